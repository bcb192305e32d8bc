"""Each agent in a box (the OS layer): bubblewrap's argv that confines one run's agent.

A role with ``[roles.NAME.isolation] mode = "bwrap"`` has its agent started as
``bwrap OPTIONS -- ARGV`` by the run's shim: the shim stays outside the box (it is the box's
parent), so a restarted daemon re-adopts the run and reads its exit as before, and the
liveness verdicts still see the agent's process tree, which is the shim's descendants.

Inside, the agent sees the host's files read-only, with these exceptions, mounted in this
order (a later mount wins where two overlap):

1. private: ``/tmp`` (and TMPDIR), ``/dev``, ``/proc`` of its own PID namespace;
2. writable: its workdir (its worktree), the role's ``writable`` paths, the state directories
   its runtime needs (`RUNTIME_STATE`), a git role's repository data (its hooks and config
   read-only: a hook written by an agent would run outside the box, at the merge);
3. hidden (an empty tmpfs over a folder, an empty file over a file): the data dir (database,
   every run's logs and prompts, other tasks' worktrees, the daemon's sockets), a database
   or its event sockets kept elsewhere, the service's environment file, the config file
   (read-only instead when it lies in the workdir), the default `HIDDEN` list and the role's
   ``hidden`` paths;
4. given back, narrowly: its worktree when it lies in the data dir, the agent door's socket,
   its own prompt and log (read-only), its role's memory file.

What cannot be made fails closed (`SandboxUnavailable`): the task is blocked with the reason,
never run unconfined. Nothing here reads task text: paths come from the config and run ids.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from taskherd.model.settings import IsolationSettings

# Hidden from every sandboxed agent unless its role says otherwise: the operator's keys, and
# the sockets of services that would act for it outside the box (a read-only mount does not
# stop a connect to a socket file).
HIDDEN = ("~/.ssh", "~/.aws", "~/.gnupg", "~/.netrc", "~/.config/gcloud", "~/.azure",
          "~/.kube", "~/.docker", "~/.git-credentials", "~/.config/gh",
          "/run/user", "/var/run/docker.sock", "/run/docker.sock", "/run/containerd",
          "/run/podman", "/run/dbus")
# What each runtime's CLI writes as it works (its login, sessions, settings), given to its
# agent writable so that Claude Code and Codex run unchanged inside. A variable names the
# folder instead of the default when it is set in the agent's environment.
RUNTIME_STATE: dict[str, tuple[tuple[str | None, str], ...]] = {
    "claude": (("CLAUDE_CONFIG_DIR", "~/.claude"), (None, "~/.claude.json"),
               (None, "~/.cache/claude"), (None, "~/.cache/claude-cli-nodejs")),
    "codex": (("CODEX_HOME", "~/.codex"),),
}


# network = "none": bwrap's network namespace always brings up its own loopback, so "none"
# also refuses to make internet sockets at all (a seccomp filter: socket(2) of AF_INET,
# AF_INET6 or AF_PACKET fails with EAFNOSUPPORT); the agent door is a UNIX socket and works.
# (architecture as audit names it, its socket(2) number, 32-bit ABIs to refuse it in too)
SOCKET_SYSCALLS = {"x86_64": (0xC000003E, 41, ((0x40000003, 0x40000000 + 41),)),
                   "aarch64": (0xC00000B7, 198, ())}
I386 = (0x40000003, 359, 102)  # x86's 32-bit ABI: socket(2), and socketcall(2) refused whole
ALLOW, REFUSE = 0x7FFF0000, 0x00050000 | 97  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO(EAFNOSUPPORT)
REFUSED_FAMILIES = (2, 10, 17)  # AF_INET, AF_INET6, AF_PACKET
SECCOMP_FD = 3  # where the shim's child opens the filter for bwrap --seccomp
# Where a box spare's in-box starter sees the daemon's log dir until its run's files are bound
# (in the data dir's hiding tmpfs): a tmpfs holding the log dir's bind and the cgroup folders'
# it joins a run's in, covered whole by an empty read-only tmpfs before the agent's exec.
STAGE_NAME = ".box-stage"
BOX_CHANNELS = "boxes"  # the folder of the box spares' FIFOs, in the data dir
# What the in-box starter needs to bind its run's files, and drops before the agent's exec.
SPARE_CAPS = ("CAP_SYS_ADMIN", "CAP_SETPCAP")


@dataclass(frozen=True)
class SparePlan:
    """How one run goes through its role's box spare (see `taskherd.host.forkserver`): the
    box made ahead with the role's static options, the run's own files bound in by the
    spare's in-box starter (`shim.in_box`) from `source` (the daemon's log dir), staged at
    `stage` inside the box (in a tmpfs of its own, covered whole before the agent's exec)."""

    key: str  # the role: one spare each
    argv: tuple[str, ...]  # bwrap and the role's static options, without "--"
    files: tuple[str, ...]  # opened on fds 3, 4, … for bwrap (its seccomp filter)
    stage: str
    source: str
    agent_argv: tuple[str, ...]
    run_files: tuple[str, ...]  # bound read-only at their paths, within `source`
    channels: str  # the folder of the spares' FIFOs (0700, in the data dir)
    cgroup_bases: tuple[str, ...] = ()  # cgroup v1 folders, bound in at `cgroup_stages`
    cgroup_stages: tuple[str, ...] = ()

    def staged_cgroups(self, join_files: list[str]) -> list[str] | None:
        """The run's cgroup join files as its in-box starter sees them; None when one lies
        outside the bound folders (the daemon moves the box in instead)."""
        staged = []
        for path in join_files:
            found = [stage + path[len(base):] for base, stage in
                     zip(self.cgroup_bases, self.cgroup_stages, strict=True)
                     if within(Path(path), Path(base))]
            if not found:
                return None
            staged.append(found[0])
        return staged

    @property
    def fingerprint(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What a spare made for this plan must have been made with (a reload that changes
        the role's box makes the old spare unusable)."""
        return self.argv, self.files


@dataclass(frozen=True)
class Confinement:
    """How a process of a confined role starts (its agent, or a gate running the agent's
    code): in its box, with the files its starter opens on fds 3, 4, … (the box's seccomp
    filter), in its run's cgroups (its caps)."""

    wrap: Callable[[list[str], dict[str, str]], list[str]] | None = None  # argv, env → boxed
    open_files: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()  # the cgroup.procs files it joins before its exec
    copier_cgroups: tuple[str, ...] = ()  # where its shim copies its output (its cpu cap)
    # argv, env → how the run goes through its role's box spare; None: no spare for it
    spare: Callable[[list[str], dict[str, str]], SparePlan | None] | None = None

    def argv(self, argv: list[str], env: dict[str, str]) -> list[str]:
        return argv if self.wrap is None else self.wrap(argv, env)

    def spare_plan(self, argv: list[str], env: dict[str, str]) -> SparePlan | None:
        return None if self.spare is None else self.spare(argv, env)


class SandboxUnavailable(Exception):
    """The sandbox a role asks for cannot be made here; the message says what to do."""


@dataclass(frozen=True)
class AgentBox:
    """Everything one run's sandbox is made of: what the daemon knows of the run."""

    settings: IsolationSettings
    runtime: str
    workdir: Path
    data_dir: Path
    door: Path  # the agent door's socket, in a folder of its own under the data dir
    run_files: tuple[Path, ...] = ()  # its own prompt, log, MCP config: read-only
    memory_file: Path | None = None
    config_file: Path | None = None
    env_file: Path | None = None
    database_files: tuple[Path, ...] = ()  # a SQLite database outside the data dir
    git_dir: Path | None = None  # the repository's common .git of a worktree role
    home: Path = field(default_factory=Path.home)
    # `_role_options`' made (the box is one run's: the role's paths are looked at once a run)
    _made: dict = field(default_factory=dict, compare=False, repr=False)

    def wrap(self, argv: list[str], env: dict[str, str], bwrap: str) -> list[str]:
        """`argv` as started in this box. Raises SandboxUnavailable for a `writable` path
        that is missing (the box would not be what the role says)."""
        self._check_writable()
        return [bwrap, *self.options(env, argv[0]), "--", *argv]

    def _check_writable(self) -> None:
        for path in self.settings.writable:
            if not path.exists():
                raise SandboxUnavailable(
                    f"the sandbox's writable path {path} does not exist: create it, or take "
                    "it out of the role's [isolation] writable list")

    def spare_plan(self, key: str, argv: list[str], env: dict[str, str], bwrap: str,
                   source: Path, cgroup_bases: tuple[Path, ...] = ()) -> SparePlan | None:
        """How a run of this box goes through a box spare of role `key`: None when it cannot
        (a git role's worktree is per task; a run file outside the log dir `source`).
        `cgroup_bases`: the cgroup v1 folders its runs' cgroups are made in, bound in for its
        starter to join its run's by writing 0 (a move of itself: the kernel's fast path)."""
        if self.git_dir is not None:
            return None
        source = Path(os.path.realpath(source))
        files = [path for path in self.run_files if path.exists()]
        if not all(within(Path(os.path.realpath(path)), source) for path in files):
            return None
        self._check_writable()  # SandboxUnavailable, as the cold box raises
        head, tail = self._role_options(env, argv[0])
        options = head + tail
        stage_root = self.data_dir / STAGE_NAME
        stage = stage_root / "logs"
        caps = [arg for cap in SPARE_CAPS for arg in ("--cap-add", cap)]
        if os.geteuid() != 0:
            # Root of its user namespace, which then owns the box's mounts: its starter binds
            # the run's files, then maps the user back (shim._Kernel.become).
            # (CAP_SETFCAP: the kernel maps a namespace's root to its parent's only for a
            # process that had it when it unshared.)
            caps += ["--cap-add", "CAP_SETFCAP", "--unshare-user", "--uid", "0", "--gid", "0"]
        at = options.index("--cap-drop") + 2
        options[at:at] = caps  # the in-box starter's alone: dropped before the agent's exec
        chdir = options.index("--chdir")
        cgroup_stages = tuple(str(stage_root / f"cgroup-{index}")
                              for index in range(len(cgroup_bases)))
        options[chdir:chdir] = ["--tmpfs", str(stage_root), "--bind", str(source), str(stage), *(
            arg for base, staged in zip(cgroup_bases, cgroup_stages, strict=True)
            for arg in ("--bind", str(base), staged))]
        return SparePlan(key, (bwrap, *options), tuple(str(p) for p in self.open_files),
                         str(stage), str(source), tuple(argv),
                         tuple(os.path.realpath(path) for path in files),
                         str(self.data_dir / BOX_CHANNELS),
                         tuple(str(base) for base in cgroup_bases), cgroup_stages)

    @property
    def open_files(self) -> tuple[Path, ...]:
        """Files the agent's starter opens on fds 3, 4, … for bwrap (its seccomp filter)."""
        if self.settings.network != "none":
            return ()
        return (self.data_dir / f"no-network-{os.uname().machine}.bpf",)

    def options(self, env: dict[str, str], program: str | None = None) -> list[str]:
        """bwrap's options for this run: its role's (`_role_options`), with its own run files
        bound read-only where they belong."""
        head, tail = self._role_options(env, program)
        run_files = [arg for path in self.run_files if path.exists()
                     for arg in ("--ro-bind", str(path), str(path))]
        return [*head, *run_files, *tail]

    def _role_options(self, env: dict[str, str],
                      program: str | None) -> tuple[list[str], list[str]]:
        """The options around the run files' binds (before them, after them): made once per
        box for its argv's program and env, which the cold box's argv and its box spare's
        plan both ask for on the way from a claim to the agent's start."""
        key = (program, tuple(sorted(env.items())))
        if self.settings.network == "none":
            _write_once(self.open_files[0], no_network_filter())
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = self._make_role_options(env, program)
        return list(found[0]), list(found[1])

    def _make_role_options(self, env: dict[str, str],
                           program: str | None) -> tuple[list[str], list[str]]:
        # No capabilities, even for a daemon run as root: with CAP_SYS_ADMIN an agent would
        # unmount what hides the data dir. (bwrap also sets no_new_privs: no setuid program
        # gives them back.)
        options = ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                   "--unshare-cgroup-try", "--cap-drop", "ALL"]
        if self.settings.network != "host":
            options.append("--unshare-net")
        if self.settings.network == "none":
            options += ["--seccomp", str(SECCOMP_FD)]
        options += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                    "--tmpfs", "/tmp"]
        tmpdir = env.get("TMPDIR")
        if tmpdir and os.path.isabs(tmpdir) and not within(Path(tmpdir), Path("/tmp")):
            options += ["--tmpfs", tmpdir]
        # What must run in the box even when installed in /tmp (a checkout there, a CI's):
        # taskherd itself (the agent's `taskherd done`: its interpreter's prefixes, and its
        # package, which an editable install keeps in the checkout) and the agent's own
        # program (the folder right under /tmp that holds it), read-only. Mounted before
        # what is hidden, which a checkout holding the data dir must not show again.
        for path in _installed_in_tmp(program, env):
            options += ["--ro-bind", str(path), str(path)]
        writable = self._writable(env)
        for path in writable:
            options += ["--bind", str(path), str(path)]
        if self.git_dir is not None:
            options += self._git_read_only(self.git_dir)
        hidden = self._hidden(env)
        empty = self._empty_file()
        for path in hidden:
            options += ["--tmpfs", str(path)] if path.is_dir() else [
                "--ro-bind", str(empty), str(path)]
        config = self.config_file
        if config is not None and config.exists() and within(config, self.workdir):
            options += ["--ro-bind", str(config), str(config)]  # visible, but not its to edit
        # Given back: what the hiding covered that this run needs (its worktree in the data
        # dir, the door, its own files).
        for path in writable:
            if any(within(Path(os.path.realpath(path)), hide) for hide in hidden):
                options += ["--bind", str(path), str(path)]
        # The door's folder, and the link agents connect through (see host/door_path.py).
        # Read-only: connecting needs no write, and an agent that could write there would
        # put a socket of its own in the door's place and take the next agent's token.
        options += ["--ro-bind", str(self.door.parent), str(self.door.parent),
                    "--symlink", f"{self.door.parent.name}/{self.door.name}",
                    str(self.data_dir / self.door.name)]
        tail = []  # after the run files' binds
        if self.memory_file is not None and self.memory_file.exists():
            tail += ["--bind", str(self.memory_file), str(self.memory_file)]
        tail += ["--chdir", str(self.workdir)]
        return options, tail

    def _writable(self, env: dict[str, str]) -> list[Path]:
        paths = [self.workdir, *self.settings.writable]
        for variable, default in RUNTIME_STATE.get(self.runtime, ()):
            path = Path(env[variable]) if variable and env.get(variable) else _home(
                default, _agent_home(env, self.home))
            if default.endswith(".json"):
                if path.exists():
                    paths.append(path)
                continue
            path.mkdir(mode=0o700, parents=True, exist_ok=True)  # else it could not be made
            paths.append(path)
        if self.git_dir is not None:
            paths.append(self.git_dir)
        return paths

    def _hidden(self, env: dict[str, str]) -> list[Path]:
        paths = [self.data_dir, *self.database_files]
        if self.env_file is not None:
            paths.append(self.env_file)
        if self.config_file is not None and not within(self.config_file, self.workdir):
            paths.append(self.config_file)
        # In the daemon's home and in the one the agent is given (a role's env may set HOME).
        homes = dict.fromkeys((self.home, _agent_home(env, self.home)))
        paths += [_home(text, home) for home in homes for text in HIDDEN]
        paths += self.settings.hidden
        # Each where it really lies: bwrap mounts over a path inside the box, and one through
        # a symlink (/var/run/docker.sock, a ~/.ssh linked elsewhere) is refused, which would
        # leave the agent unstarted; hiding the target hides it by every name.
        found = (Path(os.path.realpath(path)) for path in paths if path.exists())
        return list(dict.fromkeys(found))

    def _empty_file(self) -> Path:
        """An empty file mounted over each hidden file (/dev/null would be refused: a box's
        mounts are nodev)."""
        path = self.data_dir / "empty"
        if not path.exists() or path.stat().st_size:
            path.unlink(missing_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o400))
        return path

    @staticmethod
    def _git_read_only(git_dir: Path) -> list[str]:
        # The agent commits (objects, refs, its worktree's index); a hook or a config line
        # (core.hooksPath, a filter) it wrote would run outside the box when taskherd merges.
        options = ["--ro-bind", str(git_dir / "config"), str(git_dir / "config")]
        hooks = git_dir / "hooks"
        if hooks.is_dir():
            return options + ["--ro-bind", str(hooks), str(hooks)]
        return options + ["--tmpfs", str(hooks), "--remount-ro", str(hooks)]


