"""`taskherd cooldown list|clear`: a person sees which runtimes are paused and until when, and
ends a pause by hand; clearing a runtime that has no pause says so (exit 1) and changes nothing."""

from __future__ import annotations

import json
import time

import pytest

from tests.fleet import PYTHON, Fleet


@pytest.fixture
def fleet(tmp_path):
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"

        [roles.worker]
        command = ["{PYTHON}", "-c", "pass"]
    """)
    yield node
    node.close()


def test_a_cooldown_is_listed_then_cleared_once(fleet):
    now = time.time()
    fleet.store.set_cooldown("claude", now + 3600, "usage limit", now)

    listed = json.loads(fleet.cli("cooldown", "list", "--json").stdout)
    assert [(c["runtime"], c["reason"]) for c in listed] == [("claude", "usage limit")]
    assert "claude" in fleet.cli("cooldown", "list").stdout

    assert "cooldown of claude cleared" in fleet.cli("cooldown", "clear", "claude").stdout
    assert fleet.store.cooldown_of("claude") is None
    assert "no runtime is cooling down" in fleet.cli("cooldown", "list").stdout

    again = fleet.cli("cooldown", "clear", "claude", check=False)
    assert again.returncode == 1
    assert "runtime 'claude' has no cooldown" in again.stderr
    assert "Traceback" not in again.stderr
