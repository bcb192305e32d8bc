"""Why a task waits is said once (taskherd/policy/waits.py) and every door says the same: the
daemon's log, `status`, `task show` and the dashboard's board and task page. The case an
operator met: a role at max_concurrent 2 on a node running 2 of 3, where the board said "a
free slot on a node" while the daemon said the role was full."""

from __future__ import annotations

import json
import re

from tests.api_server import served
from tests.fleet import PYTHON, Fleet, agent

# Runs until the test lets it go (a file appears): two of these hold role slow at its limit.
HOLD = """\
import os, time
while not os.path.exists({flag!r}):
    time.sleep(0.02)
"""

WHY = "role slow is at max_concurrent 2"


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
        assert re.search(rf"waits: {WHY}\n", fleet.cli("task", "show", str(urgent.id)).stdout)
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
