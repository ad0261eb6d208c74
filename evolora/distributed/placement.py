"""Where the Ray workers run: one GPU each, or a share of the CPUs, and never a silent fallback.

    uses_gpus(workers=4, gpus=2, device="cuda")   # ValueError: 4 workers need 4 GPUs, the cluster has 2
    uses_gpus(workers=2, gpus=0, device="auto")   # False: no GPU in the cluster, the CPUs it is

Source: PopuLoRA (arXiv 2605.16727) §2 (one base replica per worker).
"""

from __future__ import annotations

from evolora.distributed.recovery import RESTART_TIMEOUT_S


def uses_gpus(workers: int, gpus: float, device: str) -> bool:
    """Whether each of ``workers`` Ray workers gets one of the cluster's ``gpus`` for ``model.device``.

    ``cpu``: never. ``cuda``: always, and the cluster must have a GPU per worker. ``auto``: when
    the cluster has any GPU, it must have one per worker; with none, the CPUs.

    Raises:
        ValueError: GPUs are asked for (``cuda``, or ``auto`` on a cluster with some) but the cluster
            has fewer than one per worker; the message gives both numbers and what to change.
    """
    if device == "cpu" or (device == "auto" and gpus == 0):
        return False
    if gpus < workers:
        raise ValueError(
            f"model.device={device}: {workers} Ray workers need one GPU each, the cluster has "
            f"{gpus:g}; set run.workers <= {int(gpus)} or model.device=cpu"
            if gpus >= 1
            else f"model.device={device}: the Ray cluster has no GPU; set model.device=cpu or auto"
        )
    return True


def placement(workers: int, *, device: str) -> tuple[object | None, list[dict]]:
    """(placement group or None, ``.options`` of each worker): one GPU per worker through a
    placement group when :func:`uses_gpus` says so, else a share of the CPUs.

    Raises:
        ValueError: see :func:`uses_gpus`.
    """
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    resources = ray.cluster_resources()
    cpus = min(1.0, resources.get("CPU", 1.0) / workers)
    if not uses_gpus(workers, resources.get("GPU", 0), device):
        return None, [{"num_cpus": cpus}] * workers
    group = ray.util.placement_group([{"CPU": cpus, "GPU": 1}] * workers, strategy="PACK")
    ray.get(group.ready(), timeout=RESTART_TIMEOUT_S)
    return group, [
        {
            "num_cpus": cpus,
            "num_gpus": 1,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=w),
        }
        for w in range(workers)
    ]
