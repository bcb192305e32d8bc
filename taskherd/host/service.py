"""Run the daemon under the OS service manager: a systemd user unit or a launchd agent.

The files are rendered by pure functions from the config, so both can be checked on any OS.
Everything the daemon needs is written into the file explicitly, above all PATH: a service
manager does not read your shell's profile, and the seeds' launchd fleet lost 3,751 crash
loops to a PATH that resolved `ruby` to the wrong one.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from taskherd.config.tables import HOME_ENV
from taskherd.model.settings import Config

SYSTEMD = "systemd"
LAUNCHD = "launchd"
MANAGERS = (SYSTEMD, LAUNCHD)
UNIT_NAME = "taskherd"
LABEL = "dev.taskherd.daemon"
ENV_FILE = "taskherd.env"  # beside the config; read by the unit, checked by `taskherd doctor`
RESTART_DELAY = 5  # seconds between restarts: a crash loop costs minutes, not thousands of runs


class ServiceError(Exception):
    """Installing or removing the service did not (fully) work; says what to do by hand."""


@dataclass(frozen=True)
class ServiceSpec:
    """What any service manager needs to know to run this daemon."""

    argv: tuple[str, ...]  # absolute program and arguments
    env: dict[str, str]
    env_file: Path  # optional KEY=value file for secrets agents need (an API key)
    workdir: Path
    stdout_log: Path
    stderr_log: Path
    stop_timeout: float


def default_manager() -> str:
    return LAUNCHD if sys.platform == "darwin" else SYSTEMD


def taskherd_argv() -> list[str]:
    """This installation's `taskherd`, absolutely; else this interpreter with `-m taskherd`."""
    script = Path(sys.executable).parent / "taskherd"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "taskherd"]


def service_spec(config: Config, program: Sequence[str] | None = None) -> ServiceSpec:
    if config.source is None:
        raise ServiceError("a service needs a config file: pass --config or run `taskherd init`")
    daemon = config.daemon
    config_path = config.source.resolve()
    argv = (*(program or taskherd_argv()), "--config", str(config_path), "up")
    env = {"PATH": daemon.path, HOME_ENV: str(daemon.data_dir.resolve())}
    logs = daemon.log_dir.resolve()
    return ServiceSpec(tuple(argv), env, config_path.parent / ENV_FILE, config_path.parent,
                       logs / "daemon.out.log",
                       logs / "daemon.err.log", daemon.shutdown_grace + 15)


def render_systemd(spec: ServiceSpec) -> str:
    lines = [
        "# Written by `taskherd service install`; `taskherd service uninstall` removes it.",
        "[Unit]",
        "Description=taskherd: queue, scheduler and supervisor for AI agents",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={' '.join(_systemd_quote(arg) for arg in spec.argv)}",
        f"WorkingDirectory={_systemd_quote(str(spec.workdir))}",
        *(f"Environment={_systemd_quote(f'{key}={value}')}" for key, value in spec.env.items()),
        # Secrets (ANTHROPIC_API_KEY=…) go in this file, mode 0600, never in the unit, which
        # any local user may read; the leading '-' lets the unit start without one.
        f"EnvironmentFile=-{_systemd_quote(str(spec.env_file))}",
        "Restart=always",
        f"RestartSec={RESTART_DELAY}",
        # Agents run in their own sessions but in this unit's cgroup: the default
        # KillMode=control-group would kill every agent on a restart, which the daemon is
        # built to survive (it re-adopts them). Stop only the daemon itself.
        "KillMode=process",
        # The unit's cgroup is the daemon's to divide: each agent's run gets a cgroup of its
        # own under it, for its role's memory, pids and cpu caps (docs/security.md).
        "Delegate=yes",
        f"TimeoutStopSec={spec.stop_timeout:g}",
        "",
        "[Install]",
        "WantedBy=default.target",
    ]
    return "\n".join(lines) + "\n"


def render_launchd(spec: ServiceSpec) -> bytes:
    plist = {
        "Label": LABEL,
        "ProgramArguments": list(spec.argv),
        "EnvironmentVariables": dict(spec.env),
        "WorkingDirectory": str(spec.workdir),
        "RunAtLoad": True,
        "KeepAlive": True,
        "ThrottleInterval": RESTART_DELAY,
        # launchd kills the job's process group on stop; agents must outlive a daemon restart.
        "AbandonProcessGroup": True,
        "ExitTimeOut": int(spec.stop_timeout),
        "StandardOutPath": str(spec.stdout_log),
        "StandardErrorPath": str(spec.stderr_log),
    }
    return plistlib.dumps(plist, sort_keys=False)


def render(manager: str, spec: ServiceSpec) -> str:
    if manager == SYSTEMD:
        return render_systemd(spec)
    return render_launchd(spec).decode()


def service_file(manager: str) -> Path:
    if manager == SYSTEMD:
        config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        return Path(config_home) / "systemd" / "user" / f"{UNIT_NAME}.service"
    return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def _systemd_quote(value: str) -> str:
    """One systemd word: quoted, with `%` and `$` doubled so systemd expands neither."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"' if any(c.isspace() for c in value) or escaped != value else escaped


# -- installing: the only part that touches the machine ----------------------------------


class ManagerError(ServiceError):
    """The file step worked but the service manager's step did not; `done` says what did."""

    def __init__(self, message: str, done: list[str]):
        super().__init__(message)
        self.done = done


def install(manager: str, spec: ServiceSpec) -> list[str]:
    """Write the file, then enable and start it; returns what was done, line by line."""
    spec.stdout_log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = service_file(manager)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(manager, spec))
    path.chmod(0o644)  # read by the service manager; holds no secrets
    done = [f"wrote {path}"]
    commands = _enable_commands(manager, path)
    try:
        done += [_run(argv) for argv in commands]
    except ServiceError as error:
        raise ManagerError(f"{error}; the file is kept: start it by hand with "
                           f"`{_manual(commands)}`", done) from error
    return done


def uninstall(manager: str) -> list[str]:
    """Stop and disable the service, then remove its file (even if the manager step fails)."""
    path = service_file(manager)
    if not path.exists():
        return [f"{path} is not installed"]
    commands = _disable_commands(manager, path)
    try:
        done = [_run(argv) for argv in commands]
        failure = None
    except ServiceError as error:
        done, failure = [], error
    path.unlink()
    done.append(f"removed {path}")
    if failure is not None:
        raise ManagerError(f"{failure}; stop it by hand with `{_manual(commands)}`", done)
    return done


def _enable_commands(manager: str, path: Path) -> list[list[str]]:
    if manager == SYSTEMD:
        return [["systemctl", "--user", "daemon-reload"],
                ["systemctl", "--user", "enable", "--now", UNIT_NAME]]
    return [["launchctl", "bootstrap", f"gui/{os.getuid()}", str(path)]]


def _disable_commands(manager: str, path: Path) -> list[list[str]]:
    if manager == SYSTEMD:
        return [["systemctl", "--user", "disable", "--now", UNIT_NAME]]
    return [["launchctl", "bootout", f"gui/{os.getuid()}/{LABEL}"]]


def _manual(commands: list[list[str]]) -> str:
    return " && ".join(" ".join(argv) for argv in commands)


def _run(argv: list[str]) -> str:
    command = " ".join(argv)
    if shutil.which(argv[0]) is None:
        raise ServiceError(f"{argv[0]} is not on this PATH")
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServiceError(f"`{command}` failed: {error}") from error
    if result.returncode != 0:
        why = (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"
        raise ServiceError(f"`{command}` failed: {why}")
    return f"ran {command}"
