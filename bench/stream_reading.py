"""What bench/claude_stream.py and bench/codex_stream.py share: a real `taskherd up` runs one
task of a role whose binary is a stand-in writing the runtime's JSON event stream at --rate
events per second; the daemon's own CPU time over the run is the figure (target under 20 % of
one core), beside the same bytes parsed by a bare `json.loads` loop in this process."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taskherd.model import NewTask, TaskState
from taskherd.store.sqlite import SQLiteStore

TARGET_CPU_SHARE = 0.20


def main(description: str, runtime: str, stand_in_source: str) -> int:
    """Run the bench for `runtime`, whose stand-in binary is `stand_in_source` (Python,
    taking the rate and seconds as its last arguments, as the role's `args` pass them)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rate", type=int, default=10_000, help="events per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"taskherd-bench-{runtime}-") as tmp:
        root = Path(tmp)
        share, events, log_bytes = run_daemon(root, runtime, stand_in_source, args.rate,
                                              args.seconds)
        naive = naive_parse_seconds(root)
    print(f"stream: {events:,} events in {args.seconds:g} s ({events / args.seconds:,.0f}/s), "
          f"{log_bytes / 1e6:.1f} MB of log")
    print(f"daemon CPU per event: {share * args.seconds / max(events, 1) * 1e6:.2f} µs; "
          f"bare json.loads per event: {naive / max(events, 1) * 1e6:.2f} µs")
    print(f"daemon CPU while reading it: {share:6.1%} of one core  target < "
          f"{TARGET_CPU_SHARE:.0%}  {'PASS' if share < TARGET_CPU_SHARE else 'FAIL'}")
    print(f"the same bytes through a bare json.loads loop: {naive / args.seconds:6.1%} of one "
          f"core (information)")
    return 0 if share < TARGET_CPU_SHARE else 1


def run_daemon(root: Path, runtime: str, stand_in_source: str, rate: int,
               seconds: float) -> tuple[float, int, int]:
    stand_in = root / runtime
    stand_in.write_text(f"#!{sys.executable}\n{stand_in_source}")
    stand_in.chmod(0o755)
    (root / "taskherd.toml").write_text(textwrap.dedent(f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        [roles.coder]
        runtime = "{runtime}"
        binary = "{stand_in}"
        args = ["{rate}", "{seconds}"]
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    env["TASKHERD_CONFIG"] = str(root / "taskherd.toml")
    log = open(root / "daemon.log", "wb")
    daemon = subprocess.Popen([sys.executable, "-m", "taskherd", "up"], env=env, cwd=root,
                              stdout=log, stderr=log)
    try:
        return measure(root, daemon, seconds)
    finally:
        daemon.terminate()
        daemon.wait(30)
        log.close()


def measure(root: Path, daemon: subprocess.Popen, seconds: float) -> tuple[float, int, int]:
    store = SQLiteStore(root / "q.db")
    process = psutil.Process(daemon.pid)
    time.sleep(1.0)  # the daemon's own start-up is not the figure
    before = process.cpu_times()
    started = time.monotonic()
    task = store.enqueue(NewTask(role="coder", title="stream", prompt="go"), time.time()).task
    deadline = started + seconds + 30
    while store.get_task(task.id).state is not TaskState.COMPLETED:
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise SystemExit(f"the run did not complete:\n{(root / 'daemon.log').read_text()}")
        time.sleep(0.1)
    after = process.cpu_times()
    elapsed = time.monotonic() - started
    used = (after.user + after.system) - (before.user + before.system)
    run = store.runs_of_task(task.id)[0]
    store.close()
    log_path = Path(run.log_path)
    events = sum(1 for line in log_path.open("rb") if line.startswith(b"{"))
    return used / elapsed, events, log_path.stat().st_size


def naive_parse_seconds(root: Path) -> float:
    log_path = next((root / "data" / "logs").glob("run-*.log"))
    started = time.process_time()
    with log_path.open("rb") as log:
        for line in log:
            if line.startswith(b"{"):
                json.loads(line)
    return time.process_time() - started

