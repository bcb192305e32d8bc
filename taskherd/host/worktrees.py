"""A git worktree per coding task, and merging its branch into the base (the OS layer).

A task of a role with `[roles.NAME.git]` works in its own `git worktree` on the branch
`taskherd/task-ID`, created from the base branch's current commit; a retry (or a rejection's
next attempt) continues in the same worktree. When the task completes, its branch is merged
into the base without touching any working tree: `git merge-tree --write-tree` computes the
result (and names the conflicting files), `git commit-tree` writes the merge commit and
`git update-ref` moves the base only if it still points where it did (compare and swap). If
the repository's own checkout is on the base, it is moved along with `git read-tree -m -u`,
which refuses to overwrite local changes.

Every git command is an argv list; branch names and paths are derived from task ids only, so
no task text ever reaches git. Each runs in a process group of its own, with its hooks: one
that outlives its time (`time_limit`, else GIT_TIMEOUT) is stopped with the whole group
(SIGTERM, then SIGKILL), so a hook's own children (a `sleep`, a test run) go too and never
keep it waiting on their pipes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BRANCH_PREFIX = "taskherd/task-"
# Merge commits are taskherd's own: its name, whatever identity (or none) the host has.
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "taskherd", "GIT_AUTHOR_EMAIL": "taskherd@localhost",
                "GIT_COMMITTER_NAME": "taskherd", "GIT_COMMITTER_EMAIL": "taskherd@localhost"}
GIT_TIMEOUT = 300.0
STOP_GRACE = 5.0  # seconds between the SIGTERM and the SIGKILL of a git stopped at its limit
# Leftover commits run no hooks unless the role asks (`hooks = true`): -c core.hooksPath
# points git at an empty place, so not even post-commit or reference-transaction run.
NO_HOOKS = ("-c", "core.hooksPath=/dev/null")
_limit = threading.local()  # this thread's deadline for its git commands (time.monotonic)


WORKTREE_ADD_TRIES = 5  # a `git worktree add` that met another add under way (see ensure_worktree)


class GitError(OSError):
    """A git command failed; the message names the command and what git said."""


class GitTimeout(GitError):
    """A git command (or one of its hooks) ran past its time limit and was killed."""


@contextmanager
def time_limit(seconds: float, record: Path | None = None) -> Iterator[None]:
    """The git commands this thread runs within the block share one deadline: a merge is
    several commands, and its limit is for all of them (a nested limit cannot extend it).
    With `record`, the file names the command running (pid and start time), so that a
    daemon that died mid-merge can stop what it left running (`stop_left_running`)."""
    outer = getattr(_limit, "deadline", None), getattr(_limit, "record", None)
    deadline = time.monotonic() + seconds
    _limit.deadline = deadline if outer[0] is None else min(outer[0], deadline)
    _limit.record = record or outer[1]
    try:
        yield
    finally:
        _limit.deadline, _limit.record = outer
        if record is not None:
            record.unlink(missing_ok=True)


def stop_left_running(record: Path) -> bool:
    """Stop the git command `record` names if it still runs (with its hooks, as a timeout
    does): a daemon killed mid-merge leaves its git in a session of its own, where a hook
    that hangs keeps the base's ref locked and every later merge into it refused."""
    import psutil  # here: config.py imports this module, and the CLI starts light

    try:
        pid, started_at = record.read_text().split()
        process = psutil.Process(int(pid))
        alive = abs(process.create_time() - float(started_at)) < 1.0
    except (OSError, ValueError, psutil.Error):
        alive = False
    if alive:
        _stop_group(int(pid), lambda: not _group_alive(int(pid)))
    record.unlink(missing_ok=True)
    return alive


@dataclass(frozen=True)
class MergeResult:
    merged: bool
    commit: str | None = None  # the base's new commit (None: nothing to merge, or a conflict)
    conflicts: tuple[str, ...] = ()
    fast_forward: bool = False

    def reason(self, branch: str, base: str) -> str:
        files = ", ".join(self.conflicts[:20]) + (" …" if len(self.conflicts) > 20 else "")
        return (f"merging {branch} into {base} conflicts in {len(self.conflicts)} file(s): "
                f"{files}; the branch is kept: resolve it there, then unblock the task")


