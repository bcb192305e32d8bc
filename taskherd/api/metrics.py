"""/metrics in Prometheus' text format (prometheus_client).

Counts of tasks and runs are read from the database at each scrape (GROUP BY, never row by
row), so every node's work is counted whichever node is scraped. The run counters
(taskherd_runs_total, _cost_usd_total, _tokens_total) count ended runs and add those pruning
deleted (the store keeps their totals), so they only go up, across prunes and restarts; the
runs open now are a gauge, taskherd_runs_running. Durations are observed as runs end, from
the event channel: a run's duration and its ready→exec latency (from the moment its task was
ready to the moment its agent started).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response

from taskherd.api.app import Api, answer_for
from taskherd.model import EventKind
from taskherd.ops import metrics as metric_ops
from taskherd.ops.tokens import READ

log = logging.getLogger("taskherd.api")

DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf"))
# The events the counters read; a listener passes over the rest undecoded (a task added).
RUN_KINDS = frozenset({EventKind.RUN_STARTED, EventKind.RUN_ENDED})
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf"))


class Metrics:
    def __init__(self, api: Api):
        self.api = api
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StoreCollector(api, self))
        self.durations = Histogram("taskherd_run_duration_seconds",
                                   "How long runs took, from spawn to end", ["role", "outcome"],
                                   buckets=DURATION_BUCKETS, registry=self.registry)
        self.latency = Histogram("taskherd_ready_to_exec_seconds",
                                 "From a task being ready to its agent's start",
                                 ["role"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.store_errors = Counter("taskherd_api_store_errors",
                                    "Store errors met by the API and the scrapes",
                                    registry=self.registry)
        self._seen: OrderedDict[int, None] = OrderedDict()  # runs whose start was observed
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._observe(), name="api-metrics")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task

    async def _observe(self) -> None:
        with self.api.hub.subscribe(RUN_KINDS) as queue:
            while (event := await queue.get()) is not None:
                if event.run_id:
                    try:
                        await self.api.run(self._observe_run, event.kind, event.run_id)
                    except Exception as error:  # noqa: BLE001 - a hint lost, not a crash
                        self.store_errors.inc()
                        log.debug("metrics: run %s not observed: %s", event.run_id, error)

    def _observe_run(self, kind: EventKind, run_id: int) -> None:
        run = metric_ops.run_timing(self.api.queue, run_id)
        if run is None:
            return
        role, spawned_at = run["role"], run["spawned_at"]
        if spawned_at is not None and run_id not in self._seen:
            self._seen[run_id] = None
            if len(self._seen) > 100_000:
                self._seen.popitem(last=False)
            ready_at = run["run_after"]
            if ready_at is not None and ready_at <= spawned_at:
                self.latency.labels(role).observe(spawned_at - ready_at)
        if kind is EventKind.RUN_ENDED and run["ended_at"] is not None and run["outcome"]:
            start = spawned_at if spawned_at is not None else run["claimed_at"]
            self.durations.labels(role, run["outcome"]).observe(max(run["ended_at"] - start, 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StoreCollector:
    """What a scrape reads from the database and from the daemon's services."""

    def __init__(self, api: Api, metrics: Metrics):
        self.api, self.metrics = api, metrics

    def collect(self) -> Iterator[Metric]:
        try:
            scrape = metric_ops.scrape(self.api.queue, self.api.clock())
            counts, totals, cooldowns, fires = (scrape.counts, scrape.totals, scrape.cooldowns,
                                                scrape.fires)
        except Exception as error:  # noqa: BLE001 - a scrape says so rather than failing
            self.metrics.store_errors.inc()
            log.warning("metrics: the store could not be read: %s", error)
            return
        tasks = GaugeMetricFamily("taskherd_tasks", "Tasks by state and role",
                                  labels=["state", "role"])
        for count in counts:
            tasks.add_metric([count.state.value, count.role], count.count)
        yield tasks
        yield from _run_families(totals)
        active = GaugeMetricFamily("taskherd_cooldowns_active",
                                   "Runtimes paused by a rate limit", labels=["runtime"])
        for cooldown in cooldowns:
            active.add_metric([cooldown.runtime], 1)
        yield active
        drift = GaugeMetricFamily("taskherd_scheduler_drift_seconds",
                                  "How late each job's last fire was, after its scheduled time",
                                  labels=["job"])
        latest: dict[str, float] = {}
        for fire in fires:
            if fire.kind == "schedule":
                latest.setdefault(fire.job_name, max(fire.fired_at - fire.scheduled_for, 0.0))
        for job, seconds in sorted(latest.items()):
            drift.add_metric([job], seconds)
        yield drift
        yield from self._services()

    def _services(self) -> Iterator[Metric]:
        services = self.api.services() if self.api.services else {}
        counted = CounterMetricFamily("taskherd_service_counts",
                                      "What each service's passes did, summed since start",
                                      labels=["service", "count"])
        errors = CounterMetricFamily("taskherd_service_store_errors",
                                     "Store errors a service's passes met", labels=["service"])
        for name, service in services.items():
            for key, value in service["counts"].items():
                counted.add_metric([name, key], value)
            errors.add_metric([name], service["errors"])
        yield counted
        yield errors


def _run_families(totals: list[dict[str, Any]]) -> Iterator[Metric]:
    """Counters of the runs that ended (pruned ones included: they only go up) and a gauge of
    the runs open now. An open run is not in the counters: its cost is not in yet, and an
    `outcome="running"` series that fell as runs ended read to Prometheus as a reset."""
    runs = CounterMetricFamily("taskherd_runs", "Runs ended, by role and outcome",
                               labels=["role", "outcome"])
    cost = CounterMetricFamily("taskherd_cost_usd", "Dollars spent by runs ended, by role "
                               "(known costs only: see taskherd_unpriced_runs)", labels=["role"])
    # Beside the dollars, never folded into them as $0: the runs whose cost is unknown.
    unpriced = CounterMetricFamily("taskherd_unpriced_runs",
                                   "Runs ended whose cost is unknown (not in taskherd_cost_usd), "
                                   "by role", labels=["role"])
    tokens = CounterMetricFamily("taskherd_tokens", "Tokens used by runs ended, by role",
                                 labels=["role", "direction"])
    running = GaugeMetricFamily("taskherd_runs_running", "Runs open now, by role",
                                labels=["role"])
    by_role: dict[str, list[float]] = {}
    for row in totals:
        if row["outcome"] is None:
            running.add_metric([row["role"]], row["runs"])
            continue
        runs.add_metric([row["role"], row["outcome"]], row["runs"])
        sums = by_role.setdefault(row["role"], [0.0, 0, 0, 0])
        sums[0] += row["cost_usd"]
        sums[1] += row["input_tokens"]
        sums[2] += row["output_tokens"]
        sums[3] += row["unpriced"]
    for role, (dollars, tokens_in, tokens_out, unknown) in sorted(by_role.items()):
        cost.add_metric([role], dollars)
        unpriced.add_metric([role], unknown)
        tokens.add_metric([role, "input"], tokens_in)
        tokens.add_metric([role, "output"], tokens_out)
    yield from (runs, cost, unpriced, tokens, running)


def endpoint(api: Api, counters: Metrics) -> Callable[[Request], Awaitable[Response]]:
    """/metrics, for a `read` token (a scraper's own token with only that scope)."""

    async def handle(request: Request) -> Response:
        try:
            caller = await api.authenticate(request, READ)
            api.check(caller, READ)
            body = await api.run(counters.render)
        except Exception as error:  # noqa: BLE001
            return answer_for(error, f"{request.method} {request.url.path}").response()
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return handle
