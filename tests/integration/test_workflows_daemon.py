"""Workflows with a real daemon and real agent processes: quality gates that do not take an
agent's word, a reviewer agent's verdicts through its run credential, and an agent adding
tasks within max_spawn."""

from __future__ import annotations

import json

import pytest

from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

CODER = """
    import os, subprocess, sys
    prompt = sys.stdin.read()
    own = prompt.split("\\n\\n## ")[0].strip()
    name = "code-" + os.environ["TASKHERD_TASK_ID"] + ".py"
    fixed = "## Quality gate failed" in prompt and own != "always-broken"
    with open(name, "w") as f:
        f.write("print('ok')\\n" if fixed else "def broken(:\\n")
    if "## Reviewer's reason" in prompt:
        open("saw-reason-" + os.environ["TASKHERD_TASK_ID"], "w").write(prompt)
    print("TASK_COMPLETE: tests: passed")
"""

REVIEWER = """
    import os, re, subprocess, sys
    prompt = sys.stdin.read()
    reviewed = re.search(r"Review the work done for task (\\d+)", prompt).group(1)
    if "reject-once" in prompt and not os.path.exists("rejected-" + reviewed):
        open("rejected-" + reviewed, "w").write("x")
        subprocess.run(["taskherd", "reject", "--reason", "add a logout test"], check=True)
    elif "by-marker" in prompt:
        print("looks good\\nAPPROVED")
    else:
        subprocess.run(["taskherd", "approve"], check=True)
"""

PLANNER = """
    import json, subprocess, sys
    results = []
    for n in range(5):
        done = subprocess.run(["taskherd", "task", "add", f"planned {n}", "--role", "noop"],
                              capture_output=True, text=True)
        results.append([done.returncode, done.stderr])
    json.dump(results, open("planner.json", "w"))
    print("TASK_COMPLETE: planned")
"""

# The gate: compile the file the task's coder wrote (a TOML string, so one line).
COMPILE_THE_TASKS_FILE = ("import os, py_compile; "
                          "py_compile.compile('code-' + os.environ['TASKHERD_TASK_ID'] + '.py', "
                          "doraise=True)")


@pytest.fixture
def fleet(tmp_path, database):
    coder = agent(tmp_path, "coder", CODER)
    reviewer = agent(tmp_path, "reviewer", REVIEWER)
    planner = agent(tmp_path, "planner", PLANNER)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "{database}"
        data_dir = "data"
        path = "/usr/bin:/bin"
        max_concurrent = 4

        [monitor]
        max_spawn = 3

        [roles.coder]
        command = ["{PYTHON}", "{coder}"]
        workdir = "{tmp_path}"
        max_attempts = 2
        backoff = "0.1s"

        [[roles.coder.gates]]
        name = "compile"
        argv = ["{PYTHON}", "-c", "{COMPILE_THE_TASKS_FILE}"]

        [[roles.coder.chain]]
        role = "noop"
        title = "Ship {{parent_title}}"

        [roles.author]
        command = ["{PYTHON}", "{coder}"]
        workdir = "{tmp_path}"
        review_by = "reviewer"
        max_reviews = 3
        backoff = "0.1s"

        [roles.reviewer]
        command = ["{PYTHON}", "{reviewer}"]
        workdir = "{tmp_path}"

        [roles.planner]
        command = ["{PYTHON}", "{planner}"]
        workdir = "{tmp_path}"

        [roles.noop]
        command = ["true"]
    """)
    node.up()
    yield node
    node.close()


def test_a_gate_fails_an_agent_that_says_tests_passed_while_the_code_does_not_compile(fleet):
    never = fleet.add("never compiles", role="coder", prompt="always-broken")
    fixed = fleet.add("fixed on retry", role="coder", prompt="fix")
    dead = fleet.wait_final(never.id, timeout=40)
    assert dead.state is TaskState.DEAD
    runs = fleet.store.runs_of_task(never.id)
    assert [run.outcome for run in runs] == [Outcome.FAILED, Outcome.FAILED]
    assert all("quality gate 'compile' failed" in run.error for run in runs)
    assert "SyntaxError" in dead.error_tail
    assert not [t for t in fleet.store.list_tasks() if t.parent_id == never.id]  # no chain

    done = fleet.wait_final(fixed.id, timeout=40)
    assert done.state is TaskState.COMPLETED
    first, second = fleet.store.runs_of_task(fixed.id)
    assert first.outcome is Outcome.FAILED and second.outcome is Outcome.SUCCEEDED
    # The retry's prompt carried the gate's failure, from the prompt builder.
    prompt = (fleet.data_dir / "logs" / f"run-{second.id}.prompt").read_text()
    assert "## Quality gate failed" in prompt and "SyntaxError" in prompt
    # Its chain fired only after the gates passed.
    [child] = [t for t in fleet.store.list_tasks() if t.parent_id == fixed.id]
    assert child.title == "Ship fixed on retry"
    shown = json.loads(fleet.cli("task", "show", str(fixed.id), "--json").stdout)
    assert [(g["name"], g["passed"]) for g in shown["gates"]] == [("compile", False),
                                                                   ("compile", True)]
    assert all(g["log_path"].endswith(".gate-compile.log") for g in shown["gates"])
    assert "SyntaxError" in open(shown["gates"][0]["log_path"]).read()


def test_a_reviewer_agent_rejects_once_then_approves_through_its_credential(fleet):
    task = fleet.add("login page", role="author", prompt="reject-once")
    marker = fleet.add("logout page", role="author", prompt="by-marker")
    done = fleet.wait_final(task.id, timeout=40)
    assert done.state is TaskState.COMPLETED and done.rejections == 1
    seen = (fleet.root / f"saw-reason-{task.id}").read_text()
    assert "## Reviewer's reason" in seen and "add a logout test" in seen
    reviews = [t for t in fleet.store.list_tasks() if t.meta.get("review_of") == task.id]
    assert len(reviews) == 2
    assert all(fleet.wait_final(r.id).state is TaskState.COMPLETED for r in reviews)
    assert fleet.wait_final(marker.id, timeout=40).state is TaskState.COMPLETED
    tree = fleet.cli("task", "tree", str(task.id)).stdout
    assert f"{task.id} author completed [1 rejection]: login page" in tree
    assert f"reviews {task.id} completed" in tree


def test_an_agent_adds_tasks_up_to_max_spawn_and_is_told_why_not_beyond(fleet):
    planner = fleet.add("plan", role="planner")
    fleet.wait_final(planner.id)
    results = json.loads((fleet.root / "planner.json").read_text())
    assert [code for code, _ in results] == [0, 0, 0, 1, 1]
    assert "max_spawn 3" in results[3][1]
    added = [t for t in fleet.store.list_tasks() if t.parent_id == planner.id]
    assert sorted(t.title for t in added) == ["planned 0", "planned 1", "planned 2"]
    assert {t.depth for t in added} == {1}
