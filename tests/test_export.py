"""`evolora export`: a merged member loads with transformers alone and gives the bank's logits,
the adapter export loads with PEFT, the model card holds lineage and citations, and bad
input exits 2 before any model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from evolora import __version__
from evolora.cli import app
from evolora.config import load_run_config
from evolora.export import (
    EVOLORA_BIBTEX,
    POPULORA_BIBTEX,
    ExportError,
    choose_member,
    lineage_of,
    model_card,
    plan_export,
)

runner = CliRunner()
TOY = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "model.dtype=float32",
    "--set",
    "lora.rank=2",
    "--set",
    "lora.init_b_std=0.05",
    "--set",
    "task.name=toy",
    "--set",
    "task.params={}",
    "--set",
    "selfplay.proposals_per_teacher=2",
    "--set",
    "selfplay.samples_per_problem=2",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=8",
    "--set",
    "selfplay.roles.student.max_new_tokens=6",
    "--set",
    "evolution.every=1",
    "--set",
    "eval.limit=2",
    "--set",
    "eval.max_new_tokens=5",
    "--set",
    "run.steps=2",
]
CFF = Path(__file__).resolve().parents[1] / "CITATION.cff"
PROMPT = "<s>user\nWhat is 2 + 3?</s>\n<s>assistant\n"
NO_PEFT = """import sys
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
inputs = AutoTokenizer.from_pretrained(sys.argv[1])("<s>user\\nhi</s>\\n<s>assistant\\n", return_tensors="pt")
assert model.generate(**inputs, max_new_tokens=4).shape[1] > inputs["input_ids"].shape[1]
print(type(model).__name__, f"peft-imported={'peft' in sys.modules}")
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, single_thread):
    """A finished 2-step toy run on the tiny model (births at step 1, held-out accuracy at the end)."""
    out = tmp_path_factory.mktemp("export") / "run"
    result = runner.invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TOY])
    assert result.exit_code == 0, result.output
    return out


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "final" / "summary.json").read_text())


def export(*args: str):
    result = runner.invoke(app, ["export", *args])
    return result, " ".join(result.output.split())


def bank_logits(run_dir: Path, member: str, input_ids: torch.Tensor) -> torch.Tensor:
    """The member's logits through the run's adapter bank (the way the run computed them)."""
    from evolora.bank.local import AdapterBank
    from evolora.model import load_base

    lora = load_run_config(run_dir).lora
    base, _ = load_base("tiny-random")
    bank = AdapterBank(base, [member], rank=lora.rank, alpha=lora.alpha, target_modules=lora.target_modules)
    bank.load_adapter(member, run_dir / "final" / member)
    bank.activate(member)
    with torch.no_grad():
        return bank.model(input_ids=input_ids).logits


