"""Sandbox benchmark: the real `taskherd up` with its agents boxed (bubblewrap), beside the
same role unboxed, in one run.

    .venv/bin/python bench/sandbox.py               # about 5 minutes on 2 cores
    .venv/bin/python bench/sandbox.py --tasks 100 --agents 200 --window 10

Three roles run the same agent: `plain` (no [isolation] table: today's unconfined agent),
`boxed` (`[roles.boxed.isolation] mode = "bwrap"`: the shim starts `bwrap OPTIONS -- ARGV`)
and `capped` (the box and the caps: memory, pids and cpu on the agent's cgroups). Everything
the bench makes lies under --dir (/var/tmp): a box has a private /tmp, so a workdir there would
not be the host's.

a. ready → exec: one daemon (max_concurrent 8), --tasks tasks of each role, enqueued in
   rotation one every --interval, of the no-op agent `date +%s.%N` (which prints the clock as
   it starts, as in bench/daemon.py part a; its output reaches the run's log by fd, through the
   box). Floors, started one at a time by a bare `subprocess.Popen` (own session, output to a
   file): the no-op itself, and the no-op in the very box the daemon builds for the boxed role
   (its bwrap argv, from taskherd.services.launch): what bwrap costs without taskherd.
   Target: each boxed role's p50 ≤ plain's p50 + 3 ms.
b. idle fleets: for each role in --fleets, a daemon of its own starts --agents idle agents
   (`sleep 600`, idle_timeout 1 h). Once every agent has exec'd: the daemon's own CPU time
   over a --window s window in % of one core (as bench/daemon.py part c), and the Pss
   (/proc/PID/smaps_rollup) of every process: the daemon, its helpers (fork server, its spare,
   each boxed role's box spare) and each
   shim's whole tree (the shim, bwrap's two processes, the agent). Per agent: taskherd's cost
   (daemon + helpers + shims + bwrap) and the same with the agent itself. Beside: the machine's
   kernel slab growth over the fleet (mount, PID and IPC namespaces, a tmpfs per box; no
   process's Pss holds it; machine-wide, so other processes' churn blurs it).
   Targets, for the boxed fleets: Pss ≤ 1 MiB per agent, both ways; daemon CPU ≤ 5 %.
   A box is four processes (shim, bwrap, bwrap as the box's init, agent): the bench raises
   its soft RLIMIT_NOFILE and checks RLIMIT_NPROC, pid_max and the namespace limits first.

Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon import NOOP, Node, percentile, printed_time, pss_kib, row  # bench/daemon.py

from taskherd.config import load_config
from taskherd.host import cgroups, procs, sandbox
from taskherd.model import NewTask, TaskState
from taskherd.services.launch import Launch, agent_path

BOX = '{ mode = "bwrap" }'
CAPS = '{ mode = "bwrap", memory = "256M", pids = 64, cpu = 1.0 }'
ISOLATION = {"plain": None, "boxed": BOX, "capped": CAPS}
P50_EXTRA = 0.003  # a box may add this much to ready → exec p50
PSS_TARGET_KIB = 1024
CPU_TARGET = 5.0  # % of one core
PROCESSES_PER_BOX = 4  # shim, bwrap outside, bwrap as the box's PID 1, the agent
NAMESPACES = ("mnt", "pid", "ipc", "uts", "cgroup")  # one of each per box


def roles_for(names: list[str], workdir: Path, command: list[str],
              extra: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    roles = {}
    for name in names:
        options = {"command": json.dumps(command), "workdir": json.dumps(str(workdir)),
                   **(extra or {})}
        if ISOLATION[name] is not None:
            options["isolation"] = ISOLATION[name]
        roles[name] = options
    return roles


def make_node(root: Path, max_concurrent: int, roles: dict[str, dict[str, str]],
              durability: str) -> Node:
    (root / "work").mkdir(parents=True)
    return Node(root, max_concurrent, roles, durability)


def release_cgroups(node: Node, timeout: float = 60.0) -> None:
    """The capped runs' cgroups, which a killed daemon leaves behind: emptied and removed,
    with their parent. A thousand killed at once take a while to exit, and a cgroup is busy
    until its last member has, so this asks again until all are gone."""
    where = cgroups.host()
    data_dir = node.data_dir.resolve()
    parents = [base / cgroups.group_name(data_dir) for base in dict.fromkeys(where.bases.values())]
    deadline = time.monotonic() + timeout
    while any(parent.exists() for parent in parents) and time.monotonic() < deadline:
        cgroups.release_stale(data_dir, set(), where)
        for parent in parents:
            try:
                parent.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                time.sleep(0.1)
    left = [str(parent) for parent in parents if parent.exists()]
    if left:
        print(f"(could not remove the cgroups {', '.join(left)}: remove them by hand)")


# -- a. ready → exec -----------------------------------------------------------------------

def ready_to_exec(root: Path, names: list[str], per_role: int, interval: float,
                  durability: str) -> tuple[dict[str, list[float]], dict, list[str] | None]:
    node = make_node(root, 8, roles_for(names, root / "work", NOOP), durability)
    node.up()
    ready: dict[int, tuple[str, float]] = {}
    try:
        start = time.monotonic()
        for index in range(per_role * len(names)):
            # In rotation at a steady rate: each role meets the same load.
            delay = start + index * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            name = names[index % len(names)]
            task_id, ready_at = node.add(name)
            ready[task_id] = (name, ready_at)

        def all_final() -> bool:  # counts come per role and state
            settled = (TaskState.COMPLETED, TaskState.DEAD, TaskState.BLOCKED)
            return sum(c.count for c in node.store.counts() if c.state in settled) >= len(ready)

        node.wait_until(all_final, 120, "the no-op tasks to finish")
        latencies: dict[str, list[float]] = {name: [] for name in names}
        phases: dict[str, dict[str, list[float]]] = {
            name: {"ready → claimed": [], "claimed → shim running": [],
                   "shim running → agent exec": []} for name in names}
        for task_id, (name, ready_at) in ready.items():
            task = node.store.get_task(task_id)
            if task.state is not TaskState.COMPLETED:
                raise SystemExit(f"task {task_id} of role {name} ended {task.state.value}: "
                                 f"{task.last_error}\n{node.tail()}")
            run = node.store.runs_of_task(task_id)[-1]
            exec_at = printed_time(run.log_path)
            shim_at = procs.read_header(Path(run.log_path))["time"]
            latencies[name].append(exec_at - ready_at)
            phases[name]["ready → claimed"].append(run.claimed_at - ready_at)
            phases[name]["claimed → shim running"].append(shim_at - run.claimed_at)
            phases[name]["shim running → agent exec"].append(exec_at - shim_at)
    finally:
        node.down()
        release_cgroups(node)
    # Built once the daemon is down: the box hides the files that exist when it is made (a
    # database's -wal file would be gone by the time the floor runs).
    boxed = next((name for name in names if ISOLATION[name] is not None), None)
    return latencies, phases, boxed_argv(node, boxed, root / "floors") if boxed else None


def boxed_argv(node: Node, name: str, floors: Path) -> list[str]:
    """The no-op as the daemon starts it for role `name`: in the box its Launch builds."""
    config = load_config(node.config_path)
    role = config.roles[name]
    floors.mkdir()
    log_path = floors / "boxed-run.log"
    log_path.touch()
    box = Launch(config, None, time.time).box(role, (log_path,), None)  # type: ignore[arg-type]
    env = procs.agent_env(agent_path(config, role), {}, {})
    return box.wrap(NOOP, env, sandbox.probe()[0] or "bwrap")


def bare_popen(argvs: dict[str, list[str]], count: int, folder: Path,
               cwd: Path) -> dict[str, list[float]]:
    """The floors: each argv started `count` times by a bare Popen, one at a time, in
    rotation."""
    env = procs.agent_env("/usr/bin:/bin", {}, {})
    folder.mkdir(exist_ok=True)
    latencies: dict[str, list[float]] = {name: [] for name in argvs}
    for index in range(count):
        for name, argv in argvs.items():
            log_path = folder / f"{name}-{index}.log"
            called_at = time.time()
            with open(log_path, "ab") as log:
                popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=env, cwd=cwd, start_new_session=True)
            if popen.wait() != 0:
                raise SystemExit(f"{name} floor exited {popen.returncode}: "
                                 f"{log_path.read_text()[-500:]}")
            latencies[name].append(printed_time(log_path) - called_at)
    return latencies


# -- b. idle fleets ------------------------------------------------------------------------

def check_limits(agents: int) -> str:
    """Room for `agents` boxes: a pidfd each in the daemon, four processes each, a mount,
    PID, IPC, UTS and cgroup namespace each. The soft RLIMIT_NOFILE is raised to what is
    needed (the daemon inherits it)."""
    wanted_files = 2 * agents + 512
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted_files:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted_files, hard), hard))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    processes = PROCESSES_PER_BOX * agents + 512
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    short = []
    if nofile < wanted_files:
        short.append(f"RLIMIT_NOFILE ≥ {wanted_files} (have {nofile}; ulimit -Hn)")
    if os.geteuid() != 0 and nproc != resource.RLIM_INFINITY and nproc < processes:
        short.append(f"RLIMIT_NPROC ≥ {processes} (have {nproc}; ulimit -Hu)")
    if pid_max < processes:
        short.append(f"kernel.pid_max ≥ {processes} (have {pid_max})")
    namespaces = {}
    for kind in NAMESPACES + ("user",):
        path = Path(f"/proc/sys/user/max_{kind}_namespaces")
        if path.exists():
            namespaces[kind] = int(path.read_text())
    for kind, limit in namespaces.items():
        # As root bwrap makes no user namespace; otherwise one per box.
        if (kind != "user" or os.geteuid() != 0) and limit < agents + 64:
            short.append(f"user.max_{kind}_namespaces ≥ {agents + 64} (have {limit})")
    if short:
        raise SystemExit(f"{agents} boxed agents need " + ", ".join(short)
                         + "; raise them or pass a smaller --agents")
    return (f"RLIMIT_NOFILE {nofile}, RLIMIT_NPROC {nproc}, pid_max {pid_max}, namespaces "
            f"≥ {min(namespaces.values()) if namespaces else '?'} each")


def slab_kib() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("Slab:"):
                return int(line.split()[1])
    return 0


def shim_trees(shims: list[int]) -> dict[int, list[psutil.Process]]:
    """Each shim's process and all its descendants (one /proc walk for all of them)."""
    children: dict[int, list[psutil.Process]] = {}
    every: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["ppid", "name"]):
        every[process.pid] = process
        children.setdefault(process.info["ppid"], []).append(process)
    trees = {}
    for shim in shims:
        if shim not in every:
            continue
        tree, todo = [], [every[shim]]
        while todo:
            process = todo.pop()
            tree.append(process)
            todo += children.get(process.pid, [])
        trees[shim] = tree
    return trees


