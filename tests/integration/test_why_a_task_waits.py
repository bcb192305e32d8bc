"""Why a task waits is said once (taskherd/policy/waits.py) and every door says the same: the
daemon's log, `status`, `task show` and the dashboard's board and task page. The case an
operator met: a role at max_concurrent 2 on a node running 2 of 3, where the board said "a
free slot on a node" while the daemon said the role was full."""

from __future__ import annotations

import json
import re

from taskherd.config import parse_config
from taskherd.model import NewTask, TaskState
from taskherd.ops import Queue
from taskherd.ops.board import why_waiting
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits
from taskherd.store import open_store
from tests.api_server import served
from tests.fleet import PYTHON, Fleet, agent

# Runs until the test lets it go (a file appears): two of these hold role slow at its limit.
HOLD = """\
import os, time
while not os.path.exists({flag!r}):
    time.sleep(0.02)
"""

WHY = "role slow is at max_concurrent 2 (2 running)"


def test_a_role_at_its_max_concurrent_is_named_in_every_door(tmp_path):
    flag = tmp_path / "let-go"
    script = agent(tmp_path, "hold", HOLD.format(flag=str(flag)))
    fleet = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        durability = "normal"
        max_concurrent = 3

        [roles.slow]
        command = ["{PYTHON}", "{script}"]
        max_concurrent = 2
        """)
    try:
        fleet.up()
        held = [fleet.add(f"slow {n}", role="slow") for n in range(2)]
        fleet.wait_until(lambda: len(fleet.store.open_runs()) == 2, what="two slow runs")
        urgent = fleet.add("urgent", role="slow", priority=0)
        line = f"P0 task {urgent.id} (slow) waits: {WHY}"
        fleet.wait_until(lambda: line in fleet.daemon_log.read_text(), what="the P0 warning")

        assert line in fleet.cli("status").stdout
        [waiting] = json.loads(fleet.cli("status", "--json").stdout)["p0_waiting"]
        assert (waiting["task_id"], waiting["waits_for"]) == (urgent.id, WHY)
        shown_text = fleet.cli("task", "show", str(urgent.id)).stdout
        assert re.search(rf"waits: {re.escape(WHY)}\n", shown_text)
        shown = json.loads(fleet.cli("task", "show", str(urgent.id), "--json").stdout)
        assert shown["waits_for"] == WHY

        site = tmp_path / "site"
        site.mkdir()
        with served(site, f'[daemon]\ndatabase = "{tmp_path / "q.db"}"\nmax_concurrent = 3\n\n'
                          f'[roles.slow]\ncommand = ["true"]\nmax_concurrent = 2\n\n'
                          f'[roles.qa]\ncommand = ["true"]\n\n'
                          f'[api]\nlisten = "127.0.0.1:0"\n') as api:
            client = api.client()
            client.post("/login", data={"token": api.tokens["operator"]})
            board = client.get("/").text
            assert WHY in board and "free slot" not in board
            assert WHY in client.get(f"/tasks/{urgent.id}").text
    finally:
        flag.touch()
        if fleet.daemon is not None:
            for task in held:
                fleet.wait_final(task.id, timeout=30)
            fleet.stop()
        fleet.close()


def test_a_refused_claim_and_the_board_give_the_same_reason(tmp_path):
    """The claim's check and the board's why are one rule (policy/admission.py): a task that
    another node's claim passed by, for its role at max_concurrent or its pool full across the
    fleet, is said to wait for the words that claim came back with."""
    now = 1_700_000_000.0
    config = parse_config({"daemon": {"database": "q.db", "max_concurrent": 4},
                           "pools": {"gpu": 1},
                           "roles": {"deployer": {"command": ["true"], "max_concurrent": 1},
                                     "trainer": {"command": ["true"], "pool": "gpu"}}},
                          base_dir=tmp_path)
    limits = ClaimLimits.from_config(config)
    with open_store(str(tmp_path / "q.db"), durability="normal") as store:
        queue = Queue(config, store)
        for role in ("deployer", "trainer"):
            store.enqueue_many([NewTask(role=role, title=f"{role} {n}") for n in (1, 2)], now)
            assert store.claim(ClaimRequest("node-a", now, 60, roles=[role], limits=limits))
            refused = store.attempt_claim(ClaimRequest("node-b", now, 60, roles=[role],
                                                       limits=limits))
            [waiting] = store.list_tasks(role=role, state=TaskState.READY)
            assert refused.claim is None and [r.role for r in refused.refused] == [role]
            assert why_waiting(queue, waiting, now) == refused.refused[0].reason
