"""A git hook that hangs costs its own task only: a real repository whose
`reference-transaction` hook blocks on a FIFO when the base branch moves (as a slow CI
trigger or a network hook would), a real daemon, real agents.

While the hook hangs the merging task waits in `merging`; `task add` returns, another role's
task is claimed and started, and its agent's `taskherd done` is heard. Released, the task
completes merged; past the role's `merge_timeout`, the hook is killed with its process group
and the task is blocked with the reason; a daemon killed mid-merge merges again when it is
back, and the task completes once.

The same holds for making a task's worktree, whose `post-checkout` hook blocks likewise: the
run waits claimed (never rescued as unspawned meanwhile) and starts in its worktree once the
hook is released; past the limit the task is blocked with the reason, no strike.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from taskherd.model import FINAL_STATES, TaskState
from tests.fleet import PYTHON, Fleet, agent
from tests.integration.fifo_gate import release
from tests.integration.test_worktrees import IDENTITY, git

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
# Blocks each checkout (a `git worktree add` too) until the FIFO is opened: a slow install
# step, or one that hangs.
POST_CHECKOUT = """#!/bin/sh
echo $$ >> "{started}"
cat "{fifo}" > /dev/null
"""
# Blocks every commit after it is made (a slow notifier), until the FIFO is opened.
POST_COMMIT = """#!/bin/sh
echo $$ >> "{started}"
cat "{fifo}" > /dev/null
"""

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

    def make(merge_timeout: str = "5m", hooks: bool = False, spawn_timeout: str = "30s",
             coders: int = 4, slots: int = 4) -> Fleet:
        coder, writer = agent(tmp_path, "coder", CODER), agent(tmp_path, "writer", WRITER)
        env = ", ".join(f'{key} = "{value}"' for key, value in IDENTITY.items())
        node = Fleet(tmp_path, f"""
            [daemon]
            database = "q.db"
            data_dir = "data"
            timezone = "UTC"
            max_concurrent = {slots}
            node_timeout = "5s"

            [roles.coder]
            command = ["{PYTHON}", "{coder}"]
            env = {{ {env} }}
            max_attempts = 1
            spawn_timeout = "{spawn_timeout}"
            max_concurrent = {coders}

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
    from taskherd.host import worktrees

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


def install(repo: Path, name: str, body: str, hook) -> None:
    script = repo / ".git" / "hooks" / name
    script.write_text(body.format(**hook))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def claimed_behind_the_checkout_hook(fleet: Fleet, hook):
    """A coder task whose worktree is being made, its post-checkout hook hanging."""
    task = fleet.add("feature", role="coder",
                     prompt=json.dumps({"file": "feature.txt", "content": "new\n"}))
    fleet.wait_until(lambda: hook_starts(hook), 30, "the post-checkout hook to hang")
    [run] = fleet.store.runs_of_task(task.id)
    assert fleet.store.get_task(task.id).state is TaskState.CLAIMED and run.spawned_at is None
    return task, run


def monitor_passed_since(fleet: Fleet, moment: float) -> None:
    """Wait for a whole pass of the node's monitor that began after `moment`: a heartbeat
    (its pass's first write) at or after it, then a later one (the pass before it ended)."""
    def seen() -> float:
        [node] = fleet.store.list_nodes()
        return node.last_seen

    first = fleet.wait_until(lambda: (at := seen()) >= moment and at, 30, "a monitor pass")
    fleet.wait_until(lambda: seen() > first, 30, "the next monitor pass")


def test_a_hanging_post_checkout_hook_holds_up_its_own_task_only_and_released_it_runs(
        fleet, hook, repo):
    install(repo, "post-checkout", POST_CHECKOUT, hook)
    node = fleet(spawn_timeout="1s")
    task, run = claimed_behind_the_checkout_hook(node, hook)
    the_queue_goes_on(node)
    # Past its spawn_timeout, the run being prepared is not rescued as never spawned.
    monitor_passed_since(node, run.claimed_at + 1.0)
    assert node.store.get_run(run.id).ended_at is None
    assert node.store.get_task(task.id).state is TaskState.CLAIMED
    release(hook["fifo"])
    # The agent runs in its worktree; its merge then meets the reference-transaction hook.
    node.wait_until(lambda: len(hook_starts(hook)) == 2, 30, "the merge to reach its hook")
    release(hook["fifo"])
    done = node.wait_final(task.id, timeout=30)
    assert done.state is TaskState.COMPLETED and done.attempts == 0
    assert git(repo, "show", "main:feature.txt") == "new"
    [ran] = node.store.runs_of_task(task.id)
    assert ran.id == run.id and ran.outcome.value == "succeeded" and ran.pid is not None


