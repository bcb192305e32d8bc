"""Service files rendered from a config: explicit PATH and env, restart policy, absolute paths.

Both renderers are pure, so the launchd plist is checked on Linux too. `--print` goes through
the real CLI as a subprocess and installs nothing.
"""

from __future__ import annotations

import os
import plistlib
import subprocess
import sys
from pathlib import Path

import pytest

from taskherd.config import load_config
from taskherd.host.service import (
    LABEL,
    ServiceError,
    render_launchd,
    render_systemd,
    service_spec,
)

SERVICE_PATH = "/opt/agents/bin:/usr/bin:/bin"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "with space" / "taskherd.toml"
    path.parent.mkdir()
    path.write_text(f"""\
[daemon]
data_dir = "data"
timezone = "Europe/Paris"
path = "{SERVICE_PATH}"

[roles.coder]
command = ["claude", "-p"]
""")
    return path


def test_systemd_unit_has_explicit_path_restart_and_absolute_paths(config_file: Path) -> None:
    spec = service_spec(load_config(config_file), program=["/venv/bin/taskherd"])
    unit = render_systemd(spec)
    lines = unit.splitlines()
    assert "Restart=always" in lines
    assert f"Environment=PATH={SERVICE_PATH}" in lines
    data_dir = config_file.parent / "data"
    assert f'Environment="TASKHERD_HOME={data_dir}"' in lines
    assert f'ExecStart=/venv/bin/taskherd --config "{config_file}" up' in lines
    assert f'WorkingDirectory="{config_file.parent}"' in lines
    # Agents must survive a daemon restart: only the daemon's own process is stopped.
    assert "KillMode=process" in lines
    assert "WantedBy=default.target" in lines


def test_systemd_escapes_what_it_would_expand(tmp_path: Path) -> None:
    path = tmp_path / "taskherd.toml"
    path.write_text('[daemon]\ndata_dir = "d"\npath = "/a%b:/c$HOME"\n')
    unit = render_systemd(service_spec(load_config(path), program=["/t"]))
    assert 'Environment="PATH=/a%%b:/c$$HOME"' in unit.splitlines()


def test_launchd_plist_keeps_alive_with_explicit_environment(config_file: Path) -> None:
    spec = service_spec(load_config(config_file), program=["/venv/bin/taskherd"])
    plist = plistlib.loads(render_launchd(spec))
    assert plist["Label"] == LABEL
    assert plist["KeepAlive"] is True and plist["RunAtLoad"] is True
    assert plist["ProgramArguments"] == ["/venv/bin/taskherd", "--config", str(config_file), "up"]
    data_dir = config_file.parent / "data"
    assert plist["EnvironmentVariables"] == {"PATH": SERVICE_PATH, "TASKHERD_HOME": str(data_dir)}
    assert plist["StandardOutPath"] == str(data_dir / "logs" / "daemon.out.log")
    assert plist["StandardErrorPath"] == str(data_dir / "logs" / "daemon.err.log")
    for key in ("WorkingDirectory", "StandardOutPath", "StandardErrorPath"):
        assert os.path.isabs(plist[key])


def test_a_service_needs_a_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKHERD_CONFIG", raising=False)
    with pytest.raises(ServiceError, match="config file"):
        service_spec(load_config())


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    return subprocess.run(
        [sys.executable, "-m", "taskherd", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize("manager", ["systemd", "launchd"])
def test_print_through_the_cli_installs_nothing(
    config_file: Path, tmp_path: Path, manager: str
) -> None:
    home = tmp_path / "home"
    result = _cli(
        "--config",
        str(config_file),
        "service",
        "install",
        "--print",
        "--manager",
        manager,
        home=home,
    )
    assert result.returncode == 0, result.stderr
    assert SERVICE_PATH in result.stdout
    assert ("Restart=always" if manager == "systemd" else "<key>KeepAlive</key>") in result.stdout
    assert not home.exists()


def test_install_without_a_service_manager_keeps_the_file_and_says_what_to_run(
    config_file: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PATH": str(tmp_path / "empty"),
    }  # no systemctl here
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "taskherd",
            "--config",
            str(config_file),
            "service",
            "install",
            "--manager",
            "systemd",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 1
    unit = home / ".config" / "systemd" / "user" / "taskherd.service"
    assert unit.is_file()
    assert "systemctl --user daemon-reload && systemctl --user enable --now taskherd" in (
        result.stderr
    )
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "taskherd",
            "--config",
            str(config_file),
            "service",
            "status",
            "--manager",
            "systemd",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert status.returncode == 0
    assert "installed" in status.stdout and "not running" in status.stdout
