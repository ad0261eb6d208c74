"""``model.device`` on a machine without a GPU: every tensor is made on a named device (read from
the source, and recorded while a run steps, evolves, checkpoints and evaluates), ``cuda`` is
accepted by the config and refused with one line by the command line, and checkpoints are
placed by their loader, not by the device that wrote them."""

from __future__ import annotations

import ast
import copy
import io
import json
import sys
from pathlib import Path

import pytest
import torch
from run_helpers import TINY_OVERRIDES
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors
from typer.testing import CliRunner

from evolora.checkpoint import MANIFEST, load_checkpoint, save_checkpoint
from evolora.cli import app
from evolora.config import ConfigError, config_from_dict
from evolora.model.device import generator_on, resolve_device

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = (ROOT / "evolora", ROOT / "operators")
FACTORIES = {f.__name__ for f in _device_constructors()}
TORCH_DIR = str(Path(torch.__file__).parent)


# -- every factory call names its device ----------------------------------------------------------
def _undeviced_calls(paths) -> list[str]:
    """``file:line torch.name`` of each ``torch.<factory>(...)`` / ``torch.Generator(...)`` call without ``device=``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
                and node.func.attr in FACTORIES | {"Generator"}
                and not any(keyword.arg == "device" for keyword in node.keywords)
            ):
                found.append(f"{path.name}:{node.lineno} torch.{node.func.attr}")
    return found


def test_every_tensor_factory_and_generator_in_the_library_names_its_device():
    files = [path for base in LIBRARY for path in sorted(base.rglob("*.py"))]
    assert len(files) > 100
    assert _undeviced_calls(files) == []


def test_the_source_scan_finds_a_factory_call_without_a_device(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nx = torch.zeros(3)\ng = torch.Generator()\ny = torch.ones(2, device='cpu')\n")
    assert [line.split(" ", 1)[1] for line in _undeviced_calls([bad])] == ["torch.zeros", "torch.Generator"]


class FactoryRecorder(TorchFunctionMode):
    """Records each tensor factory (``torch.zeros``, ``torch.tensor``, ...) called without a device
    (or with ``device=None``) from a file under ``roots``: the first caller outside torch decides.
    Under a default device other than the model's, every such call would land on the wrong one."""

    def __init__(self, roots):
        super().__init__()
        self.roots, self.calls = tuple(str(r) for r in roots), []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in FACTORIES and kwargs.get("device") is None:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(TORCH_DIR):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(self.roots):
                self.calls.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} torch.{func.__name__}")
        return func(*args, **kwargs)


def test_the_recorder_catches_a_factory_call_without_a_device():
    with FactoryRecorder([Path(__file__).parent]) as recorder:
        torch.zeros(2)
        torch.tensor([1, 2], device=None)
        torch.ones(2, device="cpu")
        torch.arange(3, device=torch.device("cpu"))
    assert [call.split(" ")[1] for call in recorder.calls] == ["torch.zeros", "torch.tensor"]


class _JudgedToy:
    """Toy-task grades and verdicts that vary with length, so the critics' code paths all run."""

    @staticmethod
    def make():
        from evolora.tasks.base import Grade
        from evolora.tasks.toy import ToyTask

        class JudgedToy(ToyTask):
            def grade(self, completion, answer):
                return Grade("correct" if len(completion) % 2 == 0 else "wrong", 0.0)

            def parse_verdict(self, text):
                return (None, "correct", "incorrect")[len(text) % 3]

        return JudgedToy(max_problem_chars=40)


@pytest.mark.slow
def test_a_run_with_critics_makes_no_tensor_without_a_device(tmp_path, single_thread):
    """Two steps (rollouts, verdicts, reviews, updates, evolution, hall of fame), a checkpoint
    written and read back, the held-out and critic evaluations and the final adapters."""
    from evolora.callbacks import Checkpointer, JsonlLogger
    from evolora.generation.types import Sampling
    from evolora.run import Run
    from evolora.tasks.base import Segment

    data = copy.deepcopy(TINY_OVERRIDES)
    data["population"] = {"roles": {"teacher": 2, "student": 2, "critic": 2}}
    data["run"]["steps"] = 2
    data["selfplay"]["matchmaking"] = {"hall_of_fame": 1}
    data["eval"] = {"limit": 2, "max_new_tokens": 4, "critic_limit": 2, "critic_samples": 2}
    config = config_from_dict(data)
    with FactoryRecorder(LIBRARY) as recorder:
        run = Run(config, tmp_path, task=_JudgedToy.make())
        run.train([JsonlLogger(), Checkpointer(1, 2)])
        assert run.load_checkpoint()
        summary = run.finish()
        prompts = [[1, 2, 3], [4, 5]]
        segments = (Segment(stop=("\n",), max_new_tokens=3), Segment(forced="=", max_new_tokens=2))
        done = run.bank.rollout(prompts, ["T0", "S1"], Sampling(max_new_tokens=4), segments=segments)
    assert summary["steps"] == 2 and summary["critic_eval"] and len(done) == 2
    assert any(r["births"] for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()))
    assert recorder.calls == []


