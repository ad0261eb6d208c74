"""The engine seam: the bank owns one engine, chosen by ``generation.engine``; the graph engine is the
eager engine's loop with its decoder swapped in, told of every factor write."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from bank_helpers import random_bank

from evolora.config import ConfigError, config_from_dict
from evolora.generation.decode import decode
from evolora.generation.engine import BATCH_SIZE, EagerEngine, Engine, GraphEngine, PeftEngine, make_engine
from evolora.generation.kernels.stop_mask import FlaggedStop
from evolora.generation.registry import resolve_engine
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE, routed
from evolora.generation.types import Sampling, Segment


class FakeGraphDecoder:
    """The graph decoder's contract, kept by the eager decode (what the real one must equal in fp32)."""

    def __init__(self, bank):
        self.bank, self.calls, self.refreshed = bank, 0, []

    def decode(
        self, input_ids, attention, names, sampling, *, eos_ids, pad_id, generator, stopped=None, min_new_tokens=0
    ):
        self.calls += 1
        return decode(
            self.bank.model,
            input_ids,
            attention,
            names,
            sampling,
            eos_ids=eos_ids,
            pad_id=pad_id,
            generator=generator,
            context=lambda rows: routed(self.bank, rows),
            stopped=stopped,
            min_new_tokens=min_new_tokens,
        )

    def refresh(self, slots):
        self.refreshed.append(list(slots))


def _bank(tiny):
    model, tokenizer = tiny
    bank = random_bank(
        model, ["A0", "A1"], target_modules=("q_proj", "v_proj", "down_proj"), b_std=0.5, seed=3, tokenizer=tokenizer
    )
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ("a problem", "another one", "x")]
    return bank, tokenizer, prompts


def test_the_bank_owns_an_engine_chosen_once(tiny):
    bank, _, _ = _bank(tiny)
    assert type(bank.engine) is EagerEngine and isinstance(bank.engine, Engine)  # auto on a CPU
    assert bank.engine.batch_size == BATCH_SIZE["cpu"] == 16
    assert type(make_engine("peft", bank.model, None, bank)) is PeftEngine
    assert type(make_engine("eager", bank.model, None, bank)) is EagerEngine
    assert resolve_engine("auto", "cpu") == "eager"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        make_engine("graph", bank.model, None, bank)
    with pytest.raises(ValueError, match="unknown generation.engine 'vllm'"):
        make_engine("vllm", bank.model, None, bank)


@pytest.mark.parametrize("greedy", [True, False])
def test_graph_engine_gives_the_eager_engines_tokens(tiny, greedy):
    bank, tokenizer, prompts = _bank(tiny)
    names, sampling = ["A0", "A1", BASE], Sampling(max_new_tokens=10, greedy=greedy, temperature=0.8, top_p=0.9)
    eager = bank.rollout(prompts, names, sampling, generator=torch.Generator().manual_seed(5))
    bank.engine = graph = GraphEngine(bank.model, tokenizer, bank, FakeGraphDecoder)
    out = bank.rollout(prompts, names, sampling, generator=torch.Generator().manual_seed(5))
    assert graph.decoder.calls == 1  # three rows, one batch
    assert [c.completion_ids for c in out] == [c.completion_ids for c in eager]
    assert [c.text for c in out] == [c.text for c in eager]


def test_graph_engine_stops_on_stop_strings_as_eager(tiny):
    bank, tokenizer, prompts = _bank(tiny)
    names, sampling = ["A0", "A1", "A0"], Sampling(max_new_tokens=16, greedy=True, stop=("e",), keep_stop=False)
    eager = bank.rollout(prompts, names, sampling)
    bank.engine = graph = GraphEngine(bank.model, tokenizer, bank, FakeGraphDecoder)
    out = bank.rollout(prompts, names, sampling)
    assert [(c.completion_ids, c.truncated) for c in out] == [(c.completion_ids, c.truncated) for c in eager]
    stopped = graph._stopped(sampling)  # the stop check with its token mask, built once per stop set
    assert isinstance(stopped, FlaggedStop) and stopped.mask.shape == (bank.model.config.vocab_size,)
    known = stopped.mask[: len(tokenizer)]  # the ids past the tokenizer's (padded rows) are marked too
    assert torch.nonzero(known).flatten().tolist() == [tokenizer.convert_tokens_to_ids("e")]
    assert graph._stopped(sampling).mask is stopped.mask
    assert not isinstance(graph._stopped(Sampling(max_new_tokens=4, stop=(re.compile("e"),))), FlaggedStop)


def test_graph_engine_segments_continue_each_segment_through_its_decoder(tiny):
    """Segments run one decode per segment over the whole context so far: near-greedy, the rows the
    eager engine writes by continuing its cache."""
    bank, tokenizer, prompts = _bank(tiny)
    names = ["A0", "A1", "A0"]
    segments = (Segment(max_new_tokens=5), Segment(forced="\n```python\n", max_new_tokens=6))
    sampling = Sampling(max_new_tokens=9, temperature=0.01)
    eager = bank.rollout(prompts, names, sampling, segments=segments, generator=torch.Generator().manual_seed(0))
    bank.engine = graph = GraphEngine(bank.model, tokenizer, bank, FakeGraphDecoder)
    out = bank.rollout(prompts, names, sampling, segments=segments, generator=torch.Generator().manual_seed(0))
    assert graph.decoder.calls == 2
    assert [(c.completion_ids, c.mask) for c in out] == [(c.completion_ids, c.mask) for c in eager]


