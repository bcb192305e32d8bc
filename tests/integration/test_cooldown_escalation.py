"""A limit whose text gives no reset time pauses its runtime for a minute, then two, four…
while limits repeat, up to the role's rate_limit_cooldown; a quiet spell starts over.
Real agent processes, on both stores."""

from __future__ import annotations

import asyncio
from pathlib import Path

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome
from taskherd.policy.admission import ClaimRequest
from taskherd.runtimes.ratelimit import guessed_cooldown
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store
from tests.fleet import PYTHON, agent, until

LIMITED = """
    import sys
    print("Error: 429 Too Many Requests")
    sys.exit(1)
"""
START = 1_800_000_000.0


def test_cooldowns_without_a_reset_time_double_while_limits_repeat(tmp_path: Path, database):
    program = agent(tmp_path, "agent", LIMITED)
    config = parse_config({
        "daemon": {"database": database, "data_dir": "data", "timezone": "UTC"},
        "roles": {"worker": {"command": [PYTHON, "-S", program],
                             "rate_limit_cooldown": "3m"}},
    }, base_dir=tmp_path)
    store = open_store(database, durability="normal")
    clock = [START]
    supervisor = Supervisor(config, store, lambda: clock[0])

    async def limited_run_at(now: float):
        clock[0] = now
        store.enqueue(NewTask(role="worker", title=f"at {now}"), now)
        claim = store.claim(ClaimRequest("n1", now, 60.0))
        supervisor.start(claim, now)
        run = await until(lambda: (r := store.get_run(claim.run.id)).ended_at and r)
        assert run.outcome is Outcome.RATE_LIMITED
        return store.cooldown_of("command")

    async def scenario():
        spans, now = [], START
        for _ in range(4):
            cooldown = await limited_run_at(now)
            spans.append((cooldown.until - now, cooldown.span))
            now = cooldown.until + 5  # limited again soon after it lifted
        quiet = await limited_run_at(now + 3600)
        return spans, quiet

    try:
        spans, quiet = asyncio.run(scenario())
    finally:
        store.close()
    assert spans == [(60, 60), (120, 120), (180, 180), (180, 180)]
    assert quiet.span == 60  # an hour without limits: a new episode starts short


def test_guessed_cooldown_steps():
    assert guessed_cooldown(None, None, START, 3600) == 60
    assert guessed_cooldown(START - 10, 60, START, 3600) == 120  # lifted 10 s ago: repeat
    assert guessed_cooldown(START + 30, 60, START, 3600) == 60  # still on: the same episode
    assert guessed_cooldown(START - 1000, 60, START, 3600) == 60  # quiet for long: start over
    assert guessed_cooldown(START - 10, 3000, START, 3600) == 3600  # capped
    assert guessed_cooldown(START - 10, None, START, 3600) == 60  # last one had a known reset
    assert guessed_cooldown(None, None, START, 30) == 30  # a cap below a minute wins
