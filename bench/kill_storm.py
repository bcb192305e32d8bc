"""Kill storm: a daemon `kill -9`'d and started again while its agents report.

    .venv/bin/python bench/kill_storm.py                   # 300 tasks, six kills 8 s apart
    .venv/bin/python bench/kill_storm.py --tasks 60 --kills 3 --every 4
    .venv/bin/python bench/kill_storm.py --postgres    # the same on a throwaway PostgreSQL

One real daemon on SQLite runs --tasks tasks of a command role (--concurrency at once); each
agent works a little, heartbeats, adds a child task, sends a message and says `taskherd
done` through the agent door (tests/faults/storm.py). The daemon alone is SIGKILLed every
--every seconds (jittered ±30 %) and started again at once, --kills times; its agents run
on under their shims. Printed: agent starts, re-runs (starts beyond one a task), strikes
(runs ended failed, crashed, stalled…), runs by outcome, and each run that did not succeed.

Exit status 1 if a restart cost anything: a re-run, a strike, a task not completed exactly
once, a child task or a message added twice, a run record missing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from tests.faults.storm import Storm, StormResult, completed_once
from tests.pg import start_server, stop_server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--every", type=float, default=8.0, help="seconds between kills")
    parser.add_argument("--concurrency", type=int, default=40)
    parser.add_argument("--work", type=float, default=1.0,
                        help="seconds an agent works before and after its middle reports")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres", action="store_true",
                        help="on a throwaway PostgreSQL server instead of SQLite")
    options = parser.parse_args()
    if not options.postgres:
        result = storm(options, "q.db")
    else:
        server = start_server()
        try:
            result = storm(options, server.url())
        finally:
            stop_server(server)
    print(result.summary())
    for line in result.odd_runs + result.refusals:
        print("  ", line)
    twice = {t: (result.children[t], result.messages[t]) for t in result.tasks
             if (result.children[t], result.messages[t]) != (1, 1)}
    if twice:
        print("   tasks whose (children, messages) are not (1, 1):", twice)
    if result.unrecorded or result.open_runs:
        print("   runs missing:", result.unrecorded, "open:", result.open_runs)
    clean = (result.reruns == 0 and result.strikes == 0 and completed_once(result)
             and not twice and not result.unrecorded and not result.open_runs)
    print("kill storm:", "nothing lost, nothing twice" if clean else "the restarts cost work")
    return 0 if clean else 1


def storm(options: argparse.Namespace, database: str) -> StormResult:
    with tempfile.TemporaryDirectory(prefix="kill-storm-") as folder:
        driver = Storm(Path(folder), options.tasks, options.kills, options.every,
                       concurrency=options.concurrency, work=options.work, database=database,
                       seed=options.seed)
        try:
            return driver.run(finish_within=600.0)
        finally:
            driver.fleet.close()


if __name__ == "__main__":
    sys.exit(main())
