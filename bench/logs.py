"""Log benchmark: a chatty agent against a real daemon, and reading the end of a huge log.

    .venv/bin/python bench/logs.py                  # both parts, a few minutes on 2 cores
    .venv/bin/python bench/logs.py --gigabytes 0.5 --noops 200 --parts a

a. A chatty agent: `seq` (numbered lines) piped through `head -c`, --gigabytes (1.5) of
   output as fast as it goes, under the default max_log_bytes (64 MiB), --chatty-runs of
   them one after another.
   Meanwhile no-op tasks of another role arrive at a steady rate (`date +%s.%N`, ready → exec
   measured as in bench/daemon.py part a); the same tasks first run with nothing else going
   (quiet, the floor). Sampled every 50 ms: the daemon's RSS and the chatty run's log size.
   Also: how long after the chatty agent's end its task is seen completed (the shim's exit
   file's time to the first 50 ms sample that finds it so), and the daemon's CPU seconds
   over the chatty runs. The control: the same chatter run as a plain process beside the
   daemon (writing a file, not a run), with the no-ops arriving meanwhile: the agent's own
   load on the machine's cores, which taskherd cannot take away (on 2 cores, `seq` and
   `head` take one and a half).
   First, the chatter alone: the daemon's CPU and RSS while it reads nothing else.
   Targets: RSS ≤ quiet + 50 MB, the log ≤ its cap, the noops' p99 ≤ 2 x quiet.
b. The end of a 1 GiB log that is one line (no newline): `taskherd task log ID -n 5` (a whole
   CLI process; beside it the same command on a one-line log, the floor: the interpreter's
   start-up) and `GET /v1/runs/ID/log?lines=5` through the daemon's API, 20 times each.
   Target: ≤ 100 ms for the request, and for the CLI beyond its floor.

Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon import NOOP, Node, ms, percentile, printed_time, steady_noops  # bench/daemon.py

from taskherd.host import procs
from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest

CAP = 64 << 20  # the default max_log_bytes
RSS_GROWTH_MB = 50.0
P99_RATIO = 2.0
READ_TARGET = 0.100


PHASES: dict[str, dict[str, list[float]]] = {}  # per measure: its latencies by phase


def exec_latencies(node: Node, ready: dict[int, float], name: str) -> list[float]:
    node.wait_until(lambda: all(node.store.get_task(t).state is TaskState.COMPLETED
                                for t in ready), 300, "the no-op tasks")
    latencies, phases = [], PHASES.setdefault(name, {"ready → claimed": [],
                                                     "claimed → shim running": [],
                                                     "shim running → agent exec": []})
    for task_id, ready_at in ready.items():
        run = node.store.runs_of_task(task_id)[-1]
        exec_at = printed_time(run.log_path)
        shim_at = procs.read_header(Path(run.log_path))["time"]
        latencies.append(exec_at - ready_at)
        phases["ready → claimed"].append(run.claimed_at - ready_at)
        phases["claimed → shim running"].append(shim_at - run.claimed_at)
        phases["shim running → agent exec"].append(exec_at - shim_at)
    return latencies


def print_phases(name: str) -> None:
    for phase, values in PHASES[name].items():
        print(f"    {phase:<26} p50={ms(percentile(values, .5))} p99={ms(percentile(values, .99))}")


class Sampler(threading.Thread):
    """The daemon's RSS, the largest run log and when each watched task was first seen
    finished, every 50 ms, until stopped."""

    def __init__(self, pid: int, log_dir: Path, database: Path, tasks: list[int]):
        super().__init__(daemon=True)
        self.process, self.log_dir = psutil.Process(pid), log_dir
        self.database, self.tasks = database, tasks
        self.rss_peak = 0
        self.log_peak = 0
        self.seen_final: dict[int, float] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        from taskherd.store.sqlite import SQLiteStore

        store = SQLiteStore(self.database, durability="normal")  # this thread's own
        while not self.stopped.wait(0.05):
            self.rss_peak = max(self.rss_peak, self.process.memory_info().rss)
            for log in self.log_dir.glob("run-*.log"):
                try:
                    self.log_peak = max(self.log_peak, log.stat().st_size)
                except FileNotFoundError:
                    pass
            for task_id in self.tasks:
                if task_id not in self.seen_final and store.get_task(task_id).state in (
                        TaskState.COMPLETED, TaskState.DEAD):
                    self.seen_final[task_id] = time.time()
        store.close()


def part_a(tmp: Path, gigabytes: float, runs: int, noops: int, interval: float,
           chatty_cpu: float | None = None) -> bool:
    size = int(gigabytes * 1e9)
    # Numbered lines, so that no loop is seen: this agent is chatty, not stuck.
    chatter = f"seq -f 'chatter line %.0f of a chatty agent' 1 1e10 | head -c {size}"
    roles = {"noop": {"command": str(NOOP).replace("'", '"')},
             "chatty": {"command": f'["sh", "-c", "{chatter}"]', "max_concurrent": "1"}}
    if chatty_cpu is not None:  # the role's cpu cap: its whole tree gets this many cores
        roles["chatty"]["isolation"] = f"{{ cpu = {chatty_cpu} }}"
    node = Node(tmp / "chatty", 8, roles, "normal")
    node.up()
    try:
        daemon = psutil.Process(node.process.pid)
        quiet = exec_latencies(node, steady_noops(node, noops, interval), "quiet")
        rss_quiet = daemon.memory_info().rss
        # The chatter alone: what reading it costs the daemon, with nothing else to do.
        cpu_before, alone_began = sum(daemon.cpu_times()[:2]), time.monotonic()
        alone = node.add("chatty")[0]
        alone_rss = rss_quiet
        while node.store.get_task(alone).state not in (TaskState.COMPLETED, TaskState.DEAD):
            alone_rss = max(alone_rss, daemon.memory_info().rss)
            time.sleep(0.05)
        alone_cpu = sum(daemon.cpu_times()[:2]) - cpu_before
        alone_seconds = time.monotonic() - alone_began
        # The control: the same chatter, as a plain process writing a file beside the daemon,
        # not a run: what its load alone costs the no-ops on this machine.
        loaded = []
        for _ in range(runs):
            with open(tmp / "control.out", "wb") as sink:
                control = subprocess.Popen(["sh", "-c", chatter], stdout=sink)
                ready = {}
                while control.poll() is None:
                    ready |= steady_noops(node, 25, interval)
            (tmp / "control.out").unlink()
            loaded += exec_latencies(node, ready, "control")
        chatty: list[int] = []
        sampler = Sampler(node.process.pid, node.data_dir / "logs", node.root / "q.db", chatty)
        cpu_before = sum(daemon.cpu_times()[:2])
        chatty += [node.add("chatty")[0] for _ in range(runs)]
        sampler.start()
        node.wait_until(lambda: node.store.open_runs(), 30, "the chatty agent to start")
        began = time.monotonic()
        ready: dict[int, float] = {}
        while not all(node.store.get_task(t).state.value in ("completed", "dead")
                      for t in chatty):
            ready |= steady_noops(node, 25, interval)
        chatty_seconds = time.monotonic() - began
        cpu_used = sum(daemon.cpu_times()[:2]) - cpu_before
        busy = exec_latencies(node, ready, "chatty")
        sampler.stopped.set()
        sampler.join()
        settle_delays = []
        for task_id in chatty:
            run = node.store.runs_of_task(task_id)[-1]
            assert run.outcome is Outcome.SUCCEEDED, (run.outcome, run.error)
            ended = procs.read_exit_file(procs.exit_path_for(Path(run.log_path))).ended_at
            settle_delays.append(sampler.seen_final[task_id] - ended)  # ±50 ms, the sampling
            final_size = Path(run.log_path).stat().st_size
    finally:
        node.down()
    q99, b99, l99 = percentile(quiet, 0.99), percentile(busy, 0.99), percentile(loaded, 0.99)
    growth = (sampler.rss_peak - rss_quiet) / 1e6
    capped = "" if chatty_cpu is None else f", its role capped at cpu = {chatty_cpu:g}"
    print(f"a. a chatty agent: {runs} x {gigabytes:g} GB of `seq` output, max_log_bytes "
          f"{CAP >> 20} MiB{capped}, {len(busy)} no-op tasks meanwhile "
          f"({chatty_seconds:.1f} s)")
    print(f"  the chatter alone: {alone_seconds:.1f} s, the daemon's CPU {alone_cpu:.2f} s "
          f"({100 * alone_cpu / alone_seconds:.1f} % of a core), its RSS "
          f"{rss_quiet / 1e6:.1f} → {alone_rss / 1e6:.1f} MB")
    print(f"  ready → exec quiet    n={len(quiet):5d} "
          f"p50={ms(percentile(quiet, .5))} p99={ms(q99)}")
    print_phases("quiet")
    print(f"  ready → exec beside the same chatter as a plain process (control)\n"
          f"                        n={len(loaded):5d} p50={ms(percentile(loaded, .5))} "
          f"p99={ms(l99)}   ratio to quiet {l99 / q99:.2f}")
    print_phases("control")
    print(f"  ready → exec chatty   n={len(busy):5d} p50={ms(percentile(busy, .5))} p99={ms(b99)}"
          f"   ratio to quiet {b99 / q99:.2f}, to the control {b99 / l99:.2f}")
    print_phases("chatty")
    print(f"  daemon RSS quiet {rss_quiet / 1e6:.1f} MB, peak while chatty "
          f"{sampler.rss_peak / 1e6:.1f} MB (+{growth:.1f} MB)")
    print(f"  daemon CPU over the chatty runs {cpu_used:.2f} s in {chatty_seconds:.1f} s "
          f"({100 * cpu_used / chatty_seconds:.1f} % of a core)")
    print(f"  largest log on disk {sampler.log_peak / 2**20:.1f} MiB (cap {CAP >> 20} MiB), "
          f"final {final_size / 2**20:.1f} MiB")
    print(f"  agent's end → task seen completed: max {ms(max(settle_delays))} "
          "(sampled every 50 ms)")
    rows = [("ready→exec p99 chatty / quiet", f"{b99 / q99:.2f}", f"≤ {P99_RATIO:g}",
             b99 <= P99_RATIO * q99),
            ("ready→exec p99 chatty / control", f"{b99 / l99:.2f}", f"≤ {P99_RATIO:g}",
             b99 <= P99_RATIO * l99),
            ("daemon RSS growth", f"{growth:.1f} MB", f"≤ {RSS_GROWTH_MB:g} MB",
             growth <= RSS_GROWTH_MB),
            ("largest log / cap", f"{sampler.log_peak / CAP:.3f}", "≤ 1", sampler.log_peak <= CAP)]
    return verdict(rows)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def part_b(tmp: Path, count: int) -> bool:
    import httpx

    from taskherd.config import load_config
    from taskherd.ops import Queue
    from taskherd.ops import tokens as token_ops
    from taskherd.ops.logs import tail

    port = free_port()
    node = Node(tmp / "read", 2, {"noop": {"command": str(NOOP).replace("'", '"')}}, "normal")
    with open(node.config_path, "a") as config:
        config.write(f'\n[api]\nlisten = "127.0.0.1:{port}"\n')
    # The runs are made before the daemon starts: none of its dispatcher's business.
    log_dir = node.data_dir / "logs"
    huge = finished_run(node, log_dir, "huge", lambda log: fill(log, 1 << 30))
    small = finished_run(node, log_dir, "small", lambda log: log.write(b"one line\n"))
    token = token_ops.create_token(Queue(load_config(node.config_path), node.store),
                                   "bench", "read", time.time()).token
    node.up()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
        env["TASKHERD_CONFIG"] = str(node.config_path)

        def cli(task_id: int) -> float:
            began = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "taskherd", "task", "log", str(task_id),
                                  "-n", "5"], env=env, cwd=node.root, capture_output=True,
                                 check=True).stdout
            took = time.perf_counter() - began
            assert len(out) < 1 << 20, len(out)
            return took

        in_process = []
        for _ in range(count):
            with open(log_dir / f"run-{huge[1]}.log", "rb") as log:
                began = time.perf_counter()
                tail(log, 5)
                in_process.append(time.perf_counter() - began)
        cli_huge = [cli(huge[0]) for _ in range(count)]
        cli_floor = [cli(small[0]) for _ in range(count)]
        node.wait_until(lambda: _listening(port), 60, "the API")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            api_times = []
            for _ in range(count):
                began = time.perf_counter()
                answer = client.get(f"/v1/runs/{huge[1]}/log", params={"lines": 5})
                api_times.append(time.perf_counter() - began)
                assert answer.status_code == 200 and len(answer.json()["text"]) < 1 << 20
    finally:
        node.down()
    c50, f50, a99 = percentile(cli_huge, .5), percentile(cli_floor, .5), percentile(api_times, .99)
    print(f"b. the end of a 1 GiB single-line log, {count} times each")
    print(f"  task log -n 5 (1 GiB)      p50={ms(c50)} p99={ms(percentile(cli_huge, .99))}")
    print(f"  task log -n 5 (one line)   p50={ms(f50)} p99={ms(percentile(cli_floor, .99))}"
          "   (the floor: the CLI's start-up)")
    print(f"  its tail (ops/logs.tail, in the CLI's process)  p50={ms(percentile(in_process, .5))}"
          f" p99={ms(percentile(in_process, .99))}")
    print(f"  GET /v1/runs/ID/log?lines=5  p50={ms(percentile(api_times, .5))} p99={ms(a99)}")
    rows = [("task log -n 5 beyond its floor (p50)", ms(c50 - f50), "≤ 100 ms",
             c50 - f50 <= READ_TARGET),
            ("GET …/log?lines=5 p99", ms(a99), "≤ 100 ms", a99 <= READ_TARGET)]
    return verdict(rows)


def finished_run(node: Node, log_dir: Path, title: str, write) -> tuple[int, int]:
    """A task with one finished run whose log `write` fills; (task id, run id)."""
    store = node.store
    task = store.enqueue(NewTask(role="reader", title=title), time.time()).task
    claim = store.claim(ClaimRequest("bench", time.time(), 60, roles=["reader"]))
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"run-{claim.run.id}.log"
    with open(path, "wb") as log:
        write(log)
    store.mark_spawned(claim.run.id, time.time(), 60, pid=1, pid_started_at=1.0,
                       log_path=str(path))
    store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), time.time())
    return task.id, claim.run.id


def fill(log, size: int) -> None:
    block = b"x" * (1 << 20)
    for _ in range(size >> 20):
        log.write(block)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def verdict(rows: list[tuple[str, str, str, bool]]) -> bool:
    print(f"\n{'measure':<40} {'value':>12}  {'target':<10} result")
    for name, value, target, ok in rows:
        print(f"{name:<40} {value:>12}  {target:<10} {'PASS' if ok else 'FAIL'}")
    print()
    return all(ok for *_, ok in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gigabytes", type=float, default=1.5, help="each chatty agent's output")
    parser.add_argument("--chatty-runs", type=int, default=2)
    parser.add_argument("--noops", type=int, default=300, help="quiet no-op tasks (the floor)")
    parser.add_argument("--interval", type=float, default=0.04, help="seconds between no-ops")
    parser.add_argument("--reads", type=int, default=20, help="reads of the 1 GiB log (part b)")
    parser.add_argument("--parts", default="ab")
    parser.add_argument("--chatty-cpu", type=float, default=None,
                        help="cap the chatty role at this many cores ([roles.NAME.isolation] "
                             "cpu; needs a host whose cgroups take it)")
    args = parser.parse_args()
    print(f"taskherd log bench: {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at start\n")
    ok = True
    with tempfile.TemporaryDirectory(prefix="taskherd-logs-") as folder:
        tmp = Path(folder)
        if "a" in args.parts:
            ok &= part_a(tmp, args.gigabytes, args.chatty_runs, args.noops, args.interval,
                         args.chatty_cpu)
        if "b" in args.parts:
            ok &= part_b(tmp, args.reads)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
