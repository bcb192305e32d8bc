"""Records are made into frozen dataclasses at their first use, and are then just that."""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import pkgutil
import re
import subprocess
import sys
import threading
from dataclasses import field
from pathlib import Path

import pytest

import taskherd
from taskherd.model.record import Record, make

DECLARED = re.compile(r"\s*class \w+\(Record\):")


def every_record() -> list[type]:
    """Every Record of the package, its modules imported (the optional extras' aside)."""
    for module in pkgutil.walk_packages(taskherd.__path__, "taskherd."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional extra that is not installed (boto3, psycopg, mcp...)
            continue
    found, stack = [], list(Record.__subclasses__())
    while stack:
        record = stack.pop()
        found.append(record)
        stack.extend(record.__subclasses__())
    return found


def test_every_record_of_the_package_makes_a_frozen_dataclass() -> None:
    # A record's fields are checked when it is made, not at import: a field without a default
    # after one with a default would otherwise be found by the first program to use it.
    records = [record for record in every_record() if record.__module__.startswith("taskherd.")]
    declared = [line for path in Path(taskherd.__file__).parent.rglob("*.py")
                if path.name != "record.py"  # its docstring's example
                for line in path.read_text().splitlines() if DECLARED.match(line)]
    assert len(records) == len(declared) > 90
    for record in records:
        make(record)
        assert dataclasses.is_dataclass(record), record
        assert record.__dataclass_params__.frozen, record  # type: ignore[attr-defined]


class Point(Record):
    """A point."""

    x: int
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)


def test_a_record_is_made_by_its_first_instance_and_is_a_frozen_dataclass() -> None:
    class Unused(Record):
        x: int

    assert "__dataclass_fields__" not in Unused.__dict__  # not made at its definition
    point = Point(1, ("a",))
    assert point == Point(1, ("a",)) and point != Point(2)
    assert hash(point.tags) and repr(point) == "Point(x=1, tags=('a',), extra={})"
    assert Point(2).extra == {} and Point(2).extra is not Point(2).extra
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 3  # type: ignore[misc]
    assert dataclasses.replace(point, x=5) == Point(5, ("a",))


def test_a_look_at_its_fields_makes_a_record() -> None:
    class Looked(Record):
        a: int
        b: str = ""

    assert dataclasses.is_dataclass(Looked)
    assert [f.name for f in dataclasses.fields(Looked)] == ["a", "b"]
    assert Looked(1) == Looked(1, "")


def test_a_wrong_record_fails_at_each_use_with_dataclass_s_own_error() -> None:
    class Wrong(Record):
        a: int = 0
        b: int  # type: ignore[misc]  # no default after one with a default: the mistake

    for _ in range(2):
        with pytest.raises(TypeError, match="non-default argument 'b' follows default"):
            Wrong(1, 2)


def test_a_record_of_its_own_init_is_refused_where_it_is_declared() -> None:
    with pytest.raises(TypeError, match="record Own defines __init__"):
        class Own(Record):
            a: int

            def __init__(self, a: int) -> None:
                object.__setattr__(self, "a", a)


def test_threads_making_a_record_at_once_get_one_dataclass() -> None:
    class Raced(Record):
        a: int
        items: list[int] = field(default_factory=list)

    start, made, errors = threading.Barrier(8), [], []

    def first_use() -> None:
        start.wait(timeout=10)
        try:
            made.append(Raced(1))
        except Exception as error:  # noqa: BLE001 - the test reports what a thread met
            errors.append(error)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == [] and made == [Raced(1)] * 8 and made[0].items == []


PICKLED_IN_ANOTHER_PROCESS = """
import pickle, sys
from taskherd.model import Task
from taskherd.model.settings import Config, DaemonConfig
config = pickle.loads(sys.stdin.buffer.read())
try:
    config.daemon = None
except Exception as error:
    print(type(error).__name__, config == Config(daemon=config.daemon), repr(config.daemon)[:12])
"""


def test_a_record_unpickled_in_a_fresh_process_is_made() -> None:
    """The API's process gets the daemon's Config pickled; records there are made by pickle."""
    from taskherd.model.settings import Config, DaemonConfig

    config = Config(daemon=DaemonConfig(data_dir=Path("/d"), database="/d/q.db"))
    done = subprocess.run([sys.executable, "-c", PICKLED_IN_ANOTHER_PROCESS],
                          input=pickle.dumps(config), capture_output=True, timeout=60)
    assert done.stdout.decode().split() == ["FrozenInstanceError", "True", "DaemonConfig"]
