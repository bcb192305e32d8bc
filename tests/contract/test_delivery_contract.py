"""Delivery outbox rows in every store: written by the settle itself, for the events the
task asked to tell, and taken, sent or failed exactly as the deliverer asks."""

from __future__ import annotations

import asyncio
import json

import pytest

from taskherd.model import EventKind, NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import StoreError

NOW = 1_700_000_000.0
TELLS = {"deliver_to": ["ops", "chat"], "deliver_on": ["completed", "dead", "job_error"]}


def settle(store, outcome, meta, max_attempts=3):
    task = store.enqueue(NewTask(role="coder", title="t", meta=meta,
                                 max_attempts=max_attempts), NOW).task
    claim = store.claim(ClaimRequest("n1", NOW, 60.0))
    store.finish_run(claim.run.id, RunResult(outcome, 1, error="boom"), RetryPolicy(), NOW + 1)
    return store.get_task(task.id)


def test_a_settle_writes_one_row_per_alias_for_an_event_it_tells(store):
    task = settle(store, Outcome.SUCCEEDED, TELLS)
    rows = store.list_deliveries()
    assert sorted((d.alias, d.event, d.task_id, d.state) for d in rows) == [
        ("chat", "completed", task.id, "pending"), ("ops", "completed", task.id, "pending")]
    payload = json.loads(rows[0].payload)
    assert payload["event"] == "completed" and payload["task"]["state"] == "completed"
    assert store.due_deliveries(NOW + 1) and not store.due_deliveries(NOW)


def test_events_not_asked_for_are_not_told_and_a_jobs_death_is_a_job_error(store):
    retried = settle(store, Outcome.FAILED, TELLS)  # back to ready: not an event
    assert retried.state is TaskState.READY and store.list_deliveries() == []
    dead = settle(store, Outcome.FAILED, TELLS | {"job": "nightly"}, max_attempts=1)
    assert dead.state is TaskState.DEAD
    assert sorted(d.event for d in store.list_deliveries()) == [
        "dead", "dead", "job_error", "job_error"]
    store.cancel(store.enqueue(NewTask(role="coder", title="c", meta=TELLS), NOW).task.id, NOW)
    assert len(store.list_deliveries()) == 4  # cancelled is not in deliver_on


def test_taking_sending_and_failing(store):
    settle(store, Outcome.SUCCEEDED, {"deliver_to": ["ops"], "deliver_on": ["completed"]})
    due = store.due_deliveries(NOW + 1)[0]
    taken = store.take_delivery(due, NOW + 30)
    assert taken.attempts == 1 and store.take_delivery(due, NOW + 30) is None  # taken once
    assert store.due_deliveries(NOW + 2) == []
    store.delivery_failed(taken.id, "HTTP 500", NOW + 5)
    again = store.take_delivery(store.due_deliveries(NOW + 5)[0], NOW + 40)
    store.delivery_sent(again.id, NOW + 6)
    store.delivery_failed(again.id, "late failure", None)  # a sent row stays sent
    assert store.list_deliveries()[0].state == "sent"
    assert store.delivery_counts() == {"ops": {"sent": 1}}


def test_aliases(store):
    store.add_alias("ops", "webhook", "http://127.0.0.1:1/x", NOW, format="slack")
    with pytest.raises(StoreError, match="exists"):
        store.add_alias("ops", "file", "/tmp/x", NOW)
    assert [a.name for a in store.list_aliases()] == ["ops"]
    assert store.get_alias("ops").format == "slack"
    assert store.remove_alias("ops") and not store.remove_alias("ops")


def test_a_failed_row_is_due_again_on_retry_and_no_other_is_touched(store):
    tells = {"deliver_to": ["ops", "chat", "log"], "deliver_on": ["completed"]}
    settle(store, Outcome.SUCCEEDED, tells)
    failed, also_failed, sent = (store.take_delivery(d, NOW + 30)
                                 for d in store.due_deliveries(NOW + 1))
    store.delivery_failed(failed.id, "HTTP 500", None)
    store.delivery_failed(also_failed.id, "HTTP 502", None)
    store.delivery_sent(sent.id, NOW + 2)
    assert store.retry_deliveries(NOW + 100, failed.id) == 1
    again = store.get_delivery(failed.id)
    assert (again.state, again.attempts, again.next_attempt_at, again.last_error) == (
        "pending", 0, NOW + 100, "HTTP 500")
    assert store.retry_deliveries(NOW + 100, failed.id) == 0  # pending now: left alone
    assert store.retry_deliveries(NOW + 100, sent.id) == 0
    assert store.retry_deliveries(NOW + 200) == 1  # every failed one: the other
    assert [d.id for d in store.due_deliveries(NOW + 200)] == sorted([failed.id,
                                                                       also_failed.id])
    assert store.get_delivery(sent.id).state == "sent" and store.get_delivery(10**9) is None


def test_a_retry_tells_the_deliverers(store):
    # A daemon's deliverer wakes for DELIVERY_QUEUED events, not for every change: a
    # retried row must tell one, as a settle's new rows do, or it waits for the next look.
    settle(store, Outcome.SUCCEEDED, {"deliver_to": ["ops"], "deliver_on": ["completed"]})
    taken = store.take_delivery(store.due_deliveries(NOW + 1)[0], NOW + 30)
    store.delivery_failed(taken.id, "HTTP 500", None)

    async def heard():
        async with store.listen() as events:
            assert store.retry_deliveries(NOW + 100, taken.id) == 1
            while (event := await asyncio.wait_for(anext(events), 10)).kind is not (
                    EventKind.DELIVERY_QUEUED):
                pass
            return event

    assert asyncio.run(heard()).kind is EventKind.DELIVERY_QUEUED