# -- model.device ----------------------------------------------------------------------------
def _with(**model):
    data = copy.deepcopy(TINY_OVERRIDES)
    data["model"].update(model)
    return data


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:3"])
def test_the_config_accepts_every_device_spelling_in_process(device):
    assert config_from_dict(_with(device=device)).model.device == device


def test_auto_is_the_default_device():
    assert config_from_dict(TINY_OVERRIDES).model.device == "auto"


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CUDA", "mps"])
def test_the_config_refuses_an_unknown_device(device):
    with pytest.raises(ConfigError, match="model.device"):
        config_from_dict(_with(device=device))


def test_ray_workers_take_a_whole_gpu_so_cuda_n_is_refused_there():
    data = _with(device="cuda:1")
    data["run"].update(backend="ray", workers=2)
    pytest.importorskip("ray")
    with pytest.raises(ConfigError, match="set model.device=cuda"):
        config_from_dict(data)


def test_auto_resolves_to_the_cpu_without_a_gpu_and_cuda_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError) as error:
        resolve_device("cuda")
    assert "torch sees no CUDA GPU" in str(error.value) and "\n" not in str(error.value)


def test_a_gpu_index_beyond_the_gpus_torch_sees_is_refused_with_the_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match=r"sees 2 GPU\(s\) \(cuda:0 to cuda:1\); set model.device=cuda:1"):
        resolve_device("cuda:2")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_the_command_line_exits_2_with_one_line_before_writing_or_loading_anything(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["evolve", "tasks/arith.yaml", "--out", str(out), "--set", "model.device=cuda"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "model.device=cuda but torch sees no CUDA GPU" in lines[0]
    assert not out.exists()


def test_a_generator_moves_to_the_model_device_with_its_seed():
    cpu = torch.Generator(device="cpu").manual_seed(11)
    assert generator_on(cpu, "cpu") is cpu and generator_on(None, "cpu") is None

    class GpuGenerator:  # what a GPU run's generator answers (none can be made here)
        device = torch.device("cuda", 0)

        def initial_seed(self):
            return 11

    moved = generator_on(GpuGenerator(), "cpu")
    assert moved.device == torch.device("cpu") and moved.initial_seed() == 11
    assert torch.equal(torch.rand(4, generator=moved, device="cpu"), torch.rand(4, generator=cpu, device="cpu"))


# -- checkpoints ------------------------------------------------------------------------------
def _checkpoint(tmp_path) -> Path:
    """A checkpoint of one slot with an AdamW state after one step, written from the CPU."""
    a, b = torch.randn(2, 8, device="cpu", requires_grad=True), torch.randn(8, 2, device="cpu", requires_grad=True)
    optimizer = torch.optim.AdamW([a, b], lr=0.1)
    (a.sum() + b.sum()).backward()
    optimizer.step()
    return save_checkpoint(
        tmp_path,
        3,
        factors={"S0": {"m": (a.detach(), b.detach())}},
        optimizers={"S0-1": optimizer.state_dict()},
        state={"x": 1},
    )


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def test_the_loader_places_every_checkpoint_tensor_where_it_is_told(tmp_path):
    path = _checkpoint(tmp_path)
    for device in ("meta", "cpu"):
        factors, optimizers, state = load_checkpoint(path, device=device)
        tensors = list(_tensors(factors)) + list(_tensors(optimizers))
        assert len(tensors) == 2 + 3 * 2 and state["step"] == 3  # A, B; step, exp_avg, exp_avg_sq each
        assert {t.device.type for t in tensors} == {device}


def test_optimizer_state_written_on_a_gpu_resumes_on_the_cpu(tmp_path, monkeypatch):
    """The optimizer file as a GPU run's ``torch.save`` tags it (storages located on ``cuda:0``):
    torch alone refuses it on a machine without a GPU; the loader maps it onto the CPU."""
    import torch.serialization as serialization

    path = _checkpoint(tmp_path)
    _, optimizers, _ = load_checkpoint(path)
    monkeypatch.setattr(serialization, "location_tag", lambda storage: "cuda:0")
    buffer = io.BytesIO()
    torch.save(optimizers, buffer)
    monkeypatch.undo()
    data = buffer.getvalue()
    (path / "optimizers.pt").write_bytes(data)
    manifest = json.loads((path / MANIFEST).read_text())
    import hashlib

    manifest["optimizers.pt"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (path / MANIFEST).write_text(json.dumps(manifest))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path / "optimizers.pt", weights_only=True)
    _, restored, _ = load_checkpoint(path, device="cpu")
    state = restored["S0-1"]["state"][0]
    assert state["exp_avg"].device.type == "cpu"
    assert torch.equal(state["exp_avg"], optimizers["S0-1"]["state"][0]["exp_avg"])


def test_a_run_asked_for_a_missing_gpu_writes_nothing(tmp_path, monkeypatch):
    from evolora.run import Run

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        Run(config_from_dict(_with(device="cuda:0")), tmp_path / "run")
    assert not (tmp_path / "run").exists()
