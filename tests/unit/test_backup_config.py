"""`[backup]` in taskherd.toml: defaults, a folder relative to the config file, every bad key
named at once, and backup keys that name their time in UTC."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taskherd.backups.archive import backup_key, backups_in
from taskherd.backups.targets import StoredObject
from taskherd.config import parse_config
from taskherd.model.settings import ConfigError


def test_no_target_means_no_backups_and_the_defaults_are_the_documented_ones(tmp_path):
    backup = parse_config({}, base_dir=tmp_path).backup
    assert backup.target is None
    assert (backup.snapshot_every, backup.snapshot_keep_for) == (300, 86400)
    assert (backup.rollup_every, backup.rollup_keep_for) == (3600, 7 * 86400)


def test_a_folder_target_is_read_relative_to_the_config_file(tmp_path):
    backup = parse_config({"backup": {"target": "kept", "snapshot_every": "10m"}},
                          base_dir=tmp_path).backup
    assert Path(backup.target) == tmp_path / "kept" and not backup.is_s3
    assert backup.snapshot_every == 600


def test_every_bad_backup_key_is_named_at_once(tmp_path):
    with pytest.raises(ConfigError) as error:
        parse_config({"backup": {"target": "s3://b", "snapshot_evrey": "5m",
                                 "compression_level": 12, "rollup_keep_count": 0}},
                     base_dir=tmp_path)
    text = str(error.value)
    assert "3 problems" in text
    assert "did you mean 'snapshot_every'" in text
    assert "compression_level = 12" in text and "rollup_keep_count = 0" in text


def test_keys_sort_by_time_name_it_in_utc_and_are_never_the_same_twice():
    moment = 1_795_431_000.25  # 2026-11-23 10:50:00.25 UTC
    key = backup_key("snapshots", moment, ".db.gz")
    assert re.fullmatch(r"snapshots/2026-11-23/10-50-00\.250000-[0-9a-f]{8}\.db\.gz", key)
    assert re.fullmatch(r"rollups/2026-11-23/10-50-00\.250000-[0-9a-f]{8}\.dump",
                        backup_key("rollups", moment, ".dump"))
    # One instant, two backups (a second node, a snapshot by hand): two keys.
    assert len({backup_key("snapshots", moment, ".db.gz") for _ in range(100)}) == 100
    later = backup_key("snapshots", moment + 0.000001, ".db.gz")
    found = backups_in([StoredObject(later, 1), StoredObject(key, 5),
                        StoredObject("notes/readme.txt", 1),
                        # keys of earlier versions: one a minute, one an hour
                        StoredObject("snapshots/2026-11-23/10-49.db.gz", 2),
                        StoredObject("rollups/2026-11-23/09.db.gz", 9)])
    assert [(b.kind, round(b.taken_at, 6)) for b in found] == [
        ("rollups", moment - 0.25 - 110 * 60), ("snapshots", moment - 0.25 - 60),
        ("snapshots", moment), ("snapshots", moment + 0.000001)]
    assert sorted(b.key for b in found if b.key.count("-") > 4) == [key, later]


def test_the_timeouts_have_defaults_and_are_validated_by_name(tmp_path):
    defaults = parse_config({"backup": {"target": "b"}}, base_dir=tmp_path).backup
    assert (defaults.connect_timeout, defaults.read_timeout) == (10.0, 60.0)
    short = parse_config({"backup": {"target": "b", "connect_timeout": "2s",
                                     "read_timeout": "30s"}}, base_dir=tmp_path).backup
    assert (short.connect_timeout, short.read_timeout) == (2.0, 30.0)
    with pytest.raises(ConfigError) as error:
        parse_config({"backup": {"target": "b", "connect_timeout": "0s",
                                 "read_timeout": "soon"}}, base_dir=tmp_path)
    assert "backup.connect_timeout" in str(error.value)
    assert "backup.read_timeout = 'soon'" in str(error.value)
