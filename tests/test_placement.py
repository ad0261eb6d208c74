"""Ray placement: GPUs one per worker or not at all, never a silent fallback to the CPUs."""

from __future__ import annotations

import pytest

from evolora.distributed.placement import uses_gpus


def test_cpu_and_auto_without_gpus_use_the_cpus():
    assert uses_gpus(4, 8, "cpu") is False
    assert uses_gpus(4, 0, "auto") is False


def test_a_gpu_per_worker_is_used():
    assert uses_gpus(2, 2, "cuda") is True and uses_gpus(2, 3, "auto") is True


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_fewer_gpus_than_workers_is_refused_with_the_numbers(device):
    with pytest.raises(ValueError, match=r"4 Ray workers need one GPU each, the cluster has 2; set run.workers <= 2"):
        uses_gpus(4, 2, device)


def test_cuda_on_a_cluster_without_gpus_is_refused():
    with pytest.raises(ValueError, match="no GPU"):
        uses_gpus(2, 0, "cuda")
