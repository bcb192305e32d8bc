"""The message store interface: messages between agents and people, with receipts.

`Store` inherits it. Who may write to whom, and what `@all` means, is decided in
`ops/messages.py`; the store keeps the rows, their receipts and their order. The messages a
starting run receives are taken in the claim's own transaction (`ClaimRequest.inbox`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from taskherd.model import InboxLimit as InboxLimit  # its home is model; named here too
from taskherd.model import Message, NewTask
from taskherd.model.record import Record

if TYPE_CHECKING:
    from taskherd.model.jobs import JobDefinition
    from taskherd.store.errors import SpawnAllowance
    from taskherd.store.requests import RequestKey


class NewMessage(Record):
    sender: str
    recipient: str
    body: str
    kind: str = "text"
    priority: int = 0
    reply_to: int | None = None
    thread_id: int | None = None  # the thread of `reply_to`, which the caller looked up
    expires_at: float | None = None
    sender_role: str | None = None
    sender_run_id: int | None = None


class NewJob(Record):
    """A job a spawn message asks for: the definition `taskherd jobs add` would store (source
    'cli', so people change it with `taskherd jobs`), its first scheduled fire, and the task
    whose run asked for it (counted against that run's max_spawn)."""

    definition: JobDefinition
    schedule_at: float | None
    spawned_by: int


class MessageStore(abc.ABC):
    @abc.abstractmethod
    def send_messages(self, batch: Sequence[NewMessage], now: float,
                      wake: Sequence[NewTask] = (),
                      once: RequestKey | None = None) -> list[Message]:
        """Write the messages in one transaction. Each task of `wake` is added with them when
        its role has no ready task (an urgent message to a role that sets wake_on_urgent).
        With `once`, noted as that agent request's work (`store/requests.py`)."""

    @abc.abstractmethod
    def spawn_from_message(self, request: NewMessage, child: NewTask | NewJob | None,
                           refusal: str | None, now: float,
                           allowance: SpawnAllowance | None = None,
                           once: RequestKey | None = None,
                           ) -> tuple[Message, Message, int | None]:
        """In one transaction: the spawn request, the child task or the job (when `child` is
        given), and the `result` message answering the request's sender with the new task's
        or job's id or with `refusal`. Returns (request, answer, the new id or None). A job
        whose name was taken meanwhile, or a child past the sender's `allowance` (counted in
        this transaction), is refused in the answer, like any other refusal. With `once`,
        the two messages are noted as that agent request's work."""

    @abc.abstractmethod
    def get_message(self, message_id: int) -> Message | None: ...

    @abc.abstractmethod
    def unread_messages(self, recipient: str, now: float, *, also: str | None = None,
                        limit: int = 100) -> list[Message]:
        """Unread, unexpired messages to `recipient` (and to `also`), urgent first."""

    @abc.abstractmethod
    def count_unread_messages(self, recipient: str, now: float) -> int: ...

    @abc.abstractmethod
    def sent_messages(self, sender: str, limit: int = 100) -> list[Message]:
        """Messages `sender` sent (a role matches its agents' messages too), newest first."""

    @abc.abstractmethod
    def message_thread(self, message_id: int) -> list[Message]:
        """Every message of the thread `message_id` belongs to, oldest first."""

    @abc.abstractmethod
    def mark_messages_read(self, message_ids: Sequence[int], now: float,
                           once: RequestKey | None = None) -> list[Message]:
        """Mark them read; returns those that were unread until now (with `once`, noted as
        that agent request's work, so that its second try answers the same)."""

    @abc.abstractmethod
    def mark_all_messages_read(self, recipient: str, now: float) -> int: ...
