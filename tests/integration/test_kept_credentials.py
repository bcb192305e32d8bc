"""SQLite: the store keeps the credentials it has checked (the API checks one a request), yet
a run's end, by another process's connection or by its own, counts at the very next check."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store

NOW = 1_700_000_000.0


@pytest.fixture
def stores(tmp_path):
    """The API's connection and the daemon's, on one file."""
    api = open_store(str(tmp_path / "q.db"), durability="normal")
    daemon = open_store(str(tmp_path / "q.db"), durability="normal")
    yield api, daemon
    api.close()
    daemon.close()


def running(store, title: str) -> tuple[int, str]:
    store.enqueue(NewTask(role="coder", title=title), NOW)
    claim = store.claim(ClaimRequest("n1", NOW, 600, roles=["coder"]))
    store.mark_spawned(claim.run.id, NOW, 600, pid=None, pid_started_at=None, log_path=None)
    token = f"run-token-{title}"
    store.issue_run_credential(claim.run.id, token, NOW)
    return claim.run.id, token


@pytest.mark.parametrize("ender", ["daemon", "api"])
def test_a_runs_credential_dies_with_its_run_at_the_next_check(stores, ender):
    api, daemon = stores
    run_id, token = running(daemon, "mine")
    other_id, other = running(daemon, "other")
    for _ in range(3):  # checked, kept, and heartbeats beside it change nothing
        assert api.run_of_credential(token).id == run_id
        api.heartbeat(run_id, NOW + 1, 600)
    assert api.run_of_credential(other).id == other_id
    ending = daemon if ender == "daemon" else api
    ending.finish_run(run_id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), NOW + 2)
    assert api.run_of_credential(token) is None
    assert api.run_of_credential(other).id == other_id


def test_a_revoke_committed_before_a_groups_write_counts_inside_the_group(stores):
    """The API's grouped calls read the database's change count once the group holds the
    write lock (nobody else commits then), not before: a revoke that came between the
    group's first check and its first write still counts at the next call."""
    from taskherd.store.sql_credentials import token_digest

    api, daemon = stores
    digest = token_digest("intake-secret")
    daemon.add_api_token("intake", "intake", digest, NOW)
    with api.writes_grouped():
        assert api.live_api_token(digest, NOW) is not None  # checked, and kept
        daemon.revoke_api_token("intake", NOW, keep_an_admin=False)
        api.enqueue(NewTask(role="coder", title="first write"), NOW)  # takes the lock
        assert api.live_api_token(digest, NOW) is None
        assert api.live_api_token(digest, NOW) is None
    assert api.live_api_token(digest, NOW) is None
