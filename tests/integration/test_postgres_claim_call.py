"""On PostgreSQL a claim within limits is one call of a function the store creates in its
connection's temporary schema: made again on a new connection after a loss, and replaced by
the claim's steps where the database role may not create temporary objects. The limits'
behaviour itself is the store contract's (tests/contract/test_limits_contract.py)."""

from __future__ import annotations

import logging

import psycopg
import pytest

from taskherd.config import load_config
from taskherd.doctor import OK, WARN, check_database
from taskherd.model import InboxLimit, NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, RoleLimit
from taskherd.store import StoreUnavailable
from taskherd.store.postgres import PostgresStore

NOW = 1_700_000_000.0
LEASE = 60.0
ONE_DEPLOYER = ClaimLimits({"deployer": RoleLimit(max_concurrent=1)})


def claim(store, node):
    return store.claim(ClaimRequest(node, NOW, LEASE, roles=["deployer"], limits=ONE_DEPLOYER,
                       inbox=InboxLimit()))


def claim_functions(url: str) -> int:
    """The claim functions of every session on the server (pg_proc lists other sessions'
    temporary functions too)."""
    with psycopg.connect(url, autocommit=True) as admin:
        return admin.execute("SELECT count(*) FROM pg_proc"
                             " WHERE proname = 'taskherd_claim_within'").fetchone()[0]


def cut_connections(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND pid <> pg_backend_pid()")


def test_a_claim_within_limits_is_one_call_of_the_connections_own_function(pg_url):
    with PostgresStore(pg_url, durability="normal") as store:
        store.counts()
        assert claim_functions(pg_url) == 0  # made by the first call that needs one only
        store.enqueue(NewTask(role="deployer", title="deploy"), NOW)
        assert claim_functions(pg_url) == 1
        assert claim(store, "node-a").task.title == "deploy"
        assert claim_functions(pg_url) == 1


def test_after_a_lost_connection_the_function_is_made_again_and_limits_still_hold(pg_url):
    with PostgresStore(pg_url, durability="normal") as store, \
            PostgresStore(pg_url, durability="normal") as other:
        for title in ("deploy 1", "deploy 2"):
            store.enqueue(NewTask(role="deployer", title=title), NOW)
        assert claim(store, "node-a").task.title == "deploy 1"
        cut_connections(pg_url)
        with pytest.raises(StoreUnavailable):
            store.counts()
        with pytest.raises(StoreUnavailable):
            other.counts()
        assert claim(other, "node-b") is None  # deploy 1's run still holds the one place
        [run] = store.open_runs()
        store.finish_run(run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), NOW)
        assert claim(other, "node-b").task.title == "deploy 2"


def test_a_role_that_may_not_create_temporary_objects_claims_in_steps(pg_server, pg_url,
                                                                     caplog):
    PostgresStore(pg_url, durability="normal").close()  # migrated by the database's owner
    url = pg_server.url_without_temporary(pg_url)
    with PostgresStore(url, durability="normal") as store, \
            caplog.at_level(logging.WARNING, logger="taskherd.store.postgres"):
        for title in ("deploy 1", "deploy 2"):
            store.enqueue(NewTask(role="deployer", title=title), NOW)
        first = claim(store, "node-a")
        assert first.task.title == "deploy 1"
        assert claim(store, "node-b") is None
        # Its run's end takes the steps too (finish_run_procedure is not there either).
        finished = store.finish_run(first.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(),
                                    NOW)
        assert (finished.moved, finished.task.state.value) == (True, "completed")
        assert claim(store, "node-b").task.title == "deploy 2"
        assert claim_functions(pg_url) == 0
    [warning] = [record.getMessage() for record in caplog.records]
    assert "cannot create a temporary function" in warning
    assert "permission denied" in warning


def test_doctor_warns_when_the_role_may_not_create_the_function(pg_server, pg_url, tmp_path):
    def checked(url: str):
        (tmp_path / "taskherd.toml").write_text(f'[daemon]\ndatabase = "{url}"\n')
        return check_database(load_config(tmp_path / "taskherd.toml"))

    assert checked(pg_url).status == OK
    no_temp = checked(pg_server.url_without_temporary(pg_url))
    assert no_temp.status == WARN
    assert "role taskherd_no_temp may not create temporary objects" in no_temp.why
    assert "GRANT TEMPORARY ON DATABASE" in no_temp.why
