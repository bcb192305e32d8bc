"""A reset clock printed without a zone ("resets 3am") is read in the daemon's timezone,
or the machine's own zone when the config sets none, never in UTC."""

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from taskherd.config import parse_config
from taskherd.host.procs import ExitStatus
from taskherd.model import Outcome
from taskherd.model.settings import RoleConfig
from taskherd.policy.timefmt import reading_zone
from taskherd.runtimes.base import OutputReader
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.runtimes.command import CommandRuntime
from tests.unit.test_runtime_results import run

# 2026-01-15 20:00 UTC: 21:00 in Paris, 15:00 in New York.
NOW = datetime(2026, 1, 15, 20, 0, tzinfo=UTC).timestamp()
PARIS_3AM = datetime(2026, 1, 16, 3, 0, tzinfo=ZoneInfo("Europe/Paris")).timestamp()
NEW_YORK_3AM = datetime(2026, 1, 16, 3, 0, tzinfo=ZoneInfo("America/New_York")).timestamp()
LIMIT = "5-hour limit reached ∙ resets 3am"


def test_claude_reads_the_reset_clock_in_the_daemons_timezone():
    role = RoleConfig(name="w", runtime="claude", timezone="Europe/Paris")
    runtime = ClaudeRuntime()
    reader = runtime.reader(role)
    line = {"type": "result", "subtype": "success", "is_error": True, "result": LIMIT}
    reader.feed((json.dumps(line) + "\n").encode(), NOW)
    result = runtime.result(role, reader, ExitStatus(code=1), run(), NOW)
    assert result.outcome is Outcome.RATE_LIMITED and result.retry_at == PARIS_3AM


def test_command_output_reset_clock_without_a_configured_zone_is_the_machines(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    role = RoleConfig(name="w", command=("agent",))
    reader = OutputReader(role)
    reader.feed(f"{LIMIT}\n".encode(), NOW)
    result = CommandRuntime().result(role, reader, ExitStatus(code=1), run(), NOW)
    assert result.outcome is Outcome.RATE_LIMITED and result.retry_at == NEW_YORK_3AM


def test_reading_zone_prefers_the_configured_zone(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    assert reading_zone("Europe/Paris") == ZoneInfo("Europe/Paris")
    assert reading_zone(None) == ZoneInfo("America/New_York")


def test_roles_carry_the_daemons_timezone(tmp_path):
    config = parse_config({"daemon": {"timezone": "Europe/Paris"},
                           "roles": {"w": {"command": ["agent"]}}}, base_dir=tmp_path)
    assert config.roles["w"].timezone == "Europe/Paris"
    assert config.role("undefined").timezone == "Europe/Paris"
