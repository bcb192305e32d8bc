"""A git worktree per coding task, with real repositories and a real daemon: each task works
on its own branch, its completion merges it into the base one merge at a time, a conflict
blocks the task naming the files, and nothing unreviewed ever reaches the base."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from taskherd.model import TaskState
from taskherd.policy.admission import ClaimRequest
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
    if not words.get("leave_uncommitted"):
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


def change(file: str, content: str, **more) -> str:
    return json.dumps({"file": file, "content": content, **more})


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


def test_work_the_agent_left_uncommitted_is_committed_and_merged_never_lost(git_fleet, repo):
    fleet = git_fleet()
    task = fleet.add("a", role="coder", prompt=change("new.txt", "forgot to commit\n",
                                                       leave_uncommitted=True))
    assert settled(fleet, task.id).state is TaskState.COMPLETED
    assert git(repo, "show", "main:new.txt") == "forgot to commit"
    assert "Uncommitted work of run" in git(repo, "log", "--format=%s", "main")


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
    # Approved, the task waits in `merging` for the daemon's merger, then completes merged.
    assert settled(fleet, task.id).state is TaskState.COMPLETED
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


def test_abandoned_worktrees_go_after_keep_and_doctor_names_stray_ones(tmp_path, repo):
    from taskherd.config import parse_config
    from taskherd.doctor import check_worktrees
    from taskherd.host import worktrees
    from taskherd.model import NewTask
    from taskherd.services.worktrees import WorktreeJanitor
    from taskherd.store import open_store

    now = 1_800_000_000.0
    config = parse_config({
        "daemon": {"database": "q.db", "data_dir": "data", "timezone": "UTC"},
        "roles": {"coder": {"command": ["true"], "git": {"repo": str(repo), "keep": "1d"}}},
    }, base_dir=tmp_path)
    root = config.daemon.data_dir / "worktrees"
    with open_store(config.daemon.database, durability="normal") as store:
        task = store.enqueue(NewTask(role="coder", title="abandoned"), now).task
        path = worktrees.ensure_worktree(repo, "main", task.id, root)
        store.record_worktree(task.id, repo=str(repo), base="main",
                              branch=worktrees.branch_for(task.id), path=str(path),
                              merge_mode="merge-commit", pool="git-main", now=now)
        store.cancel(task.id, now)
        janitor = WorktreeJanitor(config, store)
        assert janitor.run_once(now + 3600)["removed"] == 0  # kept for a day
        assert janitor.run_once(now + 86400 + 1)["removed"] == 1
        assert not path.exists() and store.worktree_of(task.id).state == "removed"
        # The branch of an abandoned task stays, for a person to look at.
        assert git(repo, "branch", "--list", f"taskherd/task-{task.id}")
        assert check_worktrees(config, config.role("coder")).status == "ok"
        # A worktree taskherd has no record of is stray: doctor names it.
        stray = worktrees.ensure_worktree(repo, "main", 99, root)
        check = check_worktrees(config, config.role("coder"))
        assert check.status == "warn" and str(stray) in check.why


def test_fast_forward_mode_and_a_checkout_with_local_edits_is_never_overwritten(repo):
    from taskherd.host import worktrees

    root = repo.parent / "trees"
    path = worktrees.ensure_worktree(repo, "main", 1, root)
    (path / "a.txt").write_text("fast\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "fast")
    result = worktrees.merge_branch(repo, "main", "taskherd/task-1", "fast-forward", "m")
    assert result.merged and result.fast_forward
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "taskherd/task-1")
    # A person's uncommitted edit of a file the merge would change: the merge is refused
    # and neither the base nor the edit moves.
    path = worktrees.ensure_worktree(repo, "main", 2, root)
    (path / "README").write_text("from the task\n")
    git(path, "commit", "-q", "-am", "readme")
    (repo / "README").write_text("a person's edit\n")
    before = git(repo, "rev-parse", "main")
    with pytest.raises(worktrees.GitError):
        worktrees.merge_branch(repo, "main", "taskherd/task-2", "merge-commit", "m")
    assert git(repo, "rev-parse", "main") == before
    assert (repo / "README").read_text() == "a person's edit\n"


def test_merges_settling_at_the_same_moment_run_one_at_a_time(tmp_path, repo, database):
    """Two nodes (two stores, two mergers) merge two tasks at once: each merge holds the pool,
    so the second starts from the first's result and both land; merges that overlapped would
    lose the compare-and-swap of the base, and one task would be blocked."""
    import threading

    from taskherd.config import parse_config
    from taskherd.host import worktrees
    from taskherd.model import NewTask, Outcome, RunResult
    from taskherd.model.settings import RetryPolicy
    from taskherd.services.worktrees import Merger
    from taskherd.store import open_store

    now = 1_800_000_000.0
    root = repo.parent / "trees"
    stores = [open_store(database, durability="normal") for _ in range(2)]
    try:
        runs = []
        for index, store in enumerate(stores):
            task = store.enqueue(NewTask(role="coder", title=f"t{index}"), now).task
            claim = store.claim(ClaimRequest("node", now, 60, roles=["coder"]))
            store.mark_spawned(claim.run.id, now, 60, pid=None, pid_started_at=None,
                               log_path=None)
            path = worktrees.ensure_worktree(repo, "main", task.id, root)
            (path / f"file{index}.txt").write_text(f"{index}\n")
            git(path, "add", "-A")
            git(path, "commit", "-q", "-m", f"task {index}")
            store.record_worktree(task.id, repo=str(repo), base="main",
                                  branch=worktrees.branch_for(task.id), path=str(path),
                                  merge_mode="merge-commit", pool="git-main", now=now)
            store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0, summary="ok"),
                             RetryPolicy(), now + 1)
            assert store.get_task(task.id).state is TaskState.MERGING
            runs.append(task.id)
        mergers = [Merger(parse_config({
            "daemon": {"database": "q.db", "node": f"node-{index}", "timezone": "UTC"},
            "roles": {"coder": {"command": ["true"], "git": {"repo": str(repo)}}},
        }, base_dir=tmp_path), store, clock=lambda: now + 2) for index, store in enumerate(stores)]
        start = threading.Barrier(2)

        def merge_all(merger):
            start.wait()
            while merger.store.merges_due():
                merger.run_once(now + 2)
                merger.join(60)

        threads = [threading.Thread(target=merge_all, args=(merger,)) for merger in mergers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        states = [stores[0].get_task(task_id).state for task_id in runs]
        assert states == [TaskState.COMPLETED, TaskState.COMPLETED]
        assert git(repo, "show", "main:file0.txt") == "0"
        assert git(repo, "show", "main:file1.txt") == "1"
    finally:
        for store in stores:
            store.close()


def test_worktrees_made_at_once_in_one_repository_are_all_made(repo, tmp_path):
    """The supervisor makes each task's worktree in a thread of its own, so two tasks of one
    repository may be made at once: neither may fail for the other's half-written entry."""
    from concurrent.futures import ThreadPoolExecutor

    from taskherd.host import worktrees

    root = tmp_path / "worktrees"
    task_ids = range(1, 9)
    with ThreadPoolExecutor(len(task_ids)) as pool:
        made = list(pool.map(lambda task_id: worktrees.ensure_worktree(repo, "main", task_id,
                                                                        root), task_ids))
    assert made == [worktrees.worktree_path(root, task_id) for task_id in task_ids]
    for path in made:
        assert (path / "shared.txt").read_text() == "one\ntwo\nthree\n"
    listed = git(repo, "worktree", "list", "--porcelain")
    assert all(str(path) in listed for path in made)


