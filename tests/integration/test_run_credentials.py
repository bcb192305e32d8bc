"""Agents hold a credential of their own run, never the database.

A real daemon, real agent processes calling `taskherd heartbeat|done|task add` through the
daemon's agent socket; every test runs on both stores (on PostgreSQL with a password in the
URL, so a leak of it would be seen).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from taskherd.agent import door as agent_door
from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

PASSWORD = "s3cret-pw-4-tests"

AGENT = """
    import json, os, subprocess, sys, time
    prompt = sys.stdin.read().strip()
    with open("env-" + os.environ["TASKHERD_RUN_ID"] + ".json", "w") as f:
        json.dump(dict(os.environ), f)
    if prompt == "env":
        print("TASK_COMPLETE: env")
    elif prompt.startswith("hold"):
        while not os.path.exists(prompt.split()[1]):
            time.sleep(0.05)
        print("TASK_COMPLETE: released")
    elif prompt == "beat-then-cost":
        subprocess.run(["taskherd", "heartbeat", "--progress", "half way"], check=True)
        subprocess.run(["taskherd", "done", "--summary", "paid", "--cost-usd", "0.25",
                        "--input-tokens", "1200", "--output-tokens", "340"], check=True)
    elif prompt == "done-no-cost":
        subprocess.run(["taskherd", "done", "--summary", "free?"], check=True)
    elif prompt == "children":
        ok = subprocess.run(["taskherd", "task", "add", "child of mine", "--role", "worker",
                             "--prompt", "env", "--json"], capture_output=True, text=True)
        bad = subprocess.run(["taskherd", "task", "add", "lost", "--role", "nosuchrole"],
                             capture_output=True, text=True)
        with open("children.json", "w") as f:
            json.dump({"ok": [ok.returncode, ok.stdout, ok.stderr],
                       "bad": [bad.returncode, bad.stdout, bad.stderr]}, f)
        print("TASK_COMPLETE: children")
"""


def with_password(database: str) -> str:
    if not database.startswith("postgresql://"):
        return database
    user, rest = database[len("postgresql://"):].split("@", 1)
    return f"postgresql://{user}:{PASSWORD}@{rest}"  # the test server trusts; it is ignored


@pytest.fixture
def fleet(tmp_path, database):
    program = agent(tmp_path, "agent", AGENT)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "{with_password(database)}"
        data_dir = "data"
        timezone = "UTC"
        path = "/usr/bin:/bin"

        [roles.worker]
        command = ["{PYTHON}", "{program}"]
        workdir = "{tmp_path}"
        max_attempts = 1
        idle_timeout = "20s"
    """)
    node.database = with_password(database)
    node.up()
    yield node
    node.close()


def agent_env(fleet: Fleet, run_id: int) -> dict[str, str]:
    path = fleet.root / f"env-{run_id}.json"
    fleet.wait_until(lambda: path.exists() and path.stat().st_size, what=f"env of run {run_id}")
    return fleet.wait_until(lambda: _json(path), what=f"env of run {run_id} written")


def _json(path):
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def run_of(fleet: Fleet, task_id: int):
    return fleet.wait_until(lambda: fleet.store.runs_of_task(task_id), what="a run")[-1]


def door_env(env: dict[str, str]) -> dict[str, str]:
    """An agent's environment, to run its commands from here as that agent would."""
    return dict(env)


def cli_as_agent(fleet: Fleet, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "taskherd", *args], env=env, capture_output=True,
                          check=False,
                          text=True, timeout=60, cwd=fleet.root)


def test_an_agent_environment_holds_no_secret_of_the_database(fleet):
    task = fleet.add("env", prompt="env")
    run = run_of(fleet, task.id)
    env = agent_env(fleet, run.id)
    fleet.wait_final(task.id)
    assert "TASKHERD_DATABASE" not in env and "TASKHERD_CONFIG" not in env
    assert {"TASKHERD_TASK_ID", "TASKHERD_RUN_ID", "TASKHERD_ROLE", "TASKHERD_HOME",
            "TASKHERD_RUN_TOKEN"} <= set(env)
    everything = "\n".join(f"{key}={value}" for key, value in env.items())
    assert PASSWORD not in everything
    assert fleet.database not in everything
    assert "postgres" not in everything.lower()
    assert str(fleet.root / "q.db") not in everything
    # The token is never written in clear: not in the daemon's log, and the store keeps a hash.
    token = env["TASKHERD_RUN_TOKEN"]
    assert token not in fleet.daemon_log.read_text()
    socket_mode = (fleet.data_dir / "agent.sock").stat().st_mode & 0o777
    assert socket_mode == 0o600
    # It died with its run.
    assert fleet.store.run_of_credential(token) is None


