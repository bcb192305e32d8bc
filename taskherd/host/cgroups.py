"""Caps on an agent's whole process tree (the OS layer): one cgroup per run.

A role's ``[roles.NAME.isolation]`` `memory`, `pids` and `cpu` become the limits of a cgroup
made for each of its runs, named from the data dir and the run id
(``taskherd-<hash of the data dir>/run-<id>``), so a restarted daemon finds it again without
storing anything, and two daemons on one host never share one. The agent's starter (the
shim's child) joins it by writing ``0`` to each `RunCgroup.join_files` before its exec: the
agent and all it forks are counted from their first instruction, the shim never. The daemon
makes each capped role's next set ahead (``ready-<random>``, `prepare`) and renames it to the
run's at its claim, so making folders and writing limits is not on the way to the exec; a
daemon's start removes the sets an earlier one left.

Two layouts, as the host has them:

- cgroup v2 (one unified hierarchy): the run's cgroup lies under the daemon's own cgroup when
  that is delegated to the daemon's user (a systemd unit with ``Delegate=yes``), else under
  the root when the daemon runs as root; the controllers are enabled in
  ``cgroup.subtree_control`` of each folder on the way down, after the daemon's own
  processes moved out of its cgroup into a leaf, ``taskherd-daemon`` (v2 lets no cgroup but
  the root hold processes and give children a controller). Limits: memory.max,
  memory.swap.max, pids.max, cpu.max.
- cgroup v1 (a hierarchy per controller): a folder of the same name in each of the memory,
  pids and cpu hierarchies, under the daemon's own cgroup there when it may write it, else
  under the hierarchy's root. Limits: memory.limit_in_bytes (and memory.memsw.limit_in_bytes,
  so swap does not stretch the cap), pids.max, cpu.cfs_quota_us / cpu.cfs_period_us.

A cap that cannot be enforced raises `CgroupUnavailable` with what to do: the caller fails
closed (the task waits blocked), never runs the agent uncapped. Stdlib only.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from taskherd.policy.sizes import format_size

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")
# The cpu cap's accounting period. The kernel's default, 100 ms, lets a capped tree run on
# every core for its whole quota and then stop: a chatty agent capped at 0.5 took both cores
# for 25 ms at a time, and other roles' starts waited behind it (their p99 ×3.2 quiet in
# bench/logs.py); over 10 ms it takes its share in slices too short to starve anyone (×1.4–1.8).
CPU_PERIOD_US = 10_000
DAEMON_LEAF = "taskherd-daemon"  # v2: where the daemon's own processes go (see _give_controllers)
# A set of a run's cgroups made ahead (`prepare`), renamed to the run's when it comes.
READY_PREFIX = "ready-"
RELEASE_TRIES = 50  # kill-and-look rounds before a cgroup's removal is given up (a D-state task)


class CgroupUnavailable(Exception):
    """A cap that was asked for cannot be enforced on this host; the message says why and
    what to do."""


@dataclass(frozen=True)
class Caps:
    memory: int | None = None  # bytes
    pids: int | None = None
    cpu: float | None = None  # cores

    @property
    def any(self) -> bool:
        return any(value is not None for value in (self.memory, self.pids, self.cpu))

    @property
    def controllers(self) -> tuple[str, ...]:
        wanted = {"memory": self.memory, "pids": self.pids, "cpu": self.cpu}
        return tuple(name for name in CONTROLLERS if wanted[name] is not None)

    def describe(self) -> str:
        parts = []
        if self.memory is not None:
            parts.append(f"memory {format_size(self.memory)}")
        if self.pids is not None:
            parts.append(f"pids {self.pids}")
        if self.cpu is not None:
            parts.append(f"cpu {self.cpu:g}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Host:
    """Where this daemon's run cgroups go, per controller (v2: the same folder for all)."""

    version: int  # 1 or 2
    bases: dict[str, Path]  # controller → the folder that holds taskherd-<hash>/
    missing: dict[str, str]  # controller → why it cannot be used here, and what to do

    def how(self) -> str:
        where = sorted({str(path) for path in self.bases.values()})
        if not where:
            return f"cgroup v{self.version}"
        who = "as root" if os.geteuid() == 0 else "delegated to this user"
        return f"cgroup v{self.version}, {who}, under {', '.join(where)}"


