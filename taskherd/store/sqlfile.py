"""Loads the named SQL blocks and numbered migrations of a dialect from `store/sql/<dialect>/`.

Nothing is read at import, and a block is made ready (its comments out, the blocks it names
put in, its parameters in the driver's style) when first used: a command runs a handful of
the store's two hundred statements, and readying them all cost `taskherd task add` more than
running its own. A migration's text is read only when it is applied.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from functools import cache, cached_property
from pathlib import Path

from taskherd.model.record import Record

SQL_ROOT = Path(__file__).parent / "sql"
_NAME_LINE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
# A quoted literal (left alone) or a `:name` parameter that is not half of a `::type` cast.
_SUBQUERY = re.compile(r"\{(\w+)\}")  # another block's name, in braces
_LITERAL_OR_PARAMETER = re.compile(r"'(?:[^']|'')*'|(?<![:\w]):([A-Za-z_]\w*)")


class Migration(Record):
    """A numbered migration file of a dialect (NNNN_name.sql)."""

    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text()

    def statements(self) -> list[str]:
        return split_statements(self.sql)


class Blocks(Mapping[str, str]):
    """Named SQL blocks by name, their files read at the first lookup and each block made
    ready when first used (then kept)."""

    def __init__(self, dialect: str, names: Callable[[], Mapping[str, str]],
                 ready: Callable[[str, Mapping[str, str]], str]):
        self._dialect = dialect
        self._names = names  # -> the blocks this mapping holds, as written
        self._ready = ready  # (a block as written, this mapping's blocks) -> its statement
        self._made: dict[str, str] = {}

    @cached_property
    def _written(self) -> Mapping[str, str]:
        return self._names()

    def __getitem__(self, name: str) -> str:
        sql = self._made.get(name)
        if sql is None:
            sql = self._ready(_strip_comment_lines(self._written[name]), self._written)
            if self._dialect == "postgres":
                sql = _psycopg_parameters(sql)
            self._made[name] = sql
        return sql

    def __iter__(self) -> Iterator[str]:
        return iter(self._written)

    def __len__(self) -> int:
        return len(self._written)


@cache
def queries(dialect: str) -> Blocks:
    """Every `-- name: X` block of `common/` and of the dialect's folder, by name.

    A block both define is the dialect's override of the common one (its reason is written
    above it); a name defined twice within one folder is a mistake. `{other}` in a block
    stands for the block named `other` (a SELECT, put in as a subquery), so two queries over
    the same rows write those rows' selection once (a block put in may name others in turn).
    """
    return Blocks(dialect, lambda: _blocks(SQL_ROOT / "common") | _blocks(SQL_ROOT / dialect),
                  _with_subqueries)


@cache
def machinery(dialect: str) -> Blocks:
    """The named blocks of a dialect's own machinery (`<dialect>/machinery/`): migrations'
    bookkeeping, locks, notifications. Kept apart from `queries`, whose blocks exist in both
    dialects alike and are tested side by side. `{other}` stands for the block of `queries`
    or of the machinery named `other`, as in `queries`."""
    return Blocks(dialect, lambda: _blocks(SQL_ROOT / dialect / "machinery"),
                  lambda sql, _: _put_in(sql, _every_block(dialect)))


def _with_subqueries(sql: str, written: Mapping[str, str]) -> str:
    """A query with each `{other}` put in; one naming no query is a mistake (KeyError)."""
    return _SUBQUERY.sub(lambda used: _put_in(_statement(written[used[1]]), written),
                         sql)


@cache
def function_definition(dialect: str, name: str) -> str:
    """A machinery block that creates a function (PL/pgSQL), with the blocks it names in
    braces put in (from `queries` or `machinery`, theirs too) and every `:x` parameter of
    theirs read as the function's argument or variable `arg_x`: the function runs the same
    statements as the store's steps. Sent without parameters, so `%` is left as written."""
    written = _every_block(dialect)
    return _LITERAL_OR_PARAMETER.sub(
        lambda match: match.group(0) if match.group(1) is None else f"arg_{match.group(1)}",
        _put_in(_strip_comment_lines(written[name]), written))