def idle_fleet(root: Path, name: str, agents: int, window: float,
               durability: str) -> dict[str, float]:
    roles = roles_for([name], root / "work", ["sleep", "600"], {"idle_timeout": '"1h"'})
    node = make_node(root, agents + 8, roles, durability)
    slab_before = slab_kib()
    node.up()
    trees: dict[int, list[psutil.Process]] = {}
    try:
        began = time.monotonic()
        node.store.enqueue_many([NewTask(role=name, title=f"idle {i}") for i in range(agents)],
                                time.time())

        def all_exec() -> bool:
            shims = [r.pid for r in node.store.open_runs() if r.pid and r.spawned_at]
            if len(shims) < agents:
                return False
            found = shim_trees(shims)
            return sum(p.info["name"] == "sleep" for tree in found.values() for p in tree) \
                >= agents

        node.wait_until(all_exec, 600, f"{agents} {name} agents to exec")
        started_in = time.monotonic() - began
        daemon = psutil.Process(node.process.pid)
        time.sleep(5)  # every agent's first looks done
        before, wall_before = daemon.cpu_times(), time.monotonic()
        time.sleep(window)
        after, wall = daemon.cpu_times(), time.monotonic() - wall_before
        cpu = (after.user + after.system - before.user - before.system) / wall
        shims = [r.pid for r in node.store.open_runs() if r.pid]
        trees = shim_trees(shims)
        pss = {"daemon": pss_kib(daemon.pid), "shims": 0, "bwrap": 0, "agents": 0}
        # Helpers: every process under the daemon that is not a run's: the fork server, its
        # spare (a shim and its starter) and each boxed role's box spare (a shim, bwrap's two
        # processes and the in-box starter waiting in there).
        in_runs = {process.pid for tree in trees.values() for process in tree}
        pss["helpers"] = sum(pss_kib(child.pid) for child in daemon.children(recursive=True)
                             if child.pid not in in_runs)
        boxes = []  # the Pss of each box's bwrap processes
        for shim, tree in trees.items():
            box = 0
            for process in tree:
                kind = ("shims" if process.pid == shim else
                        "bwrap" if process.info["name"] == "bwrap" else "agents")
                kib = pss_kib(process.pid)
                pss[kind] += kib
                box += kib if kind == "bwrap" else 0
            boxes.append(box)
        slab = slab_kib() - slab_before
        processes = sum(len(tree) for tree in trees.values())
        return {**pss, "cpu_percent": cpu * 100, "window": wall, "alive": len(trees),
                "processes": processes, "started_in": started_in, "slab": slab,
                "box_min": min(boxes, default=0), "box_median": percentile(boxes, .5) if boxes
                else 0, "box_max": max(boxes, default=0)}
    finally:
        node.down()
        psutil.wait_procs([p for tree in trees.values() for p in tree], timeout=30)
        release_cgroups(node)


