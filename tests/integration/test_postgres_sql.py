"""The PostgreSQL SQL (store/sql/postgres/) against a real server, beside the SQLite SQL it ports.

Until the PostgreSQL store exists, this proves the SQL by itself: the migrations apply, the
tables have SQLite's columns in SQLite's order (records are built from rows by column name),
every named block exists in both dialects, and each block, prepared on the server and run on
the same seeded data in both databases, returns the same columns and the same rows.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from taskherd.store.sql_task_lists import trigram_query
from taskherd.store.sqlfile import migrations, queries
from tests.pg import PgServer

try:
    import psycopg
except ImportError:  # pg_server then skips these tests, or fails them under CI, saying why
    psycopg = None

# PostgreSQL checkpoints by itself, and indexes each task's text as it is added (SQLite's
# indexer takes the newest tasks into its index in passes).
SQLITE_ONLY = {"wal_checkpoint", "text_index_upto", "index_task_text", "move_text_mark",
               "text_index_waiting"}
# PostgreSQL's full-text indexes, which SQLite keeps as an FTS5 virtual table instead.
FULL_TEXT_INDEXES = {"memories_fts_document", "tasks_fts_trigrams"}
# Locks PostgreSQL takes, which return nothing; SQLite's transaction holds the whole database
# already, and its block of the same name only reads.
LOCKS = {"lock_runs_for_rollup"}
# The two halves of a search: SQLite's index holds the seeded tasks up to its mark, and the
# tail the rest (PostgreSQL's index holds them all, its tail none). Each half runs in both
# dialects; the wholes built of them (search_tasks_*, count_searched_tasks) answer alike.
SEARCH_HALVES = {"tasks_with_text", "searched_tasks", "tasks_not_indexed", "searched_tail"}
# Blocks that return the new row in PostgreSQL only (psycopg has no lastrowid; an enqueue
# answers with the row): their rows there count what SQLite's rowcount counts.
RETURNS_ROW_IN_POSTGRES_ONLY = {"insert_task"}
PG = queries("postgres")
LITE = queries("sqlite")
NOW = 1_700_000_000.0
# `:name` but not the `::type` of a cast, nor a `12:30` inside a literal.
PARAMETER = re.compile(r"(?<![:\w]):(\w+)")
# psycopg's named placeholder, into which the store's loader rewrites `:name` for PostgreSQL.
PLACEHOLDER = re.compile(r"%\((\w+)\)s")
# Parameters tested for NULL or defaulted by coalesce(): each block using one also runs with
# all of them None, because PostgreSQL types an untyped NULL parameter differently.
NULLABLE = re.compile(r"(?::(\w+)|%\((\w+)\)s)(?:::[\w ]+?)? IS NULL|coalesce\(:(\w+)"
                      r"|CAST\((?::(\w+)|%\((\w+)\)s) AS [\w ]+\) IS NULL")


def to_psycopg(sql: str) -> str:
    """`:name` → `%(name)s` (psycopg's named placeholder), a literal `%` doubled; SQL the
    loader already rewrote is left as it is."""
    if PLACEHOLDER.search(sql):
        return sql
    return PARAMETER.sub(r"%(\1)s", sql.replace("%", "%%"))


def parameters_of(sql: str) -> list[str]:
    return sorted(set(PARAMETER.findall(sql)) | set(PLACEHOLDER.findall(sql)))


def task(**fields: Any) -> dict[str, Any]:
    return {
        "role": "coder", "title": "a task", "prompt": "do it", "priority": 2, "state": "ready",
        "pool": None, "dedup_key": None, "review": 0, "max_attempts": 3, "run_after": NOW,
        "parent_id": None, "meta": "{}", "now": NOW, "chain": None,
    } | fields


FIRE = {"job_id": 1, "job_name": "nightly", "scheduled_for": NOW, "now": NOW, "kind": "schedule",
        "retry_of": None, "retry_count": 0, "variant": None, "error": None, "finished_at": None}
JOB_STATE = {"next_run_at": NOW + 60, "schedule_at": NOW + 60, "backoff_until": None,
             "failures": 0, "variant_cursor": 0, "queued": 1, "run_now_at": None,
             "retry_at": None, "retry_of": None, "retry_count": 0, "enabled": 1}

MESSAGE = {"sender": "@person", "sender_role": None, "sender_run_id": None,
           "recipient": "qa", "kind": "text", "priority": 0, "body": "hello", "reply_to": None,
           "thread_id": None, "now": NOW, "expires_at": NOW + 600}

# The same story written into both databases with the named blocks themselves:
# task 1 (dedup key 'nightly'), its child task 2 (pool gpu), task 3 (qa, P0) claimed and
# running as run 1, task 4 cancelled; a cooldown; job 'nightly' with an open fire of task 3,
# a held (queued) fire, an open fire of the cancelled task 4 and a finished fire.
SEED: list[tuple[str, dict[str, Any]]] = [
    ("insert_task", task(title="parent", dedup_key="nightly")),
    ("insert_task", task(title="child", parent_id=1, pool="gpu")),
    ("insert_task", task(title="review it", role="qa", priority=0)),
    ("claim_next", {"node": "node-a", "lease_until": NOW + 60, "now": NOW, "roles": None,
                    "full_pools": None}),
    ("insert_run", {"task_id": 3, "node": "node-a", "role": "qa", "runtime": "command",
                    "now": NOW, "pool": "gpu", "credential_sha256": "cd34" * 16}),
    ("note_role_claim", {"role": "qa", "node": "node-a", "now": NOW}),
    ("mark_run_spawned", {"run_id": 1, "pid": 4242, "pid_started_at": NOW - 1.5,
                          "log_path": "/tmp/run-1.log", "now": NOW}),
    ("mark_task_running", {"task_id": 3, "node": "node-a", "lease_until": NOW + 60, "now": NOW}),
    ("insert_task", task(title="to cancel")),
    ("move_task", {"task_id": 4, "state": "cancelled", "from_state": "ready", "reason": "no",
                   "reset_counts": False, "now": NOW}),
    ("set_cooldown", {"runtime": "claude", "until": NOW + 300, "reason": "429", "now": NOW,
                      "span": None, "down_since": None}),
    ("insert_memory", {"scope": "qa", "section": None, "text": "hello from the memory",
                       "source": "person", "now": NOW, "embedding": "[1.0, 0.0]",
                       "embedding_model": "m"}),
    ("add_alias", {"name": "ops", "channel": "file", "target": "/tmp/ops.jsonl",
                   "format": "json", "description": None, "now": NOW}),
    ("insert_delivery", {"alias": "ops", "event": "completed", "task_id": 4,
                         "payload": "{}", "now": NOW}),
    ("insert_message", MESSAGE),
    ("insert_message", MESSAGE | {"recipient": "task:3", "priority": 2, "body": "urgent"}),
    ("insert_job", {"name": "nightly", "template": '{"role": "coder"}',
                    "trigger_spec": '{"every": 60}', "timezone": "UTC", "overlap": "queue",
                    "missed_fire": "once", "max_retries": 1, "enabled": 1, "source": "config",
                    "delete_after_run": 0, "next_run_at": NOW + 60, "schedule_at": NOW + 60,
                    "now": NOW}),
    ("write_job_state", JOB_STATE | {"id": 1, "version": 0, "now": NOW}),
    ("insert_job_fire", FIRE | {"status": "open", "task_id": 3}),
    ("insert_job_fire", FIRE | {"status": "queued", "task_id": None}),
    ("insert_job_fire", FIRE | {"status": "open", "task_id": 4, "variant": 2}),
    ("insert_job_fire", FIRE | {"status": "ok", "task_id": 1, "finished_at": NOW}),
]

# Plausible values for every parameter, aimed at the seeded rows so most blocks find something.
PARAMS: dict[str, Any] = task(title="another", now=NOW + 10) | JOB_STATE | FIRE | {
    "now": NOW + 10, "id": 1, "limit": 10, "node": "node-a", "lease_until": NOW + 70,
    "renew_before": NOW + 50, "batch": 100, "rows": json.dumps([task(title="batched")]),
    "roles": '["coder", "qa"]', "full_pools": '["gpu"]', "task_id": 3, "run_id": 1,
    "runtime": "claude", "since": NOW - 3600, "pid": 4243, "pid_started_at": NOW,
    "stale_before": NOW - 400,
    "log_path": "/tmp/run.log", "progress": "halfway", "outcome": "succeeded", "exit_code": 0,
    "summary": "done", "error": "boom", "cost_usd": 0.25, "input_tokens": 1000,
    "output_tokens": 200, "turns": 3, "session_id": "s-1", "strike": 1, "rescue": 0,
    "rate_limit": 0, "last_error": "exit 1", "error_tail": "tail", "reason": "why",
    "from_state": "running", "reset_counts": True, "before": NOW + 1000, "report": "done",
    "until": NOW + 100, "name": "nightly", "template": '{"role": "qa"}',
    "trigger_spec": '{"every": 120}', "timezone": "Europe/Paris", "overlap": "skip",
    "missed_fire": "all", "max_retries": 2, "delete_after_run": 0,
    "version": 1, "expected": NOW + 60, "job_id": 1, "status": "open", "variant": 1,
    "duration": 1.5, "kind": "run_now", "host": "box", "lease": 60.0, "running": 2,
    "token_sha256": "ab12" * 16, "credential_sha256": None, "week_from": NOW - 7 * 86400,
    "day_from": NOW - 3600,
    "through": NOW, "tasks_through": NOW - 60, "runs_through": 0,
    "day_start": NOW - 3600, "month_start": NOW - 30 * 86400, "repo": "/srv/app",
    "base": "main", "branch": "taskherd/task-3", "path": "/srv/worktrees/task-3",
    "merge_mode": "merge-commit", "merged_commit": None, "conflicts": '["a.txt"]',
    "starts": f"[{NOW - 86400}, {NOW}]", "span": 120.0, "down_since": None,
    "liveness": "waiting_input", "note": "Continue? [y/N]",
    "rate_per_minute": 30, "before_id": 3,
    "sender": "task:3", "sender_role": "qa", "sender_run_id": 1, "recipient": "qa",
    "body": "a message", "reply_to": 1, "thread_id": 1, "expires_at": NOW + 60,
    "task_address": "task:3", "also": "task:3", "root": 1, "role": "qa",
    "capabilities": '["web"]', "description": "an outside agent",
    "scope": "qa", "shared": "@shared", "section": "Learnings", "text": "hello again",
    "source": "agent", "embedding": "[0.5, 0.5]", "embedding_model": "m", "query": "hello",
    "channel": "webhook", "target": "http://127.0.0.1:9/hook", "format": "slack",
    "alias": "ops", "event": "completed", "payload": '{"event": "completed"}', "attempts": 0,
    "retry_at": NOW + 30,
    "root_id": 1, "gate_id": 1, "passed": 1,
    "pool": "gpu", "role_node": None, "pool_a": "gpu", "pool_a_node": None, "pool_b": None,
    "pool_b_node": "node-a", "tags": '["gpu"]', "timeout": 15.0, "by": "node-b",
    "request_id": "3f1c9a", "made": '{"task_ids": [3]}',
    "job": "nightly", "pattern": "%review%", "text_id": 3, "only_id": None, "trigrams": None,
    "short_scan": 100_000,
    "finished_from": NOW - 60, "finished_to": NOW + 60, "offset": 0, "cap": 100, "window": 50,
    "start_ms": round((NOW - 3600) * 1000), "width_ms": 60_000, "first_id": 1, "at": NOW,
    "ready": 3, "chart": "cost", "label": "succeeded", "n": 2,
    "unpriced": 1,
}
# The task lists' filters one at a time, over the whole table and over each state's index.
_ONE_FILTER = dict.fromkeys(("state", "role", "priority", "node", "job", "pattern", "trigrams",
                             "text_id", "finished_from", "finished_to"))
TASK_LIST_VARIANTS = [
    _ONE_FILTER, _ONE_FILTER | {"state": "cancelled"}, _ONE_FILTER | {"state": "ready"},
    _ONE_FILTER | {"state": "running", "node": "node-a"}, _ONE_FILTER | {"job": "nightly"},
    _ONE_FILTER | {"pattern": "%to\\_cancel%"}, _ONE_FILTER | {"pattern": "%cancel%"},
    # Too short for a trigram: the newest tasks scanned (two of them), an id by its key.
    _ONE_FILTER | {"pattern": "%a%", "short_scan": 2},
    _ONE_FILTER | {"pattern": "%a%", "short_scan": 2, "state": "cancelled"},
    _ONE_FILTER | {"pattern": "%3%", "text_id": 3, "short_scan": 2},
    _ONE_FILTER | {"pattern": "%1%", "text_id": 1, "short_scan": 2, "state": "cancelled"},
    _ONE_FILTER | {"state": "cancelled", "finished_from": NOW - 1, "finished_to": NOW + 1},
    _ONE_FILTER | {"offset": 1, "priority": 2}, _ONE_FILTER | {"only_id": 3},
    _ONE_FILTER | {"only_id": 4, "state": "cancelled"},
    _ONE_FILTER | {"only_id": 3, "state": "running"},
]
# Through the trigram index: SQLite's FTS5 query beside the pattern PostgreSQL reads.
SEARCH_VARIANTS = [
    _ONE_FILTER | {"pattern": "%to cancel%", "trigrams": trigram_query("TO CANCEL")},
    _ONE_FILTER | {"pattern": "%cancel%", "trigrams": trigram_query("CANCEL")},
    _ONE_FILTER | {"pattern": "%cancel%", "trigrams": trigram_query("cancel"),
                   "state": "cancelled", "offset": 0, "limit": 1},
    _ONE_FILTER | {"pattern": "%task%", "trigrams": trigram_query("task"), "role": "qa"},
    _ONE_FILTER | {"pattern": "%task%", "trigrams": trigram_query("task"), "offset": 1},
    _ONE_FILTER | {"pattern": "%xyz%", "trigrams": trigram_query("xyz")},
]
# Per block, the parameter sets to run beyond PARAMS itself (each merged over PARAMS).
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "budget_spend": [{"role": None}],
    **{name: SEARCH_VARIANTS for name in ("tasks_with_text", "searched_tasks",
                                          "tasks_not_indexed", "searched_tail",
                                          "search_tasks_newest", "search_tasks_oldest",
                                          "count_searched_tasks")},
    "open_task_by_dedup_key": [{"dedup_key": "nightly"}],
    "settle_task": [{"state": "completed"}, {"state": "ready", "run_id": 0}],
    "move_task": [{"task_id": 2, "from_state": "ready", "state": "cancelled"},
                  {"task_id": 4, "from_state": "cancelled", "state": "ready"}],
    "claim_next": [{"roles": '["qa"]'}, {"full_pools": '[]', "now": NOW - 10}],
    "expired_leases": [{"now": NOW + 1000}],
    # Later than the seeded reset: it wins; and an outage's start kept.
    "set_cooldown": [{"until": NOW + 900}, {"down_since": NOW - 5}],
    "insert_job": [{"name": "hourly"}],
    "settle_job_fire": [{"status": "ok"}],
    "release_queued_fire": [{"status": "open", "task_id": 2}],
    "due_jobs": [{"now": NOW + 100}],
    "list_jobs": [{"source": "cli"}],
    "list_job_fires": [{"status": "queued", "job_name": "nightly"}],
    "mark_run_spawned": [{"run_id": 2}],
    "insert_tasks": [{"rows": json.dumps([task(title="a child", parent_id=2, pool="gpu"),
                                          task(title="twice", dedup_key="fresh"),
                                          task(title="twice again", dedup_key="fresh"),
                                          task(title="open already", dedup_key="nightly")])}],
    "insert_task": [{"dedup_key": "nightly"}, {"dedup_key": "fresh"},
                    {"parent_id": 2, "chain": '[{"role":"qa","title":"QA","on":"success"}]'}],
    "open_descendants": [{"task_id": 1}],
    "tree_of_root": [{"root_id": 2}],
    "reject_task": [{"state": "blocked"}],
    "record_worktree": [{"pool": "git-main"}, {"pool": "git-main", "merge_mode": "rebase"}],
    "hold_merge_pool": [{"pool": "git-main"}],
    "set_worktree_state": [{"state": "merged", "merged_commit": "ab" * 20}],
    "claim_candidate": [{"roles": '["qa"]', "now": NOW - 10}, {"full_pools": None}],
    "claim_task": [{"id": 2}],
    "limit_usage": [{"role": "qa", "role_node": "node-a", "now": NOW - 10},
                    {"pool_a": None, "runtime": None}],
    "silent_nodes": [{"now": NOW + 1000, "node": "node-b"}],
    **{name: TASK_LIST_VARIANTS for name in ("filter_tasks_newest", "filter_tasks_oldest",
                                             "filter_tasks_priority", "count_filtered_tasks")},
}


# -- the two databases --------------------------------------------------------------------


def migrate_sqlite() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    for migration in migrations("sqlite"):
        for statement in migration.statements():
            db.execute(statement)
    return db


def migrate_postgres(url: str) -> Any:
    conn = psycopg.connect(url, autocommit=True)
    for migration in migrations("postgres"):
        with conn.transaction():
            for statement in migration.statements():
                conn.execute(statement)
    return conn


# A constraint refusing a write is a result too: both databases must refuse it alike.
SQLITE_REFUSALS = {"UNIQUE": "unique", "CHECK": "check", "FOREIGN KEY": "foreign key",
                   "NOT NULL": "not null"}
POSTGRES_REFUSALS = {"UniqueViolation": "unique", "CheckViolation": "check",
                     "ForeignKeyViolation": "foreign key", "NotNullViolation": "not null"}


def run_sqlite(db: sqlite3.Connection, sql: str, params: Mapping[str, Any]) -> tuple:
    try:
        cursor = db.execute(sql, dict(params))
    except sqlite3.IntegrityError as error:
        kinds = [kind for text, kind in SQLITE_REFUSALS.items() if str(error).startswith(text)]
        return ("refused",), kinds
    if cursor.description is None:
        return (), cursor.rowcount
    return [name for name, *_ in cursor.description], [tuple(row) for row in cursor.fetchall()]


def run_postgres(conn: Any, sql: str, params: Mapping[str, Any]) -> tuple:
    # prepare=True: a server-side PREPARE, so parameter types are resolved as the store's
    # repeated statements will be.
    try:
        cursor = conn.execute(to_psycopg(sql), dict(params), prepare=True)
    except psycopg.errors.IntegrityError as error:
        return ("refused",), [POSTGRES_REFUSALS.get(type(error).__name__, type(error).__name__)]
    if cursor.description is None:
        return (), cursor.rowcount
    return [column.name for column in cursor.description], [tuple(r) for r in cursor.fetchall()]


def as_sqlite_would(name: str, result: tuple) -> tuple:
    names, rows = result
    if name in RETURNS_ROW_IN_POSTGRES_ONLY and "id" in names:
        return (), len(rows)
    return result


def block_params(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    wanted = parameters_of(LITE[name]) + parameters_of(PG[name])
    missing = [p for p in wanted if p not in values]
    assert not missing, f"block {name}: give :{', :'.join(missing)} a value in PARAMS"
    return {p: values[p] for p in wanted}


def variants(name: str) -> list[dict[str, Any]]:
    runs = [PARAMS] + [PARAMS | extra for extra in VARIANTS.get(name, [])]
    nullable = {"".join(names) for names in NULLABLE.findall(LITE[name] + PG[name])}
    if nullable:
        runs.append(PARAMS | dict.fromkeys(nullable))
    return [block_params(name, values) for values in runs]


def same_columns(got: list[str], expected: list[str]) -> bool:
    # An unnamed expression is named after its text by SQLite (`min(next_run_at)`) and after
    # its function by PostgreSQL (`min`): callers read those by position, so only the count
    # of such columns must agree.
    return len(got) == len(expected) and all(
        mine == theirs for mine, theirs in zip(got, expected, strict=True) if theirs.isidentifier()
    )


@pytest.fixture(scope="module")
def seeded(pg_server: PgServer) -> Iterator[tuple[sqlite3.Connection, Any]]:
    """Both databases migrated and seeded alike, shared by the module's block tests, which
    each run inside a transaction rolled back afterwards."""
    name = pg_server.create_database()
    lite = migrate_sqlite()
    pg = migrate_postgres(pg_server.url(name))
    try:
        for block, params in SEED:
            got = as_sqlite_would(block, run_postgres(pg, PG[block], params))
            assert run_sqlite(lite, LITE[block], params) == got, (
                f"seeding with {block} differs between the dialects"
            )
        upto = lite.execute(LITE["text_index_upto"], {"most": 2}).fetchone()[0]
        lite.execute(LITE["index_task_text"], {"upto": upto})
        lite.execute(LITE["move_text_mark"], {"upto": upto})
        yield lite, pg
    finally:
        pg.close()
        lite.close()
        pg_server.drop_database(name)


def resync_identities(conn: Any) -> None:
    """A rolled-back insert still used up its identity value (sequences are not transactional):
    put each sequence back after the table's highest id, as SQLite's rowids are."""
    for table in ("tasks", "runs", "jobs", "job_fires"):
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
            f" coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
        )


# -- the tests ----------------------------------------------------------------------------


def test_every_block_exists_in_both_dialects() -> None:
    assert sorted(set(LITE) - SQLITE_ONLY) == sorted(PG)


def test_migrations_have_the_same_numbers_and_names() -> None:
    assert [(m.version, m.name) for m in migrations("postgres")] == [
        (m.version, m.name) for m in migrations("sqlite")
    ]


def test_tables_have_sqlites_columns_in_sqlites_order(pg_url: str) -> None:
    lite = migrate_sqlite()
    tables = [row[0] for row in lite.execute(  # and views, which PostgreSQL lists as tables
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        " AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name")]
    # Full-text search is a virtual table (and its shadow tables) in SQLite, a table of
    # tsvectors with a GIN index in PostgreSQL: the same search, not the same tables.
    virtual = [row[0] for row in lite.execute(
        "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")]
    tables = [t for t in tables if not any(t == v or t.startswith(f"{v}_") for v in virtual)]
    lite_columns = {t: [row[1] for row in lite.execute(f"PRAGMA table_info({t})")] for t in tables}
    lite_indexes = sorted(row[0] for row in lite.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"))

    with migrate_postgres(pg_url) as pg:
        pg_columns: dict[str, list[str]] = {}
        for table, column in pg.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        ):
            pg_columns.setdefault(table, []).append(column)
        # The indexes a migration created by name (not those behind PRIMARY KEY or UNIQUE).
        pg_indexes = sorted(row[0] for row in pg.execute(
            "SELECT indexrelid::regclass::text FROM pg_index"
            " JOIN pg_class ON pg_class.oid = pg_index.indrelid"
            " WHERE pg_class.relnamespace = 'public'::regnamespace"
            " AND indexrelid NOT IN (SELECT conindid FROM pg_constraint)"))
    # PostgreSQL keeps the tsvectors in a table of the virtual table's name.
    assert {t: c for t, c in pg_columns.items() if t not in virtual} == lite_columns
    assert [i for i in pg_indexes if i not in FULL_TEXT_INDEXES] == lite_indexes


@pytest.mark.parametrize("name", sorted(PG))
def test_block_prepares_and_runs_like_sqlite(seeded, name: str) -> None:
    lite, pg = seeded
    for params in variants(name):
        lite.execute("BEGIN")
        try:
            expected = run_sqlite(lite, LITE[name], params)
        finally:
            lite.execute("ROLLBACK")
        with pg.transaction(force_rollback=True):
            resync_identities(pg)
            got = as_sqlite_would(name, run_postgres(pg, PG[name], params))
        names, rows = got
        if name in LOCKS:
            assert names == (), got
            continue
        expected_names, expected_rows = expected
        assert same_columns(names, expected_names), (names, expected_names, params)
        if name in SEARCH_HALVES:
            continue
        assert rows == expected_rows, params


def test_claims_from_two_connections_skip_each_others_locked_rows(pg_url: str) -> None:
    """Two nodes claiming at once get different tasks, and neither waits for the other."""
    migrate_postgres(pg_url).close()
    claim = to_psycopg(PG["claim_next"])
    params = {"node": "node-a", "lease_until": NOW + 60, "now": NOW, "roles": None,
              "full_pools": None}
    with psycopg.connect(pg_url) as first, psycopg.connect(pg_url) as second:
        for title in ("one", "two"):
            first.execute(to_psycopg(PG["insert_task"]), task(title=title)).fetchall()
        first.commit()
        # A claim that waited for the first's lock would fail here instead of hanging.
        second.execute("SET lock_timeout = '2s'")
        got_first = first.execute(claim, params).fetchone()  # its transaction stays open
        got_second = second.execute(claim, params | {"node": "node-b"}).fetchone()
        second.commit()
        first.commit()
        assert got_first is not None and got_second is not None
        assert {got_first[0], got_second[0]} == {1, 2}
        assert second.execute(claim, params).fetchone() is None  # both taken, none twice


def test_concurrent_claims_never_claim_a_task_twice(pg_url: str) -> None:
    migrate_postgres(pg_url).close()
    with psycopg.connect(pg_url) as setup, setup.cursor() as cursor:
        cursor.executemany(to_psycopg(PG["insert_task"]),
                           [task(title=f"task {n}") for n in range(200)])
    claim = to_psycopg(PG["claim_next"])
    claimed: dict[str, list[int]] = {}

    def node(name: str) -> None:
        mine = claimed.setdefault(name, [])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            while (row := conn.execute(claim, {"node": name, "lease_until": NOW + 60, "now": NOW,
                                               "roles": None, "full_pools": None}).fetchone()):
                mine.append(row[0])

    threads = [threading.Thread(target=node, args=(f"node-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every_claim = [task_id for ids in claimed.values() for task_id in ids]
    assert sorted(every_claim) == list(range(1, 201))


def test_memories_written_before_their_search_table_are_found_after_it(pg_url: str) -> None:
    """The migration that keeps PostgreSQL's memory tsvectors fills them for the entries
    already there: an upgrade loses no long-term memory from search."""
    every = migrations("postgres")
    index = next(i for i, m in enumerate(every) if "memory_search" in m.name)
    conn = psycopg.connect(pg_url, autocommit=True)
    try:
        for migration in every[:index]:
            with conn.transaction():
                for statement in migration.statements():
                    conn.execute(statement)
        conn.execute("INSERT INTO memories (scope, text, source, created_at) VALUES "
                     "('qa', 'the staging database resets nightly', 'person', 1)")
        for migration in every[index:]:
            with conn.transaction():
                for statement in migration.statements():
                    conn.execute(statement)
        found = conn.execute(to_psycopg(PG["search_memories"]),
                             {"query": "databases", "scope": "qa", "shared": "@shared",
                              "limit": 5}).fetchall()
        assert [row[3] for row in found] == ["the staging database resets nightly"]
    finally:
        conn.close()