@pytest.mark.parametrize("plant", ["dot_git_file", "commondir"])
def test_committing_an_agents_leftovers_runs_no_command_it_planted(repo, tmp_path, plant):
    """The worktree is the agent's: its `.git` file, or its admin folder's `commondir`,
    pointed at a repository the agent made, whose config names a command (core.fsmonitor),
    would have the daemon's git, outside any sandbox, run it. Told the repository by the
    daemon, git runs nothing of the agent's; trusting the worktree (no `repo`), it does."""
    from taskherd.host import worktrees

    path = worktrees.ensure_worktree(repo, "main", 9, tmp_path / "worktrees")
    (path / "left.txt").write_text("uncommitted work\n")
    ran = tmp_path / "ran"
    fake = tmp_path / "fake"
    subprocess.run(["git", "init", "-q", str(fake)], check=True)
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    hook.chmod(0o755)
    subprocess.run(["git", "-C", str(fake), "config", "core.fsmonitor", str(hook)], check=True)
    admin = repo / ".git" / "worktrees" / path.name
    if plant == "dot_git_file":
        (path / ".git").write_text(f"gitdir: {fake / '.git'}\n")
    else:
        (admin / "commondir").write_text(str(fake / ".git") + "\n")

    trusting = worktrees.commit_leftovers  # as it was: the repository read from the worktree
    try:
        trusting(path, "leftovers")
    except worktrees.GitError:
        pass  # the planted repository may not take the commit: the command ran before
    assert ran.exists()  # so this test would catch a git that trusts the worktree
    ran.unlink()
    # The plant stays, and the other one is added: told the repository, git reads neither.
    (path / ".git").write_text(f"gitdir: {fake / '.git'}\n")
    (admin / "commondir").write_text(str(fake / ".git") + "\n")
    commit = worktrees.commit_leftovers(path, "leftovers", repo=repo)
    assert not ran.exists()
    assert commit and "left.txt" in git(repo, "show", "--name-only", "--format=", commit)
