"""A chat gateway stopped for two minutes under 50 queued chat tasks, then started again.

    .venv/bin/python bench/gateway_outage.py                  # 50 tasks, 120 s outage
    .venv/bin/python bench/gateway_outage.py --tasks 10 --outage 20

One daemon (`python -m taskherd up`, temp dir) with a `chat` role pointed at a loopback
OpenAI-compatible server (tests/e2e/fake_openai.py). The server is stopped (its port refuses
connections), --tasks tasks are queued, and it is started again on its port --outage seconds
later. Printed: strikes and dead tasks (target 0 each), completions (target all), the runs
the outage ended (no strike, no attempt), and the probes: after the first pause begins, the
runs claimed within each pause (target exactly one a pause), the pauses' lengths (1 s,
doubling to 30 s), and how long after the gateway's return the first answer came (at most
the longest pause). Exit status 1 if a target is missed.

Before, each refused call was a failed run: a strike, the task dead at its third.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskherd.model import Outcome, TaskState
from taskherd.services.pauses import OUTAGE_LONGEST_PAUSE
from tests.e2e.fake_openai import FakeOpenAI, Text
from tests.fleet import Fleet


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--outage", type=float, default=120.0, help="seconds it is away")
    parser.add_argument("--concurrent", type=int, default=4, help="[daemon] max_concurrent")
    args = parser.parse_args()
    api = FakeOpenAI([], after_script=Text("TASK_COMPLETE: answered")).start()
    port = urlsplit(api.base_url).port
    with tempfile.TemporaryDirectory(prefix="taskherd-gateway-") as tmp:
        fleet = Fleet(Path(tmp), f"""
            [daemon]
            database = "q.db"
            data_dir = "data"
            timezone = "UTC"
            max_concurrent = {args.concurrent}

            [roles.chat]
            runtime = "chat"
            base_url = "{api.base_url}"
            model = "fake-model"
        """)
        try:
            fleet.up()
            api.stop()
            stopped_at = time.time()
            ids = [fleet.add(f"ask {n}", role="chat", prompt=f"question {n}").id
                   for n in range(args.tasks)]
            time.sleep(max(0.0, stopped_at + args.outage - time.time()))  # the outage itself
            api.start(port)
            back_at = time.time()
            tasks = [fleet.wait_final(task_id, timeout=args.outage + 120) for task_id in ids]
            runs = sorted((run for task_id in ids for run in fleet.store.runs_of_task(task_id)),
                          key=lambda run: run.claimed_at)
            return report(args, tasks, runs, stopped_at, back_at, fleet.store.all_cooldowns())
        finally:
            fleet.close()
            api.stop()


def report(args, tasks, runs, stopped_at, back_at, cooldowns) -> int:
    down = [run for run in runs if (run.error or "").startswith("endpoint down")]
    strikes = sum(task.attempts for task in tasks)
    dead = sum(task.state is TaskState.DEAD for task in tasks)
    completed = sum(task.state is TaskState.COMPLETED for task in tasks)
    counted = sum(task.rate_limits + task.rescues for task in tasks)
    first_pause = min(run.ended_at for run in down)
    answered = min(run.ended_at for run in runs if run.outcome is Outcome.SUCCEEDED)
    # The runs under way when it went met it together and began the first pause; every run
    # claimed after that until the first answer's end is a probe, each ending a pause (the
    # last one passing). One probe per pause: no probe was claimed before the last one ended.
    batch = [run for run in runs if run.claimed_at < first_pause]
    probes = [run for run in runs if first_pause <= run.claimed_at <= answered]
    pause_starts = [max(run.ended_at for run in batch)] + [run.ended_at for run in probes[:-1]]
    # strict=False: with no probe at all there is one pause start and no length.
    lengths = [probe.claimed_at - began for probe, began in zip(probes, pause_starts, strict=False)]
    overlapping = sum(later.claimed_at < earlier.ended_at
                      for earlier, later in itertools.pairwise(probes))
    print(f"gateway away {args.outage:g} s under {args.tasks} queued chat tasks "
          f"(max_concurrent {args.concurrent})")
    print(f"strikes {strikes}   dead tasks {dead}   completed {completed} of {args.tasks}   "
          f"rate-limit/rescue counts {counted}   cooldowns left {len(cooldowns)}")
    print(f"runs the outage ended {len(down)} (lost, no strike): {len(batch)} under way as it "
          f"went, then {len(probes)} probes for {len(probes)} pauses, {overlapping} overlapping "
          f"(probes per pause: {'1' if not overlapping else 'more than 1'})")
    print("pause before each probe (s): " + " ".join(f"{gap:.1f}" for gap in lengths[:12])
          + (" …" if len(lengths) > 12 else ""))
    print(f"first answer {answered - back_at:.1f} s after the gateway came back "
          f"(longest pause {OUTAGE_LONGEST_PAUSE:g} s); all done "
          f"{max(run.ended_at for run in runs) - back_at:.1f} s after; "
          f"first failure {first_pause - stopped_at:.1f} s after it stopped")
    missed = (strikes or dead or completed != args.tasks or counted or cooldowns
              or overlapping or answered - back_at > OUTAGE_LONGEST_PAUSE + 5)
    print("FAIL" if missed else "ok: 0 strikes, 0 dead, all complete, one probe per pause")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
