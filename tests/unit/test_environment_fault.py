"""`store.errors.environment_fault`: the machine's faults get a line for people; a bug or a
wrong setting does not pass for one."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from taskherd.store.errors import StoreError, environment_fault


@pytest.mark.parametrize(("error", "says"), [
    (sqlite3.OperationalError("database is locked"), "try again once it is done"),
    (sqlite3.OperationalError("database or disk is full"), "free space"),
    (sqlite3.OperationalError("disk I/O error"), "may be full or failing"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "writable"),
    (sqlite3.DatabaseError("database disk image is malformed"), "backup restore"),
    (OSError(errno.ENOSPC, "No space left on device"), "free space"),
])
def test_a_fault_of_the_machine_says_what_to_do(error, says):
    line = environment_fault(error)
    assert line is not None and says in line and "\n" not in line
    wrapped = StoreError("cannot open q.db")
    wrapped.__cause__ = error
    assert environment_fault(wrapped) == line


@pytest.mark.parametrize("error", [
    sqlite3.OperationalError("no such column: x"),  # a bug: its traceback is worth reading
    ValueError("database is locked"),  # words alone are not the fault: the type is read
    StoreError("no task with id 3"),
])
def test_anything_else_is_not_passed_off_as_one(error):
    assert environment_fault(error) is None


def test_a_postgresql_login_refused_is_the_settings_fault_not_the_machines():
    psycopg = pytest.importorskip("psycopg")
    refused = psycopg.OperationalError('connection failed: connection to server at '
                                       '"127.0.0.1", port 5432 failed: FATAL:  database '
                                       '"absent" does not exist')
    assert environment_fault(refused) is None
    away = psycopg.OperationalError("connection failed: Connection refused\n\tIs the server "
                                    "running on that host?")
    assert "check that the PostgreSQL server runs" in environment_fault(away)
    assert "\n" not in environment_fault(away)


def test_a_store_unavailable_says_what_its_drivers_error_says_or_to_try_again():
    from taskherd.store.errors import StoreUnavailable

    bare = environment_fault(StoreUnavailable("the node's lock is held elsewhere"))
    assert bare is not None and "try again" in bare and "PostgreSQL" not in bare
    full = StoreUnavailable("cannot write")
    full.__cause__ = sqlite3.OperationalError("database or disk is full")
    assert "free space" in environment_fault(full)
