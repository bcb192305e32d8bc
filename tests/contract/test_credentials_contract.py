"""Run credentials, on every store: a token names one open run, is kept only as a hash, dies
with its run, and goes when the run is pruned."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits
from taskherd.store import StoreError

LEASE = 60.0


def started_run(store, title: str, now: float = 1000.0):
    store.enqueue(NewTask(role="coder", title=title), now)
    claimed = store.claim(ClaimRequest("n1", now, LEASE))
    store.mark_spawned(claimed.run.id, now, LEASE, pid=123, pid_started_at=1.0, log_path="l")
    return claimed.run


def test_a_token_names_its_open_run_until_the_run_ends(store):
    first, second = started_run(store, "a"), started_run(store, "b")
    store.issue_run_credential(first.id, "token-a", 1000.0)
    store.issue_run_credential(second.id, "token-b", 1000.0)
    assert store.run_of_credential("token-a").id == first.id
    assert store.run_of_credential("token-b").id == second.id
    assert store.run_of_credential("token-c") is None
    assert store.run_of_credential("token-") is None
    store.finish_run(first.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    assert store.run_of_credential("token-a") is None
    assert store.run_of_credential("token-b").id == second.id


def test_reported_usage_is_kept_unless_the_runtime_measured_its_own(store):
    reported, measured = started_run(store, "a"), started_run(store, "b")
    for run in (reported, measured):
        store.record_reported_usage(run.id, cost_usd=0.5, input_tokens=10, output_tokens=None)
    store.finish_run(reported.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    store.finish_run(measured.id, RunResult(Outcome.SUCCEEDED, cost_usd=0.75, output_tokens=3),
                     RetryPolicy(), 1001.0)
    run = store.get_run(reported.id)
    assert (run.cost_usd, run.input_tokens, run.output_tokens) == (0.5, 10, None)
    run = store.get_run(measured.id)
    assert (run.cost_usd, run.input_tokens, run.output_tokens) == (0.75, 10, 3)
    with pytest.raises(StoreError, match="already ended"):
        store.record_reported_usage(run.id, cost_usd=1.0, input_tokens=None, output_tokens=None)


def test_pruning_a_run_takes_its_credential(store):
    run = started_run(store, "a")
    store.issue_run_credential(run.id, "token-a", 1000.0)
    store.finish_run(run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    assert store.prune(before=2000.0) == 1


@pytest.mark.parametrize("limits", [None, ClaimLimits()], ids=["next", "within_limits"])
def test_a_claim_records_the_credential_it_is_given_in_its_transaction(store, limits):
    """The dispatcher mints the run's token before the claim; the claim records its digest,
    so the agent's first call is answered with no write between the claim and its start."""
    store.enqueue(NewTask(role="coder", title="a"), 1000.0)
    claimed = store.claim(ClaimRequest("n1", 1000.0, LEASE, roles=["coder"], limits=limits,
                                       credential="token-a"))
    assert claimed.credential == "token-a"
    assert store.run_of_credential("token-a").id == claimed.run.id
    store.finish_run(claimed.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    assert store.run_of_credential("token-a") is None  # dies with its run, as one issued later


def test_a_claim_without_a_credential_records_none(store):
    store.enqueue(NewTask(role="coder", title="a"), 1000.0)
    claimed = store.claim(ClaimRequest("n1", 1000.0, LEASE))
    assert claimed.credential is None
    assert store.run_of_credential("") is None
