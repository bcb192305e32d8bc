"""A slow git hook on the base branch against the rest of the queue: quiet vs while it sleeps.

    .venv/bin/python bench/slow_git.py                 # hook of 60 s, 20 adds, 200 no-ops
    .venv/bin/python bench/slow_git.py --hook 30 --adds 10 --tasks 100
    .venv/bin/python bench/slow_git.py --on post-checkout   # the hook as the worktree is made

One daemon (`python -m taskherd up`, temp dir) with two roles: `coder`, whose tasks work in a
git worktree and merge into `main` of a repository whose `reference-transaction` hook sleeps
--hook s whenever `main` moves (a slow CI trigger), and `noop`, whose agent is `date +%s.%N`.
With `--on post-checkout` the repository's `post-checkout` hook sleeps instead, when the coder
task's worktree is made (`git worktree add`), before its agent can start. Two figures, each
measured quiet (no merge under way) and again while a coder task's merge (or worktree) sits
in the hook:

- `task add` — the CLI, as a person types it (`python -m taskherd task add`), --adds times
  one after the other: its wall time, p99 (the largest but one of 20).
- ready → exec of another role — --tasks no-op tasks at a steady rate, "ready" just after the
  enqueue committed, "exec" the clock the agent prints as it starts (as bench/daemon.py a).

The figure is each ratio, hook sleeping / quiet (target ≤ ×2): the merge runs off the daemon's
loop and outside any store transaction, so a hook costs its own task only. Before, the merge
ran inside the settle's transaction on the loop: `task add` waited out the hook (39 s of a
40 s hook) and nothing was dispatched meanwhile. The coder task must then complete merged once
the hook returns. Likewise a worktree is made off the loop: the coder task's run waits
claimed, then runs and merges once the hook returns. Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.daemon import NOOP, Node, percentile, printed_time, steady_noops
from taskherd.model import FINAL_STATES, NewTask, TaskState

RATIO_TARGET = 2.0
IDENTITY = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
            "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
HOOK = """#!/bin/sh
while read -r old new ref; do
    if [ "$ref" = refs/heads/main ] && [ "$1" = prepared ]; then
        date +%s.%N >> "{marker}"
        sleep {seconds}
    fi
done
"""
POST_CHECKOUT = """#!/bin/sh
date +%s.%N >> "{marker}"
sleep {seconds}
"""
HOOKS = {"reference-transaction": HOOK, "post-checkout": POST_CHECKOUT}
CODER = """
    import subprocess
    with open("feature.txt", "w") as out:
        out.write("from the coder\\n")
    subprocess.run(["git", "add", "feature.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "feature"], check=True)
    print("TASK_COMPLETE: committed")
"""


def make_repo(root: Path, hook_seconds: float, marker: Path, on: str) -> Path:
    repo = root / "app"
    repo.mkdir()
    env = {**os.environ, **IDENTITY}
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    hook = repo / ".git" / "hooks" / on
    hook.write_text(HOOKS[on].format(marker=marker, seconds=hook_seconds))
    hook.chmod(0o755)
    return repo


def make_node(root: Path, repo: Path) -> Node:
    coder = root / "coder.py"
    coder.write_text(textwrap.dedent(CODER))
    env = ", ".join(f'{key} = "{value}"' for key, value in IDENTITY.items())
    node = Node(root / "node", 8, {
        "noop": {"command": str(NOOP).replace("'", '"')},
        "coder": {"command": f'["{sys.executable}", "{coder}"]', "env": f"{{ {env} }}",
                  "max_attempts": "1"},
    }, "normal")
    with open(node.config_path, "a") as config:
        config.write(f'\n[roles.coder.git]\nrepo = "{repo}"\nmerge_timeout = "10m"\n')
    return node


def cli_adds(node: Node, count: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    env["TASKHERD_CONFIG"] = str(node.config_path)
    took = []
    for index in range(count):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "taskherd", "task", "add", "--role", "noop",
                        "--pending", f"typed {index}"], check=True, env=env, cwd=node.root,
                       stdout=subprocess.DEVNULL, timeout=600)
        took.append(time.perf_counter() - started)
    return took


def ready_to_exec(node: Node, count: int, interval: float) -> list[float]:
    ready = steady_noops(node, count, interval)
    node.wait_until(lambda: all(node.store.get_task(t).state is TaskState.COMPLETED
                                for t in ready), 120, "no-op tasks to finish")
    return [printed_time(node.store.runs_of_task(t)[-1].log_path) - at
            for t, at in ready.items()]


def measure(node: Node, adds: int, tasks: int, interval: float) -> dict[str, float]:
    add = cli_adds(node, adds)
    exec_ = ready_to_exec(node, tasks, interval)
    return {"task add p99": percentile(add, 0.99), "ready→exec p50": percentile(exec_, 0.5),
            "ready→exec p99": percentile(exec_, 0.99)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hook", type=float, default=60.0, help="seconds the hook sleeps")
    parser.add_argument("--adds", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=200, help="no-op tasks for ready→exec")
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--on", choices=sorted(HOOKS), default="reference-transaction",
                        help="the hook that sleeps: as main moves (the merge), or as the "
                             "coder task's worktree is made")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskherd-bench-slow-git-") as tmp:
        root = Path(tmp)
        marker = root / "hook-started"
        repo = make_repo(root, args.hook, marker, args.on)
        node = make_node(root, repo)
        node.up()
        try:
            quiet = measure(node, args.adds, args.tasks, args.interval)
            coder = node.store.enqueue(NewTask(role="coder", title="feature"), time.time()).task
            node.wait_until(marker.exists, 60, "the coder task to reach the hook")
            hook_started = float(marker.read_text().split()[0])
            busy = measure(node, args.adds, args.tasks, args.interval)
            measured_in = time.time() - hook_started
            done = node.wait_until(
                lambda: (t := node.store.get_task(coder.id)).state in FINAL_STATES and t,
                args.hook + 120, "the coder task to finish")
        finally:
            node.down()
    where = "on main" if args.on == "reference-transaction" else "making the worktree"
    print(f"{args.on} hook of {args.hook:g} s {where}; {args.adds} CLI adds, "
          f"{args.tasks} no-op tasks per phase; "
          f"the busy phase took {measured_in:.1f} s of the hook's sleep")
    print(f"{'':18} {'quiet':>10} {'hook sleeping':>14} {'ratio':>8}")
    missed = measured_in > args.hook or done.state is not TaskState.COMPLETED
    for name in quiet:
        ratio = busy[name] / quiet[name]
        missed |= ratio > RATIO_TARGET
        print(f"{name:18} {quiet[name] * 1e3:8.1f} ms {busy[name] * 1e3:11.1f} ms "
              f"{'×':>3}{ratio:.2f}  (≤ ×{RATIO_TARGET:g})")
    print(f"the coder task: {done.state.value} (merged after the hook returned)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
