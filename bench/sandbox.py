"""Sandbox benchmark: what the box (`[roles.NAME.isolation] mode = "bwrap"`) costs, with the
real `taskherd up`, the same agents boxed and unboxed in one run.

    .venv/bin/python bench/sandbox.py                    # about 5 minutes on 2 cores
    .venv/bin/python bench/sandbox.py --tasks 200 --agents 200 --window 10

a. ready → exec: --tasks no-op tasks of each of two roles running the same agent (`date
   +%s.%N`, which prints the clock as it starts, as in bench/daemon.py), one unboxed and one
   boxed, enqueued alternately at a steady rate in one daemon. Target: the boxed p50 within
   3 ms of the unboxed p50.
b. idle agents: --agents idle agents (`sleep 600`) unboxed, then as many boxed, in one
   daemon. For each: the whole fleet's proportional memory (Pss, /proc/PID/smaps_rollup)
   per agent: the daemon and its fork server, every shim and everything under it (the two
   bwrap processes of a box, the agent); and, over a --window s window, the daemon's own CPU
   in % of one core. Targets: boxed Pss ≤ 1 MiB per agent; daemon CPU ≤ 5 % with them.

The fleet lives in /var/tmp: a box's /tmp is its own. Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon import NOOP, Node, ms, percentile, printed_time, pss_kib, raise_limits  # noqa: E402

from taskherd.model import NewTask, TaskState  # noqa: E402

P50_EXTRA = 0.003  # seconds the box may add to ready → exec at p50
PSS_TARGET_KIB = 1024
CPU_TARGET = 5.0  # % of one core
BOXED = '{ mode = "bwrap" }'


def ready_to_exec(root: Path, count: int, interval: float) -> dict[str, list[float]]:
    noop = str(NOOP).replace("'", '"')
    roles = {"plain": {"command": noop, "max_concurrent": "8"},
             "boxed": {"command": noop, "max_concurrent": "8", "isolation": BOXED}}
    node = Node(root / "exec", 16, roles, "normal")
    node.up()
    try:
        ready: dict[str, dict[int, float]] = {"plain": {}, "boxed": {}}
        start = time.monotonic()
        for index in range(2 * count):
            delay = start + index * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            role = ("plain", "boxed")[index % 2]
            task_id, at = node.add(role)
            ready[role][task_id] = at
        every = {t: at for tasks in ready.values() for t, at in tasks.items()}
        node.wait_until(lambda: all(node.store.get_task(t).state is TaskState.COMPLETED
                                    for t in every), 300, "the no-op tasks")
        return {role: [printed_time(node.store.runs_of_task(t)[-1].log_path) - at
                       for t, at in tasks.items()] for role, tasks in ready.items()}
    finally:
        node.down()


def idle_fleet(root: Path, role: str, agents: int, window: float) -> dict[str, float]:
    """`agents` idle agents of one kind: Pss per agent (KiB) and the daemon's CPU (%)."""
    options = {"command": '["sleep", "600"]', "idle_timeout": '"1h"'}
    if role == "boxed":
        options["isolation"] = BOXED
    node = Node(root / role, agents, {role: options}, "normal")
    node.up()
    try:
        node.store.enqueue_many([NewTask(role=role, title=f"idle {i}") for i in range(agents)],
                                time.time())
        node.wait_until(lambda: sum(1 for r in node.store.open_runs() if r.spawned_at) >= agents,
                        600, f"{agents} {role} agents to spawn")
        # Every agent started: the box's processes exist once `sleep` does.
        node.wait_until(lambda: _started(node, agents), 120, f"{agents} {role} agents' exec")
        daemon = psutil.Process(node.process.pid)
        time.sleep(5)  # let the spawn burst and every agent's first looks pass
        before, wall_before = daemon.cpu_times(), time.monotonic()
        time.sleep(window)
        after, wall = daemon.cpu_times(), time.monotonic() - wall_before
        cpu = (after.user + after.system - before.user - before.system) / wall * 100
        shims = {r.pid for r in node.store.open_runs() if r.pid}
        under = [child.pid for shim in shims for child in _tree(shim)]
        helpers = [child.pid for child in daemon.children() if child.pid not in shims]
        total = (pss_kib(daemon.pid) + sum(map(pss_kib, helpers)) + sum(map(pss_kib, shims))
                 + sum(map(pss_kib, under)))
        return {"pss_per_agent": total / agents, "cpu": cpu, "processes": len(under) + len(shims),
                "daemon_pss": pss_kib(daemon.pid)}
    finally:
        node.down()


def _started(node: Node, agents: int) -> bool:
    return sum(1 for p in psutil.process_iter(["name"]) if p.info["name"] == "sleep") >= agents


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500, help="no-op tasks of each role (a)")
    parser.add_argument("--interval", type=float, default=0.04, help="seconds between tasks")
    parser.add_argument("--agents", type=int, default=1000, help="idle agents of each kind (b)")
    parser.add_argument("--window", type=float, default=20.0, help="CPU window, seconds (b)")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        print("bubblewrap is not installed (apt install bubblewrap)")
        return 1
    print(f"taskherd sandbox bench: {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at start; {raise_limits(args.agents)}\n")
    root = Path(tempfile.mkdtemp(prefix="taskherd-sandbox-", dir="/var/tmp"))
    try:
        latency = ready_to_exec(root, args.tasks, args.interval)
        plain = idle_fleet(root, "plain", args.agents, args.window)
        boxed = idle_fleet(root, "boxed", args.agents, args.window)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    p50 = {role: percentile(values, 0.5) for role, values in latency.items()}
    print(f"a. ready → exec, {args.tasks} no-op tasks of each role, alternately")
    for role, values in latency.items():
        print(f"  {role:6} n={len(values):5d} p50={ms(p50[role])} "
              f"p99={ms(percentile(values, 0.99))}")
    print(f"b. {args.agents} idle agents of each kind, the daemon's CPU over {args.window:g} s")
    for name, fleet in (("plain", plain), ("boxed", boxed)):
        print(f"  {name:6} Pss {fleet['pss_per_agent']:7.0f} KiB per agent (daemon "
              f"{fleet['daemon_pss'] / 1024:.1f} MiB, {fleet['processes']} processes under "
              f"the shims), daemon CPU {fleet['cpu']:.2f} % of a core")
    extra = p50["boxed"] - p50["plain"]
    rows = [("ready→exec p50 boxed - unboxed", ms(extra).strip(), "≤ 3.0 ms",
             extra <= P50_EXTRA),
            ("Pss per idle boxed agent", f"{boxed['pss_per_agent']:.0f} KiB",
             f"≤ {PSS_TARGET_KIB} KiB", boxed["pss_per_agent"] <= PSS_TARGET_KIB),
            (f"daemon CPU, {args.agents} idle boxed agents", f"{boxed['cpu']:.2f} %",
             f"≤ {CPU_TARGET:g} %", boxed["cpu"] <= CPU_TARGET)]
    print(f"\n{'measure':44} {'value':>12}  {'target':10} result")
    for name, value, target, ok in rows:
        print(f"{name:44} {value:>12}  {target:10} {'PASS' if ok else 'MISS'}")
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
