"""Spawn latency: taskherd.procs.spawn (agent under the shim) vs bare Popen.

Latency is measured from the call to the moment the agent runs: the agent is
`date +%s.%N`, which prints its own start time into the log, and the bench
subtracts the wall-clock time taken just before the call. The same agent
started by a bare `subprocess.Popen` (own session, output to a file) is the
floor; the ratio shows what the shim costs.

Two patterns, both --concurrency spawns at a time, with spare shims kept as the daemon
keeps them (`taskherd.spares.prewarm(concurrency)`, capped at spares.MAX_SPARES):
- back to back: the next batch starts as soon as the last one exited, so every spawn also
  pays, on the same cores, the start-up of the spare that replaces its shim (throughput
  under contention);
- bursts after a pause: each batch waits until the spares are started and --gap seconds
  have passed, as when tasks arrive together after a quiet spell (what the spares are for).

    .venv/bin/python bench/spawn.py [--count 1000] [--concurrency 4] [--gap 0.05] [--shim-flags=-I]
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from taskherd import procs, spares

AGENT = ["date", "+%s.%N"]


def agent_start_time(log_path: Path) -> float:
    lines = log_path.read_text().splitlines()
    return float(lines[-1])  # after the header line, if any


# Where the shim's time goes, filled by spawn_batch_with_shim: how long the
# daemon is blocked in spawn(), and call -> shim header (interpreter start-up).
SHIM_BREAKDOWN = {"spawn() returns": [], "shim ready (header)": []}


async def spawn_batch_with_shim(log_dir: Path, first: int, size: int, env: dict) -> list[float]:
    started = []
    for index in range(first, first + size):
        called_at = time.time()
        process = procs.spawn(AGENT, env=env, cwd=None, log_path=log_dir / f"{index}.log",
                              header={"run_id": index, "task_id": index, "role": "bench"})
        SHIM_BREAKDOWN["spawn() returns"].append(time.time() - called_at)
        started.append((called_at, process))
    statuses = await asyncio.gather(*(process.handle.wait_exit() for _, process in started))
    assert all(status.succeeded for status in statuses), statuses
    for called_at, process in started:
        header_time = procs.read_header(process.log_path)["time"]
        SHIM_BREAKDOWN["shim ready (header)"].append(header_time - called_at)
    return [agent_start_time(process.log_path) - called_at for called_at, process in started]


def spawn_batch_bare(log_dir: Path, first: int, size: int, env: dict) -> list[float]:
    started = []
    for index in range(first, first + size):
        log_path = log_dir / f"bare-{index}.log"
        called_at = time.time()
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(AGENT, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        started.append((called_at, popen, log_path))
    for _, popen, _ in started:
        popen.wait()
    return [agent_start_time(log_path) - called_at for called_at, _, log_path in started]


def measure_bare(count: int, concurrency: int, env: dict) -> list[float]:
    latencies = []
    with tempfile.TemporaryDirectory(prefix="taskherd-bench-") as log_dir:
        for first in range(0, count, concurrency):
            size = min(concurrency, count - first)
            latencies += spawn_batch_bare(Path(log_dir), first, size, env)
    return latencies


async def measure_shim(count: int, concurrency: int, env: dict,
                       gap: float | None = None) -> list[float]:
    """Batches back to back, or (gap set) each after its spares are ready plus `gap` s."""
    latencies = []
    with tempfile.TemporaryDirectory(prefix="taskherd-bench-") as log_dir:
        for first in range(0, count, concurrency):
            size = min(concurrency, count - first)
            if gap is not None:
                spares.wait_for_spares(timeout=5.0)
                await asyncio.sleep(gap)  # their interpreters finish starting, as between bursts
            latencies += await spawn_batch_with_shim(Path(log_dir), first, size, env)
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(name: str, latencies: list[float]) -> tuple[float, float]:
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    print(f"{name:<30} n={len(latencies):<5} p50={p50 * 1e3:6.2f} ms  p99={p99 * 1e3:6.2f} ms  "
          f"mean={statistics.fmean(latencies) * 1e3:6.2f} ms")
    return p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--gap", type=float, default=0.05,
                        help="seconds of quiet before each burst in the burst pattern")
    parser.add_argument("--shim-flags", default=" ".join(spares.SHIM_PYTHON_FLAGS),
                        help="python flags for the shim, to compare variants")
    args = parser.parse_args()
    spares.SHIM_PYTHON_FLAGS = tuple(args.shim_flags.split())
    spares.prewarm(args.concurrency)  # as the daemon does with its max_concurrent
    env = procs.agent_env(os.environ["PATH"], {}, {"TASKHERD_ROLE": "bench"})
    print(f"{args.count} spawns of {' '.join(AGENT)}, {args.concurrency} at a time, "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")

    bare = measure_bare(args.count, args.concurrency, env)
    shim = asyncio.run(measure_shim(args.count, args.concurrency, env))
    breakdown = {stage: list(latencies) for stage, latencies in SHIM_BREAKDOWN.items()}
    for latencies in SHIM_BREAKDOWN.values():
        latencies.clear()
    bursts = asyncio.run(measure_shim(args.count, args.concurrency, env, gap=args.gap))
    floor_p50, floor_p99 = report("bare Popen (floor)", bare)
    shim_p50, shim_p99 = report(f"spawn() via shim {args.shim_flags}", shim)
    for stage, latencies in breakdown.items():
        report(f"  of which {stage}", latencies)
    print(f"ratio shim/floor: p50 x{shim_p50 / floor_p50:.1f}  p99 x{shim_p99 / floor_p99:.1f}; "
          f"shim overhead p50 +{(shim_p50 - floor_p50) * 1e3:.2f} ms")
    # Back-to-back spawns, --concurrency at a time, measure throughput under contention:
    # every spawn then pays a Python start-up for its shim on 2 cores. The daemon's latency
    # targets (ready → exec p50 ≤ 20 ms, p99 ≤ 100 ms) are measured end to end, with tasks
    # arriving as they do in use, by bench/daemon.py.
    print(f"(information) p50 {shim_p50 * 1e3:.1f} ms, p99 {shim_p99 * 1e3:.1f} ms with "
          f"{args.concurrency} spawns always in flight; the daemon's targets: bench/daemon.py")
    report(f"bursts of {args.concurrency} after {args.gap * 1e3:g} ms", bursts)
    for stage, latencies in SHIM_BREAKDOWN.items():
        report(f"  of which {stage}", latencies)


if __name__ == "__main__":
    main()
