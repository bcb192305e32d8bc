"""The backup service and its neighbours with a folder target: retention's rules, a stop that
abandons an upload, the WAL truncated after a snapshot (and retried while a reader holds it),
PostgreSQL through pg_dump and pg_restore, and the CLI's refusals."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from taskherd.backups.archive import Backup, expired
from taskherd.backups.service import Backups, BackupSettings
from taskherd.config import parse_config
from taskherd.model import NewTask
from taskherd.ops.backups import list_backups, restore_backup, verify_backup
from taskherd.services.checkpoints import Checkpoints
from taskherd.store import open_store
from taskherd.store.sqlite import SQLiteStore

T0 = 1_795_000_000.0
HOUR = 3600.0


def config_for(tmp_path: Path, database: str = "q.db", **backup: object):
    return parse_config({"daemon": {"database": database, "data_dir": "data"},
                         "backup": {"target": "backups", **backup}}, base_dir=tmp_path)


def test_retention_drops_what_is_too_old_or_past_the_count_but_never_the_newest():
    backups = [Backup(f"k{i}", "snapshots", T0 - i * HOUR, 1) for i in range(6)]
    backups.append(Backup("r", "rollups", T0 - 100 * HOUR, 1))
    by_age = expired(backups, "snapshots", keep_for=2.5 * HOUR, keep_count=100, now=T0)
    assert [b.key for b in by_age] == ["k3", "k4", "k5"]
    by_count = expired(backups, "snapshots", keep_for=100 * HOUR, keep_count=2, now=T0)
    assert [b.key for b in by_count] == ["k2", "k3", "k4", "k5"]
    assert expired(backups, "rollups", keep_for=HOUR, keep_count=1, now=T0) == []


def test_a_stopping_daemon_abandons_the_upload_and_records_no_failure(tmp_path):
    config = config_for(tmp_path)
    with SQLiteStore(config.daemon.database) as store:
        service = Backups(config, store)
        service.stop()
        counts = service.take(["snapshots"], T0)
        assert counts["snapshots"] == 0 and counts["upload_failures"] == 0
        assert list_backups(config) == [] and not service.state.failing
        assert not [p for p in (tmp_path / "backups").rglob("*") if p.is_file()]


def test_the_wal_is_truncated_after_a_snapshot_once_no_reader_holds_it(tmp_path, caplog):
    config = config_for(tmp_path)
    database = Path(config.daemon.database)
    with SQLiteStore(database, autocheckpoint=False) as store:
        checkpoints = Checkpoints(store)
        service = Backups(config, store, after_snapshot=checkpoints.request_truncate)
        store.enqueue_many([NewTask(role="r", title=f"t{i}") for i in range(200)], T0)
        wal = database.with_name("q.db-wal")
        assert wal.stat().st_size > 0
        with contextlib.closing(sqlite3.connect(database)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM tasks").fetchone()  # holds a read snapshot
            assert service.run_once(T0)["snapshots"] == 1
            store.enqueue(NewTask(role="r", title="while read"), T0)
            assert checkpoints.run_once(T0) == {"checkpoints": 1, "truncate_busy": 1}
            assert "a reader holds the log" in caplog.text
            reader.execute("COMMIT")
        assert checkpoints.run_once(T0 + 2) == {"checkpoints": 1, "truncated": 1}
        assert wal.stat().st_size == 0
        assert checkpoints.run_once(T0 + 4) == {"checkpoints": 1}  # back to passive ones


def test_postgres_is_backed_up_with_pg_dump_and_restored_with_pg_restore(tmp_path, pg_url):
    config = config_for(tmp_path, database=pg_url)
    with open_store(pg_url) as store:
        store.enqueue_many([NewTask(role="r", title=f"t{i}") for i in range(5)], T0)
        counts = Backups(config, store).take(["snapshots"], T0)
        assert counts["snapshots"] == 1, Backups(config, store).state.last_failure
        store.enqueue(NewTask(role="r", title="after"), T0)
    (backup,) = list_backups(config)
    assert backup.key.endswith(".dump")
    assert verify_backup(config).tasks > 0  # tables with data in the dump
    restored = restore_backup(config, T0 + HOUR)
    assert restored.tasks == 5 and Path(restored.replaced).exists()
    with open_store(pg_url) as store:
        assert sorted(t.title for t in store.list_tasks()) == [f"t{i}" for i in range(5)]


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "taskherd", *args], check=False, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin",
                               "TASKHERD_CONFIG": str(tmp_path / "taskherd.toml")})


def test_the_cli_says_what_is_wrong_and_changes_nothing(tmp_path):
    (tmp_path / "taskherd.toml").write_text('[daemon]\ndatabase = "q.db"\ndata_dir = "d"\n')
    no_target = cli(tmp_path, "backup", "snapshot")
    assert no_target.returncode == 2 and "no [backup] target" in no_target.stderr
    (tmp_path / "taskherd.toml").write_text('[daemon]\ndatabase = "q.db"\ndata_dir = "d"\n'
                                            '[backup]\ntarget = "b"\n')
    assert cli(tmp_path, "backup", "snapshot").returncode == 0
    listed = cli(tmp_path, "backup", "list")
    assert listed.returncode == 0 and "snapshots/" in listed.stdout
    before = (tmp_path / "q.db").read_bytes()
    both = cli(tmp_path, "backup", "restore", "--at", "1h", "--object", "x")
    assert both.returncode == 2 and "not both" in both.stderr
    bad_time = cli(tmp_path, "backup", "restore", "--at", "yesterday-ish")
    assert bad_time.returncode == 2 and "--at 'yesterday-ish'" in bad_time.stderr
    missing = cli(tmp_path, "backup", "restore", "--object", "snapshots/nope.db.gz")
    assert missing.returncode == 1 and "no backup 'snapshots/nope.db.gz'" in missing.stderr
    assert (tmp_path / "q.db").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if ".replaced-" in p.name]
    status = cli(tmp_path, "backup", "status")
    assert "snapshots: latest snapshots/" in status.stdout and "1 kept" in status.stdout


@pytest.mark.parametrize("garbage", [b"not a database at all", b"\x1f\x8b\x08broken gzip"])
def test_a_backup_that_is_not_a_taskherd_database_is_refused(tmp_path, garbage):
    from taskherd.backups.targets import BackupError, LocalTarget

    config = config_for(tmp_path)
    source = tmp_path / "garbage"
    source.write_bytes(garbage)
    from taskherd.backups.targets import file_sha256

    LocalTarget(tmp_path / "backups").put("snapshots/2026-11-23/10-00.db.gz", source,
                                           file_sha256(source))
    with pytest.raises(BackupError, match="does not unpack|not a readable"):
        restore_backup(config, T0)
    assert not Path(config.daemon.database).exists()


def test_doctor_and_status_report_a_failing_backup_and_its_reason(tmp_path):
    from taskherd.backups.state import BackupState, write_state
    from taskherd.doctor import PROBLEM, WARN, check_backup
    from taskherd.ops import Queue
    from taskherd.ops.board import status_board

    assert check_backup(parse_config({}, base_dir=tmp_path)).status == WARN
    config = config_for(tmp_path)
    (tmp_path / "data").mkdir()
    write_state(tmp_path / "data", BackupState(
        failures_in_a_row=3, last_failure={"at": T0, "error": "upload refused (AccessDenied)"},
        retry_at=T0 + 120))
    check = check_backup(config, now=T0)
    assert check.status == PROBLEM and "3 attempt(s) in a row" in check.why
    assert "AccessDenied" in check.why and "older backups are kept" in check.why
    with SQLiteStore(config.daemon.database) as store:
        board = status_board(Queue(config, store), T0)
    assert board["backup"]["failures_in_a_row"] == 3
    assert "AccessDenied" in board["backup"]["last_failure"]["error"]

    # Backups turned off since: the file's failures are not the service's now.
    off = parse_config({"daemon": {"database": config.daemon.database,
                                   "data_dir": str(tmp_path / "data")}}, base_dir=tmp_path)
    with SQLiteStore(config.daemon.database) as store:
        board = status_board(Queue(off, store), T0)
    assert board["backup"] == {"target": None, "last_snapshot": None, "failures_in_a_row": 0,
                               "last_failure": None}


def test_two_backups_in_one_second_are_both_kept_and_each_restores_its_own(tmp_path):
    """Keys were one a minute: a second snapshot in that minute (and a second rollup in the
    hour) replaced the first. Two nodes backing up at one instant are this case too."""
    config = config_for(tmp_path)
    with SQLiteStore(config.daemon.database) as store:
        service = Backups(config, store, BackupSettings(isolated=False))
        store.enqueue(NewTask(role="r", title="first"), T0)
        assert service.take(["snapshots", "rollups"], T0)["snapshots"] == 1
        store.enqueue(NewTask(role="r", title="second"), T0)
        assert service.take(["snapshots", "rollups"], T0)["rollups"] == 1
    backups = list_backups(config)
    assert [b.kind for b in backups] == ["rollups", "rollups", "snapshots", "snapshots"]
    assert len({b.key for b in backups}) == 4 and {b.taken_at for b in backups} == {T0}
    held = {}
    for backup in backups:
        copy = tmp_path / f"{len(held)}.db"
        restore_backup(config, T0, key=backup.key, to=copy)
        with contextlib.closing(sqlite3.connect(copy)) as db:
            held[backup.key] = [row[0] for row in db.execute("SELECT title FROM tasks")]
    assert sorted(map(len, held.values())) == [1, 1, 2, 2]


def damage_pages(path: Path) -> None:
    """Zero a hundred bytes in every third page of the file's second half: the file is still
    a SQLite database, and PRAGMA integrity_check finds a problem in each of those pages.
    The second half holds the tasks' pages alone: the schema's pages lie among the first
    hundred (made by the migrations, before any task), and a damaged schema page would make
    it no readable database at all."""
    data = bytearray(path.read_bytes())
    for offset in range(len(data) // 2 // 4096 * 4096, len(data) - 4096, 3 * 4096):
        data[offset + 100:offset + 200] = bytes(100)
    path.write_bytes(bytes(data))


def test_the_cli_passes_over_a_damaged_newest_backup_in_a_line_and_details_wait_for_verbose(
        tmp_path):
    from taskherd.backups.targets import file_sha256

    (tmp_path / "taskherd.toml").write_text('[daemon]\ndatabase = "q.db"\ndata_dir = "d"\n'
                                            '[backup]\ntarget = "b"\ncompression_level = 0\n')
    with SQLiteStore(tmp_path / "q.db") as store:
        store.enqueue_many([NewTask(role="r", title="x" * 500 + str(i)) for i in range(3000)],
                           T0)
    assert cli(tmp_path, "backup", "snapshot").returncode == 0
    assert cli(tmp_path, "backup", "snapshot").returncode == 0
    good, damaged = sorted((tmp_path / "b").rglob("*.db"))
    # Damaged with its checksum recomputed: only the integrity check can tell.
    damage_pages(damaged)
    (damaged.parent / f"{damaged.name}.sha256").write_text(file_sha256(damaged) + "\n")
    damaged_key, good_key = (str(p.relative_to(tmp_path / "b")) for p in (damaged, good))

    verified = cli(tmp_path, "backup", "verify")
    assert verified.returncode == 0, verified.stderr
    assert f"{good_key} is good" in verified.stdout
    assert f"warning: {damaged_key} is damaged: it fails PRAGMA integrity_check (" in (
        verified.stderr)
    assert len(verified.stderr.splitlines()) == 2 and "On tree page" in verified.stderr

    named = cli(tmp_path, "backup", "verify", "--object", damaged_key)
    assert named.returncode == 1
    assert len(named.stderr.splitlines()) == 2 and "--verbose" in named.stderr
    detailed = cli(tmp_path, "backup", "verify", "--object", damaged_key, "--verbose")
    assert detailed.returncode == 1 and detailed.stderr.count("On tree page") > 50

    restored = cli(tmp_path, "backup", "restore", "--to", str(tmp_path / "r.db"))
    assert restored.returncode == 0 and good_key in restored.stdout
    assert damaged_key in restored.stderr


def test_doctor_names_a_recorded_snapshot_the_target_no_longer_holds(tmp_path):
    from taskherd.doctor import OK, WARN, check_backup

    config = config_for(tmp_path)
    with SQLiteStore(config.daemon.database) as store:
        Backups(config, store, BackupSettings(isolated=False)).take(["snapshots"], T0)
    assert check_backup(config, now=T0 + 60).status == OK
    for stored in (tmp_path / "backups").rglob("*"):  # the folder emptied by hand
        if stored.is_file():
            stored.unlink()
    check = check_backup(config, now=T0 + 60)
    assert check.status == WARN and "is no longer in the target" in check.why
