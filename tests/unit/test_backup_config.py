"""`[backup]` in taskherd.toml: defaults, a folder relative to the config file, every bad key
named at once, and backup keys that name their time in UTC."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskherd.backups.archive import backup_key, backups_in
from taskherd.backups.targets import StoredObject
from taskherd.config import ConfigError, parse_config


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


def test_keys_sort_by_time_and_name_it_in_utc():
    moment = 1_795_431_000.0  # 2026-11-23 10:50:00 UTC
    assert backup_key("snapshots", moment, ".db.gz") == "snapshots/2026-11-23/10-50.db.gz"
    assert backup_key("rollups", moment, ".dump") == "rollups/2026-11-23/10.dump"
    found = backups_in([StoredObject("snapshots/2026-11-23/10-50.db.gz", 5),
                        StoredObject("notes/readme.txt", 1),
                        StoredObject("rollups/2026-11-23/09.db.gz", 9)])
    assert [(b.kind, b.taken_at) for b in found] == [("rollups", moment - 110 * 60),
                                                      ("snapshots", moment)]
