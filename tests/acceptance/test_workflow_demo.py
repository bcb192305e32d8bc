"""`python -m taskherd.demo.workflow` (the second half of `make demo`): a planner adds coder
tasks, each passes a compile gate and a QA review, one gate fails once, one review rejects
once, and every feature gets its docs task; it ends with the chain's tree."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(160)
def test_the_workflow_demo_shows_the_whole_chain() -> None:
    result = subprocess.run([sys.executable, "-m", "taskherd.demo.workflow"], check=False,
                            capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    tree = result.stdout.split("from the planner's task:", 1)[1]
    lines = [line.strip() for line in tree.splitlines() if line.strip()]
    assert lines[0].startswith("1 planner completed")
    assert any("coder completed [1 strike]: Validate the signup form" in line for line in lines)
    assert any("coder completed [1 rejection]: Cache the product list" in line for line in lines)
    assert sum("docs completed: Document:" in line for line in lines) == 3
    assert sum(" qa reviews " in line for line in lines) == 4
