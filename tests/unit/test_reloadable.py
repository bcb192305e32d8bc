"""What a reload may not change while the daemon runs, said all at once and by name."""

from __future__ import annotations

import pytest

from taskherd.config import check_reloadable, parse_config
from taskherd.model.settings import ConfigError


def config(tmp_path, database="q.db", node="n1", roles=("worker",), jobs=()):
    return parse_config({
        "daemon": {"database": database, "data_dir": "data", "node": node, "timezone": "UTC"},
        "roles": {name: {"command": ["true"]} for name in roles},
        "jobs": list(jobs),
    }, base_dir=tmp_path)


def test_limits_roles_and_jobs_may_change(tmp_path):
    running = config(tmp_path)
    check_reloadable(running, config(tmp_path, roles=("worker", "writer"),
                                     jobs=[{"name": "w", "role": "writer", "every": "1h"}]))


def test_the_database_and_the_node_may_not(tmp_path):
    with pytest.raises(ConfigError) as refused:
        check_reloadable(config(tmp_path), config(tmp_path, database="other.db", node="n2"))
    message = str(refused.value)
    assert "[daemon] database cannot change while the daemon runs" in message
    assert "[daemon] node cannot change while the daemon runs (n1 → n2)" in message
