"""Verifier throughput: programs verified per second, pooled vs one at a time.

Usage: python benchmarks/sandbox.py [--programs 60] [--workers 2]

The workload mimics teacher proposals: the bundled gsm example programs plus a few
invalid ones (an error, a banned import, a 0.5 s timeout), each verified the way
GSMTask.verify does it (two runs per program).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from evolora.sandbox import SandboxPool, run_program
from evolora.tasks.gsm.params import EXAMPLES_PATH

INVALID = ["print(1 / 0)", "import os\nprint(1)", "while True:\n    pass"]


def workload(num_programs: int, invalid: bool) -> list[str]:
    programs = [e["program"] for e in json.loads(EXAMPLES_PATH.read_text())["examples"]]
    programs += INVALID if invalid else []
    return [programs[i % len(programs)] for i in range(num_programs)]


def measure(num_programs: int, workers: int, timeout_s: float, invalid: bool) -> None:
    sources = [s for s in workload(num_programs, invalid) for _ in range(2)]  # two runs each
    start = time.perf_counter()
    serial = [run_program(s, timeout_s=timeout_s) for s in sources]
    serial_s = time.perf_counter() - start
    with SandboxPool(workers=workers) as pool:
        start = time.perf_counter()
        pooled = pool.map(sources, timeout_s=timeout_s)
        pooled_s = time.perf_counter() - start
    assert [r.status for r in serial] == [r.status for r in pooled]
    ok = sorted(r.seconds for r in serial if r.status == "ok")
    print(
        f"{'mixed (incl. error/banned/timeout)' if invalid else 'valid programs only'}: "
        f"{num_programs} programs x 2 runs, median ok run {ok[len(ok) // 2] * 1000:.1f} ms"
    )
    print(f"  one at a time  : {num_programs / serial_s:7.1f} programs/s ({serial_s:.2f} s)")
    print(f"  pool workers={workers}: {num_programs / pooled_s:7.1f} programs/s ({pooled_s:.2f} s)")
    print(f"  ratio pool/serial: {serial_s / pooled_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=0.5)
    args = parser.parse_args()
    print(f"cpus={os.cpu_count()}")
    for invalid in (False, True):
        measure(args.programs, args.workers, args.timeout_s, invalid)


if __name__ == "__main__":
    main()
