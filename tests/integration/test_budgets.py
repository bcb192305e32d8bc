"""Budgets against a real store and the real dispatcher, time passed in (`now=`): spawns
stop before a run would spend past a limit, and start again when the period resets."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.ops.budget import budget_status
from taskherd.services.dispatcher import Dispatcher
from taskherd.services.supervisor import LiveRuns
from taskherd.store import open_store

PARIS = ZoneInfo("Europe/Paris")
# 10:00 in Paris on 2026-11-23.
NOW = datetime(2026, 11, 23, 10, 0, tzinfo=PARIS).timestamp()
MIDNIGHT = datetime(2026, 11, 24, 0, 0, tzinfo=PARIS).timestamp()


def fleet_config(tmp_path, database, budgets=None, role_budget=None, runtime="command"):
    role = {"command": ["true"]} if runtime == "command" else {"runtime": runtime}
    if role_budget:
        role["budget"] = role_budget
    raw = {"daemon": {"database": database, "data_dir": "data", "timezone": "Europe/Paris"},
           "roles": {"coder": role, "qa": {"command": ["true"]}}}
    if budgets:
        raw["budgets"] = budgets
    return parse_config(raw, base_dir=tmp_path)


class Spawner:
    """The dispatcher's `start`: every claimed run ends at once, costing `cost`."""

    def __init__(self, store, cost):
        self.store, self.cost, self.spawned = store, cost, []

    def __call__(self, claim, now):
        self.store.mark_spawned(claim.run.id, now, 60, pid=None, pid_started_at=None,
                                log_path=None)
        result = RunResult(Outcome.SUCCEEDED, 0, summary="ok", cost_usd=self.cost)
        self.store.finish_run(claim.run.id, result, RetryPolicy(), now)
        self.spawned.append(claim.run.id)
        return claim


def test_a_one_dollar_limit_and_thirty_cent_runs_never_spawn_a_fourth(tmp_path, database):
    config = fleet_config(tmp_path, database, role_budget={"daily_usd": 1})
    with open_store(database, durability="normal") as store:
        for i in range(6):
            store.enqueue(NewTask(role="coder", title=f"t{i}"), NOW)
        spawner = Spawner(store, 0.30)
        dispatcher = Dispatcher(config, store, LiveRuns({}, {}), spawner)
        for minute in range(5):  # pass after pass, the fourth never starts
            dispatcher.run_once(NOW + 60 * minute)
        assert len(spawner.spawned) == 3
        [pause] = [c for c in store.active_cooldowns(NOW) if c.runtime == "budget:coder"]
        assert pause.until == MIDNIGHT and pause.reason.startswith("budget: coder daily limit")
        status = budget_status(config, store, NOW + 300)
        [day] = [line for line in status["limits"] if line["period"] == "day"]
        assert round(day["spent"], 2) == 0.90 and not day["allows_another"]
        # The next day in Paris spawns start again: three more, then the pause is until the
        # following midnight.
        dispatcher.run_once(MIDNIGHT + 1)
        assert len(spawner.spawned) == 6
        assert store.cooldown_of("budget:coder").until == MIDNIGHT + 86400


def test_runs_in_flight_count_at_their_expected_cost(tmp_path, database):
    # No run priced yet: the configured estimate is what each one is expected to cost.
    config = fleet_config(tmp_path, database, budgets={"daily_usd": 1, "run_estimate_usd": 0.4})
    with open_store(database, durability="normal") as store:
        for i in range(5):
            store.enqueue(NewTask(role="coder", title=f"t{i}"), NOW)
        claimed = []
        dispatcher = Dispatcher(config, store, LiveRuns({}, {}),
                                lambda claim, now: claimed.append(claim) or claim)
        dispatcher.run_once(NOW)
        assert len(claimed) == 2  # two in flight at $0.40 each; a third would make $1.20
        assert store.cooldown_of("budget:fleet").until == MIDNIGHT


