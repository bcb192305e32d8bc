"""What the dashboard's charts read beyond the queue itself: its depth by role, sampled once
a minute (the queue keeps no history of it), and, each quarter hour, the past quarters of the
other charts summed (`Store.roll_up_chart_sums`), so the day's and the week's charts read
sums, not a day or a week of rows. Samples and sums older than a week are forgotten.

Every node samples; the first sample of a minute stays (`Store.sample_queue_depth`), so a
fleet keeps one row per minute and role whichever nodes are up, and none while none is.
Run in a thread: the first roll-up after an upgrade sums a whole week, a day per read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from taskherd.model.settings import Config
from taskherd.store import Store

QUARTER = 900.0


@dataclass(frozen=True)
class ChartSettings:
    every: float = 60.0  # seconds between two samples (each kept under its minute's start)
    keep: float = 7 * 86400.0  # the charts' longest range
    # A run ends after the quarter it was claimed in (its cost counts there), a dead task is
    # revived: each roll-up sums the last hour again, and every 6 hours the last day (a read
    # of a day's rows, a fifth of a second at a million tasks, so not every quarter).
    summed_again: float = 3600.0
    summed_again_long: float = 86400.0
    long_every: float = 6 * 3600.0


class ChartSampler:
    def __init__(self, config: Config, store: Store, settings: ChartSettings = ChartSettings()):
        self.config = config
        self.store = store
        self.settings = settings
        self._last: float | None = None  # the sample time of the last pass that sampled
        self._last_quarter: float | None = None  # the quarter hour of the last roll-up
        self._last_long: float | None = None  # the quarter of the last day-long roll-up

    def reload(self, config: Config) -> None:
        self.config = config

    def run_once(self, now: float) -> dict[str, int]:
        counts = {"sampled": 0, "pruned": 0, "quarters_summed": 0}
        at = self._sample_time(now)
        if at != self._last:
            # The config's roles are sampled even when idle: an idle role draws 0, not a gap.
            counts["sampled"] = self.store.sample_queue_depth(at, sorted(self.config.roles))
            counts["pruned"] = self.store.prune_queue_samples(before=at - self.settings.keep)
            self._last = at
        quarter = math.floor(now / QUARTER) * QUARTER
        if quarter != self._last_quarter:
            long = self._last_long is None or quarter - self._last_long >= self.settings.long_every
            again = self.settings.summed_again_long if long else self.settings.summed_again
            counts["quarters_summed"] = self.store.roll_up_chart_sums(now, again=again)
            self._last_quarter = quarter
            if long:
                self._last_long = quarter
        return counts

    def next_wake(self, now: float) -> float:
        return self._sample_time(now) + self.settings.every

    def _sample_time(self, now: float) -> float:
        return math.floor(now / self.settings.every) * self.settings.every
