"""CPU time of one claim+complete cycle on PostgreSQL, in the client and in its server
backend: a figure the machine's load moves far less than a rate (a rate on a shared 2-core
machine swings by a third between rounds; the CPU a cycle takes does not).

    python bench/postgres_cycle_cpu.py              # 1,500 cycles a case, best of 3 rounds
    python bench/postgres_cycle_cpu.py --tasks 3000 --rounds 5

Information (no target). One process, one durable throwaway server (tests/pg.py), each case
on a fresh database, the cases alternating within each round:
- no limits, one call: the first claim alone, then `finish_run_and_claim` per cycle, with
  `ClaimLimits()` (a daemon with no limits configured claims so);
- cluster limits, one call: the same with bench/postgres.py's LIMITS (never reached: what
  counting them and taking the claims' lock costs);
- cluster limits, two calls: `claim`, then `finish_run`, per cycle.
The client's CPU is this process's (time.process_time), the server's its backend's (utime +
stime from /proc/PID/stat, so the server must run on this host, as tests/pg.py's does).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

import postgres as queue_bench  # bench/postgres.py: its loops and limits

from taskherd.policy.limits import ClaimLimits
from taskherd.store import open_store
from tests.pg import start_server, stop_server

TICKS = os.sysconf("SC_CLK_TCK")
CASES = {
    "no limits, one call": (queue_bench.NO_LIMITS, queue_bench.finish_and_claim),
    "cluster limits, one call": (queue_bench.LIMITS, queue_bench.finish_and_claim),
    "cluster limits, two calls": (queue_bench.LIMITS, queue_bench.claim_then_finish),
}


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the server process `pid` has used (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def cycle_cpu(database: str, limits: ClaimLimits, loop: queue_bench.Loop,
              tasks: int) -> tuple[float, float]:
    """Microseconds of CPU per cycle, (client, server), over `tasks` cycles."""
    store = open_store(database, durability=queue_bench.DURABILITY)
    store.enqueue_many(queue_bench.new_tasks(tasks), time.time())
    pid = store._conn.info.backend_pid  # noqa: SLF001 - the bench reads its own connection
    # The connection's functions and procedures are made by its first call, not timed.
    store.claim(queue_bench.ClaimRequest("warm", time.time(), 600, roles=["nobody"],
                                         limits=limits))
    client, server = time.process_time(), backend_cpu(pid)
    claimed: list[int] = []
    loop(store, "node", limits, claimed, time.time)
    client, server = time.process_time() - client, backend_cpu(pid) - server
    store.close()
    assert len(claimed) == tasks, f"claimed {len(claimed)} of {tasks}"
    return client / tasks * 1e6, server / tasks * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1500, help="cycles a case and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three cases")
    args = parser.parse_args(argv)
    server = start_server(durable=True)
    try:
        databases = queue_bench.fresh_databases(server)
        taken: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
        for _ in range(args.rounds):
            for name, (limits, loop) in CASES.items():
                taken[name].append(cycle_cpu(next(databases), limits, loop, args.tasks))
    finally:
        stop_server(server)
    print(f"CPU per claim+complete cycle, best of {args.rounds} rounds of {args.tasks}:")
    floor = min(sum(cpu) for cpu in taken["no limits, one call"])
    for name, values in taken.items():
        client, server_cpu = min(values, key=sum)
        print(f"  {name:<26}  client {client:6.0f} µs  server {server_cpu:6.0f} µs  "
              f"sum {client + server_cpu:6.0f} µs  ({(client + server_cpu) / floor:.2f}x "
              f"no limits, one call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
