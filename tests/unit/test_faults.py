"""Whose fault a failure is (faults.py), and the free-space floor's verdict."""

from __future__ import annotations

import errno
import os
from types import SimpleNamespace

import pytest

from taskherd.faults import DiskReading, disk_short, fault_at_end, fault_of, fault_text
from taskherd.model import Fault, Outcome, RunResult, TaskState
from taskherd.queue import RetryPolicy, Settlement, settle
from taskherd.sizes import format_size, parse_size
from taskherd.store import StoreDiskFull, StoreUnavailable

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
