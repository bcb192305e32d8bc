"""Run credentials, on every store: a token names one open run, is kept only as a hash, dies
with its run, and goes when the run is pruned."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits
from taskherd.store import StoreError
from taskherd.store.sql_credentials import token_digest

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


def claimed_with(store, secret: str, limits: ClaimLimits | None = None, title: str = "a"):
    store.enqueue(NewTask(role="coder", title=title), 1000.0)
    return store.claim(ClaimRequest("n1", 1000.0, LEASE, roles=["coder"], limits=limits,
                                    credential=secret))


def credential_rows(store) -> int:
    with store._write() as db:
        return db.execute("SELECT count(*) AS n FROM run_credentials").fetchall()[0]["n"]


def issued_before_the_upgrade(store, run_id: int, token: str) -> None:
    """A credential as taskherd issued them before they went on the run's row."""
    with store._write() as db:
        db.execute(f"INSERT INTO run_credentials (token_sha256, run_id, created_at) "
                   f"VALUES ('{token_digest(token)}', {run_id}, 1000.0)")


@pytest.mark.parametrize("limits", [None, ClaimLimits()], ids=["next", "within_limits"])
def test_a_claim_records_the_credential_it_is_given_in_its_transaction(store, limits):
    """The dispatcher mints the run's secret before the claim; the claim names the run in
    the token and keeps its digest on the run's row, so the agent's first call is answered
    with no write between the claim and its start, and no row of run_credentials."""
    claimed = claimed_with(store, "secret-a", limits)
    token = claimed.credential
    assert token == f"{claimed.run.id}.secret-a"
    assert store.run_of_credential(token).id == claimed.run.id
    assert store.get_run(claimed.run.id) == claimed.run  # the claim's run is the row's
    assert credential_rows(store) == 0
    store.finish_run(claimed.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    assert store.run_of_credential(token) is None  # dies with its run, as one issued later


@pytest.mark.parametrize("limits", [None, ClaimLimits()], ids=["next", "within_limits"])
def test_a_credential_with_a_forged_run_or_a_wrong_secret_is_refused(store, limits):
    mine = claimed_with(store, "secret-a", limits, "a")
    theirs = claimed_with(store, "secret-b", limits, "b")
    assert store.run_of_credential(mine.credential).id == mine.run.id
    for forged in (
            f"{theirs.run.id}.secret-a",  # my secret, another open run named
            f"{mine.run.id}.secret-b",  # another run's secret under my run's id
            f"{mine.run.id}.secret-", f"{mine.run.id}.secret-aa", f"{mine.run.id}.",
            f"{theirs.run.id + 1000}.secret-a",  # no such run
            "9" * 40 + ".secret-a", "9223372036854775808.secret-a",  # past any key (bigint)
            "9" * 5000 + ".secret-a",  # past what int() reads
            f"0{mine.run.id}.secret-a", f"+{mine.run.id}.secret-a",
            "\uff11.secret-a",  # a digit of another script, which int() reads as 1
            ".secret-a", "secret-a", "", "."):
        assert store.run_of_credential(forged) is None, forged
    assert store.run_of_credential(theirs.credential).id == theirs.run.id


def test_a_credential_issued_before_the_upgrade_still_names_its_run(store):
    """Agents running across an upgrade hold tokens kept in run_credentials: an old random
    one, and one in the run's form whose run has no digest on its row."""
    old, named = started_run(store, "a"), started_run(store, "b")
    issued_before_the_upgrade(store, old.id, "OldRandomToken_-x")
    issued_before_the_upgrade(store, named.id, f"{named.id}.old-secret")
    assert store.run_of_credential("OldRandomToken_-x").id == old.id
    assert store.run_of_credential(f"{named.id}.old-secret").id == named.id
    assert store.run_of_credential(f"{named.id}.other-secret") is None
    assert store.run_of_credential(f"{old.id}.OldRandomToken_-x") is None
    store.finish_run(old.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    assert store.run_of_credential("OldRandomToken_-x") is None


def test_a_credential_issued_apart_in_the_runs_form_goes_on_its_row(store):
    run, other = started_run(store, "a"), started_run(store, "b")
    store.issue_run_credential(run.id, f"{run.id}.later", 1000.0)
    assert store.run_of_credential(f"{run.id}.later").id == run.id
    assert store.get_run(run.id).credential_sha256 == token_digest("later")  # the secret's
    assert credential_rows(store) == 0
    with pytest.raises(ValueError, match=f"names run {other.id}, not run {run.id}"):
        store.issue_run_credential(run.id, f"{other.id}.later", 1000.0)
    assert store.run_of_credential(f"{other.id}.later") is None
    shown = store.get_run(run.id)  # the digest is compared, never shown
    assert "credential_sha256" not in shown.to_dict()
    assert token_digest("later") not in repr(shown)


def test_a_claim_without_a_credential_records_none(store):
    store.enqueue(NewTask(role="coder", title="a"), 1000.0)
    claimed = store.claim(ClaimRequest("n1", 1000.0, LEASE))
    assert claimed.credential is None
    assert store.run_of_credential("") is None
