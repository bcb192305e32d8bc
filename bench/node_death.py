"""Dead node → its task claimable again: real daemons on a throwaway PostgreSQL.

    .venv/bin/python bench/node_death.py            # 20 kills, about 2 minutes
    .venv/bin/python bench/node_death.py --kills 8 --node-timeout 5s

One watcher node (`taskherd up`, no role it can run, so it only watches) and --parallel
victim nodes, each a `taskherd up` of its own with the default `node_timeout` (15 s) and a
lease of an hour, so only the node's silence can bring its task back. Each round, every victim
takes one task whose agent waits forever; once all are running, each victim's machine dies at
once: the daemon is frozen, then it and every process it started are SIGKILLed, as a power
loss would. The figure is, for each kill, the time from the kill to the moment the task is
`ready` again in the database (claimable by any node), read by polling every 20 ms. Then the
task is cancelled and the victim started again for the next round.

Beside it, what the same death costs without a node timeout: the lease (60 s by default in
taskherd, an hour here), and the hour after which Oban's Lifeline and River's rescuer take
back a dead node's jobs by default (printed, not waited for).

Exit status 1 if the target is missed: p50 and max ≤ 20 s with the default node_timeout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from taskherd.model import NewTask, TaskState
from taskherd.store import open_store
from tests.fleet import kill_machine
from tests.pg import start_server, stop_server

TARGET = 20.0
PEERS_DEFAULT = 3600.0  # Oban Lifeline's rescue_after, River's RescueStuckJobsAfter
AGENT = "import time\nwhile True:\n    time.sleep(1)\n"


class Daemon:
    def __init__(self, root: Path, database: str, name: str, node_timeout: str, role: bool):
        self.root, self.name = root, name
        root.mkdir(parents=True)
        (root / "agent.py").write_text(AGENT)
        roles = textwrap.dedent(f"""
            [roles.hold]
            command = ["{sys.executable}", "-S", "{root / 'agent.py'}"]
            idle_timeout = "1h"
        """) if role else ""
        (root / "taskherd.toml").write_text(textwrap.dedent(f"""
            [daemon]
            database = "{database}"
            data_dir = "data"
            node = "{name}"
            lease = "1h"
            node_timeout = "{node_timeout}"
            max_concurrent = 1
        """) + roles)
        self.process: subprocess.Popen | None = None

    def up(self) -> None:
        with open(self.root / "daemon.log", "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "taskherd", "up"],
                                            cwd=self.root, stdout=log, stderr=log)

    def kill_machine(self) -> float:
        return kill_machine(self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                child.kill()
            self.process.kill()
            self.process.wait(10)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def run(kills: int, parallel: int, node_timeout: str) -> list[float]:
    server = start_server()
    url = server.url()
    durations: list[float] = []
    with tempfile.TemporaryDirectory(prefix="taskherd-bench-death-") as tmp:
        store = open_store(url, durability="normal")
        watcher = Daemon(Path(tmp) / "watcher", url, "watcher", node_timeout, role=False)
        victims = [Daemon(Path(tmp) / f"v{i}", url, f"v{i}", node_timeout, role=True)
                   for i in range(parallel)]
        try:
            watcher.up()
            for victim in victims:
                victim.up()
            while len(durations) < kills:
                round_victims = victims[:min(parallel, kills - len(durations))]
                tasks = [store.enqueue(NewTask(role="hold", title=f"hold {len(durations) + i}"),
                                       time.time()).task.id for i in range(len(round_victims))]
                # Each victim holds one (max_concurrent = 1): wait until all are running.
                wait_for(lambda held=tasks: all(store.get_task(t).state is TaskState.RUNNING
                                                for t in held), 60, "every victim to run its task")
                killed = {victim.name: victim.kill_machine() for victim in round_victims}
                holder = {t: store.get_task(t).lease_node for t in tasks}
                pending = set(tasks)
                while pending:
                    for task_id in list(pending):
                        if store.get_task(task_id).state is TaskState.READY:
                            durations.append(time.time() - killed[holder[task_id]])
                            store.cancel(task_id, time.time(), "bench round over")
                            pending.discard(task_id)
                    if pending:
                        time.sleep(0.02)
                        if time.time() - min(killed.values()) > 300:
                            raise RuntimeError(f"tasks {sorted(pending)} never came back")
                print(f"  round: {len(durations)}/{kills} kills, last "
                      f"{', '.join(f'{d:.1f}s' for d in durations[-len(tasks):])}", flush=True)
                for victim in round_victims:
                    victim.up()
        finally:
            for daemon in [watcher, *victims]:
                daemon.stop()
            store.close()
            stop_server(server)
    return durations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=4, help="victim nodes killed per round")
    parser.add_argument("--node-timeout", default="15s", help="[daemon] node_timeout")
    args = parser.parse_args()
    started = time.perf_counter()
    durations = sorted(run(args.kills, args.parallel, args.node_timeout))
    p50 = durations[len(durations) // 2]
    print(f"\ndead node → its task claimable again, {len(durations)} kills, node_timeout "
          f"{args.node_timeout}:")
    print(f"  p50 {p50:6.2f} s   max {durations[-1]:6.2f} s   min {durations[0]:6.2f} s")
    print(f"  without a node timeout: the lease (60 s by default); Oban and River by default: "
          f"{PEERS_DEFAULT:.0f} s → p50 {PEERS_DEFAULT / p50:.0f}x sooner here")
    passed = p50 <= TARGET and durations[-1] <= TARGET
    print(f"  target p50 and max ≤ {TARGET:g} s: {'PASS' if passed else 'FAIL'}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