def test_runs_whose_worktree_is_being_made_hold_their_slots(fleet, hook, repo):
    install(repo, "post-checkout", POST_CHECKOUT, hook)
    node = fleet(slots=2)
    first, _ = claimed_behind_the_checkout_hook(node, hook)
    second = node.add("second", role="coder",
                      prompt=json.dumps({"file": "second.txt", "content": "2\n"}))
    node.wait_until(lambda: len(hook_starts(hook)) == 2, 30, "the second checkout to hang")
    # The node's two slots are theirs, though no agent runs yet: another role's P0 waits.
    urgent = node.add("urgent", role="writer", priority="P0")
    node.wait_until(lambda: re.search(rf"P0 task {urgent.id} \(writer\) waits: node \S+ is at "
                                      "max_concurrent 2", node.daemon_log.read_text()),
                    30, "the P0 to be held back")
    assert node.store.get_task(urgent.id).state is TaskState.READY
    assert node.stop() == 0  # stops both hooks (see below)
    for task in (first, second):
        assert node.store.get_task(task.id).state is TaskState.READY


def test_a_post_checkout_hook_past_merge_timeout_blocks_its_task_with_the_reason_no_strike(
        fleet, hook, repo):
    install(repo, "post-checkout", POST_CHECKOUT, hook)
    node = fleet(merge_timeout="2s")
    task, run = claimed_behind_the_checkout_hook(node, hook)
    the_queue_goes_on(node)
    blocked = node.wait_until(
        lambda: (t := node.store.get_task(task.id)).state is TaskState.BLOCKED and t, 30,
        "making the worktree to time out")
    assert "within merge_timeout 2s" in blocked.reason and "post-checkout" in blocked.reason
    assert blocked.attempts == 0  # the repository's fault, not the agent's
    ended = node.store.get_run(run.id)
    assert ended.outcome.value == "blocked" and ended.pid is None  # no agent started
    [pid] = hook_starts(hook)
    node.wait_until(lambda: not _alive(pid), 10, "the hook to be gone")
    the_queue_goes_on(node)


def test_a_task_cancelled_while_its_worktree_is_made_never_starts_an_agent(fleet, hook, repo):
    install(repo, "post-checkout", POST_CHECKOUT, hook)
    node = fleet()
    task, run = claimed_behind_the_checkout_hook(node, hook)
    node.cli("task", "cancel", str(task.id))
    # Its git is stopped (the hook with it) and the run ends cancelled, with no agent.
    ended = node.wait_until(lambda: (r := node.store.get_run(run.id)).ended_at and r, 30,
                            "the run to end")
    assert ended.outcome.value == "cancelled" and ended.pid is None
    [pid] = hook_starts(hook)
    node.wait_until(lambda: not _alive(pid), 10, "the hook to be gone")
    assert node.store.get_task(task.id).state is TaskState.CANCELLED
    the_queue_goes_on(node)


def test_a_daemon_stopped_while_a_worktree_is_made_releases_the_run_and_stops_the_hook(
        fleet, hook, repo):
    install(repo, "post-checkout", POST_CHECKOUT, hook)
    node = fleet()
    task, run = claimed_behind_the_checkout_hook(node, hook)
    assert node.stop() == 0  # at once, not held by the hook until merge_timeout (5 minutes)
    ended = node.store.get_run(run.id)
    assert ended.outcome.value == "lost" and "worktree" in ended.error
    released = node.store.get_task(task.id)
    assert released.state is TaskState.READY and released.attempts == 0
    [pid] = hook_starts(hook)
    assert not _alive(pid)


def test_a_made_worktree_is_found_without_git_unless_a_git_was_left_working_on_it(
        repo, tmp_path):
    from taskherd.host import worktrees

    root = tmp_path / "trees"
    assert worktrees.made_worktree(repo, 1, root) is None
    path = worktrees.ensure_worktree(repo, "main", 1, root)
    assert worktrees.made_worktree(repo, 1, root) == path
    assert worktrees.made_worktree(repo, 2, root) is None
    worktrees.running_record(root, 1).write_text("1 0\n")  # an earlier daemon's git
    assert worktrees.made_worktree(repo, 1, root) is None
    worktrees.running_record(root, 1).unlink()
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(repo), str(other)], check=True)
    assert worktrees.made_worktree(other, 1, root) is None  # another repository's
    subprocess.run(["rm", "-rf", str(path)], check=True)
    assert worktrees.made_worktree(repo, 1, root) is None
    assert worktrees.ensure_worktree(repo, "main", 1, root) == path  # made again


def test_a_daemon_killed_while_a_worktree_is_made_is_rescued_no_strike_its_git_stopped(
        fleet, hook, repo):
    install(repo, "post-checkout", POST_CHECKOUT, hook)
    node = fleet()
    task, run = claimed_behind_the_checkout_hook(node, hook)
    node.daemon.kill()  # kill -9: its git and the hook go on, in their own session
    node.daemon.wait(10)
    [left] = hook_starts(hook)
    assert _alive(left)
    node.up()
    # Back, it releases the run (never spawned: lost, no strike), and the next run stops the
    # git left working on the task before it uses the worktree; then it runs and merges.
    node.wait_until(lambda: len(hook_starts(hook)) == 2, 30, "the merge to reach its hook")
    assert not _alive(left)
    release(hook["fifo"])
    done = node.wait_final(task.id, timeout=30)
    assert done.state is TaskState.COMPLETED and done.attempts == 0
    first, second = node.store.runs_of_task(task.id)
    assert first.id == run.id and first.outcome.value == "lost" and first.pid is None
    assert second.outcome.value == "succeeded"
    assert git(repo, "show", "main:feature.txt") == "new"
