"""evolora.heap: trimming and the mmap threshold around a long decode."""

import sys

import pytest
import torch

from evolora import heap

GLIBC = sys.platform.startswith("linux") and heap._libc() is not False


def test_threshold_below_a_page_is_refused_before_anything_changes():
    with pytest.raises(ValueError, match="4096"):
        with heap.mapped_blocks(1024):
            pass


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_mapped_blocks_sets_the_threshold_and_fixes_it_on_exit(monkeypatch):
    calls = []
    real = heap._libc()

    class Recorder:
        def mallopt(self, param, value):
            calls.append((param, value))
            return real.mallopt(param, value)

        def malloc_trim(self, pad):
            return real.malloc_trim(pad)

    monkeypatch.setattr(heap, "_libc", lambda: Recorder())
    with heap.mapped_blocks(2 << 20) as done:
        assert done is True
        block = torch.ones(1 << 20)  # 4 MB: above the threshold, served by its own mmap
        assert float(block.sum()) == float(1 << 20)
    assert calls == [(heap.M_MMAP_THRESHOLD, 2 << 20), (heap.M_MMAP_THRESHOLD, heap.DYNAMIC_MAX)]


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_threshold_is_restored_when_the_block_raises(monkeypatch):
    calls = []
    real = heap._libc()
    monkeypatch.setattr(heap, "_libc", lambda: type("R", (), {
        "mallopt": lambda self, p, v: calls.append(v) or real.mallopt(p, v)})())
    with pytest.raises(RuntimeError):
        with heap.mapped_blocks():
            raise RuntimeError("decode failed")
    assert calls == [1 << 20, heap.DYNAMIC_MAX]


def test_without_glibc_it_is_a_no_op(monkeypatch):
    monkeypatch.setattr(heap, "_libc", lambda: False)
    with heap.mapped_blocks() as done:
        assert done is False
    assert heap.trim() is False