def _installed_in_tmp(program: str | None, env: dict[str, str]) -> list[Path]:
    own = (Path(sys.prefix), Path(sys.base_prefix), Path(__file__).resolve().parents[2])
    paths = [Path(os.path.realpath(path)) for path in own]
    found = [path for path in paths if within(path, Path("/tmp"))]
    folder = _folder_in_tmp(program, env)
    return list(dict.fromkeys([*found, *([folder] if folder is not None else [])]))


def _folder_in_tmp(program: str | None, env: dict[str, str]) -> Path | None:
    """The folder right under /tmp holding `program` (found on the agent's PATH), if any."""
    if program is None:
        return None
    found = program if "/" in program else shutil.which(program, path=env.get("PATH"))
    if found is None:
        return None
    path = Path(os.path.realpath(found))
    if not within(path, Path("/tmp")) or len(path.parts) < 4:
        return None
    return Path(*path.parts[:3])


def _agent_home(env: dict[str, str], home: Path) -> Path:
    given = env.get("HOME")
    return Path(given) if given and os.path.isabs(given) else home


def _home(text: str, home: Path) -> Path:
    return home / text[2:] if text.startswith("~/") else Path(text)


def no_network_filter(machine: str | None = None) -> bytes:
    """A classic BPF program for seccomp, as bwrap --seccomp reads it (struct sock_filter
    entries in native order): socket(2) of a REFUSED_FAMILIES family fails with
    EAFNOSUPPORT, in every ABI the machine's processes can call through; all else passes."""
    machine = machine or os.uname().machine
    if machine not in SOCKET_SYSCALLS:
        raise SandboxUnavailable(f'network = "none" is not built for this machine '
                                 f'({machine}); use "loopback"')
    arch, socket_nr, other_abis = SOCKET_SYSCALLS[machine]
    # (label, op, k, jump if true, jump if false): labels resolved to relative jumps below.
    steps: list[tuple[str | None, str, int, str | None, str | None]] = [
        (None, "ld", 4, None, None),  # seccomp_data.arch
        (None, "jeq", arch, None, "other abi"),
        (None, "ld", 0, None, None),  # seccomp_data.nr
        (None, "jeq", socket_nr, "family", "allow" if not other_abis else None)]
    for i, (_, nr) in enumerate(other_abis):
        last = i == len(other_abis) - 1
        steps.append((None, "jeq", nr, "family", "allow" if last else None))
    if machine == "x86_64":  # its i386 ABI (int 0x80): socketcall(2) refused whole
        steps += [("other abi", "jeq", I386[0], None, "allow"), (None, "ld", 0, None, None),
                  (None, "jeq", I386[2], "refuse", None),
                  (None, "jeq", I386[1], "family", "allow")]
    else:
        steps.append(("other abi", "ret", ALLOW, None, None))
    steps.append(("family", "ld", 16, None, None))  # seccomp_data.args[0], its low word
    for i, family in enumerate(REFUSED_FAMILIES):
        last = i == len(REFUSED_FAMILIES) - 1
        steps.append((None, "jeq", family, "refuse", "allow" if last else None))
    steps += [("allow", "ret", ALLOW, None, None), ("refuse", "ret", REFUSE, None, None)]
    at = {label: index for index, (label, *_) in enumerate(steps) if label}

    def jump(index: int, label: str | None) -> int:
        return 0 if label is None else at[label] - index - 1

    codes = {"ld": 0x20, "jeq": 0x15, "ret": 0x06}  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    return b"".join(struct.pack("=HBBI", codes[op], jump(index, yes), jump(index, no), k)
                    for index, (_, op, k, yes, no) in enumerate(steps))


