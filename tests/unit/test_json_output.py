"""--json output for machines: times as ISO 8601 with an offset (epoch beside), money rounded
to a thousandth of a cent, everything else as it was."""

from __future__ import annotations

from datetime import datetime

from taskherd.cli.common import for_json

MOMENT = 1_795_000_000.25


def test_times_are_iso_8601_with_offset_and_keep_their_epoch():
    shown = for_json({"id": 3, "created_at": MOMENT, "finished_at": None, "until": MOMENT,
                      "runs": [{"ended_at": MOMENT}]})
    parsed = datetime.fromisoformat(shown["created_at"])
    assert parsed.utcoffset() is not None
    assert parsed.timestamp() == MOMENT
    assert shown["created_at_epoch"] == MOMENT
    assert shown["finished_at"] is None and "finished_at_epoch" not in shown
    assert datetime.fromisoformat(shown["until"]).timestamp() == MOMENT
    assert datetime.fromisoformat(shown["runs"][0]["ended_at"]).timestamp() == MOMENT
    assert shown["id"] == 3


def test_money_is_rounded_to_a_thousandth_of_a_cent_and_unknown_stays_unknown():
    shown = for_json({"cost_usd": 0.0024000000000000002, "cost_week": 1.234567891,
                      "cost_today": None, "duration": 1.23456789})
    assert shown["cost_usd"] == 0.0024
    assert shown["cost_week"] == 1.23457
    assert shown["cost_today"] is None
    assert shown["duration"] == 1.23456789