@dataclass(frozen=True)
class RunCgroup:
    folders: tuple[Path, ...]  # one per controller used (v1), or one (v2)
    version: int = 2
    controllers: tuple[str, ...] = ()  # v1: each folder's controller, in the same order

    @property
    def join_files(self) -> list[str]:
        """What the agent's starter writes `0` to, to move itself in. On v1, `tasks`: the
        starter is one thread (a fresh fork), and moving a thread skips the whole-group lock
        whose writer waits for an RCU grace period (about 7 ms each start here, up to 30 ms
        on a loaded host; `cgroup.procs` takes it)."""
        name = "tasks" if self.version == 1 else "cgroup.procs"
        return [str(folder / name) for folder in self.folders]

    @property
    def copier_files(self) -> list[str]:
        """Where the run's shim moves itself while it copies the agent's output: the cpu
        cap's cgroup alone (v1, a hierarchy per controller), so the copying of a chatty
        agent's output counts against the role's cores, while no memory cap ever kills the
        shim. On v2 one cgroup holds every cap: the shim stays out."""
        if self.version != 1 or "cpu" not in self.controllers:
            return []
        return [str(self.folders[self.controllers.index("cpu")] / "tasks")]


def host(root: Path = ROOT, self_cgroup: Path = Path("/proc/self/cgroup")) -> Host:
    """What this host offers this daemon's runs: which controllers, where."""
    try:
        own = _own_cgroups(self_cgroup)
    except OSError:
        own = {}
    if (root / "cgroup.controllers").exists():
        return _host_v2(root, own.get("", "/"))
    bases, missing = {}, {}
    for name in CONTROLLERS:
        hierarchy = root / name
        if not (hierarchy / "cgroup.procs").exists():
            missing[name] = (f"the {name} controller is not mounted at {hierarchy} (mount "
                             f"cgroup v1 {name}, or boot with cgroup v2)")
            continue
        inside = hierarchy / own.get(name, "/").lstrip("/")
        base = next((path for path in (inside, hierarchy) if os.access(path, os.W_OK)), None)
        if base is None:
            missing[name] = (f"{hierarchy} is not writable by this user (run the daemon as "
                             "root, or on a cgroup v2 host as a systemd service with "
                             "Delegate=yes)")
        else:
            bases[name] = base
    return Host(1, bases, missing)


def _host_v2(root: Path, own: str) -> Host:
    available = set(_read(root / "cgroup.controllers").split())
    base = root / own.lstrip("/")
    if os.geteuid() == 0 and not _delegated(base):
        # Root may write any cgroup, but one systemd did not hand over (a login session, a
        # plain service) is systemd's to arrange: the runs go under the root cgroup.
        base = root
    if not os.access(base, os.W_OK):
        why = (f"the daemon's cgroup {base} is not delegated to it: run it as a systemd "
               "user service with Delegate=yes (taskherd service install writes it), or "
               "under systemd-run --user --scope -p Delegate=yes")
        return Host(2, {}, dict.fromkeys(CONTROLLERS, why))
    # What the daemon's cgroup was given, which may be less than the host has: systemd's
    # user manager is delegated only some controllers (memory and pids, on older ones).
    given = (set(_read(base / "cgroup.controllers").split())
             if (base / "cgroup.controllers").exists() else available)
    bases, missing = {}, {}
    for name in CONTROLLERS:
        if name in given:
            bases[name] = base
        elif name in available:
            missing[name] = (f"the {name} controller is not delegated to {base}: give it to "
                             "the user's systemd (systemctl edit user@.service: [Service] "
                             f"Delegate=memory pids cpu), or run the daemon as root")
        else:
            missing[name] = f"the {name} controller is not enabled on this host's cgroup v2"
    return Host(2, bases, missing)