@cache
def _every_block(dialect: str) -> dict[str, str]:
    """The blocks of `queries` and of the machinery, as written (they share no name)."""
    return (_blocks(SQL_ROOT / "common") | _blocks(SQL_ROOT / dialect)
            | _blocks(SQL_ROOT / dialect / "machinery"))


def _put_in(sql: str, written: Mapping[str, str]) -> str:
    """`sql` with each `{other}` that names a block of `written` put in (theirs too); a brace
    that names none is left for its caller to fill (notify_event's {payload})."""
    return _SUBQUERY.sub(lambda used: _put_in(_statement(written[used[1]]), written)
                         if used[1] in written else used[0], sql)


@cache
def _blocks(folder: Path) -> dict[str, str]:
    """A folder's blocks as written, comments in: each is made ready (comments out) when
    first used, as a command uses a handful (read once; callers copy, never change it)."""
    found: dict[str, str] = {}
    for file in sorted(os.listdir(folder)):  # not pathlib's glob: its Paths sort slowly
        if not file.endswith(".sql"):
            continue
        parts = _NAME_LINE.split((folder / file).read_text())
        # parts = [preamble, name1, body1, name2, body2, ...]
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise ValueError(f"SQL block {name!r} is defined twice in {folder.name}/")
            found[name] = body
    return found


@cache
def _migration_files(dialect: str) -> tuple[tuple[int, str, str], ...]:
    """(version, name, file name) of each migration, in order. The folder's names are listed
    (os.listdir): every open reads them, and an open that finds them all applied, as most
    do, has no other use for them."""
    found = []
    for file in sorted(os.listdir(SQL_ROOT / dialect / "migrations")):
        if not file.endswith(".sql"):
            continue
        match = _MIGRATION_FILE.match(file)
        if not match:
            raise ValueError(f"migration file {file!r} is not named NNNN_name.sql")
        found.append((int(match.group(1)), match.group(2), file))
    versions = [version for version, _, _ in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations of {dialect} are not numbered 1..n without gaps: {versions}")
    return tuple(found)


def migrations(dialect: str) -> tuple[Migration, ...]:
    return pending(dialect, set())


def pending(dialect: str, applied: set[int]) -> tuple[Migration, ...]:
    """The migrations of `dialect` not in `applied`, in order."""
    folder = SQL_ROOT / dialect / "migrations"
    return tuple(Migration(version, name, folder / file)
                 for version, name, file in _migration_files(dialect) if version not in applied)


def latest_migration(dialect: str) -> int:
    """The number of the newest migration `dialect` has (they are numbered 1..n)."""
    return len(_migration_files(dialect))


def newer_schema_error(applied: set[int], release_of: Callable[[int], str | None],
                       dialect: str) -> str | None:
    """Why this taskherd must not use a database whose schema is newer than it knows (a
    newer node migrated it), naming the release it needs; None when it knows the schema."""
    known = latest_migration(dialect)
    newest = max(applied, default=0)
    if newest <= known:
        return None
    from taskherd import __version__

    needed = release_of(newest)
    return (f"the database's schema is at version {newest}, newer than this taskherd "
            f"{__version__} knows (up to {known}): a newer node migrated it; run taskherd "
            f"{needed or 'of that node'} or later here")


def split_statements(script: str) -> list[str]:
    """Split a script into complete statements (sqlite3 knows where one ends)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if _strip_comment_lines(pending):
                statements.append(pending.strip())
            pending = ""
    if _strip_comment_lines(pending):
        raise ValueError(f"incomplete SQL statement at the end of a script: {pending.strip()[:80]}")
    return statements


def _psycopg_parameters(sql: str) -> str:
    """Rewrite `:name` into psycopg's `%(name)s`, so both dialects' files read alike.

    psycopg reads every `%` of a query as the start of a placeholder, literals included,
    so a literal percent sign is doubled first.
    """
    return _LITERAL_OR_PARAMETER.sub(
        lambda match: match.group(0) if match.group(1) is None else f"%({match.group(1)})s",
        sql.replace("%", "%%"),
    )


def _statement(block: str) -> str:
    """A block as put into another: its comment lines out, no closing semicolon."""
    return _strip_comment_lines(block).rstrip(";")


def _strip_comment_lines(sql: str) -> str:
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()
