"""evolora.heap: trimming and the mmap threshold around a long decode."""

import sys

import pytest

from evolora import heap

GLIBC = sys.platform.startswith("linux") and heap._libc() is not False


@pytest.fixture
def mallopt_calls(monkeypatch):
    """The (parameter, value) of every ``mallopt`` call, passed on to the real glibc."""
    calls, real = [], heap._libc()

    class Recorder:
        def mallopt(self, param, value):
            calls.append((param, value))
            return real.mallopt(param, value)

    monkeypatch.setattr(heap, "_libc", lambda: Recorder())
    return calls


def test_threshold_below_a_page_is_refused_before_anything_changes():
    with pytest.raises(ValueError, match="4096"):
        with heap.mapped_blocks(1024):
            pass


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_mapped_blocks_sets_the_threshold_and_fixes_it_on_exit(mallopt_calls):
    with heap.mapped_blocks(2 << 20) as done:
        assert done is True
        assert mallopt_calls == [(heap.M_MMAP_THRESHOLD, 2 << 20)]
    assert mallopt_calls == [(heap.M_MMAP_THRESHOLD, 2 << 20), (heap.M_MMAP_THRESHOLD, heap.DYNAMIC_MAX)]


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_threshold_is_restored_when_the_block_raises(mallopt_calls):
    with pytest.raises(RuntimeError):
        with heap.mapped_blocks():
            raise RuntimeError("decode failed")
    assert [value for _, value in mallopt_calls] == [1 << 20, heap.DYNAMIC_MAX]


def test_without_glibc_it_is_a_no_op(monkeypatch):
    monkeypatch.setattr(heap, "_libc", lambda: False)
    with heap.mapped_blocks() as done:
        assert done is False
    assert heap.trim() is False