# -- report --------------------------------------------------------------------------------

Result = tuple[str, str, str, bool]  # measure, value, target, met


def report_ready(root: Path, names: list[str], args: argparse.Namespace) -> list[Result]:
    print(f"\na. ready → exec: {args.tasks} tasks of `{' '.join(NOOP)}` per role "
          f"({', '.join(names)}), in rotation one every {args.interval * 1e3:g} ms, "
          "max_concurrent 8")
    latencies, phases, box_argv = ready_to_exec(root, names, args.tasks, args.interval,
                                                args.durability)
    floor_argvs = {"no-op": NOOP, "no-op in the box": box_argv} if box_argv else {"no-op": NOOP}
    floors = bare_popen(floor_argvs, args.tasks, root / "floors", root / "work")
    for name in names:
        print(row(f"{name} (enqueue → exec)", latencies[name]))
        for phase, values in phases[name].items():
            print(row(f"  {phase}", values))
    for name, values in floors.items():
        print(row(f"bare Popen: {name}", values))
    if box_argv:
        bare = percentile(floors["no-op in the box"], .5) - percentile(floors["no-op"], .5)
        print(f"the box alone (bare Popen, p50): {bare * 1e3:+.1f} ms; its bwrap argv: "
              f"{len(box_argv) - len(NOOP) - 2} words before `--`")
    plain50, plain99 = percentile(latencies["plain"], .5), percentile(latencies["plain"], .99)
    results = []
    for name in names[1:]:
        p50, p99 = percentile(latencies[name], .5), percentile(latencies[name], .99)
        print(f"{name} vs plain: p50 {(p50 - plain50) * 1e3:+.1f} ms, p99 "
              f"{(p99 - plain99) * 1e3:+.1f} ms")
        results.append((f"ready→exec p50, {name} − plain", f"{(p50 - plain50) * 1e3:+.1f} ms",
                        f"≤ +{P50_EXTRA * 1e3:g} ms", p50 - plain50 <= P50_EXTRA))
    return results


