"""Whose fault a failure is (faults.py), the free-space floor read through a fake statvfs with
`now` passed in, and the node's disk pause put on its record once (a real SQLite store)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from taskherd.config import parse_config
from taskherd.host.diskspace import READINGS_KEPT, FreeSpace
from taskherd.host.senders import one_line
from taskherd.model import Fault, Outcome, RunResult, TaskState
from taskherd.model.settings import ConfigError, RetryPolicy
from taskherd.policy.faults import DiskReading, disk_short, fault_at_end, fault_of, fault_text
from taskherd.policy.queue import Settlement, settle
from taskherd.policy.sizes import format_size, parse_size
from taskherd.services.disk_pause import DiskPause
from taskherd.store import StoreDiskFull, StoreUnavailable, open_store

MIB = 1 << 20
NOW = 1_800_000_000.0


def disk_error(number: int) -> OSError:
    return OSError(number, os.strerror(number), "/data/logs/run-7.log")


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_a_full_over_quota_or_read_only_disk_is_the_machines_fault(number):
    assert fault_of(disk_error(number)) is Fault.DISK


def test_other_errors_are_not_the_machines_fault():
    assert fault_of(disk_error(errno.ENOENT)) is None  # a missing program: the role's config
    assert fault_of(ValueError("role has no command")) is None
    assert fault_of(StoreUnavailable("database error: server closed the connection")) is None


def test_the_fault_is_found_behind_the_error_raised_from_it():
    try:
        try:
            raise disk_error(errno.ENOSPC)
        except OSError as error:
            raise RuntimeError("could not write the prompt") from error
    except RuntimeError as wrapped:
        assert fault_of(wrapped) is Fault.DISK
        assert fault_text(wrapped).startswith("disk full: could not write the prompt")


def test_the_stores_disk_full_says_so():
    error = StoreDiskFull("database or disk is full")
    assert fault_of(error) is Fault.DISK
    assert str(error).startswith("disk full: the database could not write")
    assert fault_text(error) == str(error)
    assert fault_text(disk_error(errno.EROFS)).startswith("disk read-only: [Errno 30]")


@pytest.mark.parametrize(("outcome", "report", "short", "fault"), [
    (Outcome.CRASHED, None, "0 B free at /data", Fault.DISK),
    (Outcome.FAILED, None, "0 B free at /data", Fault.DISK),
    (Outcome.LOST, None, "/data is read-only", Fault.DISK),
    (Outcome.FAILED, "fail", "0 B free at /data", None),  # the agent said it failed
    (Outcome.SUCCEEDED, None, "0 B free at /data", None),  # the work is done all the same
    (Outcome.TIMED_OUT, None, "0 B free at /data", None),  # its own behaviour
    (Outcome.STALLED, None, "0 B free at /data", None),
    (Outcome.CRASHED, None, None, None),  # the disk had room: the agent's crash
])
def test_a_runs_end_is_the_disks_fault_only_when_the_disk_was_short(outcome, report, short,
                                                                     fault):
    assert fault_at_end(outcome, report, short) is fault


def test_the_floor_names_the_first_folder_short_of_it():
    readings = [DiskReading("/data", 900 * MIB), DiskReading("/data/logs", 300 * MIB)]
    assert disk_short(readings, 512 * MIB) == ("300 MiB free at /data/logs, below "
                                               "min_free_disk 512 MiB")
    assert disk_short(readings, 256 * MIB) is None
    assert disk_short([DiskReading("/data", 0)], 0) == "/data is full"  # no floor: still full
    assert disk_short([DiskReading("/data", 5 * MIB, read_only=True)], 0) == "/data is read-only"


def test_a_fault_puts_the_task_back_as_it_was():
    task = SimpleNamespace(attempts=2, max_attempts=3, review=False, rescues=9)
    lost = RunResult(Outcome.LOST, error="could not start: disk full", fault=Fault.DISK)
    assert settle(task, lost, RetryPolicy(), NOW) == Settlement(TaskState.READY, NOW)
    crashed = RunResult(Outcome.CRASHED, error="vanished; the disk was short", fault=Fault.DISK)
    assert settle(task, crashed, RetryPolicy(), NOW).strike == 0
    # Without the fault, the same crash is the last strike.
    assert settle(task, RunResult(Outcome.CRASHED), RetryPolicy(), NOW).state is TaskState.DEAD


def test_sizes_as_people_write_them():
    assert parse_size("512MiB") == 512 * MIB
    assert parse_size("1.5 GiB") == 3 << 29
    assert parse_size("500MB") == 500_000_000
    assert parse_size(4096) == parse_size("4096") == 4096
    assert parse_size("0") == 0
    for bad in ("512M", "-1MiB", "lots", "0.3KiB", "", "1e9"):
        with pytest.raises(ValueError, match="expected a size such as '512MiB'"):
            parse_size(bad)
    with pytest.raises(TypeError):
        parse_size(True)
    assert [format_size(n) for n in (0, 1023, 512 << 10, 37 * MIB + MIB // 2, 2 << 30)] == [
        "0 B", "1023 B", "512 KiB", "37.5 MiB", "2.0 GiB"]


def test_min_free_disk_is_read_as_a_size_and_a_bad_one_is_named(tmp_path: Path):
    assert parse_config({}, base_dir=tmp_path).daemon.min_free_disk == 512 * MIB
    assert parse_config({"daemon": {"min_free_disk": "2GiB"}},
                        base_dir=tmp_path).daemon.min_free_disk == 2 << 30
    with pytest.raises(ConfigError, match=r"daemon.min_free_disk = '512M': expected a size"):
        parse_config({"daemon": {"min_free_disk": "512M"}}, base_dir=tmp_path)


class FakeDisk:
    """statvfs of one disk whose free space the test sets; counts the calls."""

    def __init__(self, free: int):
        self.free, self.read_only, self.calls = free, False, 0

    def __call__(self, path: str) -> SimpleNamespace:
        self.calls += 1
        return SimpleNamespace(f_bavail=self.free // 4096, f_frsize=4096,
                               f_flag=os.ST_RDONLY if self.read_only else 0)


def test_free_space_is_read_once_per_pass_and_kept_for_the_passes_close_after():
    # A busy node makes several passes a task, the first on the way to its claim.
    disk = FakeDisk(600 * MIB)
    space = FreeSpace(disk)
    folders = [Path("/data"), Path("/data/logs")]
    assert space.readings(folders, NOW) == [DiskReading("/data", 600 * MIB),
                                            DiskReading("/data/logs", 600 * MIB)]
    disk.free = 0
    assert space.readings(folders, NOW)[0].free == 600 * MIB  # the same pass: no new look
    assert space.readings(folders, NOW + 0.2, keep=0.5)[0].free == 600 * MIB  # kept
    assert disk.calls == 2
    assert space.readings(folders, NOW + 0.5, keep=0.5)[0].free == 0
    assert disk.calls == 4
    disk.free = 600 * MIB
    assert space.readings(folders, NOW + 0.6)[0].free == 600 * MIB  # none kept: read now
    assert space.readings(folders, NOW - 1, keep=0.5)[0].free == 600 * MIB  # clock went back
    assert disk.calls == 8


@pytest.fixture
def node(tmp_path: Path):
    """A node on a real SQLite store, its disk a FakeDisk, its role telling @ops."""
    told = tmp_path / "told.jsonl"
    config = parse_config({
        "daemon": {"data_dir": "data", "node": "n1", "timezone": "UTC",
                   "min_free_disk": "512MiB"},
        "roles": {"worker": {"command": ["true"], "deliver_to": ["@ops"],
                             "on": ["node_paused", "node_resumed"]}},
    }, base_dir=tmp_path)
    store = open_store(config.daemon.database, durability="normal")
    store.add_alias("ops", "file", str(told), NOW)
    store.node_up("n1", host="h", pid=1, version="t", lease=60.0, roles=["worker"], now=NOW)
    disk = FakeDisk(600 * MIB)
    yield SimpleNamespace(store=store, disk=disk,
                          pause=DiskPause(store, lambda: config, FreeSpace(disk)))
    store.close()


def test_below_the_floor_the_node_pauses_once_and_resumes_in_the_first_pass_with_room(node):
    store, disk, pause = node.store, node.disk, node.pause
    assert pause.check(NOW) is None
    disk.free = 100 * MIB
    reason = pause.check(NOW + 1)
    assert reason.startswith("100 MiB free at ") and reason.endswith("min_free_disk 512 MiB")
    disk.free = 90 * MIB
    assert pause.check(NOW + 2) is not None  # still short: not recorded, not told again
    [record] = store.list_nodes()
    assert (record.paused_at, record.paused_reason) == (NOW + 1, reason)
    disk.free = 513 * MIB
    assert pause.check(NOW + 3) is None
    assert store.list_nodes()[0].paused_at is None
    deliveries = store.list_deliveries(alias="ops")
    assert sorted(d.event for d in deliveries) == ["node_paused", "node_resumed"]
    paused = json.loads(next(d.payload for d in deliveries if d.event == "node_paused"))
    assert one_line(paused) == f"taskherd: node n1 starts nothing new: {reason}"


def test_passes_with_room_reuse_a_reading_and_a_paused_node_reads_at_every_pass(node):
    # The dispatcher's first pass after an event read three folders on the way to its claim.
    disk, pause = node.disk, node.pause
    assert pause.check(NOW) is None
    calls = disk.calls
    disk.free = 100 * MIB
    assert pause.check(NOW + READINGS_KEPT / 2) is None  # the reading of NOW serves
    assert disk.calls == calls
    assert pause.check(NOW + READINGS_KEPT) is not None
    disk.free = 600 * MIB
    assert pause.check(NOW + READINGS_KEPT + 0.01) is None  # paused: read again at once


def test_a_read_only_disk_pauses_the_node(node):
    node.disk.read_only = True
    assert node.pause.check(NOW).endswith("is read-only")


def test_a_fault_holds_the_node_until_a_probe_write_goes_through(node, tmp_path: Path):
    pause = node.pause
    (tmp_path / "data" / "logs").mkdir(parents=True)
    pause.met(disk_error(errno.EDQUOT), NOW)  # a quota: statvfs shows room all along
    assert pause.check(NOW + 0.5).startswith("disk quota exceeded: [Errno 122]")
    assert pause.check(NOW + 1.5) is None  # past its hold, a probe write went through
    # Faults in a row hold it longer (1 s, 2 s, 4 s…): a fault where no probe reaches (an
    # agent's workdir on another disk) cannot make the node claim and release in a loop.
    pause.met(disk_error(errno.ENOSPC), NOW + 2)
    pause.met(disk_error(errno.ENOSPC), NOW + 3)  # the third in a row: held 4 s
    assert pause.check(NOW + 6.9) is not None
    assert pause.check(NOW + 7.1) is None


def test_a_fault_the_readings_explained_lifts_as_soon_as_they_find_room(node, tmp_path: Path):
    """Faults in a row while the disk was full hold the node for seconds; once the readings
    found the disk short, the shortage is the fault's cause: the first pass that finds room
    again tries the probe, whatever is left of the hold."""
    pause, disk = node.pause, node.disk
    (tmp_path / "data" / "logs").mkdir(parents=True)
    for n in range(4):  # the fourth in a row: held 8 s
        pause.met(disk_error(errno.ENOSPC), NOW + n * 0.1)
    disk.free = 0
    assert pause.check(NOW + 1).startswith("0 B free at ")
    disk.free = 600 * MIB
    assert pause.check(NOW + 2) is None
