"""Role memory with a real daemon: a run finds its role's memory file (in its prompt and at
TASKHERD_MEMORY_FILE), writes to it and searches long-term memory from inside its run;
after the run the file is back within its cap and every line that left it is in long-term
memory."""

from __future__ import annotations

import json

from taskherd.model import TaskState
from tests.fleet import PYTHON, Fleet, agent

AGENT = """
import json, os, subprocess, sys
prompt = sys.stdin.read()
task = os.environ["TASKHERD_TASK_ID"]
open("prompt-" + task, "w").write(prompt)
found = subprocess.run([sys.executable, "-m", "taskherd", "memory", "search", "rollback",
                        "--json"], capture_output=True, text=True, check=True).stdout
open("found-" + task, "w").write(found)
path = os.environ["TASKHERD_MEMORY_FILE"]
with open(path, "a") as memory:  # the session log is the file's last section
    for n in range(40):
        memory.write(f"- run {task} note {n}\\n")
print("TASK_COMPLETE: noted")
"""


def test_the_memory_file_is_read_written_and_kept_within_its_cap(tmp_path):
    script = agent(tmp_path, "noter", AGENT)
    fleet = Fleet(tmp_path, f"""
        [daemon]
        data_dir = "data"
        poll_interval = "0.2s"
        [memory]
        short_term_lines = 30
        [roles.coder]
        command = ["{PYTHON}", "{script}"]
        memory = true
    """)
    try:
        fleet.cli("memory", "add", "the rollback needs two people", "--role", "coder")
        first = fleet.add("first", role="coder")
        fleet.up()
        assert fleet.wait_final(first.id).state is TaskState.COMPLETED
        path = fleet.data_dir / "memory" / "coder.md"
        text = path.read_text()
        assert len(text.splitlines()) <= 30
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        moved = fleet.store.list_memories("coder", 1000)
        written = {f"- run {first.id} note {n}" for n in range(40)}
        kept = {line for line in text.splitlines() if line.startswith("- run")}
        gone = {m.text for m in moved if m.source == "short-term"}
        assert kept | gone == written and not kept & gone  # every line, in one place
        assert all(m.section == "Session log" for m in moved if m.source == "short-term")
        found = json.loads((tmp_path / f"found-{first.id}").read_text())
        assert [m["text"] for m in found] == ["the rollback needs two people"]

        second = fleet.add("second", role="coder")
        assert fleet.wait_final(second.id).state is TaskState.COMPLETED
        prompt = (tmp_path / f"prompt-{second.id}").read_text()
        assert "## Your role's memory" in prompt and f"- run {first.id} note 39" in prompt
    finally:
        fleet.close()