def _delegated(cgroup: Path) -> bool:
    """Whether systemd delegated `cgroup` (Delegate=yes; systemd 251+ marks it so)."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(cgroup, name) == b"1":
                return True
        except OSError:  # not marked, or a filesystem without extended attributes
            pass
    return False


def group_name(data_dir: Path) -> str:
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:8]
    return f"taskherd-{digest}"


def create(data_dir: Path, run_id: int, caps: Caps, where: Host | None = None,
           ready: str | None = None) -> RunCgroup:
    """The run's cgroup(s) with `caps` written; a leftover of the same name is emptied and
    reused. `ready`: a set made ahead with the same caps (`prepare`), renamed to be the run's
    (a rename a folder, ~10 µs, where making them is ~0.6 ms on the way from claim to exec).
    CgroupUnavailable when a cap asked for cannot be enforced here."""
    where = where or host()
    if ready is not None:
        taken = _take_ready(where, group_name(data_dir), ready, run_id, caps)
        if taken is not None:
            return taken
        for base in dict.fromkeys(where.bases.values()):  # not left behind for nobody
            if (base / group_name(data_dir) / ready).is_dir():
                _remove(base / group_name(data_dir) / ready)
    for name in caps.controllers:
        if name not in where.bases:
            raise CgroupUnavailable(f"its {name} cap cannot be enforced here: "
                                    f"{where.missing.get(name, 'unknown reason')}")
    make = _create_v2 if where.version == 2 else _create_v1
    try:
        for _ in range(2):
            try:
                return make(where, group_name(data_dir), f"run-{run_id}", caps)
            except FileNotFoundError:
                # The data dir's folder went between its mkdir and the run's: its last other
                # run was released meanwhile (release removes it once empty). Again.
                continue
        return make(where, group_name(data_dir), f"run-{run_id}", caps)
    except OSError as error:
        raise CgroupUnavailable(f"its cgroup could not be made: {error}") from error


def prepare(data_dir: Path, caps: Caps, where: Host | None = None) -> str:
    """Make a set of cgroups with `caps` for a run to come (`create(..., ready=NAME)`), off
    the way from its claim to its agent's exec; its name. Raises OSError or
    CgroupUnavailable as `create` would."""
    where = where or host()
    if any(name not in where.bases for name in caps.controllers):
        raise CgroupUnavailable("a cap of these cannot be enforced here")
    name = f"{READY_PREFIX}{secrets.token_hex(6)}"
    (_create_v2 if where.version == 2 else _create_v1)(where, group_name(data_dir), name, caps)
    return name


def _take_ready(where: Host, group: str, ready: str, run_id: int,
                caps: Caps) -> RunCgroup | None:
    """The ready set `ready` renamed to the run's; None when it cannot be (gone, or a leftover
    of the run's name is in the way): the run's are made then, as without one."""
    bases = list(dict.fromkeys(where.bases[name] for name in caps.controllers))
    folders = [base / group / f"run-{run_id}" for base in bases]
    if any(folder.exists() for folder in folders):
        return None
    try:
        for base, folder in zip(bases, folders, strict=True):
            os.rename(base / group / ready, folder)
    except OSError:
        return None  # one renamed already is made whole again by the run's own create
    if where.version == 2:
        return RunCgroup(tuple(folders))
    return RunCgroup(tuple(folders), version=1, controllers=caps.controllers)


def _create_v1(where: Host, group: str, leaf: str, caps: Caps) -> RunCgroup:
    folders = []
    for name in caps.controllers:
        folder = where.bases[name] / group / leaf
        folder.mkdir(parents=True, exist_ok=True)
        _empty(folder)  # a leftover of a reused id: nothing of it joins this run
        if name == "memory":
            memsw = folder / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                # The kernel refuses a memory limit above memory+swap's: a leftover's lower
                # memsw is lifted first, or a cap that grew could not be written at all.
                _write(memsw, -1)
            _write(folder / "memory.limit_in_bytes", caps.memory)
            if memsw.exists():
                _write(memsw, caps.memory)
        elif name == "pids":
            _write(folder / "pids.max", caps.pids)
        else:
            assert caps.cpu is not None
            _write(folder / "cpu.cfs_period_us", CPU_PERIOD_US)
            _write(folder / "cpu.cfs_quota_us", round(caps.cpu * CPU_PERIOD_US))
        folders.append(folder)
    return RunCgroup(tuple(folders), version=1, controllers=caps.controllers)


def _create_v2(where: Host, group: str, leaf: str, caps: Caps) -> RunCgroup:
    base = next(iter(where.bases.values()))
    parent, folder = base / group, base / group / leaf
    enable = " ".join(f"+{name}" for name in caps.controllers)
    _give_controllers(base, enable)
    parent.mkdir(exist_ok=True)
    _give_controllers(parent, enable)
    folder.mkdir(exist_ok=True)
    _empty(folder)
    if caps.memory is not None:
        _write(folder / "memory.max", caps.memory)
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", 0)
    if caps.pids is not None:
        _write(folder / "pids.max", caps.pids)
    if caps.cpu is not None:
        _write(folder / "cpu.max", f"{round(caps.cpu * CPU_PERIOD_US)} {CPU_PERIOD_US}")
    return RunCgroup((folder,))


def _give_controllers(level: Path, enable: str) -> None:
    """Enable `enable` for the cgroups under `level`. v2 lets no cgroup but the root both
    hold processes and give its children a domain controller (memory), and the daemon's own
    cgroup holds it, its fork server and shims (a systemd unit with Delegate=yes puts them
    there): they move into a leaf of their own, DAEMON_LEAF, as systemd asks of a delegated
    unit, and the controllers go to the runs' side."""
    for _ in range(RELEASE_TRIES):  # a process forked meanwhile lands in `level`: again
        try:
            _write(level / "cgroup.subtree_control", enable)
            return
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise
        try:
            _move_members(level, level / DAEMON_LEAF)
        except OSError as error:
            raise CgroupUnavailable(
                f"{level} holds processes that could not be moved into a cgroup of their own "
                f"({error}), so it cannot give its controllers to the runs' cgroups: start "
                "the daemon in a cgroup of its own (systemd-run --user --scope -p "
                "Delegate=yes taskherd up)") from error
    raise CgroupUnavailable(f"{level} kept gaining processes while they were being moved "
                            "out of it; its controllers could not be given to the runs")


