"""Long-term memory benchmark: search over 100,000 entries on SQLite and PostgreSQL, hybrid
search, and relevance.

    python bench/memory.py        # --entries 100000 --queries 300 --hybrid-entries 10000

Speed: --entries entries of one role (sentences of a 3,000-word vocabulary, word frequency
falling as 1/rank, as in text) in a SQLite store and in a PostgreSQL store (a throwaway
server, tests/pg.py; --no-postgres skips it); --queries searches of two or three words drawn
the same way, each `ops.memory.search(limit=5)` as `taskherd memory search` runs it. Beside
it on SQLite, query by query, the peer: the same FTS5 index ranking every match with bm25
(taskherd ranks the newest 1,000 matches of an unselective search). Target: full-text p99
≤ 20 ms on each store. Hybrid: --hybrid-entries entries stored with vectors of the scripted
endpoint below, --hybrid-queries searches, each embedding its question over HTTP; printed
for information (the exit status is the full-text target's).

Relevance: a small labelled set written for this benchmark (RELEVANT below: 16 questions an
agent asks before acting, each with the one entry that answers it, among 48 entries), recall@5
of full-text search alone and of hybrid search with the scripted embeddings endpoint of
tests/e2e/fake_embeddings.py on 127.0.0.1. That endpoint's "model" is a declared synonym
table, so the hybrid figure shows the ranking code working as designed on paraphrased
questions, not the quality of any real embedding model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from taskherd.config import parse_config
from taskherd.ops import Queue
from taskherd.ops import memory as memory_ops
from taskherd.store.memory import NewMemory, query_words
from taskherd.store.postgres import PostgresStore
from taskherd.store.sqlite import SQLiteStore
from tests.e2e.fake_embeddings import DIMENSIONS, FakeEmbeddings
from tests.pg import start_server, stop_server

TARGET_P99_MS = 20.0
VOCABULARY = 3000

# (the entry that answers, the question asked in other words)
RELEVANT = [
    ("Never deploy on Friday afternoons: rollbacks need two people on call",
     "can I deploy the release late in the week"),
    ("The staging database is reset every night at 02:00 UTC", "when is the test DB wiped"),
    ("Run the migrations before restarting the API servers",
     "order of migrations and reboot of the API"),
    ("Reddit bans accounts that post the same link twice in an hour",
     "why was our forum profile suspended"),
    ("Customers on the legacy plan are billed in euros", "which currency do old subscribers pay"),
    ("The design team rejected dark gradients on the landing page",
     "was a shadowy colour fade already rejected for the homepage"),
    ("Use the read replica for analytics queries, never the primary",
     "where should reporting SQL run"),
    ("Bluesky rate-limits posting to 30 posts per five minutes",
     "how fast may we publish posts to Bluesky"),
    ("The CEO wants weekly summaries under 200 words", "how long should the boss's digest be"),
    ("Security scans must exclude the vendored node_modules folder",
     "which directory to skip in the security audit"),
    ("Pytest flakes when the Redis cache is cold; warm it first",
     "tests fail randomly when the cache is empty"),
    ("Invoices are generated on the first business day of the month",
     "when do bills go out"),
    ("Support replies must be sent within four hours on weekdays",
     "response time promise for support tickets"),
    ("The mobile app crashes on Android 9 when the camera is denied",
     "phone program dies without photo permission"),
    ("Marketing emails need an unsubscribe link by law", "legal requirement for newsletters"),
    ("Docker images are pushed to the internal registry, not Docker Hub",
     "where do Docker builds get uploaded"),
]
DISTRACTORS = [
    "The office coffee machine is cleaned on Mondays", "Team lunch is booked for Thursday",
    "The quarterly offsite is in Lisbon this year", "Use British spelling in blog posts",
    "Slack channels are archived after 90 days of silence", "The logo must keep its margins",
    "Interns start in September", "The wiki moved to the new domain",
    "Print jobs go to the second floor printer", "Badges must be worn in the lab",
    "The old VPN client is retired", "Holiday requests go through the HR portal",
    "Keyboards are replaced every three years", "The podcast is recorded on Tuesdays",
    "Parking spots are assigned by seniority", "The plant on the desk needs water on Fridays",
    "The support rota is posted on Sundays", "Conference talks need slides a week early",
    "The fire drill is every March", "Desk bookings open at midnight",
    "Expense receipts must be scanned", "The newsletter font is Inter",
    "Meeting rooms are named after rivers", "The fridge is emptied every Friday",
    "Laptops are encrypted at setup", "Guests sign in at the front desk",
    "The all-hands is on the first Monday", "Stand-ups last fifteen minutes",
    "Code freeze starts two days before a holiday", "The bike room code changes monthly",
    "Release notes go to the changelog", "Coffee beans come from a local roaster",
]
# The scripted model's synonym groups (about half the questions share a word with their
# answer; the others are paraphrases only meaning can match).
SYNONYMS = [
    {"deploy", "ship", "release"}, {"friday", "late", "week"}, {"staging", "test"},
    {"database", "db"}, {"reset", "wiped"}, {"night", "nightly"},
    {"migrations", "schema"}, {"restarting", "reboot"},
    {"reddit", "forum"}, {"bans", "suspended"}, {"accounts", "profile"},
    {"legacy", "old"}, {"billed", "pay"}, {"euros", "currency"}, {"customers", "subscribers"},
    {"rejected", "turned"}, {"dark", "shadowy"}, {"gradients", "fade"},
    {"landing", "homepage"}, {"analytics", "reporting"}, {"queries", "sql"},
    {"replica", "where"}, {"bluesky", "publish"}, {"posting", "posts", "fast"},
    {"ceo", "boss"}, {"summaries", "digest"}, {"words", "long"}, {"scans", "audit"},
    {"exclude", "skip"}, {"folder", "directory"}, {"pytest", "tests"}, {"flakes", "randomly"},
    {"cold", "start"}, {"invoices", "bills"}, {"generated", "go"}, {"month", "when"},
    {"support", "tickets"}, {"replies", "response"}, {"hours", "time"}, {"within", "promise"},
    {"mobile", "phone"}, {"app", "program"}, {"crashes", "dies"}, {"camera", "photo"},
    {"denied", "permission"}, {"emails", "newsletters"}, {"law", "legal"},
    {"unsubscribe", "requirement"}, {"docker", "container"}, {"images", "builds"},
    {"pushed", "uploaded"}, {"registry", "get"},
]


# The peer: the same FTS5 index and bm25, ranking every match (no window of the newest).
FULL_RANKING = """SELECT memories.* FROM memories_fts
JOIN memories ON memories.id = memories_fts.rowid
WHERE memories_fts MATCH :query AND (memories.scope = 'coder' OR memories.scope = '@shared')
ORDER BY bm25(memories_fts), memories.id DESC LIMIT 5"""


def words_of(rng: random.Random, count: int) -> list[str]:
    # Zipf-like: rank r drawn with weight 1/r.
    return [f"w{min(int(VOCABULARY ** rng.random()), VOCABULARY - 1)}" for _ in range(count)]


def fill(store: Any, entries: int, rng: random.Random,
         embeddings: FakeEmbeddings | None = None) -> None:
    for start in range(0, entries, 5000):
        batch = [NewMemory("coder", " ".join(words_of(rng, rng.randint(6, 20))), "agent")
                 for _ in range(start, min(start + 5000, entries))]
        if embeddings is not None:  # stored as `memory add` stores them, one vector each
            batch = [NewMemory(new.scope, new.text, new.source, None,
                               json.dumps(embeddings.vector(new.text)), embeddings.model)
                     for new in batch]
        store.add_memories(batch, time.time())


def timed(queue: Queue, searches: list[str]) -> list[float]:
    spent = []
    for text in searches:
        began = time.perf_counter()
        memory_ops.search(queue, "coder", text, limit=5)
        spent.append((time.perf_counter() - began) * 1000)
    return spent


def speed(store: Any, folder: Path, entries: int, queries: int,
          peer: bool) -> tuple[list[float], list[float]]:
    """taskherd's search (`ops.memory.search`, as `taskherd memory search` runs it), and on
    SQLite the peer beside it, query by query."""
    queue = Queue(parse_config({"roles": {"coder": {"command": ["true"]}}}, base_dir=folder),
                  store)
    rng = random.Random(7)
    fill(store, entries, rng)
    searches = [" ".join(words_of(rng, rng.randint(2, 3))) for _ in range(queries)]
    fts_ms, full_ms = [], []
    for text in searches:
        fts_ms += timed(queue, [text])
        if peer:
            began = time.perf_counter()
            query = store._text_query(query_words(text))
            store._conn.execute(FULL_RANKING, {"query": query}).fetchall()
            full_ms.append((time.perf_counter() - began) * 1000)
    return fts_ms, full_ms


def hybrid_speed(store: Any, folder: Path, entries: int, queries: int,
                 embeddings: FakeEmbeddings) -> list[float]:
    """Hybrid search (full text fused with vector similarity) over `entries` embedded
    entries; each search embeds its question at the scripted endpoint on 127.0.0.1."""
    raw: dict = {"roles": {"coder": {"command": ["true"]}},
                 "memory": {"embeddings": {"base_url": f"{embeddings.base_url}/v1",
                                           "model": embeddings.model}}}
    queue = Queue(parse_config(raw, base_dir=folder), store)
    rng = random.Random(11)
    fill(store, entries, rng, embeddings)
    return timed(queue, [" ".join(words_of(rng, rng.randint(2, 3))) for _ in range(queries)])


def recall(folder: Path, embeddings: FakeEmbeddings | None) -> float:
    name = "hybrid" if embeddings else "fts"
    raw: dict = {"roles": {"coder": {"command": ["true"]}}}
    if embeddings is not None:
        raw["memory"] = {"embeddings": {"base_url": f"{embeddings.base_url}/v1",
                                        "model": embeddings.model}}
    with Queue(parse_config(raw, base_dir=folder), SQLiteStore(folder / f"{name}.db")) as queue:
        ids = {}
        for text in [answer for answer, _ in RELEVANT] + DISTRACTORS:
            ids[text] = memory_ops.add(queue, "coder", text, time.time()).id
        hits = 0
        for answer, question in RELEVANT:
            found = [m.id for m in memory_ops.search(queue, "coder", question, limit=5)]
            hits += ids[answer] in found
    return hits / len(RELEVANT)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def line(name: str, values: list[float]) -> str:
    return (f"  {name:<40} p50 {statistics.median(values):8.3f} ms  "
            f"p99 {p99(values):8.3f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--hybrid-entries", type=int, default=10_000)
    parser.add_argument("--hybrid-queries", type=int, default=30)
    parser.add_argument("--no-postgres", action="store_true",
                        help="SQLite only (no PostgreSQL server binaries here)")
    args = parser.parse_args()
    figures: dict[str, list[float]] = {}
    server = None if args.no_postgres else start_server()
    try:
        with tempfile.TemporaryDirectory() as name, FakeEmbeddings(SYNONYMS) as embeddings:
            folder = Path(name)
            stores = {"SQLite": lambda n: SQLiteStore(folder / f"{n}.db", durability="normal")}
            if server is not None:
                stores["PostgreSQL"] = lambda n: PostgresStore(
                    server.url(server.create_database()), durability="normal")
            for dialect, opened in stores.items():
                with opened("speed-fts") as store:
                    fts_ms, full_ms = speed(store, folder, args.entries, args.queries,
                                            peer=dialect == "SQLite")
                figures[f"{dialect} full-text"] = fts_ms
                if full_ms:
                    figures[f"{dialect} peer: FTS5 ranking every match"] = full_ms
                with opened("speed-hybrid") as store:
                    figures[f"{dialect} hybrid"] = hybrid_speed(
                        store, folder, args.hybrid_entries, args.hybrid_queries, embeddings)
            fts_recall, hybrid_recall = recall(folder, None), recall(folder, embeddings)
    finally:
        if server is not None:
            stop_server(server)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"search over {args.entries} entries (hybrid: {args.hybrid_entries} embedded "
          f"entries, {DIMENSIONS} dimensions), {args.queries} queries, limit 5; "
          f"target p99 ≤ {TARGET_P99_MS} ms:")
    for name, values in figures.items():
        print(line(name, values))
    if "SQLite peer: FTS5 ranking every match" in figures:
        peer = p99(figures["SQLite peer: FTS5 ranking every match"])
        print(f"  ratio peer/taskherd p99 (SQLite full-text): "
              f"{peer / p99(figures['SQLite full-text']):.1f}")
    print(f"relevance, {len(RELEVANT)} labelled questions among "
          f"{len(RELEVANT) + len(DISTRACTORS)} entries: recall@5 full-text {fts_recall:.2f}, "
          f"hybrid (scripted embeddings) {hybrid_recall:.2f}")
    met = [p99(values) <= TARGET_P99_MS for name, values in figures.items()
           if name.endswith(" full-text")]
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
