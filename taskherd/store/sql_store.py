"""The store's logic over named SQL blocks, shared by every dialect.

`SQLStore` implements each transition once: which named statements run, in which
transaction, and what they mean. A dialect subclass (`SQLiteStore`, `PostgresStore`) brings
the connection, the transaction that takes the write lock, its named SQL and the few places
where the databases differ (how an inserted id is read, what a constraint error looks like).

The transitions live in its parts, one concept each: adding tasks (sql_tasks), claiming them
(sql_claims), runs and the settle their end sets off (sql_runs), a person's moves
(sql_moves), cooldowns (sql_cooldowns), reads (sql_reads), pruning and the roll-up
(sql_history); nodes, messages, workflows and the rest in theirs. This module holds what
they share: the dialect's hooks, the writing transaction and its events.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any

from taskherd.model import Event, EventKind
from taskherd.store.base import Store
from taskherd.store.connection import Connection
from taskherd.store.sql_agents import SQLAgents
from taskherd.store.sql_budgets import SQLBudgets
from taskherd.store.sql_charts import SQLCharts
from taskherd.store.sql_claims import SQLClaims
from taskherd.store.sql_cooldowns import SQLCooldowns
from taskherd.store.sql_credentials import SQLCredentials
from taskherd.store.sql_delivery import SQLDelivery
from taskherd.store.sql_history import SQLHistory
from taskherd.store.sql_jobs import SQLJobs
from taskherd.store.sql_memory import SQLMemory
from taskherd.store.sql_messages import SQLMessages
from taskherd.store.sql_moves import SQLMoves
from taskherd.store.sql_nodes import SQLNodes
from taskherd.store.sql_reads import SQLReads
from taskherd.store.sql_reports import SQLReports
from taskherd.store.sql_requests import SQLRequests
from taskherd.store.sql_runs import SQLRuns
from taskherd.store.sql_task_lists import SQLTaskLists
from taskherd.store.sql_tasks import SQLTasks
from taskherd.store.sql_tokens import SQLTokens
from taskherd.store.sql_workflows import SQLWorkflows
from taskherd.store.sql_worktrees import SQLWorktrees
from taskherd.store.watch import SQLWatch

# An event a transition emitted, as (kind, now, fields); `built` makes the Events.
Emitted = tuple[EventKind, float, dict[str, Any]]


# The parts with the store's own transitions come first: SQLWorkflows stubs some of their
# steps with methods that raise.
class SQLStore(SQLTasks, SQLClaims, SQLRuns, SQLMoves, SQLCooldowns, SQLReads, SQLHistory,
               SQLJobs, SQLNodes, SQLCredentials, SQLReports, SQLWatch, SQLTokens,
               SQLMessages, SQLAgents, SQLMemory, SQLDelivery, SQLWorkflows, SQLWorktrees,
               SQLBudgets, SQLRequests, SQLTaskLists, SQLCharts, Store):
    q: Mapping[str, str]  # the dialect's named SQL blocks

    # -- what a dialect provides ---------------------------------------------------------

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Connection]:
        """One transaction that may write; it commits on leaving, rolls back on an error.
        It holds the store's lock throughout, which keeps `_outbox` its own."""

    @abstractmethod
    def _read(self) -> AbstractContextManager[Connection]:
        """A connection to read from (a consistent snapshot is not promised across reads)."""

    @abstractmethod
    def _insert_many(self, db: Connection, name: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Run the named INSERT once per row; the number of rows inserted."""

    @abstractmethod
    def _inserted(self, cursor: Any) -> tuple[int, Mapping[str, Any] | None]:
        """The id of the task insert_task just added, and its whole row where the dialect's
        INSERT returns it (None: read it when it is wanted)."""

    @abstractmethod
    def _is_foreign_key_error(self, error: Exception) -> bool: ...

    @abstractmethod
    def _is_unique_error(self, error: Exception) -> bool: ...

    def _savepoint(self, db: Connection) -> AbstractContextManager[Connection]:
        """A savepoint of the transaction under way on `db`: what is written inside it is
        rolled back alone when it raises, the transaction going on. The database's failures
        that the dialect names StoreErrors (any of SQLite's; PostgreSQL's lost connection or
        full disk) are raised as such once its writes are rolled back; where the database
        ended the whole transaction, as what that transaction's end makes of them. Here, the
        dialect's transaction opened inside another, which PostgreSQL's makes a savepoint."""
        return self._transaction()

    def _transaction_lost(self, db: Connection) -> bool:
        """Whether the database ended the transaction under way on `db` itself, after a
        failure inside it (SQLite may, after SQLITE_FULL): nothing of it can be committed."""
        return False

    def _order_claims(self, db: Connection) -> None:
        """Order this transaction after every other claim that counts runs across nodes (and
        every cooldown set), until it ends: PostgreSQL's advisory lock. A no-op where the
        transaction already holds the database's one write lock (SQLite's BEGIN IMMEDIATE)."""

    def _together(self, db: Connection) -> AbstractContextManager[Any]:
        """The statements executed inside it reach the database together and their results
        come back together when it ends (PostgreSQL's pipeline: one round trip for them all,
        each statement still run after the one before, with a snapshot of its own); read
        their cursors after it. A no-op where a statement is a call in this process (SQLite).
        """
        return nullcontext()

    def _claim_started(self, db: Connection) -> None:
        """A claim's transaction began: PostgreSQL sets it to commit without waiting for the
        disk (the spawn's record that follows does) and to walk the ready tasks in order
        whatever its statistics say; a no-op elsewhere."""

    def _announce(self, db: Connection, outbox: Sequence[Emitted]) -> None:
        """Hand the transaction's events to the database, where it is the one to deliver
        them at commit (PostgreSQL's NOTIFY); a no-op elsewhere."""

    def _published(self, outbox: Sequence[Emitted]) -> None:
        """Deliver the events of a transaction that committed; a no-op where the database
        delivers them itself."""

    # -- the transaction and its events ---------------------------------------------

    # The events of the writing transaction under way, as (kind, now, fields): an Event is
    # built only for a listener, and most commits have none (claim+complete builds three).
    _outbox: list[Emitted] | None = None

    def _write(self) -> _Writing:
        """One writing transaction; the events its transitions emit reach listeners only
        if it commits, and only after."""
        return _Writing(self)

    def _emit(self, kind: EventKind, now: float, **fields: Any) -> None:
        """Queue an event of the current writing transaction."""
        assert self._outbox is not None, "an event outside a writing transaction"
        self._outbox.append((kind, now, fields))

    def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]:
        with self._read() as db:
            return db.execute(self.q[name], params).fetchall()



class _Writing:
    """The context of `SQLStore._write`. A class rather than @contextmanager around the
    dialect's transaction: it is entered twice per claim+complete, and two nested generator
    contexts cost that path several percent."""

    __slots__ = ("db", "events", "store", "transaction")

    def __init__(self, store: SQLStore):
        self.store = store
        self.transaction = store._transaction()
        self.events: list[Emitted] = []

    def __enter__(self) -> Connection:
        self.db = self.transaction.__enter__()
        self.store._outbox = self.events
        return self.db

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> bool | None:
        self.store._outbox = None
        if kind is None and self.events:
            try:
                self.store._announce(self.db, self.events)
            except BaseException as failure:
                if not self.transaction.__exit__(type(failure), failure, failure.__traceback__):
                    raise
                return None
        suppressed = self.transaction.__exit__(kind, error, traceback)
        if kind is None and self.events:
            self.store._published(self.events)
        return suppressed


def built(outbox: Iterable[Emitted]) -> Iterator[Event]:
    """The events of an outbox, built as they are read."""
    return (Event(kind, now, **fields) for kind, now, fields in outbox)