def _move_members(level: Path, leaf: Path) -> None:
    leaf.mkdir(exist_ok=True)
    for pid in _read(level / "cgroup.procs").split():
        try:
            _write(leaf / "cgroup.procs", pid)
        except ProcessLookupError:  # it exited meanwhile
            pass


def run_folders(data_dir: Path, run_id: int, where: Host | None = None) -> list[Path]:
    """The run's cgroup folders that exist."""
    where = where or host()
    group = group_name(data_dir)
    return [folder for folder in dict.fromkeys(base / group / f"run-{run_id}"
                                                for base in where.bases.values())
            if folder.is_dir()]


def memory_killed(data_dir: Path, run_id: int, where: Host | None = None) -> int:
    """How many processes of the run the kernel killed at its memory cap."""
    for folder in run_folders(data_dir, run_id, where):
        for name in ("memory.events", "memory.oom_control"):  # v2, v1
            if (folder / name).exists():
                return _field(folder / name, "oom_kill")
    return 0


def pids_refused(data_dir: Path, run_id: int, where: Host | None = None) -> int:
    """How many forks of the run its pids cap refused."""
    for folder in run_folders(data_dir, run_id, where):
        if (folder / "pids.events").exists():
            return _field(folder / "pids.events", "max")
    return 0


def release(data_dir: Path, run_id: int, where: Host | None = None) -> None:
    """Kill what is left in the run's cgroups and remove them; quiet when already gone."""
    for folder in run_folders(data_dir, run_id, where):
        _remove(folder)
        _remove_if_empty(folder.parent)


def release_stale(data_dir: Path, keep: set[int], where: Host | None = None) -> int:
    """Remove the run cgroups of this data dir whose run is not in `keep` (left by a daemon
    that died); how many."""
    where = where or host()
    removed = 0
    for base in dict.fromkeys(where.bases.values()):
        parent = base / group_name(data_dir)
        if not parent.is_dir():
            continue
        for folder in parent.glob("run-*"):
            run_id = folder.name.removeprefix("run-")
            if folder.is_dir() and run_id.isdigit() and int(run_id) not in keep:
                _remove(folder)
                removed += 1
        for folder in parent.glob(f"{READY_PREFIX}*"):  # made ahead by an earlier daemon
            if folder.is_dir():
                _remove(folder)
        _remove_if_empty(parent)
    return removed


def _remove_if_empty(parent: Path) -> None:
    """The data dir's folder, once it holds no run: a host that runs many daemons (a test
    suite) would otherwise gather one empty folder per data dir in every hierarchy."""
    try:
        parent.rmdir()
    except OSError:  # runs still in it (EBUSY on cgroupfs), or already gone
        pass


def _remove(folder: Path) -> None:
    kill_file = folder / "cgroup.kill"  # v2 (Linux 5.14+): the kernel kills them all at once
    for _ in range(RELEASE_TRIES):
        if kill_file.exists():
            try:
                _write(kill_file, 1)
            except OSError:
                pass
        _kill_members(folder)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY:
                return
        time.sleep(0.01)  # the killed are still exiting: their cgroup is busy until then


def _empty(folder: Path) -> None:
    """Kill what is in `folder` and wait for it to be gone: a lower limit written while the
    killed still hold their memory could be refused as busy."""
    for _ in range(RELEASE_TRIES):
        if not _kill_members(folder):
            return
        time.sleep(0.01)


def _kill_members(folder: Path) -> int:
    """SIGKILL each process in `folder`; how many there were."""
    try:
        members = _read(folder / "cgroup.procs").split()
    except OSError:
        return 0
    for pid in members:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    return len(members)


def _own_cgroups(path: Path) -> dict[str, str]:
    """Controller → this process's cgroup path ('' for v2's unified hierarchy)."""
    found = {}
    for line in path.read_text().splitlines():
        _, controllers, cgroup = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            found[name] = cgroup
    return found


def _field(path: Path, key: str) -> int:
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def _read(path: Path) -> str:
    with open(path) as file:
        return file.read()


def _write(path: Path, value: object) -> None:
    with open(path, "w") as file:
        file.write(str(value))
