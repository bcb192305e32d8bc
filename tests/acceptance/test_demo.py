"""`python -m taskherd.demo` (what `make demo` runs): the real daemon, real agents, < 2 min."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest


@pytest.mark.timeout(160)
def test_demo_runs_the_fleet_and_summarises_every_outcome() -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "taskherd.demo"],
        check=False,
        capture_output=True,
        text=True,
        timeout=150,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert elapsed < 120
    rows = {}
    for line in result.stdout.split("what happened", 1)[1].splitlines():
        match = re.match(r"^(\d+)\s+(.+?)\s{2,}(\w+)\s+(\w+)\s+(\d+)\s+(.+?)(?:\s{2,}(.*))?$", line)
        if match:
            rows[match.group(3)] = match
    assert rows, result.stdout
    flaky = rows["flaky"]
    assert flaky.group(4) == "completed" and flaky.group(5) == "3"
    assert flaky.group(6) == "failed → failed → succeeded"
    assert rows["crasher"].group(4) == "dead"
    assert rows["crasher"].group(6).startswith("crashed → crashed")
    assert rows["staller"].group(4) == "dead"
    assert rows["staller"].group(6).startswith("stalled")
    assert rows["ops"].group(4) == "blocked"
    assert "data dir: " in result.stdout
