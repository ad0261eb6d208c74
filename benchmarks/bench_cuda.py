"""CUDA timing helpers of the GPU scripts: a call captured in a CUDA graph, replayed back to back."""

from __future__ import annotations

import torch


def replay_us(call, replays: int) -> tuple[float, torch.cuda.CUDAGraph]:
    """(µs per replay, the graph) of ``call`` captured once (after three warm-up calls on a side
    stream) and replayed ``replays`` times back to back between two CUDA events; median of 3 rounds."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    rounds = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        rounds.append(start.elapsed_time(end) * 1e3 / replays)
    return sorted(rounds)[1], graph


def count_kernels(run) -> int:
    """GPU kernels (not memcpy/memset) ``torch.profiler`` records during one call of ``run``."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return sum(
        1
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))
    )
