"""A git worktree per coding task, with real repositories and a real daemon: each task works
on its own branch, its completion merges it into the base one merge at a time, a conflict
blocks the task naming the files, and nothing unreviewed ever reaches the base."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from taskherd.model import TaskState
from tests.fleet import PYTHON, Fleet, agent

# The coder: writes CONTENT into FILE of its working directory and commits it. The prompt is
# JSON: {"file": …, "content": …}.
CODER = """
    import json, os, subprocess, sys
    words = json.loads(sys.stdin.read().split("\\n\\n## ")[0])
    with open(words["file"], "w") as out:
        out.write(words["content"])
    branch = subprocess.run(["git", "branch", "--show-current"], capture_output=True,
                            text=True, check=True).stdout.strip()
    subprocess.run(["git", "add", "--", words["file"]], check=True)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "change " + words["file"]],
                   check=True)
    print("TASK_COMPLETE: committed on " + branch)
"""
IDENTITY = {"GIT_AUTHOR_NAME": "coder", "GIT_AUTHOR_EMAIL": "coder@example.com",
            "GIT_COMMITTER_NAME": "coder", "GIT_COMMITTER_EMAIL": "coder@example.com"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", **IDENTITY}).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "app"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "shared.txt").write_text("one\ntwo\nthree\n")
    (repo / "README").write_text("app\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    return repo


@pytest.fixture
def git_fleet(tmp_path, repo):
    fleets = []

    def make(*, review: bool = False, max_concurrent: int = 2) -> Fleet:
        coder = agent(tmp_path, "coder", CODER)
        env = ", ".join(f'{key} = "{value}"' for key, value in IDENTITY.items())
        fleet = Fleet(tmp_path, f"""
            [daemon]
            database = "q.db"
            data_dir = "data"
            timezone = "UTC"
            max_concurrent = {max_concurrent}

            [roles.coder]
            command = ["{PYTHON}", "{coder}"]
            env = {{ {env} }}
            review = {str(review).lower()}
            max_attempts = 1

            [roles.coder.git]
            repo = "{repo}"
            base = "main"
        """)
        fleets.append(fleet)
        fleet.up()
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


def change(file: str, content: str) -> str:
    return json.dumps({"file": file, "content": content})


def settled(fleet: Fleet, task_id: int, timeout: float = 30.0):
    waiting = {TaskState.COMPLETED, TaskState.BLOCKED, TaskState.DEAD, TaskState.NEEDS_REVIEW}
    return fleet.wait_until(lambda: (t := fleet.store.get_task(task_id)).state in waiting and t,
                            timeout, f"task {task_id} to settle")


def test_two_tasks_changing_different_files_both_merge(git_fleet, repo):
    fleet = git_fleet()
    first = fleet.add("a", role="coder", prompt=change("a.txt", "from task a\n"))
    second = fleet.add("b", role="coder", prompt=change("b.txt", "from task b\n"))
    for task in (first, second):
        done = settled(fleet, task.id)
        assert done.state is TaskState.COMPLETED, done.reason
        assert done.summary == f"committed on taskherd/task-{task.id}"
    assert git(repo, "show", "main:a.txt") == "from task a"
    assert git(repo, "show", "main:b.txt") == "from task b"
    # The checkout on main moved along with it, and each merge is a merge commit.
    assert (repo / "a.txt").read_text() == "from task a\n" and git(repo, "status", "--short") == ""
    merges = git(repo, "log", "--merges", "--format=%s", "main").splitlines()
    assert sorted(merges) == [f"Merge taskherd/task-{first.id}: a",
                              f"Merge taskherd/task-{second.id}: b"]
    # Merged worktrees and branches are removed.
    fleet.wait_until(lambda: all(fleet.store.worktree_of(t.id).state == "removed"
                                 for t in (first, second)), what="the worktrees to be removed")
    assert not list((fleet.data_dir / "worktrees").glob("task-*"))
    assert git(repo, "branch", "--list", "taskherd/*") == ""


def test_two_tasks_changing_the_same_lines_one_merges_one_is_blocked_naming_the_file(
        git_fleet, repo):
    fleet = git_fleet()
    first = fleet.add("a", role="coder", prompt=change("shared.txt", "ONE\ntwo\nthree\n"))
    second = fleet.add("b", role="coder", prompt=change("shared.txt", "uno\ntwo\nthree\n"))
    outcomes = {settled(fleet, t.id).state: fleet.store.get_task(t.id) for t in (first, second)}
    assert set(outcomes) == {TaskState.COMPLETED, TaskState.BLOCKED}
    blocked = outcomes[TaskState.BLOCKED]
    assert "conflicts in 1 file(s): shared.txt" in blocked.reason
    merged = outcomes[TaskState.COMPLETED]
    expected = "ONE" if merged.id == first.id else "uno"
    assert git(repo, "show", "main:shared.txt").splitlines()[0] == expected
    # The blocked task's branch and worktree are kept for a person to resolve.
    assert git(repo, "rev-parse", "--verify", f"taskherd/task-{blocked.id}")
    assert (fleet.data_dir / "worktrees" / f"task-{blocked.id}").is_dir()
    assert fleet.store.worktree_of(blocked.id).conflicts == ("shared.txt",)


def test_the_base_never_holds_an_unreviewed_commit(git_fleet, repo):
    fleet = git_fleet(review=True)
    start = git(repo, "rev-parse", "main")
    task = fleet.add("a", role="coder", prompt=change("a.txt", "reviewed\n"))
    waiting = settled(fleet, task.id)
    assert waiting.state is TaskState.NEEDS_REVIEW
    assert git(repo, "rev-parse", "main") == start  # the work waits on its branch
    assert git(repo, "show", f"taskherd/task-{task.id}:a.txt") == "reviewed"
    fleet.cli("task", "approve", str(task.id))
    assert fleet.store.get_task(task.id).state is TaskState.COMPLETED
    assert git(repo, "show", "main:a.txt") == "reviewed"


def test_a_rejected_attempt_continues_in_the_same_worktree(git_fleet, repo):
    fleet = git_fleet(review=True)
    start = git(repo, "rev-parse", "main")
    task = fleet.add("a", role="coder", prompt=change("a.txt", "first try\n"))
    assert settled(fleet, task.id).state is TaskState.NEEDS_REVIEW
    first_tip = git(repo, "rev-parse", f"taskherd/task-{task.id}")
    fleet.cli("task", "reject", str(task.id), "--reason", "again")
    fleet.wait_until(lambda: len(fleet.store.runs_of_task(task.id)) == 2
                     and fleet.store.get_task(task.id).state is TaskState.NEEDS_REVIEW,
                     timeout=30, what="the second attempt")
    # The second attempt's commit sits on top of the first: same worktree, same branch.
    assert git(repo, "rev-parse", f"taskherd/task-{task.id}~1") == first_tip
    assert git(repo, "rev-parse", "main") == start
