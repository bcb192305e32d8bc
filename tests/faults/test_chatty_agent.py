"""A chatty agent cannot hurt the fleet: a real daemon, real agents that write far more than
their role's max_log_bytes (64 KiB here, 64 MiB by default). The log on disk stays within the
cap with its head, a line saying what was cut and its tail; the run's result at the end of the
output is still read, and so is a question the agent ends with."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from taskherd.model import Outcome, TaskState
from tests.fleet import PYTHON, Fleet, agent

CAP = 64 << 10
OUTPUT = 24 << 20  # bytes each agent writes: 384 times its cap

# Numbered lines, so that the test can tell which part of the output the log kept.
CHATTY = f"""
    import os, sys, time
    out = sys.stdout.buffer
    out.write(b"first words of the agent\\n")
    line = 0
    written = 0
    while written < {OUTPUT}:
        if written >= {OUTPUT} // 2 and len(sys.argv) > 2:  # half way: wait for the release
            out.flush()
            while not os.path.exists(sys.argv[2]):
                time.sleep(0.02)
        block = b"".join(b"line %09d of chatter\\n" % (line + i) for i in range(2000))
        out.write(block)
        written += len(block)
        line += 2000
    out.write(sys.argv[1].encode())
    out.flush()
"""


@pytest.fixture
def fleet(tmp_path):
    program = agent(tmp_path, "chatty", CHATTY)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"

        [roles.finisher]
        command = ["{PYTHON}", "-S", "{program}", "TASK_COMPLETE: said a lot\\n"]
        workdir = "{tmp_path}"
        max_log_bytes = "64KiB"

        [roles.restarted]
        command = ["{PYTHON}", "-S", "{program}", "TASK_COMPLETE: outlived its daemon\\n",
                   "{tmp_path / 'release'}"]
        workdir = "{tmp_path}"
        max_log_bytes = "64KiB"

        [roles.asker]
        # It asks, then waits for an answer that never comes: the daemon must see the question.
        command = ["sh", "-c",
                   "{PYTHON} -S {program} 'Shall I deploy it? [y/N] ' && exec sleep 600"]
        workdir = "{tmp_path}"
        max_log_bytes = "64KiB"
        input_timeout = "1s"
        idle_timeout = "60s"
    """)
    yield node
    (tmp_path / "release").touch()  # a failed test must not leave the agent waiting
    node.close()


def test_a_chatty_agents_log_keeps_head_cut_line_and_tail_within_its_cap(fleet):
    fleet.up()
    task = fleet.add("talk a lot, then finish", role="finisher")
    final = fleet.wait_final(task.id, timeout=120)

    assert final.state is TaskState.COMPLETED
    run = fleet.store.runs_of_task(task.id)[-1]
    assert run.outcome is Outcome.SUCCEEDED and run.summary == "said a lot"
    log = Path(run.log_path).read_bytes()
    assert len(log) <= CAP
    header, _, rest = log.partition(b"\n")
    assert json.loads(header.removeprefix(b"# taskherd "))["run"] == run.id
    assert rest.startswith(b"first words of the agent\nline 000000000 of chatter\n")
    cut = re.search(rb"\n# taskherd cut (\d+) bytes of output here[^\n]*\n", log)
    assert cut is not None, "no line says what was cut"
    assert int(cut.group(1)) > OUTPUT - CAP
    assert log.endswith(b"of chatter\nTASK_COMPLETE: said a lot\n")
    # The kept tail is the latest output, in order, from a whole line.
    tail_numbers = [int(n) for n in re.findall(rb"^line (\d+) of chatter$", log[cut.end():],
                                               re.MULTILINE)]
    assert tail_numbers == list(range(tail_numbers[0], tail_numbers[0] + len(tail_numbers)))
    assert (tail_numbers[-1] + 1) * len(b"line 000000000 of chatter\n") >= OUTPUT
    # What the daemon read of it was bounded: it said it passed over most of the output.
    assert "writes faster than the daemon reads" in fleet.daemon_log.read_text()

    shown = fleet.cli("task", "log", str(task.id), "-n", "1").stdout
    assert shown == "TASK_COMPLETE: said a lot\n"


def test_a_question_after_much_output_is_still_seen(fleet):
    fleet.up()
    task = fleet.add("talk a lot, then ask", role="asker")
    fleet.wait_until(lambda: fleet.store.get_task(task.id).state is TaskState.BLOCKED,
                     timeout=120, what="the task blocked on its question")

    run = fleet.store.runs_of_task(task.id)[-1]
    assert run.outcome is Outcome.NEEDS_INPUT
    assert "Shall I deploy it? [y/N]" in (run.error or "")
    log = Path(run.log_path).read_bytes()
    assert len(log) <= CAP and log.endswith(b"of chatter\nShall I deploy it? [y/N] ")


def test_a_chatty_agent_re_adopted_after_a_daemon_kill_is_read_through_its_cuts(fleet, tmp_path):
    fleet.up()
    task = fleet.add("talk a lot across a restart", role="restarted")
    def cut_log() -> bool:
        # The run read again each time: its log path is recorded only once it has spawned.
        runs = fleet.store.runs_of_task(task.id)
        log_path = runs[-1].log_path if runs else None
        return bool(log_path) and b"# taskherd cut " in Path(log_path).read_bytes()

    fleet.wait_until(cut_log, what="half its output, cut")
    fleet.stop(signal.SIGKILL)  # the shim and its agent run on without a daemon
    fleet.up()
    (tmp_path / "release").touch()
    final = fleet.wait_final(task.id, timeout=120)

    assert final.state is TaskState.COMPLETED
    run = fleet.store.runs_of_task(task.id)[-1]
    assert run.outcome is Outcome.SUCCEEDED and run.summary == "outlived its daemon"
    assert len(Path(run.log_path).read_bytes()) <= CAP
    assert "re-adopted" in fleet.daemon_log.read_text()