def report_fleets(root: Path, fleets: list[str], args: argparse.Namespace) -> list[Result]:
    limits = check_limits(args.agents)
    print(f"\nb. {args.agents} idle agents (`sleep 600`) per fleet ({', '.join(fleets)}), each "
          f"on a daemon of its own; CPU window {args.window:g} s; {limits}")
    figures = {name: report_fleet(root, name, args) for name in fleets}
    results = []
    for name, use in figures.items():
        if name == "plain":
            continue
        label = f"{name}, {args.agents} idle"
        if "plain" in figures:
            plain = figures["plain"]
            print(f"{name} per agent: {use['cost']:.0f} KiB, {use['with agent']:.0f} KiB with "
                  f"the agent; plain {plain['cost']:.0f} KiB, {plain['with agent']:.0f} KiB: "
                  f"the box adds {use['with agent'] - plain['with agent']:+.0f} KiB")
        results += [
            (f"Pss per agent, {label}", f"{use['cost']:.0f} KiB", f"≤ {PSS_TARGET_KIB} KiB",
             use["cost"] <= PSS_TARGET_KIB),
            ("  with the agent itself", f"{use['with agent']:.0f} KiB",
             f"≤ {PSS_TARGET_KIB} KiB", use["with agent"] <= PSS_TARGET_KIB),
            (f"daemon CPU, {label}", f"{use['cpu_percent']:.2f} %", f"≤ {CPU_TARGET:g} %",
             use["cpu_percent"] <= CPU_TARGET)]
    return results


