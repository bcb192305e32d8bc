"""A task's git worktree, made and removed in a repository of 10,000 files, against plain git.

    .venv/bin/python bench/worktrees.py               # 10,000 files, 5 rounds
    .venv/bin/python bench/worktrees.py --files 50000 --rounds 3

taskherd's side is what the supervisor and the janitor do for one task: `ensure_worktree`
(prune stale entries, look for the branch, `git worktree add -b taskherd/task-ID`) and
`remove_worktree` (`git worktree remove`, the merged branch deleted). The floor is the same
work typed by hand: `git worktree add -b B PATH main`, `git worktree remove --force PATH`,
`git branch -D B`. Rounds alternate between the two; the medians and their ratio are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskherd.host import worktrees  # noqa: E402

ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=ENV,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for index in range(files):
        folder = repo / f"pkg{index // 500:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"module{index:05d}.py").write_text(f"VALUE = {index}\n" * 20)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "10k files")
    return repo


def taskherd_round(repo: Path, root: Path, task_id: int) -> float:
    started = time.perf_counter()
    path = worktrees.ensure_worktree(repo, "main", task_id, root)
    worktrees.remove_worktree(repo, path, worktrees.branch_for(task_id), "main")
    return time.perf_counter() - started


def plain_round(repo: Path, root: Path, task_id: int) -> float:
    path, branch = root / f"plain-{task_id}", f"plain/{task_id}"
    started = time.perf_counter()
    git(repo, "worktree", "add", "-q", "-b", branch, str(path), "main")
    git(repo, "worktree", "remove", "--force", str(path))
    git(repo, "branch", "-D", branch)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskherd-bench-worktrees-") as tmp:
        root = Path(tmp)
        repo = make_repo(root, args.files)
        trees = root / "trees"
        ours, floor = [], []
        for round_ in range(args.rounds):
            # Which goes first alternates, so neither always finds the other's warm cache.
            if round_ % 2:
                ours.append(taskherd_round(repo, trees, round_))
                floor.append(plain_round(repo, trees, round_))
            else:
                floor.append(plain_round(repo, trees, round_))
                ours.append(taskherd_round(repo, trees, round_))
    mine, plain = statistics.median(ours), statistics.median(floor)
    print(f"repository: {args.files:,} files; {args.rounds} rounds of add + remove each")
    print(f"taskherd (ensure_worktree + remove_worktree): median {mine * 1000:7.1f} ms")
    print(f"plain git worktree add + remove + branch -D:  median {plain * 1000:7.1f} ms")
    print(f"ratio taskherd / plain git: {mine / plain:.2f}x   (load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