def test_a_credential_acts_on_its_own_run_only_and_not_after_it_ended(fleet):
    release_a, release_b = fleet.root / "release-a", fleet.root / "release-b"
    task_a = fleet.add("a", prompt=f"hold {release_a}")
    task_b = fleet.add("b", prompt=f"hold {release_b}")
    run_a, run_b = run_of(fleet, task_a.id), run_of(fleet, task_b.id)
    env_a = agent_env(fleet, run_a.id)
    # Holding A's token and claiming to be B changes nothing: the token names the run.
    pretending = door_env(env_a) | {"TASKHERD_RUN_ID": str(run_b.id),
                                     "TASKHERD_TASK_ID": str(task_b.id)}
    result = cli_as_agent(fleet, pretending, "fail", "--summary", "settle B")
    assert result.returncode == 0, result.stderr
    assert fleet.store.get_run(run_b.id).report is None
    assert fleet.store.get_run(run_a.id).report == "fail"
    release_a.touch()
    release_b.touch()
    assert fleet.wait_final(task_a.id).state is TaskState.DEAD
    assert fleet.wait_final(task_b.id).state is TaskState.COMPLETED
    # A's run has ended: its credential no longer works, for anything.
    for args in (["heartbeat"], ["done"], ["task", "add", "late", "--role", "worker"]):
        after = cli_as_agent(fleet, door_env(env_a), *args)
        assert after.returncode == 1, (args, after.stdout, after.stderr)
        assert "not valid" in after.stderr
    assert fleet.store.get_run(run_a.id).outcome is Outcome.FAILED


def test_a_bad_token_is_refused_and_outside_an_agent_the_commands_say_so(fleet):
    release = fleet.root / "release"
    task = fleet.add("hold", prompt=f"hold {release}")
    run = run_of(fleet, task.id)
    env = agent_env(fleet, run.id)
    bad = door_env(env) | {"TASKHERD_RUN_TOKEN": env["TASKHERD_RUN_TOKEN"][:-2] + "xx"}
    result = cli_as_agent(fleet, bad, "done", "--summary", "forged")
    assert result.returncode == 1
    assert "not valid" in result.stderr
    assert fleet.store.get_run(run.id).report is None
    outside = {key: value for key, value in env.items() if key != "TASKHERD_RUN_TOKEN"}
    for args in (["done"], ["heartbeat"], ["block"]):
        result = cli_as_agent(fleet, outside, *args)
        assert result.returncode == 2
        assert "run by an agent inside a run" in result.stderr
    # The raw door refuses what it does not know, by kind.
    with pytest.raises(agent_door.DoorError) as refused:
        agent_door.call("settle_everything", {}, env=env)
    assert refused.value.kind == "bad_input"
    with pytest.raises(agent_door.DoorError) as refused:
        agent_door.call("report", {"verdict": "done", "cost_usd": -1}, env=env)
    assert refused.value.kind == "bad_input"
    release.touch()
    assert fleet.wait_final(task.id).state is TaskState.COMPLETED


def test_done_records_what_the_run_cost_and_an_unknown_cost_stays_unknown(fleet):
    paid = fleet.add("paid", prompt="beat-then-cost")
    unknown = fleet.add("free", prompt="done-no-cost")
    assert fleet.wait_final(paid.id).summary == "paid"
    fleet.wait_final(unknown.id)
    run = fleet.store.runs_of_task(paid.id)[-1]
    assert (run.outcome, run.cost_usd, run.input_tokens, run.output_tokens) == (
        Outcome.SUCCEEDED, 0.25, 1200, 340)
    assert run.progress == "half way"
    run = fleet.store.runs_of_task(unknown.id)[-1]
    assert run.outcome is Outcome.SUCCEEDED
    assert (run.cost_usd, run.input_tokens, run.output_tokens) == (None, None, None)


def test_an_agent_adds_a_child_of_its_task_but_not_for_an_unknown_role(fleet):
    parent = fleet.add("parent", prompt="children")
    fleet.wait_final(parent.id)
    report = json.loads((fleet.root / "children.json").read_text())
    code, out, err = report["ok"]
    assert code == 0, err
    child = json.loads(out)
    assert child["parent_id"] == parent.id and child["created"]
    assert fleet.wait_final(child["id"]).state is TaskState.COMPLETED
    code, out, err = report["bad"]
    assert code == 2
    assert "nosuchrole" in err
    assert sorted(t.title for t in fleet.store.list_tasks()) == ["child of mine", "parent"]
