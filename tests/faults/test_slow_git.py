"""A git hook that hangs costs its own task only: a real repository whose
`reference-transaction` hook blocks on a FIFO when the base branch moves (as a slow CI
trigger or a network hook would), a real daemon, real agents.

While the hook hangs the merging task waits in `merging`; `task add` returns, another role's
task is claimed and started, and its agent's `taskherd done` is heard. Released, the task
completes merged; past the role's `merge_timeout`, the hook is killed with its process group
and the task is blocked with the reason; a daemon killed mid-merge merges again when it is
back, and the task completes once.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from taskherd.model import FINAL_STATES, TaskState
from tests.fleet import PYTHON, Fleet, agent
from tests.integration.fifo_gate import release

# Writes FILE in its worktree and commits it (the prompt is JSON: {"file", "content"}).
CODER = """
    import json, subprocess, sys
    words = json.loads(sys.stdin.read().split("\\n\\n## ")[0])
    with open(words["file"], "w") as out:
        out.write(words["content"])
    if not words.get("leave_uncommitted"):
        subprocess.run(["git", "add", "--", words["file"]], check=True)
        subprocess.run(["git", "commit", "-q", "-m", "change " + words["file"]], check=True)
    print("TASK_COMPLETE: committed")
"""
# Another role's agent: reports through the daemon's agent door, as real agents do.
WRITER = """
    import subprocess
    subprocess.run(["taskherd", "done", "--summary", "written"], check=True)
"""
# Blocks the update of the base branch until the FIFO is opened; each start is written down
# (its pid: the test checks the killed hook is gone). Other refs (the task's branch) pass.
HOOK = """#!/bin/sh
phase="$1"
while read -r old new ref; do
    if [ "$ref" = refs/heads/main ] && [ "$phase" = prepared ]; then
        echo $$ >> "{started}"
        cat "{fifo}" > /dev/null
    fi
