"""The agent door in-process: its socket in a folder whose path is longer than a UNIX socket
address holds, private, answering each kind of error by name."""

from __future__ import annotations

import asyncio
import stat

from taskherd.agent import door as agent_door
from taskherd.agent.door import AgentDoor, DoorError
from taskherd.config import load_config
from taskherd.model import NewTask
from taskherd.ops import Queue
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store


def test_the_door_serves_from_a_long_path_and_names_each_refusal(tmp_path):
    data_dir = tmp_path / ("deep-" * 20) / "data"
    data_dir.mkdir(parents=True)
    assert len(str(agent_door.socket_path(data_dir))) > agent_door.MAX_SOCKET_PATH
    (tmp_path / "taskherd.toml").write_text(
        '[daemon]\ndata_dir = "data"\n[roles.worker]\ncommand = ["true"]\n')
    config = load_config(tmp_path / "taskherd.toml")
    store = open_store(str(tmp_path / "q.db"))
    store.enqueue(NewTask(role="worker", title="t"), 1000.0)
    run = store.claim(ClaimRequest("n1", 1000.0, 60.0)).run
    store.issue_run_credential(run.id, "the-token", 1000.0)
    env = {"TASKHERD_RUN_TOKEN": "the-token", "TASKHERD_HOME": str(data_dir)}
    changes = []

    def ask(op, args, **overrides):
        try:
            return agent_door.call(op, args, env=env | overrides)
        except DoorError as error:
            return error.kind

    async def scenario():
        door = AgentDoor(Queue(config, store), lambda: 1001.0, on_change=lambda: changes.append(1))
        await door.start(data_dir)
        mode = stat.S_IMODE(agent_door.socket_path(data_dir).stat().st_mode)
        try:
            answers = [await asyncio.to_thread(ask, *request) for request in [
                ("heartbeat", {"progress": "started"}),
                ("add_child_task", {"task": {"title": "child", "role": "worker"}}),
                ("add_child_task", {"task": {"title": "x", "role": "nobody"}}),
                ("add_child_task", {"task": {"title": "x", "role": "worker", "parent_id": 99}}),
                ("report", {"verdict": "maybe"}),
                ("report", {"verdict": "done", "tip_usd": 1}),
                ("report", {"verdict": "done", "input_tokens": 1.5}),
            ]]
            answers.append(await asyncio.to_thread(ask, "heartbeat", {},
                                                   TASKHERD_RUN_TOKEN="forged"))
            answers.append(await asyncio.to_thread(ask, "report", {"verdict": "done",
                                                                   "cost_usd": 0.1}))
        finally:
            await door.close()
        return mode, answers

    mode, answers = asyncio.run(scenario())
    assert mode == 0o600
    assert answers[0] == {"run_id": run.id}
    assert answers[1]["task"]["parent_id"] == run.task_id and changes == [1]
    assert answers[2:7] == ["bad_input"] * 5
    assert answers[7] == "unauthorized"
    assert answers[8] == {"run_id": run.id, "verdict": "done"}
    assert store.get_run(run.id).cost_usd == 0.1
    assert not agent_door.socket_path(data_dir).exists()
    # The daemon is gone, and this agent may not wait for it to come back.
    assert ask("heartbeat", {}, TASKHERD_REPORT_WAIT="0") == "unreachable"
    store.close()