def branch_for(task_id: int) -> str:
    return f"{BRANCH_PREFIX}{int(task_id)}"


def worktree_path(root: Path, task_id: int) -> Path:
    return root / f"task-{int(task_id)}"


def running_record(root: Path, task_id: int) -> Path:
    """Where the git command working for the task (a leftover commit, its merge) is named
    while it runs: see `time_limit` and `stop_left_running`."""
    return root / f"task-{int(task_id)}.git-running"


@contextmanager
def _unlimited() -> Iterator[None]:
    """No time limit but GIT_TIMEOUT within the block: for the reads and the undo that follow
    a command the limit stopped."""
    outer = getattr(_limit, "deadline", None)
    _limit.deadline = None
    try:
        yield
    finally:
        _limit.deadline = outer


def git(repo: Path | str, *args: str, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `git -C repo ARGS…` (never a shell); GitError when it fails and `check`, or when
    it (or a hook) runs past this thread's time limit: then its process group is killed."""
    argv = ["git", "-C", str(repo), *args]
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    deadline = getattr(_limit, "deadline", None)
    # Within a time limit, the limit alone: a role's merge_timeout may well exceed GIT_TIMEOUT.
    timeout = GIT_TIMEOUT if deadline is None else deadline - time.monotonic()
    what = f"git {' '.join(args)}"
    if timeout <= 0:
        raise GitTimeout(f"{what}: not started, its time limit had passed")
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True, env=full_env,
                                   start_new_session=True)
    except OSError as error:
        raise GitError(f"{what}: {error}") from error
    _note_running(process)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise GitTimeout(f"{what} in {repo}: still running after {timeout:.0f}s (a hook that "
                       f"hangs?): stopped, with its hooks") from None
    if check and process.returncode != 0:
        said = (err or out).strip().splitlines()
        raise GitError(f"{what} in {repo}: {said[-1] if said else process.returncode}")
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def _note_running(process: subprocess.Popen[str]) -> None:
    record = getattr(_limit, "record", None)
    if record is None:
        return
    import psutil

    try:
        started_at = psutil.Process(process.pid).create_time()
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w") as out:
            out.write(f"{process.pid} {started_at}\n")
    except (OSError, psutil.Error):
        pass  # ended already, or nowhere to write: nothing a restart would have to stop


