"""Spawn latency: taskherd.host.procs.spawn (agent under the shim) vs bare Popen.

Latency is measured from the call to the moment the agent runs: the agent is
`date +%s.%N`, which prints its own start time into the log, and the bench
subtracts the wall-clock time taken just before the call. The same agent
started by a bare `subprocess.Popen` (own session, output to a file) is the
floor; the ratio shows what the shim costs.

--concurrency spawns at a time, back to back (the next batch starts as soon as the last
one exited), two ways: with shims forked by the fork server, as the daemon spawns them
(`taskherd.host.forkserver`), and with cold-started shims, its fallback when no server is up.

    .venv/bin/python bench/spawn.py [--count 1000] [--concurrency 4] [--shim-flags=-I]
                                    [--max-log-bytes 0]

Logs are capped as a role's are (--max-log-bytes, 64 MiB: the agent writes into the shim's
pipe); 0 spawns uncapped, the agent writing its log itself, as before logs were capped.
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

from taskherd.host import forkserver, procs

AGENT = ["date", "+%s.%N"]
MAX_LOG_BYTES = 64 << 20  # a role's default; set by --max-log-bytes


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
                              header={"run_id": index, "task_id": index, "role": "bench"},
                              max_log_bytes=MAX_LOG_BYTES or None)
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


async def measure_shim(count: int, concurrency: int, env: dict) -> list[float]:
    """Batches back to back."""
    latencies = []
    with tempfile.TemporaryDirectory(prefix="taskherd-bench-") as log_dir:
        for first in range(0, count, concurrency):
            size = min(concurrency, count - first)
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
    parser.add_argument("--shim-flags", default=" ".join(forkserver.SHIM_PYTHON_FLAGS),
                        help="python flags for the shim, to compare variants")
    parser.add_argument("--max-log-bytes", type=int, default=64 << 20,
                        help="each log's cap (0: uncapped, the agent writes its log itself)")
    args = parser.parse_args()
    global MAX_LOG_BYTES
    MAX_LOG_BYTES = args.max_log_bytes
    forkserver.SHIM_PYTHON_FLAGS = tuple(args.shim_flags.split())
    env = procs.agent_env(os.environ["PATH"], {}, {"TASKHERD_ROLE": "bench"})
    print(f"{args.count} spawns of {' '.join(AGENT)}, {args.concurrency} at a time, "
          f"max_log_bytes {args.max_log_bytes or 'none'}, "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"load {open('/proc/loadavg').read().split()[0]}")

    bare = measure_bare(args.count, args.concurrency, env)
    forkserver.start()  # as the daemon does
    assert forkserver.wait_until_up(10.0), "the fork server did not start"
    forked = asyncio.run(measure_shim(args.count, args.concurrency, env))
    forked_breakdown = {stage: list(values) for stage, values in SHIM_BREAKDOWN.items()}
    for values in SHIM_BREAKDOWN.values():
        values.clear()
    forkserver.stop()
    cold = asyncio.run(measure_shim(args.count, args.concurrency, env))
    floor_p50, floor_p99 = report("bare Popen (floor)", bare)
    for name, latencies, breakdown in (("forked by the server", forked, forked_breakdown),
                                       (f"cold {args.shim_flags}", cold, SHIM_BREAKDOWN)):
        shim_p50, shim_p99 = report(f"spawn() via shim, {name}", latencies)
        for stage, values in breakdown.items():
            report(f"  of which {stage}", values)
        print(f"  ratio shim/floor: p50 x{shim_p50 / floor_p50:.1f}  "
              f"p99 x{shim_p99 / floor_p99:.1f}; overhead p50 "
              f"+{(shim_p50 - floor_p50) * 1e3:.2f} ms")
    # The daemon's latency targets (ready → exec) are measured end to end, with tasks
    # arriving as they do in use, by bench/daemon.py.
    print(f"load average after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
