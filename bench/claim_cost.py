"""What a claim+complete costs, against an earlier commit: CPU instructions and WAL pages.

    python bench/claim_cost.py                  # this tree against b69793b (before the core work)
    python bench/claim_cost.py --base HEAD~5 --cycles 3000

Wall-clock rates swing by ±10 % on a busy machine, too much to tell a 5 % change. Two figures
that no load can blur are measured instead, for this tree and for `--base` (exported with
`git archive` into a temporary folder), each on a fresh SQLite store at `durability = "normal"`:

- CPU instructions per claim+complete cycle, counted by valgrind's callgrind: a run that
  enqueues and then claims and completes --cycles tasks, minus a run that only enqueues;
- WAL pages written per cycle: the growth of a WAL that is never checkpointed, over the cycles.

The core issue's target: claim+complete no more than 5 % slower than before the read paths'
indexes and roll-ups (base b69793b). Exit status 1 if the instructions or the pages grow more.
Needs valgrind (`apt install valgrind`) and git.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.05
WAL_FRAME = 4096 + 24  # a page and its frame header

# Run in a child interpreter with the tree under test first on sys.path.
CYCLES = r"""
import os, sys, tempfile
sys.path.insert(0, sys.argv[1])
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.policy.queue import RetryPolicy
from taskherd.store.sqlite import SQLiteStore
try:
    from taskherd.policy.admission import ClaimRequest
    def claim(store, *args, **fields):
        return store.claim(ClaimRequest(*args, **fields))
except ImportError:  # a tree from before the claim request: the claim took its fields
    def claim(store, *args, **fields):
        return store.claim(*args, **fields)
tasks, cycles = int(sys.argv[2]), int(sys.argv[3])
folder = tempfile.mkdtemp()
now = 1_800_000_000.0
store = SQLiteStore(os.path.join(folder, "q.db"), durability="normal", autocheckpoint=False)
batch = [NewTask(title=f"t{i}", prompt="p", role="coder") for i in range(tasks)]
for start in range(0, tasks, 500):
    store.enqueue_many(batch[start:start + 500], now)
wal = os.path.join(folder, "q.db-wal")
before = os.path.getsize(wal) if os.path.exists(wal) else 0
policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
for _ in range(cycles):
    claimed = claim(store, "bench-node", now, 60.0)
    store.finish_run(claimed.run.id, success, policy, now)
grown = os.path.getsize(wal) - before if os.path.exists(wal) else 0
print("wal-bytes", grown, file=sys.stderr)
store.close()
"""


def instructions(tree: Path, tasks: int, cycles: int) -> tuple[int, int]:
    """(instructions, WAL bytes) of one run under callgrind."""
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out",
             sys.executable, "-c", CYCLES, str(tree), str(tasks), str(cycles)],
            capture_output=True, text=True, check=True)
    collected = re.search(r"Collected : (\d+)", done.stderr)
    wal = re.search(r"wal-bytes (\d+)", done.stderr)
    if collected is None or wal is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(collected.group(1)), int(wal.group(1))


def per_cycle(tree: Path, tasks: int, cycles: int) -> tuple[float, float]:
    setup, _ = instructions(tree, tasks, 0)
    total, wal = instructions(tree, tasks, cycles)
    return (total - setup) / cycles, wal / WAL_FRAME / cycles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="b69793b", help="the commit to compare with")
    parser.add_argument("--cycles", type=int, default=1500)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found: apt install valgrind")
    tasks = args.cycles * 2
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "taskherd"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        print(f"claim+complete, {args.cycles} cycles at durability normal, under callgrind")
        base_instr, base_wal = per_cycle(base, tasks, args.cycles)
        tree_instr, tree_wal = per_cycle(ROOT, tasks, args.cycles)
    rows = [("instructions per cycle", base_instr, tree_instr),
            ("WAL pages per cycle", base_wal, tree_wal)]
    failed = False
    print(f"{'':28}{args.base:>14}{'this tree':>14}{'ratio':>9}  target ≤ {TARGET:.2f}")
    for name, before, after in rows:
        ratio = after / before
        failed |= ratio > TARGET
        print(f"{name:28}{before:14,.2f}{after:14,.2f}{ratio:9.3f}  "
              f"{'PASS' if ratio <= TARGET else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
