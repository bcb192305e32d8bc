"""`taskherd doctor` as a subprocess: it judges commands by the PATH the service will run with.

Exit codes: 0 with no problem (warnings allowed), 1 with any problem, a config that does not
load included (it is a finding, printed as a problem line like the others).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest


def doctor(config: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TASKHERD_HOME": str(config.parent / "home")}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "taskherd", "--config", str(config), "doctor", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture
def tool(tmp_path: Path) -> Path:
    """An agent program in a folder the test's shell PATH has and the service PATH does not."""
    folder = tmp_path / "shell-only-bin"
    folder.mkdir()
    program = folder / "my-agent"
    program.write_text("#!/bin/sh\necho TASK_COMPLETE: ok\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def write_config(tmp_path: Path, service_path: str, command: str) -> Path:
    config = tmp_path / "taskherd.toml"
    config.write_text(f"""\
[daemon]
data_dir = "data"
timezone = "UTC"
path = "{service_path}"

[roles.coder]
command = ["{command}", "--task", "{{task_id}}"]
""")
    return config


def test_command_on_the_shell_path_but_not_the_service_path_is_a_problem(
    tmp_path: Path, tool: Path
) -> None:
    config = write_config(tmp_path, "/usr/bin:/bin", tool.name)
    result = doctor(config, path=f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    assert result.returncode == 1, result.stdout
    line = next(line for line in result.stdout.splitlines() if "role coder" in line)
    assert line.startswith("problem ")
    assert "'my-agent'" in line and "/usr/bin:/bin" in line  # names the command and the PATH
    assert f"add {tool.parent} to daemon.path" in line  # and how to fix it


def test_a_good_config_passes(tmp_path: Path, tool: Path) -> None:
    config = write_config(tmp_path, f"{tool.parent}:/usr/bin:/bin", tool.name)
    result = doctor(config)
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    for what in ("config", "database", "log dir", "role coder", "timezone UTC", "disk"):
        assert any(line.startswith("ok") and what in line for line in lines), (what, lines)


def test_doctor_does_not_change_the_queue(tmp_path: Path, tool: Path) -> None:
    config = write_config(tmp_path, f"{tool.parent}:/usr/bin:/bin", tool.name)
    env = {**os.environ, "TASKHERD_HOME": str(tmp_path / "home")}
    add = [
        sys.executable,
        "-m",
        "taskherd",
        "--config",
        str(config),
        "task",
        "add",
        "t",
        "--role",
        "coder",
        "--json",
    ]
    subprocess.run(add, check=True, capture_output=True, env=env, timeout=60)
    listing = [sys.executable, "-m", "taskherd", "--config", str(config), "task", "list", "--json"]
    before = subprocess.run(listing, check=True, capture_output=True, env=env, timeout=60)
    assert doctor(config).returncode == 0
    after = subprocess.run(listing, check=True, capture_output=True, env=env, timeout=60)
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert not list((tmp_path / "data" / "logs").glob(".doctor-*"))


def test_a_broken_config_is_a_problem_line_and_exit_1(tmp_path: Path) -> None:
    config = tmp_path / "taskherd.toml"
    config.write_text("[daemon]\nmax_concurent = 4\n")
    result = doctor(config)
    assert result.returncode == 1
    assert result.stdout.startswith("problem config")
    assert "max_concurent" in result.stdout


def test_json_and_a_missing_timezone_warns(tmp_path: Path, tool: Path) -> None:
    config = write_config(tmp_path, f"{tool.parent}:/usr/bin:/bin", tool.name)
    config.write_text(config.read_text().replace('timezone = "UTC"\n', ""))
    result = doctor(config, "--json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["ok"] is True
    zone = next(check for check in report["checks"] if check["what"] == "timezone")
    assert zone["status"] == "warn" and "daemon.timezone" in zone["fix"]


CAPPED_ROLE = """\
[daemon]
data_dir = "data"
timezone = "UTC"
path = "/usr/bin:/bin"

[roles.coder]
command = ["echo", "TASK_COMPLETE: ok"]
"""
NOBODY = 65534


@pytest.fixture
def nobodys_dir():
    """A folder an ordinary user (nobody) owns, outside pytest's root-only tmp folders."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root, to run doctor as another user")
    path = Path(tempfile.mkdtemp(prefix="taskherd-test-", dir="/var/tmp"))
    os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_doctor_names_the_caps_this_host_enforces_and_how(tmp_path: Path) -> None:
    from taskherd.host import cgroups

    host = cgroups.host()
    if not host.bases and not os.environ.get("CI"):
        pytest.skip(f"this host enforces no caps: {host.missing}")
    config = tmp_path / "taskherd.toml"
    config.write_text(CAPPED_ROLE + 'isolation = { memory = "64M", pids = 32, cpu = 1 }\n')
    result = doctor(config)
    line = next(line for line in result.stdout.splitlines() if "agent caps" in line)
    enforced = ", ".join(name for name in cgroups.CONTROLLERS if name in host.bases)
    assert line.startswith(f"ok      agent caps: {enforced} enforced (cgroup v{host.version}, ")
    assert "as root" in line if os.geteuid() == 0 else "delegated to this user" in line


def doctor_as(user: int, config: Path, warm_up: Path) -> list[str]:
    """doctor's lines for `config`, checked by a process of `user`: forked, since that user
    may not run this interpreter (it lies in root's home); every module doctor loads is
    loaded first, by a run on `warm_up`, for the same reason."""
    from taskherd import doctor as doctor_module

    doctor_module.run_checks(str(warm_up))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
            os.environ.update(HOME=str(config.parent), TASKHERD_HOME=str(config.parent))
            lines = [check.line() for check in doctor_module.run_checks(str(config))]
        except BaseException as error:  # noqa: BLE001 - said to the test, which fails on it
            lines = [f"error {type(error).__name__}: {error}"]
        os.write(write, json.dumps(lines).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        lines = json.loads(answer.read())
    os.waitpid(pid, 0)
    return lines


def test_caps_a_role_asks_for_that_this_user_cannot_enforce_are_a_problem(
        tmp_path: Path, nobodys_dir: Path) -> None:
    # An ordinary user on a host whose cgroups only root may write (v1, or v2 undelegated).
    capped = CAPPED_ROLE + 'isolation = { memory = "64M" }\n'
    (tmp_path / "taskherd.toml").write_text(capped)
    config = nobodys_dir / "taskherd.toml"
    config.write_text(capped)
    lines = doctor_as(NOBODY, config, warm_up=tmp_path / "taskherd.toml")
    line = next(line for line in lines if "agent caps" in line)
    assert line.startswith("problem agent caps: not enforceable here for role(s) coder "
                           "(memory): their tasks are blocked → "), lines
    assert "run the daemon as root" in line or "Delegate=yes" in line  # what to do

    # Asked by no role, the same lack is said, but is no problem.
    config.write_text(CAPPED_ROLE)
    line = next(line for line in doctor_as(NOBODY, config, warm_up=tmp_path / "taskherd.toml")
                if "agent caps" in line)
    assert line.startswith("ok      agent caps: none enforceable on this host: "), line


def test_a_controller_this_host_lacks_is_said_and_a_problem_only_when_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from taskherd import doctor as doctor_module
    from taskherd.config import load_config
    from taskherd.host import cgroups
    from tests.unit.test_cgroups import v1_host

    _, host = v1_host(tmp_path, controllers=("memory", "pids"))  # no cpu mounted
    monkeypatch.setattr(cgroups, "host", lambda: host)
    config = tmp_path / "taskherd.toml"
    config.write_text(CAPPED_ROLE + 'isolation = { memory = "64M" }\n')
    check = doctor_module.check_caps(load_config(str(config)))
    assert check.status == "ok" and check.line().startswith(
        "ok      agent caps: memory, pids enforced (cgroup v1, ")
    assert check.why.startswith("cpu cannot be: the cpu controller is not mounted at ")

    config.write_text(CAPPED_ROLE + "isolation = { cpu = 0.5 }\n")
    check = doctor_module.check_caps(load_config(str(config)))
    assert check.status == "problem" and "role(s) coder (cpu)" in check.why
    assert "mount cgroup v1 cpu" in check.fix
