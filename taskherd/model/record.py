"""Record: the base of taskherd's frozen records, each made a dataclass when first used.

`dataclass()` writes and compiles six methods for each class it makes (__init__, __repr__,
__eq__, __hash__, __setattr__, __delattr__): about half a millisecond a class, whatever its
fields. model/, policy/, store/ and ops/ declare some hundred records, and `taskherd task add`,
run by scripts and agents many times a day, uses about a dozen of them: making the 59 it
imported took a third of its time. A record is therefore made into its frozen dataclass when the
program first uses it, by its first instance or a look at its fields (`dataclasses.fields`,
`is_dataclass`); from then on it is that dataclass, with nothing in between.

    class Task(Record):
        id: int
        title: str = ""

A mistake in a record's fields (one without a default after one with a default) is found when
it is made: tests/unit/test_record.py makes every record of the package.
"""

from __future__ import annotations

import threading
from dataclasses import Field, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # frozen_default is typing's from 3.12; typing_extensions has it for mypy
    from typing_extensions import dataclass_transform
else:
    from typing import dataclass_transform

# Two threads making the same record at once would have dataclass() read the class while the
# other rewrites it (a default_factory field's class attribute is removed by the first).
_MAKING = threading.RLock()
_FIELDS = "__dataclass_fields__"


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
class _RecordMeta(type):
    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if bases and "__init__" in namespace:  # make() would replace it with the dataclass's
            raise TypeError(f"record {name} defines __init__: use __post_init__")
        cls = super().__new__(mcls, name, bases, namespace)
        if bases:  # a record, not Record itself: made by its first instance
            cls.__init__ = _first_init_of(cls)  # type: ignore[misc]  # make() replaces it
        return cls

    if not TYPE_CHECKING:  # hidden from mypy, which would read any attribute of a record as Any
        def __getattr__(cls, name: str) -> Any:
            # Only a look-up the class cannot answer comes here: a record not yet made has no
            # fields (dataclasses.fields, is_dataclass and the row reader ask for them).
            if name == _FIELDS and _unmade(cls):
                make(cls)
                return cls.__dict__[_FIELDS]
            raise AttributeError(name)


class Record(metaclass=_RecordMeta):
    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickled in another process (the API's child gets the daemon's Config), a record
        # is made first: pickle would otherwise build it with object.__new__ alone.
        return _made, (type(self),), self.__dict__


def _first_init_of(record: Any) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        make(record)
        record.__init__(self, *args, **kwargs)  # the dataclass's, made just now
    __init__.makes_record = True  # type: ignore[attr-defined]
    return __init__


def _made(record: type) -> Any:
    make(record)
    return object.__new__(record)


def _unmade(record: type) -> bool:
    return getattr(record.__dict__.get("__init__"), "makes_record", False)


def make(record: Any) -> None:
    """Make the record its frozen dataclass now (once; a later call does nothing)."""
    with _MAKING:
        if not _unmade(record):
            return
        first_init = record.__dict__["__init__"]
        del record.__init__  # dataclass() adds an __init__ only to a class without one
        try:
            dataclass(frozen=True)(record)
        except BaseException:  # the same error again at its next use, not object's __init__
            record.__init__ = first_init
            raise
