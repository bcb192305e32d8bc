"""/metrics' run counters only go up: a retention prune and a restart of the API leave every
counter where it was (Prometheus reads a drop as a reset), and the runs open now are a gauge."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from taskherd.api.server import ApiServer
from taskherd.config import load_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from tests.api_server import served

T0 = 1_800_000_000.0


def scrape(url: str, token: str) -> dict[tuple, float]:
    """Every sample of /metrics by (name, labels), as Prometheus parses the exposition."""
    answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"},
                       timeout=10)
    assert answer.status_code == 200, answer.text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.text)
            for sample in family.samples}


def run_counters(samples: dict[tuple, float]) -> dict[tuple, float]:
    names = ("taskherd_runs_total", "taskherd_cost_usd_total", "taskherd_tokens_total")
    return {key: value for key, value in samples.items() if key[0] in names}


def never_lower(before: dict[tuple, float], after: dict[tuple, float]) -> None:
    for series, value in before.items():
        assert series in after, f"{series} vanished"
        assert after[series] >= value, f"{series} went down: {value} -> {after[series]}"


def finish(store, role: str, outcome: Outcome, now: float, cost: float) -> int:
    store.enqueue(NewTask(role=role, title=f"{role} at {now}", max_attempts=1), now)
    claim = store.claim(ClaimRequest("n1", now, 60, roles=[role]))
    store.finish_run(claim.run.id, RunResult(outcome, cost_usd=cost, input_tokens=100,
                                             output_tokens=10), RetryPolicy(), now + 5)
    return claim.run.id


def test_a_prune_and_a_restart_lower_no_counter_and_open_runs_are_a_gauge(tmp_path):
    with served(tmp_path) as api:
        store, token = api.queue.store, api.tokens["read"]
        finish(store, "coder", Outcome.SUCCEEDED, T0, 0.5)
        finish(store, "coder", Outcome.FAILED, T0 + 10, 0.25)
        finish(store, "qa", Outcome.SUCCEEDED, T0 + 20, 1.0)
        store.enqueue(NewTask(role="coder", title="still running"), T0 + 30)
        running = store.claim(ClaimRequest("n1", T0 + 30, 60, roles=["coder"]))

        first = scrape(api.url, token)
        assert first[("taskherd_runs_running", (("role", "coder"),))] == 1
        assert not any(dict(labels).get("outcome") == "running" for _, labels in first)
        counters = run_counters(first)
        assert counters[("taskherd_runs_total", (("outcome", "succeeded"), ("role", "coder")))] == 1
        assert counters[("taskherd_cost_usd_total", (("role", "coder"),))] == 0.75

        # Retention deletes every finished task and its runs: the counters stay.
        assert store.prune(before=T0 + 1000) == 3
        after_prune = run_counters(scrape(api.url, token))
        assert after_prune == counters

        store.finish_run(running.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=2.0),
                         RetryPolicy(), T0 + 40)
        ended = scrape(api.url, token)
        never_lower(counters, run_counters(ended))
        assert ended[("taskherd_runs_total", (("outcome", "succeeded"), ("role", "coder")))] == 2
        assert ended[("taskherd_cost_usd_total", (("role", "coder"),))] == 2.75
        assert ended.get(("taskherd_runs_running", (("role", "coder"),)), 0) == 0

    # The API (and its process's state) starts again on the same database.
    config = load_config(tmp_path / "taskherd.toml")
    server = ApiServer(config, port=0)
    server.start()
    try:
        again = run_counters(scrape(server.url, token))
    finally:
        server.stop()
    assert again == run_counters(ended)
