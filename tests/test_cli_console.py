"""The CLI's console: third-party warnings and progress bars off (unless --verbose), evolora's
own warnings kept, and a first line that says what is about to happen."""

from __future__ import annotations

import logging
import warnings

import pytest

from evolora.cli.display import start_line
from evolora.config import config_from_dict
from evolora.quiet import NOISY_LIBRARIES, quiet_libraries


@pytest.fixture(autouse=True)
def _restore_process_state(monkeypatch):
    """quiet_libraries changes process-wide state: undo it after each test."""
    from transformers.utils import logging as transformers_logging

    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.delenv("EVOLORA_QUIET", raising=False)
    monkeypatch.setattr(transformers_logging, "_tqdm_active", True)
    levels = {name: logging.getLogger(name).level for name in NOISY_LIBRARIES}
    verbosity = transformers_logging.get_verbosity()
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    transformers_logging.set_verbosity(verbosity)


def _warn_from(module_name: str, message: str) -> list[warnings.WarningMessage]:
    """Issue a FutureWarning as if from inside ``module_name``; return what was recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_libraries(verbose=False)
        warnings.warn_explicit(message, FutureWarning, filename=f"{module_name}.py", lineno=1, module=module_name)
        warnings.warn_explicit(
            "evolora's own", UserWarning, filename="evolora/x.py", lineno=1, module="evolora.tasks.gsm.task"
        )
    return caught


def test_library_warnings_are_dropped_and_evolora_warnings_kept():
    caught = _warn_from("transformers.modeling_utils", "`is_gradient_checkpointing` is deprecated")
    assert [str(w.message) for w in caught] == ["evolora's own"]
    caught = _warn_from("torch.nn.modules.module", "old API")
    assert [str(w.message) for w in caught] == ["evolora's own"]


def test_verbose_keeps_library_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_libraries(verbose=True)
        warnings.warn_explicit("kept", FutureWarning, filename="t.py", lineno=1, module="transformers.modeling_utils")
    assert [str(w.message) for w in caught] == ["kept"]


def test_progress_bars_are_off_after_quieting():
    import os

    from transformers.utils import logging as transformers_logging

    assert transformers_logging.is_progress_bar_enabled()
    quiet_libraries(verbose=False)
    assert not transformers_logging.is_progress_bar_enabled()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"


@pytest.mark.parametrize("converted", [False, True])
def test_start_line_names_model_task_population_steps_and_conversion(monkeypatch, tmp_path, converted):
    import evolora.model.resolve as model

    monkeypatch.setattr(model, "is_converted", lambda path: converted)
    config = config_from_dict(
        {
            "model": {"name": "smollm2-135m-instruct"},
            "task": {"name": "arith"},
            "population": {"teachers": 3, "students": 2},
            "run": {"steps": 7},
        }
    )
    line = start_line(config, tmp_path / "out", resume=False)
    for part in ("3 teachers + 2 students", "smollm2-135m-instruct", "task arith", "7 steps", str(tmp_path / "out")):
        assert part in line
    assert ("converting" in line) is (not converted)
    assert start_line(config, tmp_path, resume=True).startswith("evolora: resuming")


def test_start_line_counts_critics_when_the_population_has_them(tmp_path):
    config = config_from_dict(
        {
            "model": {"name": "tiny-random"},
            "task": {"name": "arith"},
            "population": {"roles": {"teacher": 2, "student": 2, "critic": 3}},
        }
    )
    assert "2 teachers + 2 students + 3 critics on tiny-random" in start_line(config, tmp_path, resume=False)


def test_start_line_says_one_teacher_not_one_teachers(tmp_path):
    config = config_from_dict(
        {
            "model": {"name": "tiny-random"},
            "task": {"name": "arith"},
            "population": {"teachers": 1, "students": 1},
            "evolution": {"enabled": False},
        }
    )
    assert "starting 1 teacher + 1 student on" in start_line(config, tmp_path, resume=False)


def test_start_line_names_the_resolved_device_and_dtype(tmp_path):
    from evolora.model.dtype import auto_dtype

    pinned = config_from_dict({"model": {"name": "tiny-random", "device": "cpu", "dtype": "float32"}})
    assert "on tiny-random (cpu, float32)," in start_line(pinned, tmp_path, resume=False)
    auto = config_from_dict({"model": {"name": "tiny-random", "device": "cpu"}})
    assert f"on tiny-random (cpu, {auto_dtype('cpu')})," in start_line(auto, tmp_path, resume=False)


def test_plain_tqdm_bars_and_ray_workers_are_quieted_too():
    import os

    quiet_libraries(verbose=True)
    assert "TQDM_DISABLE" not in os.environ and "EVOLORA_QUIET" not in os.environ
    quiet_libraries(verbose=False)
    assert os.environ["TQDM_DISABLE"] == "1"  # transformers' GGUF conversion uses plain tqdm
    assert os.environ["EVOLORA_QUIET"] == "1"  # read by evolora.distributed.actor in each Ray worker


def test_start_line_names_the_operators_with_their_resolved_parameters(tmp_path):
    config = config_from_dict(
        {
            "model": {"name": "tiny-random"},
            "task": {"name": "arith"},
            "evolution": {"every": 2, "selection": {"name": "tournament", "params": {"k": 5}}},
        }
    )
    line = start_line(config, tmp_path, resume=False)
    assert (
        "evolving every 2 steps by selection tournament(k=5, replace=True), crossover svd_merge(weights=equal, "
        "temperature=1.0), mutation lowrank_gaussian(sigma=0.1) ->"
    ) in line  # noise_rank=None left out
    off = config_from_dict({"model": {"name": "tiny-random"}, "evolution": {"enabled": False}})
    assert ", no evolution ->" in start_line(off, tmp_path, resume=False)
