"""An answer's ISO times: the text datetime writes for each moment, in any zone, though a
moment is written from its second's text (kept) with its milliseconds put in."""

from __future__ import annotations

import random
from datetime import datetime
from zoneinfo import ZoneInfo

from taskherd.policy.timefmt import iso_time

ZONES = [ZoneInfo(name) for name in ("UTC", "Europe/Paris", "America/New_York",
                                     "Asia/Kolkata", "Australia/Lord_Howe")]
# Moments whose microseconds round up into the next second or half to even, and moments on
# either side of a change of offset (Paris and New York's, spring and autumn 2024).
EDGES = [whole + fraction
         for whole in (0, 1, 1_711_846_799, 1_711_846_800, 1_730_595_599, 1_730_595_600,
                       1_730_613_599, 1_795_000_000)
         for fraction in (0.0, 0.0000005, 0.0000015, 0.0005, 0.4995, 0.9994999, 0.9995,
                          0.9999995, 0.9999996)]


def test_each_moment_is_written_as_datetime_writes_it():
    chosen = random.Random(30)
    moments = EDGES + [chosen.uniform(0, 4e9) for _ in range(5_000)]
    moments += [1_795_000_000 + n * 0.000_37 for n in range(5_000)]  # a burst's moments
    for zone in ZONES:
        for moment in moments:
            assert iso_time(moment, zone) == datetime.fromtimestamp(moment, zone).isoformat(
                timespec="milliseconds"), (moment, zone)
