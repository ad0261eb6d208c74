"""The version guard: a package outside the tested range gives one line naming both versions, an
error where the version is known to break (an old transformers), a warning elsewhere."""

from __future__ import annotations

import importlib.metadata
import warnings

import pytest

from evolora import versions
from evolora.versions import VersionError, VersionWarning, check_versions, guard_versions, required

TESTED = {"torch": "2.13.0", "transformers": "5.24.0", "peft": "0.21.2"}
PINS = {"torch": ">=2.13,<2.15", "transformers": "==5.24.0", "peft": "==0.21.2"}


def test_the_tested_ranges_are_the_package_requirements():
    assert required() == PINS


def test_a_source_checkout_reads_the_ranges_from_its_pyproject(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "requires", missing)
    assert required() == PINS


def test_tested_versions_pass_silently():
    assert check_versions(TESTED, PINS) == []
    assert check_versions({**TESTED, "torch": "2.14.1+cu130"}, PINS) == []  # a local build tag is the same torch


def test_an_old_transformers_is_one_error_line_with_both_versions(monkeypatch):
    monkeypatch.delenv(versions.ALLOW_ENV, raising=False)
    with pytest.raises(VersionError) as error:
        check_versions({**TESTED, "transformers": "5.17.0"}, PINS)
    message = str(error.value)
    assert "\n" not in message
    assert "transformers 5.17.0 is installed" in message and "transformers==5.24.0" in message
    assert "pip install 'transformers==5.24.0'" in message and "cache" in message


def test_the_error_can_be_turned_into_a_warning(monkeypatch):
    monkeypatch.setenv(versions.ALLOW_ENV, "1")
    (line,) = check_versions({**TESTED, "transformers": "5.17.0"}, PINS)
    assert line.startswith("transformers 5.17.0 is installed")


@pytest.mark.parametrize(
    "name, version",
    [
        ("torch", "2.11.0+cu130"),
        ("torch", "2.15.0"),
        ("transformers", "5.30.0"),
        ("peft", "0.20.0"),
        ("peft", "0.22.1"),
    ],
)
def test_other_versions_outside_the_range_warn(name, version):
    (line,) = check_versions({**TESTED, name: version}, PINS)
    assert line.startswith(f"{name} {version} is installed; evolora is tested with {name}{PINS[name]}")
    assert "\n" not in line


def test_the_guard_reads_the_installed_versions_and_warns_once(monkeypatch):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.11.0" if name == "torch" else real(name))
    monkeypatch.setattr(versions, "_checked", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guard_versions()
        guard_versions()
    lines = [str(w.message) for w in caught if w.category is VersionWarning]
    assert len(lines) == 1 and lines[0].startswith("torch 2.11.0 is installed")


def test_a_model_load_stops_on_a_broken_transformers_before_loading(monkeypatch):
    from evolora.model import load_base

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "5.17.0" if name == "transformers" else real(name))
    monkeypatch.setattr(versions, "_checked", False)
    monkeypatch.delenv(versions.ALLOW_ENV, raising=False)
    with pytest.raises(VersionError, match="transformers 5.17.0 is installed"):
        load_base("tiny-random")
    monkeypatch.setattr(versions, "_checked", True)  # later loads in this process see the real versions


def test_the_command_line_prints_the_error_as_one_line(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from evolora.cli import app

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "5.17.0" if name == "transformers" else real(name))
    monkeypatch.setattr(versions, "_checked", False)
    monkeypatch.delenv(versions.ALLOW_ENV, raising=False)
    result = CliRunner().invoke(
        app, ["evolve", "tasks/arith.yaml", "--set", "model.name=tiny-random", "--out", str(tmp_path / "run")]
    )
    monkeypatch.setattr(versions, "_checked", True)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert any(line.startswith("error: transformers 5.17.0 is installed") for line in lines), result.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