@pytest.mark.slow
def test_merged_member_loads_without_peft_generates_and_matches_the_bank(finished_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evolora.model import load_base

    out = tmp_path / "merged"
    out.mkdir()  # an empty --out is fine
    result, output = export(str(finished_run), "--out", str(out))
    assert result.exit_code == 0, output
    best, criterion = choose_member(summary_of(finished_run))
    assert f"exporting {best['id']} (student; the fittest student by the run's fitness, the one evaluated" in output
    assert not (out / "adapter_config.json").exists()  # transformers would otherwise load it through PEFT
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not [name for name, _ in model.named_parameters() if "lora" in name]
    assert model.generation_config.do_sample is False and model.generation_config.max_new_tokens is None
    inputs = tokenizer(PROMPT, return_tensors="pt")
    with torch.no_grad():
        merged = model(**inputs).logits
        generated = model.generate(**inputs, max_new_tokens=4)
    assert generated.shape[1] > inputs["input_ids"].shape[1]
    expected = bank_logits(finished_run, best["id"], inputs["input_ids"])
    assert (merged - expected).abs().max().item() < 1e-4
    base, _ = load_base("tiny-random")
    with torch.no_grad():
        assert (base(**inputs).logits - expected).abs().max().item() > 1e-3  # the adapter changes the logits
    assert (out / "model.safetensors").stat().st_mode & 0o044 == 0o044  # readable like any other file
    fresh = subprocess.run(
        [sys.executable, "-c", NO_PEFT, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert fresh.returncode == 0 and fresh.stdout.split() == ["LlamaForCausalLM", "peft-imported=False"], fresh.stderr


def test_adapter_export_loads_with_peft_and_keeps_the_files(finished_run, tmp_path):
    from peft import PeftModel

    from evolora.model import load_base

    teacher = next(r for r in summary_of(finished_run)["individuals"] if r["role"] == "teacher")
    out = tmp_path / "adapter"
    result, output = export(str(finished_run), "--member", teacher["id"], "--no-merge", "--out", str(out))
    assert result.exit_code == 0, output
    assert f"exporting {teacher['id']} (teacher, not a student; asked for by id) as its PEFT adapter" in output
    source = finished_run / "final" / teacher["id"]
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (out / name).read_bytes() == (source / name).read_bytes()
    base, tokenizer = load_base("tiny-random")
    model = PeftModel.from_pretrained(base, str(out))
    inputs = tokenizer(PROMPT, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert (logits - bank_logits(finished_run, teacher["id"], inputs["input_ids"])).abs().max().item() < 1e-5
    card = (out / "README.md").read_text()
    assert "library_name: peft" in card and f"# evolora member {teacher['id']} (teacher)" in card


def test_model_card_holds_lineage_ratings_config_and_citations(finished_run, tmp_path):
    summary = summary_of(finished_run)
    child = next(r for r in summary["individuals"] if r["born_step"] >= 1)
    out = tmp_path / "card"
    result, output = export(str(finished_run), "--member", child["id"], "--no-merge", "--out", str(out))
    assert result.exit_code == 0, output
    card = (out / "README.md").read_text()
    row = f"| {child['id']} | {child['role']} | {child['born_step']} | {child['operator']} | {', '.join(child['parents'])} |"
    assert row in card
    for parent in child["parents"]:
        assert f"| {parent} | {child['role']} | 0 | init | - |" in card
    assert f"| {child['mu']:.2f} | {child['sigma']:.2f} | {child['conservative']:.2f} |" in card
    assert "arXiv 2605.16727" in card and POPULORA_BIBTEX in card and EVOLORA_BIBTEX in card
    assert (finished_run / "config.yaml").read_text().strip() in card
    assert "Held-out source: toy questions" in card
    saved = json.loads((out / "evolora_member.json").read_text())
    assert saved["member"]["id"] == child["id"] and saved["lineage"][-1]["id"] == child["id"]


def test_citations_agree_with_citation_cff():
    cff = yaml.safe_load(CFF.read_text(encoding="utf-8"))
    populora = next(r for r in cff["references"] if r["doi"] == "10.48550/arXiv.2605.16727")
    assert f"title         = {{{populora['title']}}}" in POPULORA_BIBTEX
    assert " and ".join(a["family-names"] for a in populora["authors"]) in POPULORA_BIBTEX
    assert f"year          = {{{populora['year']}}}" in POPULORA_BIBTEX
    assert f"version = {{{cff['version']}}}" in EVOLORA_BIBTEX and cff["version"] == __version__
    assert f"license = {{{cff['license']}}}" in EVOLORA_BIBTEX and cff["authors"][0]["name"] in EVOLORA_BIBTEX


def rows(*specs):
    return [{"id": i, "role": role, "conservative": c, "held_out": h} for i, role, c, h in specs]


def test_best_is_held_out_accuracy_then_conservative_rating():
    held = lambda a: {"accuracy": a, "correct": int(a * 4), "total": 4}  # noqa: E731
    summary = {
        "individuals": rows(
            ("t0", "teacher", 9.0, None),
            ("s0", "student", 5.0, held(0.25)),
            ("s1", "student", 1.0, held(0.5)),
            ("s2", "student", 7.0, held(0.5)),
        ),
        "held_out_source": "toy",
    }
    best, criterion = choose_member(summary)
    assert best["id"] == "s2" and criterion.startswith("best student by held-out accuracy: 50.0% (2/4) on toy")
    summary["individuals"][1]["held_out"] = None  # one candidate without held-out accuracy: ratings decide
    best, criterion = choose_member(summary)
    assert best["id"] == "s2" and "μ − 3σ = 7.00" in criterion
    fittest = {
        "individuals": rows(("s0", "student", 5.0, None), ("s1", "student", 1.0, held(0.25))),
        "held_out_source": "toy",
        "held_out_members": "fittest",
    }  # eval.members: fittest chose s1
    best, criterion = choose_member(fittest)
    assert best["id"] == "s1" and criterion.startswith(
        "the fittest student by the run's fitness, the one evaluated: 25.0%"
    )
    agent = {"individuals": rows(("a0", "agent", -3.0, None))}
    assert choose_member(agent)[0]["id"] == "a0"
    assert choose_member(summary, "t0") == (summary["individuals"][0], "asked for by id")
    with pytest.raises(ExportError, match=r"no member 'x9'.*\['t0', 's0', 's1', 's2'\]"):
        choose_member(summary, "x9")
    with pytest.raises(ExportError, match="no student or agent"):
        choose_member({"individuals": rows(("t0", "teacher", 1.0, None))})


def test_lineage_follows_every_parent_oldest_first():
    lineage = [
        {"id": "s0", "role": "student", "parents": [], "operator": "init", "born_step": 0},
        {"id": "s1", "role": "student", "parents": [], "operator": "init", "born_step": 0},
        {"id": "s2", "role": "student", "parents": ["s0", "s1"], "operator": "svd_merge", "born_step": 10},
        {"id": "s3", "role": "student", "parents": ["s2"], "operator": "lowrank_gaussian", "born_step": 20},
        {"id": "s4", "role": "student", "parents": ["s1"], "operator": "lowrank_gaussian", "born_step": 20},
    ]
    found = lineage_of({"lineage": lineage}, "s3")
    assert [(e["id"], e["parents"]) for e in found] == [("s0", []), ("s1", []), ("s2", ["s0", "s1"]), ("s3", ["s2"])]


@pytest.fixture
def no_model(monkeypatch):
    import evolora.model

    monkeypatch.setattr(evolora.model, "load_base", lambda *a, **k: pytest.fail("a model was loaded"))


def test_bad_input_exits_2_before_a_model_loads(finished_run, tmp_path, no_model):
    result, output = export(str(tmp_path / "nowhere"))
    assert result.exit_code == 2 and "nowhere/config.yaml does not exist" in output
    result, output = export(str(finished_run), "--member", "x9")
    assert result.exit_code == 2 and "no member 'x9'" in output and "--member best" in output
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    result, output = export(str(finished_run), "--out", str(occupied))
    assert result.exit_code == 2 and "already exists and is not empty" in output
    assert (occupied / "keep.txt").read_text() == "mine"
    with pytest.raises(ExportError, match="finished run"):
        plan_export(finished_run / "checkpoints")


def test_missing_adapter_is_refused(finished_run, tmp_path, no_model):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished_run, run, ignore=shutil.ignore_patterns("checkpoints"))
    best, _ = choose_member(summary_of(run))
    (run / "final" / best["id"] / "adapter_model.safetensors").unlink()
    result, output = export(str(run))
    assert result.exit_code == 2 and "adapter_model.safetensors does not exist" in output
    (run / "final" / "summary.json").write_text('{"steps": 2,')  # torn
    result, output = export(str(run))
    assert result.exit_code == 2 and "summary.json is not valid JSON" in output and "--resume" in output
    plan = plan_export(finished_run, merge=False, out=tmp_path / "x")
    assert plan.out == tmp_path / "x" and "## Lineage" in model_card(plan)
    assert plan_export(finished_run).out == finished_run / "export" / plan.member["id"]
