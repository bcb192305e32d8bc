"""Backups to a real S3-compatible server (moto's, started by tests/s3.py on 127.0.0.1):
snapshots and rollups, listing, retention by count and age (time passed in), restore, a
checksum that does not match refused, and the server going away mid-upload and coming back.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from taskherd.backups.service import Backups, BackupSettings
from taskherd.backups.targets import BackupError
from taskherd.config import parse_config
from taskherd.model import NewTask
from taskherd.model.settings import BackupConfig
from taskherd.ops.backups import backup_status, list_backups, restore_backup, verify_backup
from taskherd.store.sqlite import SQLiteStore

T0 = 1_795_000_000.0 - (1_795_000_000.0 % 3600)  # on the hour, UTC
MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


def fleet_config(tmp_path: Path, target: str, endpoint: str, **backup: object):
    raw = {"daemon": {"database": "q.db", "data_dir": "data"},
           "backup": {"target": target, "endpoint_url": endpoint, "region": "us-east-1",
                      **backup}}
    return parse_config(raw, base_dir=tmp_path)


def tasks_in(path: Path | str) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [row[0] for row in db.execute("SELECT title FROM tasks ORDER BY id")]


def add(store: SQLiteStore, *titles: str) -> None:
    store.enqueue_many([NewTask(role="coder", title=title) for title in titles], T0)


def add_ballast(path: Path, megabytes: int) -> None:
    """Incompressible bytes in a table of their own: an upload of several multipart parts."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE IF NOT EXISTS ballast (blob BLOB)")
        db.executemany("INSERT INTO ballast VALUES (?)",
                       [(os.urandom(1 << 20),) for _ in range(megabytes)])
        db.commit()


@pytest.fixture
def fleet(tmp_path, s3):
    config = fleet_config(tmp_path, f"s3://{s3.test_bucket}/fleet-a", s3.url)
    store = SQLiteStore(config.daemon.database)
    yield config, store
    store.close()


def test_a_snapshot_and_a_rollup_are_listed_and_restore_what_they_held(fleet, s3, tmp_path):
    config, store = fleet
    add(store, "one", "two")
    counts = Backups(config, store).run_once(T0 + 5 * MINUTE)  # first pass: both are due
    assert counts["snapshots"] == counts["rollups"] == 1

    keys = [backup.key for backup in list_backups(config)]
    assert len(keys) == 2
    assert re.fullmatch(key_of("rollups", T0 + 5 * MINUTE), keys[0])
    assert re.fullmatch(key_of("snapshots", T0 + 5 * MINUTE), keys[1])
    # Each object carries the sha256 of its bytes.
    client = s3.client()
    for key in keys:
        stored = client.get_object(Bucket=s3.test_bucket, Key=f"fleet-a/{key}")
        assert stored["Metadata"]["sha256"] == hashlib.sha256(stored["Body"].read()).hexdigest()
    status = backup_status(config)
    assert status["snapshots"]["count"] == 1 and status["snapshots"]["bytes"] > 0
    assert status["last_snapshot"]["key"] in keys and status["failures_in_a_row"] == 0

    add(store, "three")  # after the snapshot: a restore goes back to before it
    store.close()
    restored = restore_backup(config, T0 + HOUR, key=keys[0])
    assert tasks_in(config.daemon.database) == ["one", "two"]
    assert restored.replaced and tasks_in(restored.replaced) == ["one", "two", "three"]
    assert oct(Path(config.daemon.database).stat().st_mode & 0o777) == "0o600"


def test_retention_keeps_by_count_and_by_age_and_never_the_last_one(tmp_path, s3):
    config = fleet_config(tmp_path, f"s3://{s3.test_bucket}", s3.url,
                          snapshot_every="10m", snapshot_keep_count=4, snapshot_keep_for="1h",
                          rollup_every="1h", rollup_keep_for="2h", compression_level=1)
    with SQLiteStore(config.daemon.database) as store:
        add(store, "kept")
        # In this process: 25 snapshots, and a worker process each would only add start-ups.
        service = Backups(config, store, BackupSettings(isolated=False))
        passes = [T0 + step * 5 * MINUTE for step in range(49)]  # every 5 min for 4 hours
        stored = sum(service.run_once(now).get("snapshots", 0) for now in passes)
        assert stored == 25  # due every 10 minutes, not at every pass
        backups = list_backups(config)
        snapshots = [b.taken_at - T0 for b in backups if b.kind == "snapshots"]
        rollups = [b.taken_at - T0 for b in backups if b.kind == "rollups"]
        assert snapshots == [3 * HOUR + 30 * MINUTE + i * 10 * MINUTE for i in range(4)]
        assert rollups == [2 * HOUR, 3 * HOUR, 4 * HOUR]  # 2 hours back from T0+4h
        # Days later with no new backup: age alone would empty the target; one stays.
        going = service.prune(T0 + 30 * DAY)
        left = list_backups(config)
        assert going == 5 and [b.kind for b in left] == ["rollups", "snapshots"]


