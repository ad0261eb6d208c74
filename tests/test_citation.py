"""CITATION.cff parses and carries the keys CFF 1.2.0 requires."""

import datetime
import re
from pathlib import Path

import yaml

import evolora

CFF = Path(__file__).resolve().parents[1] / "CITATION.cff"


def load():
    return yaml.safe_load(CFF.read_text(encoding="utf-8"))


def test_required_keys():
    cff = load()
    for key in ("cff-version", "message", "title", "authors"):
        assert key in cff, f"CITATION.cff lacks required key {key!r}"
    assert cff["cff-version"] == "1.2.0"
    assert cff["title"] == "evolora"
    assert cff["authors"] == [{"name": "evolora developers"}]
    assert isinstance(cff["message"], str) and cff["message"].strip()


def test_software_metadata():
    cff = load()
    assert cff["version"] == evolora.__version__ == "0.1.0"
    assert cff["license"] == "Apache-2.0"
    assert datetime.date.fromisoformat(cff["date-released"]) == datetime.date(2026, 11, 29)


def test_references():
    refs = {ref["title"]: ref for ref in load()["references"]}
    populora = refs["PopuLoRA: Co-Evolving LLM Populations for Reasoning Self-Play"]
    azr = refs["Absolute Zero: Reinforced Self-play Reasoning with Zero Data"]
    assert populora["doi"] == "10.48550/arXiv.2605.16727" and populora["year"] == 2026
    assert [a["family-names"] for a in populora["authors"]] == [
        "Castanyer",
        "Bradway",
        "Wolf",
        "Lin",
        "Mavor-Parker",
        "Sargent",
    ]
    assert azr["doi"] == "10.48550/arXiv.2505.03335" and azr["year"] == 2025
    assert azr["authors"][0]["family-names"] == "Zhao"
    for ref in refs.values():
        assert ref["type"] == "article" and ref["authors"]
        assert re.fullmatch(r"10\.\d{4,9}/\S+", ref["doi"])
        assert all(i["type"] in {"doi", "url"} for i in ref["identifiers"])


def test_gsm8k_reference_for_the_bundled_test_split():
    refs = {ref["title"]: ref for ref in load()["references"]}
    gsm8k = refs["Training Verifiers to Solve Math Word Problems"]
    assert gsm8k["doi"] == "10.48550/arXiv.2110.14168" and gsm8k["year"] == 2021
    assert gsm8k["authors"][0]["family-names"] == "Cobbe"
    assert "gsm8k_test.jsonl.gz" in gsm8k["notes"]
    assert (CFF.parent / "evolora" / "data" / "gsm8k_test.jsonl.gz").is_file()
