"""A role's caps (`[roles.NAME.isolation] memory, pids, cpu`) on its agent's whole process
tree, with a real daemon and the host's real cgroups: an agent past its memory cap is killed
and its run names the cap; a fork bomb stops at pids; what an agent leaves behind (even out
of its process group) is stopped with its cgroup; the daemon and the other agents run on.
"""

from __future__ import annotations

import json
import os

import pytest

from taskherd.host import cgroups
from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

HOST = cgroups.host()
pytestmark = pytest.mark.skipif(
    any(name not in HOST.bases for name in ("memory", "pids")) and not os.environ.get("CI"),
    reason=f"this host enforces no memory and pids caps: {HOST.missing}")

EATS = """
    import time
    eaten = []
    for _ in range(64):  # 256 MiB, 4 MiB at a time, every page touched
        eaten.append(bytearray(4 << 20))
    print("TASK_COMPLETE: ate 256 MiB")
"""

FORKS = """
    import json, os, sys, time
    children, refused = [], 0
    for _ in range(int(sys.argv[2])):
        try:
            pid = os.fork()
        except OSError:
            refused += 1
            continue
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    json.dump({"forked": len(children), "refused": refused}, open(sys.argv[1], "w"))
    for pid in children:
        os.kill(pid, 9)
    print("TASK_COMPLETE: forked")
"""

LEAVES = """
    import os, sys, time
    if os.fork() == 0:
        os.setsid()  # out of its process group: only its cgroup still holds it
        open(sys.argv[1], "w").write(str(os.getpid()))
        time.sleep(600)
        os._exit(0)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    print("TASK_COMPLETE: left a child")
"""


def capped_fleet(root, caps: str) -> Fleet:
    programs = {name: agent(root, name, body)
                for name, body in (("eats", EATS), ("forks", FORKS), ("leaves", LEAVES))}
    return Fleet(root, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        max_concurrent = 4

        [roles.eater]
        command = ["{PYTHON}", "-S", "{programs['eats']}"]
        max_attempts = 2
        backoff = "1h"
        backoff_cap = "1h"
        isolation = {{ {caps} }}

        [roles.forker]
        command = ["{PYTHON}", "-S", "{programs['forks']}", "{root / 'forked.json'}", "200"]
        isolation = {{ {caps} }}

        [roles.leaver]
        command = ["{PYTHON}", "-S", "{programs['leaves']}", "{root / 'left.pid'}"]
        isolation = {{ {caps} }}

        [roles.bystander]
        command = ["echo", "TASK_COMPLETE: unharmed"]
    """)


@pytest.mark.parametrize("capped", [True, False])
def test_caps_hold_an_agents_whole_tree_and_the_fleet_runs_on(tmp_path, capped):
    fleet = capped_fleet(tmp_path, 'memory = "64M", pids = 32' if capped else 'mode = "off"')
    try:
        fleet.up()
        eater, forker, leaver = (fleet.add(name, role=name)
                                 for name in ("eater", "forker", "leaver"))
        bystander = fleet.add("unharmed", role="bystander")
        forked = json.loads(fleet.wait_until(
            lambda: (tmp_path / "forked.json").exists()
            and (tmp_path / "forked.json").read_text(), what="the fork bomb to report"))
        if capped:
            # The agent itself, and the python that runs it, count: at most pids in all.
            assert forked["forked"] < 32 and forked["refused"] > 0
            run = fleet.wait_until(lambda: (runs := fleet.store.runs_of_task(eater.id))
                                   and runs[0].ended_at and runs[0], what="the eater's end")
            assert run.outcome is Outcome.FAILED
            assert run.error.startswith("out of memory: 64.0 MiB cap")
            task = fleet.store.get_task(eater.id)
            assert task.attempts == 1 and task.last_error.startswith("out of memory")
            assert "out of memory: 64.0 MiB cap" in fleet.cli("task", "show",
                                                              str(eater.id)).stdout
            enforced = ", ".join(name for name in cgroups.CONTROLLERS if name in HOST.bases)
            doctor = fleet.cli("doctor", check=False).stdout
            assert f"ok      agent caps: {enforced} enforced ({HOST.how()})" in doctor
        else:  # the same agents, uncapped: the test would catch caps that do nothing
            assert forked == {"forked": 200, "refused": 0}
            assert fleet.wait_final(eater.id).state is TaskState.COMPLETED
        assert fleet.wait_final(forker.id).state is TaskState.COMPLETED
        assert fleet.wait_final(leaver.id).state is TaskState.COMPLETED
        assert fleet.wait_final(bystander.id).state is TaskState.COMPLETED
        left = int((tmp_path / "left.pid").read_text())
        if capped:  # stopped with its cgroup, which is removed
            fleet.wait_until(lambda: not _alive(left), what="the left child to be stopped")
            fleet.wait_until(lambda: not any(
                cgroups.run_folders(fleet.data_dir, run.id, HOST)
                for task in (eater, forker, leaver)
                for run in fleet.store.runs_of_task(task.id)), what="the cgroups' removal")
        else:
            assert _alive(left)  # out of its group, nothing else stops it
            os.kill(left, 9)
    finally:
        fleet.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
