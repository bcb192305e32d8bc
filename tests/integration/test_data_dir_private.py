"""The data dir (logs with prompts and agent output, locks, sockets) is private however it
comes to exist, including when the database sits beside the config file."""

import os
import stat
import time

from taskherd.config import load_config, make_private_dir
from taskherd.services.supervisor import Supervisor
from taskherd.store.sqlite import SQLiteStore


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_dir_is_0700_when_the_database_sits_beside_the_config(tmp_path, monkeypatch):
    monkeypatch.delenv("TASKHERD_HOME", raising=False)
    monkeypatch.delenv("TASKHERD_DATABASE", raising=False)
    old_umask = os.umask(0o022)
    try:
        config_file = tmp_path / "taskherd.toml"
        config_file.write_text('[daemon]\ndatabase = "taskherd.db"\n')
        config = load_config(config_file)
        assert config.daemon.data_dir == tmp_path / ".taskherd"
        store = SQLiteStore(tmp_path / "taskherd.db")
        try:
            Supervisor(config, store, time.time)
        finally:
            store.close()
        assert mode(config.daemon.data_dir) == 0o700
        assert mode(config.daemon.log_dir) == 0o700
    finally:
        os.umask(old_umask)


def test_make_private_dir_makes_every_missing_level_0700(tmp_path):
    old_umask = os.umask(0o022)
    try:
        made = make_private_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old_umask)
    assert made == tmp_path / "a" / "b" / "c"
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
