"""How long a runtime whose endpoint is down waits between probes (services/pauses.py), with
`now` passed in, on a real SQLite store: 1 s, doubled by each probe that finds it still down,
up to 30 s; runs cut off together by one restart do not lengthen it; a rate limit's pause is
not taken for an outage's."""

from __future__ import annotations

from pathlib import Path

from taskherd.config import parse_config
from taskherd.services.pauses import OUTAGE_LONGEST_PAUSE, RuntimePauses
from taskherd.store import open_store

NOW = 1_800_000_000.0


def test_probes_that_find_it_down_double_the_pause_up_to_half_a_minute(tmp_path: Path):
    config = parse_config({
        "daemon": {"database": str(tmp_path / "q.db"), "data_dir": "data", "timezone": "UTC"},
        "roles": {"writer": {"runtime": "chat", "base_url": "http://127.0.0.1:9",
                             "model": "m"}},
    }, base_dir=tmp_path)
    role = config.roles["writer"]
    store = open_store(config.daemon.database, durability="normal")
    try:
        pauses = RuntimePauses(store, lambda: None, lambda: config)
        # Three runs under way meet the restart together: one pause of 1 s, begun by the first.
        waits = [pauses.endpoint_down(role, "endpoint down: ConnectError", NOW + t) - (NOW + t)
                 for t in (0.0, 0.1, 0.2)]
        assert waits == [1.0, 1.0, 1.0]
        now, spans = NOW + 1.0, []
        for _ in range(7):  # each probe finds it still down
            until = pauses.endpoint_down(role, "endpoint down: HTTP 503", now, probe=True)
            spans.append(until - now)
            now = until
        assert spans == [2.0, 4.0, 8.0, 16.0, OUTAGE_LONGEST_PAUSE, OUTAGE_LONGEST_PAUSE,
                         OUTAGE_LONGEST_PAUSE]
        assert store.cooldown_of("chat").down_since == NOW  # since its first failed call
        store.clear_cooldown("chat")

        # A rate limit's long pause is kept, and an outage met meanwhile begins at 1 s.
        store.set_cooldown("chat", now + 600, "429", now, 600.0)
        assert pauses.endpoint_down(role, "endpoint down: 502", now + 1) == now + 600
        assert store.cooldown_of("chat").down_since == now + 1
    finally:
        store.close()
