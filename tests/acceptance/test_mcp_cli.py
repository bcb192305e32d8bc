"""`taskherd mcp` serves one agent's run: outside a run it refuses to start, saying why."""

from __future__ import annotations

import os
import subprocess
import sys


def test_mcp_outside_a_run_exits_2_naming_the_missing_credential(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    result = subprocess.run([sys.executable, "-m", "taskherd", "mcp"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "TASKHERD_RUN_TOKEN is not set" in result.stderr
