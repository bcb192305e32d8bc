"""Messages over named SQL (`store/sql/common/messages.sql`); mixed into `SQLStore`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from taskherd.model import SYSTEM_SENDER, TASK_ADDRESS, EventKind, InboxLimit, Message, NewTask, Run
from taskherd.store.errors import SpawnLimitReached
from taskherd.store.messages import MessageStore, NewJob, NewMessage

if TYPE_CHECKING:
    from taskherd.model.jobs import Job, JobDefinition
    from taskherd.store.connection import Connection
    from taskherd.store.errors import SpawnAllowance
    from taskherd.store.requests import RequestKey


class SQLMessages(MessageStore):
    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...
        def _add_task(self, db: Connection, new: NewTask,
                      now: float) -> tuple[int | None, bool]: ...
        def _insert_job(self, db: Connection, definition: JobDefinition, source: str,
                        now: float, schedule_at: float | None) -> Job: ...
        def _is_unique_error(self, error: Exception) -> bool: ...
        def _spawn_room(self, db: Connection, allowance: SpawnAllowance | None) -> None: ...
        def _note_request(self, db: Connection, key: RequestKey | None,
                          made: dict[str, Any]) -> None: ...

    def send_messages(self, batch: Sequence[NewMessage], now: float,
                      wake: Sequence[NewTask] = (),
                      once: RequestKey | None = None) -> list[Message]:
        with self._write() as db:
            sent = [Message.from_row(db.execute(self.q["insert_message"],
                                                _message_params(new, now)).fetchall()[0])
                    for new in batch]
            for task in wake:
                ready = db.execute(self.q["ready_tasks_of_role"], {"role": task.role})
                if ready.fetchall()[0]["n"] == 0:
                    self._add_task(db, task, now)
            self._note_request(db, once, {"messages": [message.id for message in sent]})
        return sent

    def spawn_from_message(self, request: NewMessage, child: NewTask | NewJob | None,
                           refusal: str | None, now: float,
                           allowance: SpawnAllowance | None = None,
                           once: RequestKey | None = None,
                           ) -> tuple[Message, Message, int | None]:
        try:
            return self._spawn_from_message(request, child, refusal, now, allowance, once)
        except SpawnLimitReached as reached:
            # Another addition of the same run took the last place since the check before:
            # the transaction rolled back whole, and the request is answered with why.
            return self._spawn_from_message(request, None, str(reached), now, once=once)
        except Exception as error:
            if not (isinstance(child, NewJob) and self._is_unique_error(error)):
                raise
            # Another request (or a person) took the name between the check and this write:
            # the transaction rolled back whole, and the request is answered with why.
            taken = f"a job named {child.definition.name!r} already exists"
            return self._spawn_from_message(request, None, taken, now, once=once)

    def _spawn_from_message(self, request: NewMessage, child: NewTask | NewJob | None,
                            refusal: str | None, now: float,
                            allowance: SpawnAllowance | None = None,
                            once: RequestKey | None = None,
                            ) -> tuple[Message, Message, int | None]:
        with self._write() as db:
            if child is not None:
                self._spawn_room(db, allowance)
            asked = Message.from_row(db.execute(self.q["insert_message"],
                                                _message_params(request, now)).fetchall()[0])
            child_id = None
            if isinstance(child, NewJob):
                job = self._insert_job(db, child.definition, "cli", now, child.schedule_at)
                db.execute(self.q["insert_spawned_job"],
                           {"job_id": job.id, "task_id": child.spawned_by, "now": now})
                child_id, body = job.id, _job_answer(job)
            elif child is not None:
                child_id, created = self._add_task(db, child, now)
                what = "spawned" if created else "an open task has its dedup key:"
                body = f"{what} task {child_id} (role {child.role}): {child.title}"
            else:
                body = f"spawn refused, nothing was created: {refusal}"
            answer = NewMessage(SYSTEM_SENDER, request.sender, body, "result", request.priority,
                                asked.id, asked.thread)
            answered = Message.from_row(db.execute(self.q["insert_message"],
                                                   _message_params(answer, now)).fetchall()[0])
            self._note_request(db, once, {"messages": [asked.id, answered.id]})
        return asked, answered, child_id

    def get_message(self, message_id: int) -> Message | None:
        rows = self._all("get_message", {"id": message_id})
        return Message.from_row(rows[0]) if rows else None

    def unread_messages(self, recipient: str, now: float, *, also: str | None = None,
                        limit: int = 100) -> list[Message]:
        params = {"recipient": recipient, "also": also or recipient, "now": now, "limit": limit}
        return [Message.from_row(row) for row in self._all("unread_messages", params)]

    def count_unread_messages(self, recipient: str, now: float) -> int:
        return int(self._all("count_unread_messages",
                             {"recipient": recipient, "now": now})[0]["n"])

    def sent_messages(self, sender: str, limit: int = 100) -> list[Message]:
        rows = self._all("sent_messages", {"sender": sender, "limit": limit})
        return [Message.from_row(row) for row in rows]

    def message_thread(self, message_id: int) -> list[Message]:
        first = self.get_message(message_id)
        if first is None:
            return []
        rows = self._all("message_thread", {"root": first.thread})
        return [Message.from_row(row) for row in rows]

    def mark_messages_read(self, message_ids: Sequence[int], now: float,
                           once: RequestKey | None = None) -> list[Message]:
        with self._write() as db:
            marked = [Message.from_row(rows[0]) for i in message_ids
                      if (rows := db.execute(self.q["mark_message_read"],
                                             {"id": i, "now": now}).fetchall())]
            self._note_request(db, once, {"messages": [message.id for message in marked]})
        return marked

    def mark_all_messages_read(self, recipient: str, now: float) -> int:
        with self._write() as db:
            params = {"recipient": recipient, "now": now}
            return db.execute(self.q["mark_all_messages_read"], params).rowcount

    def _deliver_inbox(self, db: Connection, run: Run, limit: InboxLimit,
                       now: float) -> tuple[Message, ...]:
        """Inside the claim's transaction: the messages the starting run gets in its prompt,
        marked delivered to it, within `limit` (the first always fits; the prompt builder
        shortens one that is too long alone). What does not fit waits for the next run.
        PostgreSQL's claim within limits does the same in one statement (deliver_claim_inbox)."""
        params = undelivered_params(run.role, run.task_id, now, limit)
        waiting = db.execute(self.q["undelivered_for_run"], params).fetchall()
        delivered: list[Message] = []
        size = 0
        for row in waiting:
            size += len(row["body"].encode("utf-8"))
            if delivered and size > limit.bytes:
                break
            marked = db.execute(self.q["mark_message_delivered"],
                                {"id": row["id"], "run_id": run.id, "now": now}).fetchall()
            if marked:
                delivered.append(Message.from_row(marked[0]))
        return tuple(delivered)

    def _prune_messages(self, db: Connection, before: float) -> int:
        return db.execute(self.q["prune_messages"], {"before": before}).rowcount


def undelivered_params(role: str, task_id: int, now: float,
                       limit: InboxLimit) -> dict[str, Any]:
    """undelivered_for_run's parameters: a starting run of `role` for task `task_id`."""
    return {"role": role, "task_address": f"{TASK_ADDRESS}{task_id}", "now": now,
            "limit": limit.messages}


def _message_params(new: NewMessage, now: float) -> dict[str, Any]:
    return {
        "sender": new.sender, "sender_role": new.sender_role,
        "sender_run_id": new.sender_run_id, "recipient": new.recipient, "kind": new.kind,
        "priority": new.priority, "body": new.body, "reply_to": new.reply_to,
        "thread_id": new.thread_id, "now": now, "expires_at": new.expires_at,
    }


def _job_answer(job: Job) -> str:
    role = job.template.get("role")
    if job.next_run_at is None:
        when = "it fires when run (taskherd jobs run)" if job.enabled else "it is disabled"
    else:
        when = "first fire " + datetime.fromtimestamp(job.next_run_at, UTC).strftime(
            "%Y-%m-%d %H:%M:%S UTC")
    return f"spawned job {job.id} {job.name!r} (role {role}): {when}"
