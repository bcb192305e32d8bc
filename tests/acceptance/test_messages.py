"""Messages end to end: a person writes to a role, the role's next run finds the messages in
its prompt (urgent first) and answers from inside its run with `taskherd msg send`; an urgent
message wakes a role that asks for it; bad input changes nothing."""

from __future__ import annotations

import json

import pytest

from taskherd.model import TaskState
from tests.fleet import PYTHON, Fleet, agent

# The agent keeps its prompt, then answers the first message it received, as its run.
AGENT = """
    import os, subprocess, sys
    prompt = sys.stdin.read()
    open("prompt-" + os.environ["TASKHERD_TASK_ID"], "w").write(prompt)
    inbox = json.loads(subprocess.run([sys.executable, "-m", "taskherd", "msg", "inbox", "--json"],
                                      capture_output=True, text=True, check=True).stdout)
    first = inbox[0]["id"]
    subprocess.run([sys.executable, "-m", "taskherd", "msg", "send", "qa", "on it",
                    "--reply-to", str(first), "--kind", "status"], check=True)
    subprocess.run([sys.executable, "-m", "taskherd", "msg", "read", str(first)], check=True)
    print("TASK_COMPLETE: answered")
"""


@pytest.fixture
def fleet(tmp_path):
    script = agent(tmp_path, "answer", "import json\n" + AGENT.replace("\n    ", "\n"))
    made = Fleet(tmp_path, f"""
        [daemon]
        data_dir = "data"
        poll_interval = "0.2s"
        [messages]
        inbox_messages = 2
        [roles.coder]
        command = ["{PYTHON}", "{script}"]
        wake_on_urgent = true
        [roles.qa]
        command = ["true"]
    """)
    yield made
    made.close()


def test_a_run_reads_its_messages_in_its_prompt_and_answers_from_inside(fleet):
    fleet.cli("msg", "send", "coder", "please look at the flaky test")
    fleet.cli("msg", "send", "coder", "the build is red", "--priority", "high")
    fleet.cli("msg", "send", "coder", "third, waits for the next run")
    fleet.cli("msg", "send", "coder", "the deploy is down", "--priority", "urgent")
    woken = fleet.store.list_tasks(role="coder")
    assert [t.title for t in woken] == ["Urgent message from @person"]  # wake_on_urgent

    fleet.up()
    task = fleet.wait_final(woken[0].id)
    assert task.state is TaskState.COMPLETED
    prompt = (fleet.root / f"prompt-{task.id}").read_text()
    messages = prompt.split("## Messages for you", 1)[1]
    assert messages.index("the deploy is down") < messages.index("the build is red")
    assert "flaky test" not in messages  # inbox_messages = 2: the rest wait

    sent = json.loads(fleet.cli("msg", "outbox", "coder", "--json").stdout)
    assert [(m["sender"], m["recipient"], m["body"], m["kind"]) for m in sent] == [
        (f"task:{task.id}", "qa", "on it", "status")]
    thread = json.loads(fleet.cli("msg", "thread", str(sent[0]["id"]), "--json").stdout)
    assert [m["body"] for m in thread] == ["the deploy is down", "on it"]
    assert thread[0]["read_at"] is not None and thread[0]["delivered_at"] is not None
    unread = json.loads(fleet.cli("msg", "unread", "coder", "--json").stdout)
    assert unread["unread"] == 3  # delivered is not read: the high one was only delivered


@pytest.mark.parametrize("args, says", [
    (["send", "nobody", "hi"], "no such role"),
    (["send", "coder", "hi", "--priority", "9"], "priority"),
    (["send", "coder", "   "], "needs a body"),
    (["send", "coder", "hi", "--reply-to", "77"], "reply_to = 77: no message"),
    (["send", "task:77", "hi"], "no task with id 77"),
    (["send", "coder", "hi", "--ttl", "soon"], "--ttl"),
    (["send", "coder", "hi", "--from", "@robot"], "@robot"),
    (["inbox"], "name the recipient"),
    (["thread", "5"], "no message with id 5"),
])
def test_bad_input_exits_2_names_the_problem_and_changes_nothing(fleet, args, says):
    result = fleet.cli("msg", *args, check=False)
    assert result.returncode == 2, result
    assert says in result.stderr
    assert fleet.store.sent_messages("@person") == []
    assert fleet.store.list_tasks() == []
