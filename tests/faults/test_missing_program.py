"""A role whose program is missing (not installed, not on the service's PATH) is the machine's
configuration, not the agent's doing: its task waits blocked with the reason, no strike and no
retry; installed and unblocked, it runs."""

from __future__ import annotations

from taskherd.model import TaskState
from tests.fleet import Fleet


def test_a_missing_program_blocks_the_task_without_a_strike(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fleet = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        path = "{bin_dir}:/usr/bin:/bin"

        [roles.worker]
        command = ["my-agent"]
        max_attempts = 1
    """)
    try:
        fleet.up()
        task = fleet.add("needs my-agent")
        blocked = fleet.wait_until(
            lambda: (t := fleet.store.get_task(task.id)).state is TaskState.BLOCKED and t,
            what="the task to be blocked")
        assert blocked.attempts == 0  # with max_attempts = 1 a strike would have made it dead
        assert "agent program 'my-agent' not found" in blocked.last_error
        assert "roles.worker" in blocked.last_error
        program = bin_dir / "my-agent"
        program.write_text("#!/bin/sh\necho 'TASK_COMPLETE: installed'\n")
        program.chmod(0o755)
        fleet.cli("task", "unblock", str(task.id))
        done = fleet.wait_final(task.id)
        assert done.state is TaskState.COMPLETED and done.summary == "installed"
    finally:
        fleet.close()
