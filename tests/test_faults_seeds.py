"""Fault class "seeds": every ``run.seed`` the docs allow, [0, 2**63 - 1], runs to the end (evolution and
held-out evaluation included), and any other integer is refused when the config loads, before any
model does, with the allowed range (exit 2, one line)."""

from __future__ import annotations

import pytest
from run_helpers import TOY_ARGS
from typer.testing import CliRunner

from evolora.cli import app
from evolora.config import ConfigError, load_config
from evolora.config.run import MAX_SEED
from evolora.streams import rollout_seed, step_streams

runner = CliRunner()


@pytest.mark.parametrize("seed", [-1, -(2**70), 2**63, 2**64])
def test_a_seed_outside_the_range_is_refused_when_the_config_loads(seed):
    with pytest.raises(ConfigError, match=r"run.seed: a seed is an integer in \[0, 2\*\*63 - 1\]"):
        load_config("tasks/gsm.yaml", [f"run.seed={seed}"])
    with pytest.raises(ConfigError, match="run.seed"):
        load_config("tasks/gsm.yaml", seed=seed)


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_the_cli_refuses_such_a_seed_before_any_model_loads(seed, tmp_path, monkeypatch):
    import evolora.model

    monkeypatch.setattr(evolora.model, "load_base", lambda *a, **k: pytest.fail("a model was loaded"))
    result = runner.invoke(
        app, ["evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--seed", str(seed), *TOY_ARGS]
    )
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "run.seed: a seed is an integer in [0, 2**63 - 1]" in flat, result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


def test_every_stream_of_the_largest_seed_can_be_built():
    streams = step_streams(MAX_SEED, 7)
    assert 0 <= streams.rollout_seed < 2**64
    streams.repair.initial_seed(), streams.matchmaking.integers(10), streams.proposals.random()


def test_seeds_below_2_to_the_43_keep_their_rollout_streams():
    """A run recorded before the modulus replays as it did."""
    assert [rollout_seed(s, t) for s, t in ((0, 1), (9, 3), (2**40, 5))] == [
        1,
        9 * 1_000_003 + 3,
        2**40 * 1_000_003 + 5,
    ]


@pytest.mark.parametrize("seed", [0, MAX_SEED])
def test_a_run_with_an_extreme_seed_goes_to_the_end(seed, tmp_path, single_thread):
    out = tmp_path / "run"
    result = runner.invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), "--seed", str(seed), *TOY_ARGS])
    assert result.exit_code == 0, result.output
    assert (out / "final" / "summary.json").is_file()
    assert f"seed: {seed}" in (out / "config.yaml").read_text()
