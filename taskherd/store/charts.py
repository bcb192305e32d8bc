"""The store interface for the dashboard's charts (`Store` inherits it): sums over a range
cut into equal buckets, and the queue's depth sampled once a minute (the queue keeps no
history of it). Which ranges there are, and what a bucket's numbers mean in words, is
decided in `ops/charts.py`; the SQL is `sql/common/charts.sql`."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from taskherd.model.record import Record


class Buckets(Record):
    """`count` buckets of `width` seconds from `start`: bucket i is [start + i·width,
    start + (i+1)·width)."""

    start: float
    width: float
    count: int

    @property
    def until(self) -> float:
        return self.start + self.width * self.count

    def times(self) -> list[float]:
        return [self.start + self.width * i for i in range(self.count)]

    def params(self) -> dict[str, Any]:
        """The range as every chart query takes it (bucket numbers in whole milliseconds)."""
        return {"since": self.start, "until": self.until,
                "start_ms": round(self.start * 1000), "width_ms": round(self.width * 1000)}


class ChartStore(abc.ABC):
    @abc.abstractmethod
    def sample_queue_depth(self, at: float, roles: Sequence[str]) -> int:
        """Keep the queue's depth now as the sample of the minute `at` (a minute's start): one
        row per role found queued or held, and per role of `roles` (0 when idle). A minute
        already sampled (by another node) is left as it is. Returns the rows written."""

    @abc.abstractmethod
    def prune_queue_samples(self, before: float) -> int:
        """Delete the samples taken before `before`; returns how many."""

    @abc.abstractmethod
    def roll_up_chart_sums(self, now: float, again: float) -> int:
        """Sum the past quarter hours (before the one holding `now`) of the finished, latency
        and cost charts, and the depth sampled (its highest), into the sums kept: those since
        the last roll-up, and the `again` seconds before it once more (runs that ended since,
        tasks revived), within the week; older sums are forgotten. Buckets of whole quarter
        hours are then read from the sums up to the last quarter summed, and live past it.
        Returns the quarters summed."""

    @abc.abstractmethod
    def queue_depth_buckets(self, buckets: Buckets) -> list[dict[str, Any]]:
        """Per bucket and role: the highest ready and running counts sampled, and how many
        samples the bucket holds (`bucket`: its number from 0)."""

    @abc.abstractmethod
    def finished_buckets(self, buckets: Buckets) -> list[dict[str, Any]]:
        """Per bucket and final state: how many tasks finished in it."""

    @abc.abstractmethod
    def latency_histogram(self, buckets: Buckets) -> list[dict[str, Any]]:
        """Per bucket of agents started: how many first runs of a task waited at most `le`
        seconds from the task being added to their start (`le` None: longer than the last
        bound). First runs only: a settled task no longer says when it was ready."""

    @abc.abstractmethod
    def cost_buckets(self, buckets: Buckets) -> list[dict[str, Any]]:
        """Per bucket of claims, role and outcome, the runs ended: their count, the dollars
        known and how many have no known cost (`unpriced`)."""