def report_fleet(root: Path, name: str, args: argparse.Namespace) -> dict[str, float]:
    use = idle_fleet(root / f"fleet-{name}", name, args.agents, args.window, args.durability)
    alive = max(use["alive"], 1)
    cost = use["daemon"] + use["helpers"] + use["shims"] + use["bwrap"]
    use["cost"], use["with agent"] = cost / alive, (cost + use["agents"]) / alive
    print(f"{name}: {use['alive']} agents exec'd in {use['started_in']:.1f} s, "
          f"{use['processes']} processes in the shims' trees; daemon CPU "
          f"{use['cpu_percent']:.2f} % of one core over {use['window']:.1f} s")
    print(f"  Pss: daemon {use['daemon'] / 1024:.1f} MB, helpers {use['helpers'] / 1024:.1f} MB, "
          f"shims {use['shims'] / 1024:.1f} MB, bwrap {use['bwrap'] / 1024:.1f} MB, agents "
          f"{use['agents'] / 1024:.1f} MB")
    print(f"  per agent: daemon + helpers + shims + bwrap {use['cost']:.0f} KiB (shim "
          f"{use['shims'] / alive:.0f}, bwrap {use['bwrap'] / alive:.0f}), with the agent "
          f"{use['with agent']:.0f} KiB; kernel slab {use['slab'] / alive:+.0f} KiB per agent "
          "(machine-wide)")
    if use["bwrap"]:
        # Not one figure: the box's PID 1 keeps more heap the more boxes started before it.
        print(f"  one box's bwrap processes: Pss min {use['box_min']:.0f}, median "
              f"{use['box_median']:.0f}, max {use['box_max']:.0f} KiB")
    return use


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300, help="no-op tasks per role (a)")
    parser.add_argument("--interval", type=float, default=0.04,
                        help="seconds between two enqueues (steady rate)")
    parser.add_argument("--agents", type=int, default=1000, help="idle agents per fleet (b)")
    parser.add_argument("--window", type=float, default=20.0, help="CPU window, seconds (b)")
    parser.add_argument("--fleets", default="plain,boxed,capped",
                        help="comma list of the roles whose idle fleet is measured (b)")
    parser.add_argument("--roles", default="plain,boxed,capped",
                        help="comma list of the roles timed in a (plain always is)")
    parser.add_argument("--dir", default="/var/tmp",
                        help="where the bench's files go (not /tmp: a box's /tmp is private)")
    parser.add_argument("--durability", choices=["full", "normal"], default="full")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: a,b")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    names = ["plain"] + [n for n in dict.fromkeys(args.roles.split(",")) if n != "plain"]
    fleets = list(dict.fromkeys(filter(None, args.fleets.split(","))))
    for name in names + fleets:
        if name not in ISOLATION:
            parser.error(f"unknown role {name!r}: choose from {', '.join(ISOLATION)}")
    bwrap, problem = sandbox.probe()
    if problem is not None:
        raise SystemExit(f"no sandbox to measure: {problem}")
    began = time.monotonic()
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    print(f"taskherd sandbox bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"{version}, {'root' if os.geteuid() == 0 else 'unprivileged'}, "
          f"{cgroups.host().how()}, durability {args.durability}, load average "
          f"{os.getloadavg()[0]:.2f} at start")
    print("roles: " + "; ".join(f"{name}: isolation = {ISOLATION[name] or '(none)'}"
                                for name in ISOLATION))
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="taskherd-sandbox-bench-", dir=args.dir) as tmp_dir:
        tmp = Path(tmp_dir)
        if "a" not in skip:
            results += report_ready(tmp / "ready", names, args)
        if "b" not in skip and fleets:
            results += report_fleets(tmp, fleets, args)
    print(f"\n(bench took {time.monotonic() - began:.0f} s; load average "
          f"{os.getloadavg()[0]:.2f} at the end)")
    print(f"\n{'measure':<40} {'value':>12}  {'target':<10} result")
    for name, value, target, ok in results:
        print(f"{name:<40} {value:>12}  {target:<10} {'PASS' if ok else 'FAIL'}")
    return 0 if all(ok for *_, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
