"""A kill storm: the daemon `kill -9`'d and started again, again and again, while its agents
report. Thirty tasks of a command role whose agents work a little, then heartbeat, add a child
task, send a message and say `taskherd done` through the agent door (tests/faults/storm.py),
each command failing the agent if it fails. Restarts cost nothing: no strike, no task run
twice, each task completed exactly once, each child task and message made once, and every run
an agent started kept, ended. (bench/kill_storm.py runs the same storm at 300 tasks.)
"""

from __future__ import annotations

import pytest

from taskherd.model import Outcome
from tests.faults.storm import Storm, completed_once


@pytest.mark.timeout(300)
def test_a_daemon_killed_again_and_again_costs_its_agents_nothing(tmp_path):
    storm = Storm(tmp_path, tasks=30, kills=5, every=1.5, concurrency=10, work=0.3)
    try:
        result = storm.run()
    finally:
        storm.fleet.close()
    detail = "\n".join([result.summary(), *result.odd_runs, *result.refusals])
    assert result.waits > 0, detail  # the kills met agents reporting: the storm was one
    assert result.refusals == [], detail
    assert result.strikes == 0 and result.reruns == 0, detail
    assert completed_once(result), detail
    assert set(result.children.values()) == {1} and set(result.messages.values()) == {1}
    assert result.unrecorded == [] and result.open_runs == []
    # Besides the runs that succeeded, only claims the daemon died holding before their agent
    # started: lost, no strike, and their task ran once all the same.
    assert set(result.outcomes) <= {Outcome.SUCCEEDED.value, Outcome.LOST.value}, detail
    assert result.lost_with_agent == [], detail
