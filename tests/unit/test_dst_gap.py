"""dst_gap: what a fixed time fires as on a day that does not have it (02:30 when clocks jump
from 02:00 to 03:00), for each policy, in Paris and New York, with `now` passed in; and the
repeated hour of a fall-back day, which no policy changes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from taskherd.config import load_config
from taskherd.policy.jobs import JobError, parse_job
from taskherd.policy.schedules import DstGap, ScheduleError, next_fires, parse_trigger

# 2026: Paris jumps 29 Mar 02:00 CET → 03:00 CEST and goes back 25 Oct 03:00 → 02:00;
# New York jumps 8 Mar 02:00 EST → 03:00 EDT and goes back 1 Nov 02:00 → 01:00.
SPRING = {"Europe/Paris": (3, 29), "America/New_York": (3, 8)}
AUTUMN = {"Europe/Paris": ((10, 25), "30 2 * * *"), "America/New_York": ((11, 1), "30 1 * * *")}
# The fires of "30 2 * * *" from the day before the jump, as local wall times per policy.
ACROSS_THE_JUMP = {
    "shift": ["02:30", "03:30", "02:30"],  # today's behaviour: later by the gap
    "skip": ["02:30", "02:30", "02:30"],  # the jump day has none: the third is two days on
    "next_valid": ["02:30", "03:00", "02:30"],  # right after the jump, as cron runs it
}


def local(fires, tz):
    return [f.astimezone(tz) for f in fires]


@pytest.mark.parametrize("zone", SPRING)
@pytest.mark.parametrize("policy", [p.value for p in DstGap])
def test_a_fixed_time_in_the_gap_fires_as_its_policy_says(zone, policy):
    tz = ZoneInfo(zone)
    month, day = SPRING[zone]
    now = datetime(2026, month, day - 1, 1, 0, tzinfo=tz)
    trigger = parse_trigger({"cron": "30 2 * * *", "dst_gap": policy}, zone)
    fires = local(next_fires(trigger, now, 3), tz)
    assert [f"{f:%H:%M}" for f in fires] == ACROSS_THE_JUMP[policy]
    days = [f.day for f in fires]
    assert days == ([day - 1, day + 1, day + 2] if policy == "skip" else [day - 1, day, day + 1])
    if policy == "next_valid":  # the very instant of the jump, not a minute later
        jump = fires[1].astimezone(UTC)
        assert (jump - timedelta(seconds=1)).astimezone(tz).hour == 1


@pytest.mark.parametrize("zone", SPRING)
@pytest.mark.parametrize("policy", [p.value for p in DstGap])
def test_a_calendar_entry_in_the_gap_follows_the_policy_and_now_inside_the_gap(zone, policy):
    tz = ZoneInfo(zone)
    month, day = SPRING[zone]
    trigger = parse_trigger({"calendar": [{"hour": 2, "minute": 30}], "dst_gap": policy}, zone)
    before = datetime(2026, month, day, 1, 59, tzinfo=tz)
    expected = {"shift": datetime(2026, month, day, 3, 30, tzinfo=tz),
                "skip": datetime(2026, month, day + 1, 2, 30, tzinfo=tz),
                "next_valid": datetime(2026, month, day, 3, 0, tzinfo=tz)}[policy]
    assert trigger.next_after(before) == expected
    # Asked again from just after that fire (a scheduler tick), it is not fired twice.
    assert trigger.next_after(expected) == datetime(2026, month, day + 1 + (policy == "skip"),
                                                     2, 30, tzinfo=tz)


@pytest.mark.parametrize("zone", AUTUMN)
@pytest.mark.parametrize("policy", [p.value for p in DstGap])
def test_the_repeated_hour_is_the_same_under_every_policy(zone, policy):
    # A fixed time fires once, at its first occurrence; a wildcard schedule keeps real time
    # through the repeated hour (both passes), whatever dst_gap says.
    tz = ZoneInfo(zone)
    (month, day), expression = AUTUMN[zone]
    now = datetime(2026, month, day, 0, 0, tzinfo=tz)
    fixed = parse_trigger({"cron": expression, "dst_gap": policy}, zone)
    first, second = local(next_fires(fixed, now, 2), tz)
    assert first.dst() == timedelta(hours=1)  # the first pass, still summer time
    assert (first.day, second.day) == (day, day + 1)  # and not again an hour later
    hourly = parse_trigger({"cron": "0 * * * *", "dst_gap": policy}, zone)
    fires = next_fires(hourly, now, 5)
    assert {b - a for a, b in itertools.pairwise(fires)} == {timedelta(hours=1)}  # both passes


def test_default_is_shift_and_stored_specs_keep_their_shape():
    trigger = parse_trigger({"cron": "30 2 * * *"}, "Europe/Paris")
    assert trigger.dst_gap is DstGap.SHIFT
    assert trigger.to_spec() == {"cron": "30 2 * * *", "timezone": "Europe/Paris"}
    skip = parse_trigger({"every": "1h", "dst_gap": "skip"}, "Europe/Paris")
    assert skip.to_spec() == {"every": "3600s", "timezone": "Europe/Paris", "dst_gap": "skip"}
    assert parse_trigger(skip.to_spec(), None) == skip  # a stored spec reads back the same


@pytest.mark.parametrize("spec, said", [
    ({"cron": "30 2 * * *", "dst_gap": "later"},
     "dst_gap: 'later' is not a policy; accepted: shift, skip, next_valid"),
    ({"cron": "30 2 * * *", "dst_gap": 1}, "dst_gap: 1 is not a policy"),
    ({"at": "2027-03-28T02:30", "dst_gap": "skip"}, "dst_gap: 'skip' does not apply to 'at'"),
])
def test_a_bad_dst_gap_is_refused_naming_the_key(spec, said):
    with pytest.raises(ScheduleError) as error:
        parse_trigger(spec, "Europe/Paris")
    assert str(error.value).startswith(said)


def test_a_config_job_with_a_bad_dst_gap_names_the_job_and_key(tmp_path):
    path = tmp_path / "taskherd.toml"
    path.write_text('[daemon]\ntimezone = "Europe/Paris"\n[roles.r]\ncommand = ["true"]\n')
    config = load_config(path)
    table = {"name": "nightly", "role": "r", "cron": "30 2 * * *", "dst_gap": "never"}
    with pytest.raises(JobError, match=r"^jobs\[0\]\.dst_gap: 'never' is not a policy"):
        parse_job(table, config, where="jobs[0].")
    spec = parse_job(table | {"dst_gap": "next_valid"}, config)
    assert spec.definition().trigger["dst_gap"] == "next_valid"