done
exit 0
"""
# Blocks every commit after it is made (a slow notifier), until the FIFO is opened.
POST_COMMIT = """#!/bin/sh
echo $$ >> "{started}"
cat "{fifo}" > /dev/null
"""
IDENTITY = {"GIT_AUTHOR_NAME": "coder", "GIT_AUTHOR_EMAIL": "coder@example.com",
            "GIT_COMMITTER_NAME": "coder", "GIT_COMMITTER_EMAIL": "coder@example.com"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", **IDENTITY}).stdout.strip()


@pytest.fixture
def hook(tmp_path) -> dict[str, Path]:
    fifo, started = tmp_path / "hook-gate", tmp_path / "hook-started"
    os.mkfifo(fifo)
    return {"fifo": fifo, "started": started}


@pytest.fixture
def repo(tmp_path, hook) -> Path:
    repo = tmp_path / "app"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("app\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    script = repo / ".git" / "hooks" / "reference-transaction"
    script.write_text(HOOK.format(**hook))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return repo


@pytest.fixture
def fleet(tmp_path, repo):
    made = []

    def make(merge_timeout: str = "5m", hooks: bool = False) -> Fleet:
        coder, writer = agent(tmp_path, "coder", CODER), agent(tmp_path, "writer", WRITER)
        env = ", ".join(f'{key} = "{value}"' for key, value in IDENTITY.items())
        node = Fleet(tmp_path, f"""
            [daemon]
            database = "q.db"
            data_dir = "data"
            timezone = "UTC"
            max_concurrent = 4

            [roles.coder]
            command = ["{PYTHON}", "{coder}"]
            env = {{ {env} }}
            max_attempts = 1

            [roles.coder.git]
            repo = "{repo}"
            merge_timeout = "{merge_timeout}"
            hooks = {str(hooks).lower()}

            [roles.writer]
            command = ["{PYTHON}", "{writer}"]
            max_attempts = 1
        """)
        made.append(node)
        node.up()
        return node

    yield make
    for node in made:
        node.close()


def hook_starts(hook) -> list[int]:
    path = hook["started"]
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def merging_behind_the_hook(fleet: Fleet, hook, starts: int = 1):
    """A coder task whose merge hangs in the hook (its `starts`th start)."""
    task = fleet.add("feature", role="coder",
                     prompt=json.dumps({"file": "feature.txt", "content": "new\n"}))
    fleet.wait_until(lambda: len(hook_starts(hook)) >= starts, 30, "the hook to hang")
    assert fleet.store.get_task(task.id).state is TaskState.MERGING
    return task


def the_queue_goes_on(fleet: Fleet) -> None:
    """`task add` answers and another role's task runs to the end, its agent's report heard."""
    added = fleet.cli("task", "add", "--role", "writer", "--json", "notes")
    writer = json.loads(added.stdout)["id"]
    done = fleet.wait_final(writer, timeout=30)
    assert done.state is TaskState.COMPLETED and done.summary == "written"
    [run] = fleet.store.runs_of_task(writer)
    assert run.outcome.value == "succeeded" and run.pid is not None


def test_a_hanging_hook_holds_up_its_own_task_only_and_released_it_merges(fleet, hook, repo):
    node = fleet()
    task = merging_behind_the_hook(node, hook)
    the_queue_goes_on(node)
    assert node.store.get_task(task.id).state is TaskState.MERGING
    release(hook["fifo"])
    done = node.wait_final(task.id, timeout=30)
    assert done.state is TaskState.COMPLETED
    assert git(repo, "show", "main:feature.txt") == "new"


def test_a_hook_past_merge_timeout_is_killed_and_blocks_its_task_with_the_reason(
        fleet, hook, repo):
    node = fleet(merge_timeout="2s")
    start = git(repo, "rev-parse", "main")
    task = merging_behind_the_hook(node, hook)
    the_queue_goes_on(node)
    blocked = node.wait_until(
        lambda: (t := node.store.get_task(task.id)).state is TaskState.BLOCKED and t, 30,
        "the merge to time out")
    assert "within merge_timeout 2s" in blocked.reason and "update-ref" in blocked.reason
    assert git(repo, "rev-parse", "main") == start and git(repo, "status", "--short") == ""
    # Stopped by SIGTERM, git removed its lock: the base is not locked for the next merge.
    assert not (repo / ".git" / "refs" / "heads" / "main.lock").exists()
    # The hook went with git's process group: nothing is left waiting on the FIFO.
    [pid] = hook_starts(hook)
    node.wait_until(lambda: not _alive(pid), 10, "the hook to be gone")
    # Nothing else was touched: a new task of another role still runs.
    the_queue_goes_on(node)


def test_a_daemon_killed_mid_merge_merges_again_when_back_and_completes_once(
        fleet, hook, repo):
    node = fleet()
    task = merging_behind_the_hook(node, hook)
    node.daemon.kill()  # kill -9: its git and hook go on, in their own session
    node.daemon.wait(10)
    node.up()
    # Back, it stops the git it had left (whose hook kept the base locked) and merges again.
    [left, _] = node.wait_until(lambda: len(starts := hook_starts(hook)) == 2 and starts,
                                    30, "the restarted daemon's merge to reach the hook")
    assert not _alive(left) and node.store.get_task(task.id).state is TaskState.MERGING
    release(hook["fifo"])
    done = node.wait_final(task.id, timeout=30)
    assert done.state is TaskState.COMPLETED and done.state in FINAL_STATES
    merges = git(repo, "log", "--merges", "--format=%s", "main").splitlines()
    assert merges == [f"Merge taskherd/task-{task.id}: feature"]
    assert len(node.store.runs_of_task(task.id)) == 1  # merged again, never run again


def test_a_hanging_post_commit_hook_on_leftovers_holds_up_its_own_task_only(
        fleet, hook, repo):
    """A role that opts into hooks for the commit of what its agent left uncommitted: that
    commit runs off the loop, and its hook hanging holds up nothing but its own task."""
    script = repo / ".git" / "hooks" / "post-commit"
    script.write_text(POST_COMMIT.format(**hook))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    node = fleet(hooks=True)
    task = node.add("forgetful", role="coder", prompt=json.dumps(
        {"file": "left.txt", "content": "uncommitted\n", "leave_uncommitted": True}))
    node.wait_until(lambda: hook_starts(hook), 30, "the post-commit hook to hang")
    the_queue_goes_on(node)
    assert node.store.get_task(task.id).state is TaskState.RUNNING
    release(hook["fifo"])
    # The merge's update of main meets the reference-transaction hook: released too.
    node.wait_until(lambda: len(hook_starts(hook)) == 2, 30, "the merge to reach its hook")
    release(hook["fifo"])
    assert node.wait_final(task.id, timeout=30).state is TaskState.COMPLETED
    assert git(repo, "show", "main:left.txt") == "uncommitted"


def test_leftover_commits_skip_the_repositorys_hooks_unless_the_role_opts_in(repo, tmp_path):
    from taskherd import worktrees

    script = repo / ".git" / "hooks" / "post-commit"
    script.write_text(f"#!/bin/sh\necho ran >> {tmp_path / 'post-commit-ran'}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    path = worktrees.ensure_worktree(repo, "main", 1, tmp_path / "trees")
    (path / "a.txt").write_text("a\n")
    assert worktrees.commit_leftovers(path, "left over")
    assert not (tmp_path / "post-commit-ran").exists()
    (path / "b.txt").write_text("b\n")
    assert worktrees.commit_leftovers(path, "left over", hooks=True)
    assert (tmp_path / "post-commit-ran").read_text() == "ran\n"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