def test_peft_engine_gives_the_routed_tokens_greedy(tiny):
    bank, tokenizer, prompts = _bank(tiny)
    names = ["A0", "A1", BASE]
    eager = bank.rollout(prompts, names, Sampling(max_new_tokens=8, greedy=True))
    bank.engine = make_engine("peft", bank.model, tokenizer, bank)
    peft = bank.rollout(prompts, names, Sampling(max_new_tokens=8, greedy=True))
    assert [c.completion_ids for c in peft] == [c.completion_ids for c in eager]


def test_every_factor_write_refreshes_the_engine(tiny, monkeypatch):
    bank, tokenizer, prompts = _bank(tiny)
    bank.engine = graph = GraphEngine(bank.model, tokenizer, bank, FakeGraphDecoder)
    bank.set_factors("A0", bank.get_factors("A1"))  # before the decoder exists: nothing to refresh
    bank.rollout(prompts[:1], ["A0"], Sampling(max_new_tokens=2, greedy=True))
    bank.set_factors("A1", bank.get_factors("A0"))
    monkeypatch.setattr("evolora.bank.local.policy_update_many", lambda bank, jobs, **settings: {})
    bank.update({"A0": (None, []), "A1": (None, [])})
    assert graph.decoder.refreshed == [["A1"], ["A0", "A1"]]


def test_segments_refuse_greedy_and_stop(tiny):
    bank, tokenizer, prompts = _bank(tiny)
    with pytest.raises(ValueError, match="segments sample and carry their own stop strings"):
        bank.rollout(prompts, ["A0"] * 3, Sampling(max_new_tokens=4, stop=("x",)), segments=(Segment(),))


def test_sampling_options_are_checked():
    with pytest.raises(ValueError, match="max_new_tokens"):
        Sampling(max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(max_new_tokens=4, top_p=0)
    assert Sampling(max_new_tokens=4, greedy=True, temperature=0).greedy


def test_the_engine_key_is_checked_when_the_config_loads():
    assert config_from_dict({}).generation.engine == "auto"
    assert config_from_dict({}).selfplay.generation_batch_size is None  # the engine's, by device
    with pytest.raises(ConfigError, match="generation.engine=graph needs a CUDA device"):
        config_from_dict({"generation": {"engine": "graph"}, "model": {"device": "cpu"}})
    with pytest.raises(ConfigError, match="generation.engine"):
        config_from_dict({"generation": {"engine": "vllm"}})


@pytest.mark.parametrize("routing, engine", [("routed", "eager"), ("peft", "peft")])
def test_a_stored_routing_key_still_loads_as_its_engine(routing, engine):
    assert config_from_dict({"selfplay": {"routing": routing}}).generation.engine == engine
    assert (
        config_from_dict({"selfplay": {"routing": routing}, "generation": {"engine": "auto"}}).generation.engine
        == "auto"
    )


def test_importing_the_engine_loads_no_task():
    code = (
        "import sys, evolora.generation.engine; print(sorted(m for m in sys.modules if m.startswith('evolora.tasks')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_concepts_pages_engine_example_runs(capsys):
    """docs/concepts/engines.md: the example engine sees every row and every factor write."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "concepts" / "engines.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", page, re.S)
    namespace: dict = {}
    exec(compile(code, "engines.md", "exec"), namespace)
    engine = namespace["engine"]
    assert engine.rows == 3 and engine.refreshed == ["A"]
    assert namespace["bank"].engine is engine and len(namespace["done"]) == 3
    assert capsys.readouterr().out.startswith("3 ['A']")


def test_a_step_sends_every_teachers_rows_in_one_call_and_every_students_in_another(tmp_path):
    """Whole steps in big batches: one engine call per role, each holding all of that role's rows."""
    from run_helpers import TINY_OVERRIDES

    from evolora.model import load_base
    from evolora.run import Run
    from evolora.tasks.toy import ToyTask

    config = config_from_dict({**TINY_OVERRIDES, "task": {"name": "toy"}, "run": {"steps": 1, "seed": 0}})
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path / "run", model=model, tokenizer=tokenizer, task=ToyTask())
    role = {m.slot: m.role for m in run.population.members}
    calls = []
    generate = run.bank.engine.generate

    def record(prompts, adapters, sampling, **options):
        calls.append([role[a] for a in adapters])
        return generate(prompts, adapters, sampling, **options)

    run.bank.engine.generate = record
    run.run_step()
    teachers = config.role_sizes["teacher"]
    assert [set(c) for c in calls] == [{"teacher"}, {"student"}]  # toy proposals are always valid
    assert len(calls[0]) == teachers * config.selfplay.proposals_per_teacher
    assert len(calls[1]) == teachers * config.selfplay.proposals_per_teacher * config.selfplay.samples_per_problem


def test_auto_takes_the_graph_engine_only_where_it_runs():
    assert resolve_engine("auto", "cuda", "llama") == "graph"
    assert resolve_engine("auto", "cuda", "gemma2") == "eager"  # a layer the graph step does not compute
    assert resolve_engine("auto", "cpu", "llama") == "eager"
    with pytest.raises(ValueError, match="not 'gemma2'; set generation.engine=auto or eager"):
        resolve_engine("graph", "cuda", "gemma2")


def test_graph_engine_batches_fit_the_largest_bucket(tiny):
    from evolora.generation.graph import BUCKETS

    bank, tokenizer, prompts = _bank(tiny)
    bank.engine = graph = GraphEngine(bank.model, tokenizer, bank, FakeGraphDecoder)
    seen = []
    graph.decode_batch = lambda ids, *args, **kw: seen.append(len(ids)) or ids[:, :1]
    bank.rollout(
        [prompts[0]] * (max(BUCKETS) + 3),
        ["A0"] * (max(BUCKETS) + 3),
        Sampling(max_new_tokens=1, greedy=True),
        batch_size=4096,
    )
    assert seen == [max(BUCKETS), 3]
