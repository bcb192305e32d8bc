"""What the demo agents share: printing, heartbeats, reports and an attempt counter.

Agents are started with the interpreter that runs the demo, so `python -m taskherd` reaches
this installation whatever PATH the daemon gives them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path


def say(text: str) -> None:
    # Flushed at once: the daemon's stall detector reads the log, not our buffer.
    print(text, flush=True)


def prompt() -> str:
    return sys.stdin.read() if not sys.stdin.isatty() else ""


def steps_in(text: str, default: int = 4) -> int:
    found = re.search(r"(\d+)\s+steps?", text)
    return int(found.group(1)) if found else default


def taskherd(*args: str) -> None:
    """Call the taskherd CLI the way any agent would (heartbeat, done, fail, block)."""
    subprocess.run([sys.executable, "-m", "taskherd", *args], check=False,
                   stdout=subprocess.DEVNULL, timeout=30)


def attempt() -> int:
    """This task's attempt number, counted in a file in the role's workdir."""
    counter = Path.cwd() / f"attempts-{os.environ.get('TASKHERD_TASK_ID', 'x')}"
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    return count


def work(steps: int, verb: str, pause: float = 0.7) -> None:
    for step in range(1, steps + 1):
        say(f"step {step}/{steps}: {verb}")
        if step % 2 == 0:
            taskherd("heartbeat", "--progress", f"{step}/{steps}")
        time.sleep(pause)
