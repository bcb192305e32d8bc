"""On PostgreSQL a claim's own transaction does not wait for the disk (claim_settings), but a
run's end does: a transaction that ends a run and claims the node's next task
(`finish_run_and_claim`) commits durably. What it writes is the store contract's
(tests/contract/test_finish_and_claim_contract.py)."""

from __future__ import annotations

import psycopg

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store.postgres import PostgresStore

NOW = 1_700_000_000.0
LEASE = 60.0
# Each write of `runs` notes its transaction's synchronous_commit, as the server sees it.
PROBE = """
CREATE TABLE commit_probe (run_id bigint, ended boolean, synchronous_commit text);
CREATE FUNCTION note_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    INSERT INTO commit_probe
    VALUES (new.id, new.ended_at IS NOT NULL, current_setting('synchronous_commit'));
    RETURN new;
END $$;
CREATE TRIGGER note_commit AFTER INSERT OR UPDATE OF ended_at ON runs
FOR EACH ROW EXECUTE FUNCTION note_commit();
"""


def test_a_runs_end_with_the_next_claim_commits_durably(pg_url):
    store = PostgresStore(pg_url, durability="full")
    try:
        store.enqueue_many([NewTask(role="coder", title=f"t{i}") for i in range(2)], NOW)
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute(PROBE)
        first = store.claim(ClaimRequest("n1", NOW, LEASE))
        _, attempt = store.finish_run_and_claim(first.run.id, RunResult(Outcome.SUCCEEDED),
                                                RetryPolicy(), NOW + 1,
                                                ClaimRequest("n1", NOW + 1, LEASE))
        with psycopg.connect(pg_url, autocommit=True) as db:
            noted = db.execute("SELECT run_id, ended, synchronous_commit FROM commit_probe"
                               " ORDER BY run_id, ended").fetchall()
    finally:
        store.close()
    second = attempt.claim.run.id
    assert noted == [(first.run.id, False, "off"),  # the claim alone: no wait for the disk
                     (first.run.id, True, "on"), (second, False, "on")]