def _kill_group(process: subprocess.Popen[str]) -> None:
    """Stop git and every process of its group (its hooks and theirs), then reap it. A hook
    that left the group may still hold the pipes: they are closed rather than read."""
    _stop_group(process.pid, lambda: process.poll() is not None)
    try:
        process.communicate(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        process.wait()


def _stop_group(pgid: int, ended: Callable[[], bool]) -> None:
    """SIGTERM first: git removes its lock files on it (a SIGKILLed update-ref leaves
    `refs/heads/BASE.lock` behind, and every later update of the base fails); SIGKILL after
    STOP_GRACE for a group that ignored it."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline:
            if ended() and not _group_alive(pgid):
                return
            time.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ensure_worktree(repo: Path, base: str, task_id: int, root: Path) -> Path:
    """The task's worktree, made on first use from the base's current commit; an existing
    one (a retry, a rejected attempt) is reused as it is, with the work done so far."""
    path = worktree_path(root, task_id)
    branch = branch_for(task_id)
    if path.is_dir() and _is_worktree_of(repo, path):
        return path
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    git(repo, "worktree", "prune")  # a folder removed by hand leaves a stale entry behind
    for attempt in range(1, WORKTREE_ADD_TRIES + 1):
        try:
            if _branch_exists(repo, branch):
                git(repo, "worktree", "add", "--", str(path), branch)
            else:
                git(repo, "worktree", "add", "-b", branch, "--", str(path), f"refs/heads/{base}")
            return path
        except GitTimeout:
            raise
        except GitError as error:
            # Two tasks' worktrees made at once in one repository (they are made in threads):
            # `git worktree add` reads every other worktree's entry before it writes anything,
            # and fails on one that the other add is still writing ("failed to read
            # .git/worktrees/task-1/commondir"). git's own race, over in milliseconds.
            if "/worktrees/" not in str(error) or attempt == WORKTREE_ADD_TRIES:
                raise
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable: the last try returns or raises")


def made_worktree(repo: Path, task_id: int, root: Path) -> Path | None:
    """The task's worktree if it is already made and nothing an earlier daemon left is still
    working on it (a later attempt), found from the files git keeps, without running git:
    the supervisor asks on the daemon's loop. None when that cannot be told so: then
    `ensure_worktree`, off the loop, makes it or finds it with git."""
    path = worktree_path(root, task_id)
    if running_record(root, task_id).exists():
        return None  # a git an earlier daemon left running: stopped first, off the loop
    try:
        pointer = (path / ".git").read_text().strip()  # "gitdir: REPO/.git/worktrees/NAME"
        admin = (path / pointer.removeprefix("gitdir: ")).resolve()
        back = (admin / "gitdir").read_text().strip()  # and back: "PATH/.git"
    except (OSError, ValueError):
        return None
    common = repo / ".git" if (repo / ".git").is_dir() else repo  # a bare repository
    if (not pointer.startswith("gitdir: ") or admin.parent.name != "worktrees"
            or admin.parent.parent != common.resolve()
            or (admin / back).resolve() != (path / ".git").resolve()
            or (admin / "locked").exists()):  # (locked while `git worktree add` makes it)
        return None
    return path


def commit_leftovers(path: Path, message: str, hooks: bool = False,
                     repo: Path | None = None) -> str | None:
    """Commit what the agent changed in its worktree but did not commit (an agent that edits
    and never runs `git commit`): the work must reach the branch, never be removed with the
    worktree. The commit's id, or None when the tree was clean (or is gone). Without `hooks`
    the repository's hooks do not run: a pre-commit check refusing the agent's leftovers
    would leave them out of the branch.

    With `repo` (always, from the daemon), git is told where the worktree's repository is
    instead of reading it from the worktree: the agent owns the worktree's `.git` file and
    the admin folder's `commondir`, and either, pointed at a repository it made, would have
    this git, run outside any sandbox, load that repository's config (a `core.fsmonitor`
    command, say) and run it."""
    if not path.is_dir():
        return None
    env = _trusted_worktree_env(repo, path) if repo is not None else {}
    if not git(path, "status", "--porcelain", "--untracked-files=all", env=env).stdout.strip():
        return None
    git(path, "add", "-A", env=env)
    if hooks:
        git(path, "commit", "-q", "-m", message, env=GIT_IDENTITY | env)
    else:
        git(path, *NO_HOOKS, "commit", "-q", "--no-verify", "-m", message,
            env=GIT_IDENTITY | env)
    return git(path, "rev-parse", "HEAD", env=env).stdout.strip()


def _trusted_worktree_env(repo: Path, path: Path) -> dict[str, str]:
    """GIT_DIR, GIT_COMMON_DIR and GIT_WORK_TREE of the worktree at `path`, read from the
    repository (whose config and hooks no agent can write), never from the worktree; and the
    links git would otherwise follow written back as they were made (the worktree's `.git`,
    the admin folder's `commondir`, `gitdir` and `HEAD`, its task's branch): git still reads
    `commondir` for the refs, whatever GIT_COMMON_DIR says."""
    common = Path(git(repo, "rev-parse", "--path-format=absolute",
                      "--git-common-dir").stdout.strip())
    admin = common / "worktrees" / path.name  # as ensure_worktree names it: task-ID
    task_id = path.name.removeprefix("task-")
    if not admin.is_dir() or not task_id.isdigit():
        raise GitError(f"{path}: no worktree of {repo} is registered as {path.name}")
    for link, text in ((path / ".git", f"gitdir: {admin}"), (admin / "commondir", "../.."),
                       (admin / "gitdir", str(path / ".git")),
                       (admin / "HEAD", f"ref: refs/heads/{branch_for(int(task_id))}")):
        try:  # never through a symlink the agent put there: this runs outside its box
            fd = os.open(link, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            raise GitError(f"{link}: not a file as git made it: {error}") from error
        try:
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)
    return {"GIT_DIR": str(admin), "GIT_COMMON_DIR": str(common), "GIT_WORK_TREE": str(path)}


def merge_branch(repo: Path, base: str, branch: str, mode: str, message: str) -> MergeResult:
    """Merge `branch` into `base` (see the module's note); a conflict changes nothing."""
    old = _commit_of(repo, f"refs/heads/{base}")
    tip = _commit_of(repo, f"refs/heads/{branch}")
    if _is_ancestor(repo, tip, old):
        return MergeResult(merged=True)  # nothing new (already merged, or no commit made)
    if mode == "fast-forward" and _is_ancestor(repo, old, tip):
        new, fast_forward = tip, True
    else:
        tree, conflicts = _merged_tree(repo, old, tip)
        if conflicts:
            return MergeResult(merged=False, conflicts=conflicts)
        new = git(repo, "commit-tree", tree, "-p", old, "-p", tip, "-m", message,
                  env=GIT_IDENTITY).stdout.strip()
        fast_forward = False
    try:
        _move_base(repo, base, old, new)
    except GitError:
        # If the base holds the branch all the same, this merge landed: an earlier attempt
        # finished it (a daemon that died mid-merge left its git to end the update), or a
        # hook hung after the update and was killed. Asked past the time limit: these reads
        # run no hook.
        with _unlimited():
            if _is_ancestor(repo, tip, f"refs/heads/{base}"):
                return MergeResult(merged=True, commit=_commit_of(repo, f"refs/heads/{base}"))
        raise
    return MergeResult(merged=True, commit=new, fast_forward=fast_forward)


def remove_worktree(repo: Path, path: Path, branch: str | None = None,
                    base: str | None = None) -> None:
    """Remove the worktree, and `branch` too when it is merged into `base`; a worktree
    already gone is no error."""
    if path.exists():
        git(repo, "worktree", "remove", "--force", "--", str(path))
    else:
        git(repo, "worktree", "prune")
    if branch and base and _branch_exists(repo, branch) and _is_ancestor(
            repo, f"refs/heads/{branch}", f"refs/heads/{base}"):
        git(repo, "branch", "-D", "--", branch)


def task_worktrees(repo: Path, root: Path) -> dict[int, Path]:
    """The worktrees of `repo` under `root` that taskherd made, by task id."""
    listing = git(repo, "worktree", "list", "--porcelain", "-z").stdout.split("\0")
    found = {}
    for line in listing:
        if not line.startswith("worktree "):
            continue
        path = Path(line.removeprefix("worktree "))
        if path.parent == root and path.name.startswith("task-") and path.name[5:].isdigit():
            found[int(path.name[5:])] = path
    return found


def _merged_tree(repo: Path, ours: str, theirs: str) -> tuple[str, tuple[str, ...]]:
    done = git(repo, "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z",
               ours, theirs, check=False)
    if done.returncode not in (0, 1):
        raise GitError(f"git merge-tree in {repo}: {done.stderr.strip()}")
    fields = [field for field in done.stdout.split("\0") if field]
    tree, files = fields[0].strip(), tuple(dict.fromkeys(f.strip() for f in fields[1:]))
    return tree, files if done.returncode == 1 else ()


def _move_base(repo: Path, base: str, old: str, new: str) -> None:
    """Point the base at `new` if it still is at `old`; a checkout of the base follows."""
    checked_out = _base_checked_out(repo, base)
    if checked_out:
        # Files first: read-tree refuses (and changes nothing) if local edits would be lost.
        git(repo, "read-tree", "-m", "-u", old, new)
    try:
        git(repo, "update-ref", "-m", f"taskherd: merge into {base}", f"refs/heads/{base}",
            new, old)
    except GitError:
        # The files go back unless the base did move (a hook killed after the update); past
        # the time limit, as read-tree runs no hook and must not leave the checkout half-moved.
        with _unlimited():
            if checked_out and _commit_of(repo, f"refs/heads/{base}") != new:
                git(repo, "read-tree", "-m", "-u", new, old)
        raise


def _base_checked_out(repo: Path, base: str) -> bool:
    if git(repo, "rev-parse", "--is-bare-repository").stdout.strip() == "true":
        return False
    head = git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip()
    return head == f"refs/heads/{base}"


def _commit_of(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").stdout.strip()


def _is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", ancestor, descendant,
               check=False).returncode == 0


def _branch_exists(repo: Path, branch: str) -> bool:
    return git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}",
               check=False).returncode == 0


def _is_worktree_of(repo: Path, path: Path) -> bool:
    return path.resolve() in {p.resolve() for p in task_worktrees(repo, path.parent).values()}