def test_a_backup_whose_checksum_does_not_match_is_refused(fleet, s3):
    config, store = fleet
    add(store, "one")
    Backups(config, store).take(["snapshots"], T0)
    store.close()
    before = Path(config.daemon.database).read_bytes()
    (backup,) = list_backups(config)
    client = s3.client()
    key = f"fleet-a/{backup.key}"
    original = client.get_object(Bucket=s3.test_bucket, Key=key)
    body = bytearray(original["Body"].read())
    body[len(body) // 2] ^= 0xFF  # one flipped bit in transit or at rest
    client.put_object(Bucket=s3.test_bucket, Key=key, Body=bytes(body),
                      Metadata=original["Metadata"])

    with pytest.raises(BackupError, match="checksum mismatch"):
        restore_backup(config, T0 + HOUR)
    with pytest.raises(BackupError, match="checksum mismatch"):
        verify_backup(config)
    assert Path(config.daemon.database).read_bytes() == before
    leftovers = [p.name for p in Path(config.daemon.database).parent.iterdir()
                 if p.name.startswith(".restore-") or ".replaced-" in p.name]
    assert leftovers == []



def test_a_damaged_newest_backup_is_named_and_restore_and_verify_take_the_newest_good_one(
        fleet, s3):
    config, store = fleet
    add(store, "one")
    service = Backups(config, store, BackupSettings(isolated=False))
    service.take(["snapshots"], T0)
    add(store, "two")
    service.take(["snapshots"], T0 + 5 * MINUTE)
    add(store, "three")
    service.take(["snapshots"], T0 + 10 * MINUTE)
    store.close()
    oldest, middle, newest = (b.key for b in list_backups(config))
    client = s3.client()
    for key in (newest, middle):  # both newer ones damaged: one flipped byte each
        stored = client.get_object(Bucket=s3.test_bucket, Key=f"fleet-a/{key}")
        body = bytearray(stored["Body"].read())
        body[len(body) // 2] ^= 0xFF
        client.put_object(Bucket=s3.test_bucket, Key=f"fleet-a/{key}", Body=bytes(body),
                          Metadata=stored["Metadata"])

    told: list[str] = []
    verified = verify_backup(config, damaged=lambda error: told.append(str(error)))
    assert verified.key == oldest
    assert [line.split(" ")[0] for line in told] == [newest, middle]
    assert all("is damaged: checksum mismatch" in line for line in told)
    assert [d["key"] for d in verified.damaged] == [newest, middle]

    restored = restore_backup(config, T0 + HOUR)
    assert restored.key == oldest and tasks_in(config.daemon.database) == ["one"]
    # A key named outright is not replaced by another: its damage is the answer.
    with pytest.raises(BackupError, match="checksum mismatch"):
        verify_backup(config, key=newest)


def test_status_reads_the_target_and_names_a_recorded_latest_it_no_longer_holds(fleet, s3):
    from taskherd.cli.backup import status_lines

    config, store = fleet
    add(store, "one")
    Backups(config, store, BackupSettings(isolated=False)).take(["snapshots"], T0)
    (taken,) = list_backups(config)
    assert backup_status(config)["snapshots"]["latest"]["key"] == taken.key

    client = s3.client()  # the bucket emptied behind the daemon's back
    for item in client.list_objects_v2(Bucket=s3.test_bucket)["Contents"]:
        client.delete_object(Bucket=s3.test_bucket, Key=item["Key"])
    status = backup_status(config)
    assert status["snapshots"]["latest"] is None and status["snapshots"]["count"] == 0
    assert status["snapshots"]["recorded_gone"] == taken.key
    text = "\n".join(status_lines(status))
    assert "snapshots: none in the target" in text
    assert f"the latest recorded, {taken.key}, is no longer in the target" in text
    assert f"latest {taken.key}" not in text


def test_a_frozen_server_fails_the_upload_after_its_timeouts_and_a_retry_stores_it(
        tmp_path, s3):
    """A server that accepts connections and never answers: the attempt fails once its
    timeouts (configured short here) run out, not minutes later; older backups are kept."""
    from tests.s3 import Relay

    relay = Relay(s3.port)
    config = fleet_config(tmp_path, f"s3://{s3.test_bucket}", relay.url,
                          connect_timeout="1s", read_timeout="1s")
    assert (config.backup.connect_timeout, config.backup.read_timeout) == (1.0, 1.0)
    try:
        with SQLiteStore(config.daemon.database) as store:
            add(store, "one")
            service = Backups(config, store, BackupSettings(isolated=False))
            assert service.take(["snapshots"], T0)["snapshots"] == 1
            relay.freeze()
            counts = service.take(["snapshots"], T0 + HOUR)
            assert counts["upload_failures"] == 1 and counts["snapshots"] == 0
            assert "timeout" in service.state.last_failure["error"].lower()
            relay.thaw()
            assert service.take(["snapshots"], T0 + 2 * HOUR)["snapshots"] == 1
            # The request given up on may still land as the server wakes (the relay held its
            # bytes): a whole object under a key of its own, which replaces nothing.
            assert {b.taken_at for b in list_backups(config)} >= {T0, T0 + 2 * HOUR}
    finally:
        relay.thaw()
        relay.go_away()


def test_the_server_going_away_mid_upload_fails_it_keeps_older_backups_and_a_retry_stores_it(
        tmp_path, s3):
    from tests.s3 import Relay

    relay = Relay(s3.port)
    config = fleet_config(tmp_path, f"s3://{s3.test_bucket}", relay.url, compression_level=1)
    with SQLiteStore(config.daemon.database) as store:
        add(store, "before")
        service = Backups(config, store)
        assert service.run_once(T0)["snapshots"] == 1
        add(store, "after")
        add_ballast(Path(config.daemon.database), 24)  # 3 parts of 8 MiB, and more

        moved = []

        def cut_mid_upload(count: int) -> None:
            moved.append(count)
            if sum(moved) >= 12 << 20 and not getattr(relay, "gone", False):
                relay.gone = True
                relay.go_away()

        next_due = T0 + config.backup.snapshot_every
        counts = service.take(["snapshots"], next_due, progress=cut_mid_upload)
        assert counts["upload_failures"] == 1 and counts["snapshots"] == 0
        assert sum(moved) >= 12 << 20, "the outage came mid-upload, with parts on the wire"
        status = backup_status(config)
        assert status["failures_in_a_row"] == 1 and "target_error" in status
        assert "127.0.0.1" in status["last_failure"]["error"]
        assert status["retry_at"] == next_due + 30  # the first backoff step

        relay.come_back()
        # The older snapshot is still there, whole; the failed one left no object behind.
        (kept,) = [b for b in list_backups(config) if b.kind == "snapshots"]
        assert kept.taken_at == T0
        # Not retried before its backoff; retried after it, and stored.
        assert service.run_once(next_due + 29) == {}
        counts = service.run_once(next_due + 30)
        assert counts["snapshots"] == 1 and counts["upload_failures"] == 0
        assert backup_status(config)["failures_in_a_row"] == 0
        newest = max((b for b in list_backups(config) if b.kind == "snapshots"),
                     key=lambda b: b.taken_at)
        assert newest.size > 24 << 20
        restored = restore_backup(config, next_due + HOUR, to=tmp_path / "check.db")
        assert tasks_in(restored.database) == ["before", "after"]
    relay.go_away()


def test_the_server_killed_mid_upload_and_started_again_takes_the_retry(tmp_path, s3_server,
                                                                       monkeypatch):
    """Not a relay: the server process itself dies (SIGKILL) while parts are in flight, and a
    new one starts on its port; moto keeps no disk, so the bucket is made again, as a person
    would after bringing back an empty server."""
    from tests.s3 import CREDENTIALS, S3Server

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    server = S3Server(tmp_path / "own-moto.log")
    server.start()
    try:
        server.bucket("dies")
        config = fleet_config(tmp_path, "s3://dies/x", server.url, compression_level=1)
        with SQLiteStore(config.daemon.database) as store:
            add(store, "one")
            add_ballast(Path(config.daemon.database), 20)
            moved = []

            def kill_after_first_part(count: int) -> None:
                moved.append(count)
                if sum(moved) >= 8 << 20 and server.process.poll() is None:
                    server.kill()

            service = Backups(config, store)
            assert service.take(["snapshots"], T0, progress=kill_after_first_part) == {
                "snapshots": 0, "upload_failures": 1, "pruned": 0}
            assert "fail" in service.state.last_failure["error"]
            server.start()
            server.bucket("dies")
            counts = service.run_once(T0 + 30)  # the backoff's first step
            assert counts["snapshots"] == counts["rollups"] == 1
            kept = [b.key for b in list_backups(config)]
            assert len(kept) == 2 and re.fullmatch(key_of("rollups", T0 + 30), kept[0])
            assert re.fullmatch(key_of("snapshots", T0 + 30), kept[1])
    finally:
        server.kill()


def test_no_credentials_in_the_config_file(tmp_path):
    from taskherd.model.settings import ConfigError

    with pytest.raises(ConfigError) as error:
        parse_config({"backup": {"target": "s3://b/p", "secret_access_key": "hunter2",
                                 "endpoint_url": "minio:9000", "snapshot_every": "soon"}},
                     base_dir=tmp_path)
    text = str(error.value)
    assert "3 problems" in text and "never read from the config file" in text
    assert "endpoint_url" in text and "snapshot_every" in text
    assert "hunter2" not in text


def test_a_bad_target_is_named(tmp_path):
    from taskherd.model.settings import ConfigError

    bad = {"s3:///prefix": "bucket is missing", "ftp://host/x": "expected a folder or s3://"}
    for target, words in bad.items():
        with pytest.raises(ConfigError, match=words):
            parse_config({"backup": {"target": target}}, base_dir=tmp_path)
    assert replace(BackupConfig(), target="s3://b").is_s3


def key_of(kind: str, moment: float, suffix: str = ".db.gz") -> str:
    """The pattern of the key of a backup taken at `moment`: to the microsecond, then a
    nonce of its own."""
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d/%H-%M-%S.%f")
    return re.escape(f"{kind}/{stamp}-") + "[0-9a-f]{8}" + re.escape(suffix)