def test_a_run_of_unknown_cost_counts_at_the_configured_estimate(tmp_path, database):
    config = fleet_config(tmp_path, database,
                          budgets={"daily_usd": 1, "unknown_run_usd": 0.5})
    with open_store(database, durability="normal") as store:
        for i in range(4):
            store.enqueue(NewTask(role="qa", title=f"t{i}"), NOW)
        spawner = Spawner(store, None)  # a command reports no cost
        dispatcher = Dispatcher(config, store, LiveRuns({}, {}), spawner)
        dispatcher.run_once(NOW)
        assert len(spawner.spawned) == 2
        [day] = [line for line in budget_status(config, store, NOW)["limits"]
                 if line["period"] == "day"]
        assert day["unknown_runs"] == 2 and day["spent"] == 1.0


def test_another_role_without_a_budget_keeps_running(tmp_path, database):
    config = fleet_config(tmp_path, database, role_budget={"daily_usd": 0.5})
    with open_store(database, durability="normal") as store:
        for i in range(3):
            store.enqueue(NewTask(role="coder", title=f"c{i}"), NOW)
            store.enqueue(NewTask(role="qa", title=f"q{i}"), NOW)
        spawner = Spawner(store, 0.30)
        Dispatcher(config, store, LiveRuns({}, {}), spawner).run_once(NOW)
        roles = [store.get_run(run_id).role for run_id in spawner.spawned]
        assert roles.count("coder") == 1 and roles.count("qa") == 3


def test_a_token_limit_pauses_once_reached_and_the_cli_shows_it(tmp_path, database):
    import subprocess
    import sys
    import time

    now = time.time()  # the CLI reads the clock: the runs must be today's
    config = fleet_config(tmp_path, database, role_budget={"daily_tokens": 1000})
    (tmp_path / "taskherd.toml").write_text(
        f'[daemon]\ndatabase = "{database}"\ndata_dir = "data"\ntimezone = "Europe/Paris"\n'
        '[roles.coder]\ncommand = ["true"]\nbudget = { daily_tokens = 1000 }\n'
        '[roles.qa]\ncommand = ["true"]\n')
    with open_store(database, durability="normal") as store:
        for i in range(3):
            store.enqueue(NewTask(role="coder", title=f"t{i}"), now)

        def spend_tokens(claim, now):
            store.mark_spawned(claim.run.id, now, 60, pid=None, pid_started_at=None,
                               log_path=None)
            store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0, input_tokens=900,
                                                     output_tokens=100), RetryPolicy(), now)
            return claim

        Dispatcher(config, store, LiveRuns({}, {}), spend_tokens).run_once(now)
        assert len(store.list_runs(limit=10)) == 1
    budget = subprocess.run([sys.executable, "-m", "taskherd", "--config",
                             str(tmp_path / "taskherd.toml"), "budget", "status"],
                            capture_output=True, text=True, check=True).stdout
    assert "PAUSED" in budget and "1,000" in budget
    status = subprocess.run([sys.executable, "-m", "taskherd", "--config",
                             str(tmp_path / "taskherd.toml"), "status"],
                            capture_output=True, text=True, check=True).stdout
    assert "role coder is paused by its budget until" in status


def test_a_pause_is_lifted_when_the_budgets_are_removed_from_the_config(tmp_path, database):
    config = fleet_config(tmp_path, database, role_budget={"daily_usd": 0.5})
    with open_store(database, durability="normal") as store:
        for i in range(3):
            store.enqueue(NewTask(role="coder", title=f"c{i}"), NOW)
        spawner = Spawner(store, 0.30)
        Dispatcher(config, store, LiveRuns({}, {}), spawner).run_once(NOW)
        assert store.cooldown_of("budget:coder") is not None
        unbudgeted = fleet_config(tmp_path, database)  # `taskherd reload` without [budgets]
        Dispatcher(unbudgeted, store, LiveRuns({}, {}), spawner).run_once(NOW + 60)
        assert store.cooldown_of("budget:coder") is None
        assert len(spawner.spawned) == 3