def _write_once(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_bytes(data)
    os.replace(temp, path)


def within(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies in it (both absolute, as given: no symlinks read)."""
    inside, outer = str(path), str(folder).rstrip("/")
    return inside == outer or inside.startswith(outer + "/") or outer == ""


class Bubblewrap:
    """The host's bubblewrap, checked once by making a box. A host that could not is asked
    again at the next run that needs one (a blocked task's unblock), so installing bwrap or
    enabling user namespaces is seen without a restart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: str | None = None

    def path(self) -> str:
        """The bwrap program, known to make a box here; SandboxUnavailable otherwise."""
        with self._lock:
            path = self._path
            if path is None:
                path, problem = probe()
                if problem is not None or path is None:
                    raise SandboxUnavailable(problem or "bwrap not found")
                self._path = path
            return path


def probe() -> tuple[str | None, str | None]:
    """(bwrap's path, None) when a box can be made here, else (None, what to do)."""
    path = shutil.which("bwrap")
    if path is None:
        return None, ("bubblewrap is not installed (`apt install bubblewrap`, `dnf install "
                      "bubblewrap`); a role with [isolation] mode = \"bwrap\" does not run "
                      "unconfined")
    try:
        done = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                               "--unshare-pid", "--", "/bin/true"], capture_output=True,
                              timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"bubblewrap could not run: {error}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, (f"bubblewrap cannot make a sandbox here: {said[-1] if said else 'exit '}"
                      f"{'' if said else done.returncode}; enable unprivileged user "
                      "namespaces (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu "
                      "an AppArmor profile for bwrap), or run the daemon as root")
    return path, None
