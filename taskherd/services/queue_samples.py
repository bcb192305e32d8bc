"""The queue's depth by role, sampled once a minute for the dashboard's chart (the queue
keeps no history of it), and the samples older than a week pruned.

Every node samples; the first sample of a minute stays (`Store.sample_queue_depth`), so a
fleet keeps one row per minute and role whichever nodes are up, and none while none is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from taskherd.model.settings import Config
from taskherd.store import Store


@dataclass(frozen=True)
class SamplerSettings:
    every: float = 60.0  # seconds between two samples (each kept under its minute's start)
    keep: float = 7 * 86400.0  # the chart's longest range


class QueueSampler:
    def __init__(self, config: Config, store: Store, settings: SamplerSettings = SamplerSettings()):
        self.config = config
        self.store = store
        self.settings = settings
        self._last: float | None = None  # the sample time of the last pass that sampled

    def reload(self, config: Config) -> None:
        self.config = config

    def run_once(self, now: float) -> dict[str, int]:
        at = self._sample_time(now)
        if at == self._last:
            return {"sampled": 0, "pruned": 0}
        # The config's roles are sampled even when idle: an idle role draws 0, not a gap.
        sampled = self.store.sample_queue_depth(at, sorted(self.config.roles))
        pruned = self.store.prune_queue_samples(before=at - self.settings.keep)
        self._last = at
        return {"sampled": sampled, "pruned": pruned}

    def next_wake(self, now: float) -> float:
        return self._sample_time(now) + self.settings.every

    def _sample_time(self, now: float) -> float:
        return math.floor(now / self.settings.every) * self.settings.every
