import dataclasses
import itertools
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from taskherd.policy.schedules import (
    CRON_ALIASES,
    TIMEZONE_REQUIRED,
    AtTrigger,
    CalendarTrigger,
    CronTrigger,
    EveryTrigger,
    ManualTrigger,
    MissedFire,
    OverlapPolicy,
    ScheduleError,
    due_fires,
    next_fires,
    parse_trigger,
)

NY = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
UTC_ZONE = ZoneInfo("UTC")

# 2026 transitions: New York 8 Mar 02:00→03:00 and 1 Nov 02:00→01:00;
# Berlin 29 Mar 02:00→03:00 and 25 Oct 03:00→02:00.
TRANSITIONS = [
    pytest.param("America/New_York", (2026, 3, 8), id="new-york-spring"),
    pytest.param("America/New_York", (2026, 11, 1), id="new-york-autumn"),
    pytest.param("Europe/Berlin", (2026, 3, 29), id="berlin-spring"),
    pytest.param("Europe/Berlin", (2026, 10, 25), id="berlin-autumn"),
]


def fires_between(trigger, start, end):
    fires, moment = [], start
    while (moment := trigger.next_after(moment)) is not None and moment < end:
        fires.append(moment)
    return fires


def around(zone, ymd, days_before=2, days_after=2):
    tz = ZoneInfo(zone)
    day = datetime(*ymd, tzinfo=tz)
    return day - timedelta(days=days_before), day + timedelta(days=days_after), day.date()


def per_local_day(fires, tz):
    return Counter(f.astimezone(tz).date() for f in fires)


# --- daylight saving ----------------------------------------------------------


@pytest.mark.parametrize(("zone", "ymd"), TRANSITIONS)
@pytest.mark.parametrize("expression", ["30 2 * * *", "30 1 * * *", "0 2 * * *", "59 2 * * *"])
def test_daily_job_fires_exactly_once_on_every_transition_day(zone, ymd, expression):
    start, end, day = around(zone, ymd)
    trigger = CronTrigger(expression, ZoneInfo(zone))
    counts = per_local_day(fires_between(trigger, start, end), ZoneInfo(zone))
    assert counts[day] == 1
    assert set(counts.values()) == {1}


@pytest.mark.parametrize(
    ("zone", "ymd", "local_fire"),
    [
        # 02:30 does not exist: shifted forward by the one-hour gap.
        ("America/New_York", (2026, 3, 8), "2026-03-08T03:30:00-04:00"),
        ("Europe/Berlin", (2026, 3, 29), "2026-03-29T03:30:00+02:00"),
        # New York's 02:30 exists once on its autumn day (01:xx repeats there).
        ("America/New_York", (2026, 11, 1), "2026-11-01T02:30:00-05:00"),
        # Berlin's 02:30 happens twice: the first occurrence, in summer time.
        ("Europe/Berlin", (2026, 10, 25), "2026-10-25T02:30:00+02:00"),
    ],
)
def test_daily_0230_fires_at_documented_instant(zone, ymd, local_fire):
    start, end, day = around(zone, ymd, 1, 1)
    tz = ZoneInfo(zone)
    fires = fires_between(CronTrigger("30 2 * * *", tz), start, end)
    on_day = [f.astimezone(tz).isoformat() for f in fires if f.astimezone(tz).date() == day]
    assert on_day == [local_fire]


def test_repeated_hour_in_new_york_fires_fixed_job_once_on_first_pass():
    start, end, day = around("America/New_York", (2026, 11, 1), 1, 1)
    fires = fires_between(CronTrigger("30 1 * * *", NY), start, end)
    on_day = [f.astimezone(NY).isoformat() for f in fires if f.astimezone(NY).date() == day]
    assert on_day == ["2026-11-01T01:30:00-04:00"]


@pytest.mark.parametrize(("zone", "ymd"), TRANSITIONS)
def test_hourly_job_fires_every_real_hour(zone, ymd):
    start, end, day = around(zone, ymd)
    tz = ZoneInfo(zone)
    fires = fires_between(CronTrigger("@hourly", tz), start, end)
    assert {b - a for a, b in itertools.pairwise(fires)} == {timedelta(hours=1)}
    expected = 23 if ymd[1] == 3 else 25
    assert per_local_day(fires, tz)[day] == expected


@pytest.mark.parametrize(("zone", "ymd"), TRANSITIONS)
def test_every_30m_with_window_fires_08_00_to_22_30_once_each(zone, ymd):
    start, end, day = around(zone, ymd)
    tz = ZoneInfo(zone)
    trigger = parse_trigger({"every": "30m", "window": "08:00-22:30"}, zone)
    fires = fires_between(trigger, start, end)
    for d in {f.astimezone(tz).date() for f in fires}:
        local = [f.astimezone(tz).strftime("%H:%M") for f in fires if f.astimezone(tz).date() == d]
        assert local == [f"{h:02d}:{m:02d}" for h in range(8, 23) for m in (0, 30)]
    assert per_local_day(fires, tz)[day] == 30


@pytest.mark.parametrize(("zone", "ymd"), TRANSITIONS)
def test_every_30m_without_window_keeps_real_time_spacing(zone, ymd):
    start, end, _ = around(zone, ymd)
    fires = fires_between(parse_trigger({"every": "30m"}, zone), start, end)
    assert {b - a for a, b in itertools.pairwise(fires)} == {timedelta(minutes=30)}


@pytest.mark.parametrize(("zone", "ymd"), TRANSITIONS)
@pytest.mark.parametrize(
    "spec",
    [
        {"cron": "30 2 * * *"},
        {"cron": "*/15 * * * *"},
        {"cron": "0,30 1-3 * * *"},
        {"every": "20m", "window": "01:00-04:00"},
        {"calendar": [{"hour": 2, "minute": 30}]},
    ],
)
def test_next_after_agrees_from_any_starting_point(zone, ymd, spec):
    # The scheduler may call next_after from any `now` (after a restart, inside
    # the gap, in the repeated hour); the answer must be the same set of fires.
    start, end, _ = around(zone, ymd, 1, 1)
    trigger = parse_trigger(spec, zone)
    fires = fires_between(trigger, start, end)
    rng = random.Random(f"{zone}{ymd}{spec}")
    for _ in range(200):
        now = start + timedelta(seconds=rng.randrange(int((end - start).total_seconds())))
        expected = next(f for f in fires + [end] if f > now)
        if expected != end:
            assert trigger.next_after(now) == expected, now.astimezone(ZoneInfo(zone))


def test_next_after_inside_the_gap_still_finds_the_shifted_fire():
    now = datetime(2026, 3, 8, 3, 10, tzinfo=NY)  # 02:30 was skipped, shifted to 03:30
    assert CronTrigger("30 2 * * *", NY).next_after(now) == datetime(2026, 3, 8, 3, 30, tzinfo=NY)


def test_next_after_in_first_pass_of_repeated_hour_finds_second_pass():
    now = datetime(2026, 11, 1, 1, 50, tzinfo=NY)  # EDT, fold=0
    nxt = CronTrigger("*/15 * * * *", NY).next_after(now)
    assert nxt.astimezone(NY).isoformat() == "2026-11-01T01:00:00-05:00"


# --- the trigger contract -----------------------------------------------------


def test_next_after_is_strictly_after_and_in_utc():
    trigger = CronTrigger("0 9 * * *", ZoneInfo("Europe/Paris"))
    now = datetime(2026, 6, 1, 9, 0, tzinfo=ZoneInfo("Europe/Paris"))
    nxt = trigger.next_after(now)
    assert nxt.tzinfo is UTC
    assert nxt == datetime(2026, 6, 2, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "trigger",
    [
        CronTrigger("* * * * *", NY),
        EveryTrigger(timedelta(minutes=5), NY),
        ManualTrigger(NY),
        AtTrigger(datetime(2026, 1, 1, tzinfo=UTC), NY),
    ],
)
def test_naive_now_is_refused(trigger):
    with pytest.raises(ValueError, match="naive"):
        trigger.next_after(datetime(2026, 1, 1))


def test_triggers_are_frozen_and_comparable():
    a = parse_trigger({"cron": "*/5 * * * *"}, "UTC")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.expression = "* * * * *"
    assert a == parse_trigger({"cron": "*/5 * * * *"}, "UTC")
    assert len({a, parse_trigger({"cron": "*/5 * * * *"}, "UTC")}) == 1


EXPRESSIONS = [
    "*/5 * * * *",
    "0 9 * * 1-5",
    "30 18 1,15 * *",
    "0 0 */2 * 1",
    "15 3 * 2 sun",
    "0 12 29 2 *",
    "7-20/3 4,22 * * 6",
    "0 0 1 jan,jul *",
    "0 9 L * *",
    "0 9 * * 1#1",
    "5 * 13 * 5",
    "*/20 8-17 * * mon-fri",
    "0 0 1-31 * 1",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_cron_matches_croniter_where_there_is_no_dst(expression):
    trigger = CronTrigger(expression, ZoneInfo("UTC"))
    rng = random.Random(expression)
    for _ in range(30):
        now = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=rng.randrange(3 * 525600))
        expected = croniter(expression, now).get_next(datetime)
        assert trigger.next_after(now) == expected, (expression, now)


@pytest.mark.parametrize(("alias", "expansion"), sorted(CRON_ALIASES.items()))
def test_aliases_fire_like_their_expansion(alias, expansion):
    now = datetime(2026, 5, 17, 13, 7, tzinfo=BERLIN)
    assert next_fires(CronTrigger(alias, BERLIN), now, 5) == next_fires(
        CronTrigger(expansion, BERLIN), now, 5
    )


def test_alias_examples():
    now = datetime(2026, 5, 17, 13, 7, tzinfo=UTC)  # a Sunday
    assert CronTrigger("@weekly", ZoneInfo("UTC")).next_after(now) == datetime(
        2026, 5, 24, tzinfo=UTC
    )
    assert CronTrigger("@ANNUALLY", ZoneInfo("UTC")).next_after(now) == datetime(
        2027, 1, 1, tzinfo=UTC
    )


# --- calendar (launchd StartCalendarInterval) ---------------------------------


def local_fires(trigger, now, count, tz):
    return [f.astimezone(tz).strftime("%a %Y-%m-%d %H:%M") for f in next_fires(trigger, now, count)]


def test_calendar_monday_nine_am():
    trigger = parse_trigger({"calendar": [{"hour": 9, "minute": 0, "weekday": 1}]}, "Europe/Paris")
    assert isinstance(trigger, CalendarTrigger)
    now = datetime(2026, 5, 1, tzinfo=ZoneInfo("Europe/Paris"))
    assert local_fires(trigger, now, 2, ZoneInfo("Europe/Paris")) == [
        "Mon 2026-05-04 09:00",
        "Mon 2026-05-11 09:00",
    ]


@pytest.mark.parametrize("sunday", [0, 7])
def test_calendar_weekday_0_and_7_are_sunday(sunday):
    trigger = parse_trigger({"calendar": {"weekday": sunday, "hour": 6, "minute": 0}}, "UTC")
    assert local_fires(trigger, datetime(2026, 5, 1, tzinfo=UTC), 1, UTC) == [
        "Sun 2026-05-03 06:00"
    ]


def test_calendar_several_entries_fire_on_any():
    trigger = parse_trigger(
        {"calendar": [{"hour": 18, "minute": 30}, {"hour": 7, "minute": 15}]}, "UTC"
    )
    assert local_fires(trigger, datetime(2026, 5, 1, 12, tzinfo=UTC), 3, UTC) == [
        "Fri 2026-05-01 18:30",
        "Sat 2026-05-02 07:15",
        "Sat 2026-05-02 18:30",
    ]


def test_calendar_missing_minute_means_every_minute_like_launchd():
    trigger = parse_trigger({"calendar": [{"hour": 9}]}, "UTC")
    fires = next_fires(trigger, datetime(2026, 5, 1, tzinfo=UTC), 61)
    assert fires[0] == datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    assert fires[59] == datetime(2026, 5, 1, 9, 59, tzinfo=UTC)
    assert fires[60] == datetime(2026, 5, 2, 9, 0, tzinfo=UTC)


def test_calendar_day_and_weekday_fire_on_either_like_cron():
    trigger = parse_trigger(
        {"calendar": [{"day": 13, "weekday": 5, "hour": 0, "minute": 0}]}, "UTC"
    )
    assert local_fires(trigger, datetime(2026, 2, 1, tzinfo=UTC), 3, UTC) == [
        "Fri 2026-02-06 00:00",
        "Fri 2026-02-13 00:00",
        "Fri 2026-02-20 00:00",
    ]


def test_calendar_month_and_day():
    trigger = parse_trigger({"calendar": [{"month": 2, "day": 29, "hour": 0, "minute": 0}]}, "UTC")
    assert next_fires(trigger, datetime(2026, 1, 1, tzinfo=UTC), 2) == [
        datetime(2028, 2, 29, tzinfo=UTC),
        datetime(2032, 2, 29, tzinfo=UTC),
    ]


# --- every, at, manual ----------------------------------------------------------


def test_every_window_accepts_single_digit_hours_and_en_dash():
    a = parse_trigger({"every": "30m", "window": "8:00–22:30"}, "UTC")
    b = parse_trigger({"every": "30m", "window": "08:00-22:30"}, "UTC")
    assert a == b


def test_every_window_rolls_to_next_day_after_end():
    trigger = parse_trigger({"every": "45m", "window": "09:00-10:30"}, "UTC")
    assert local_fires(trigger, datetime(2026, 5, 1, 9, 10, tzinfo=UTC), 4, UTC) == [
        "Fri 2026-05-01 09:45",
        "Fri 2026-05-01 10:30",
        "Sat 2026-05-02 09:00",
        "Sat 2026-05-02 09:45",
    ]


def test_every_without_window_restarts_each_local_midnight():
    trigger = parse_trigger({"every": "7h"}, "Asia/Tokyo")
    tz = ZoneInfo("Asia/Tokyo")
    assert [f[-5:] for f in local_fires(trigger, datetime(2026, 5, 1, tzinfo=tz), 5, tz)] == [
        "07:00",
        "14:00",
        "21:00",
        "00:00",
        "07:00",
    ]


def test_at_fires_once_in_its_zone():
    trigger = parse_trigger({"at": "2026-12-01T09:00", "timezone": "Europe/Paris"}, None)
    before = datetime(2026, 11, 30, tzinfo=UTC)
    assert trigger.next_after(before) == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert trigger.next_after(datetime(2026, 12, 1, 8, 0, tzinfo=UTC)) is None
    assert next_fires(trigger, before, 5) == [datetime(2026, 12, 1, 8, 0, tzinfo=UTC)]


def test_at_with_an_offset_keeps_that_instant():
    trigger = parse_trigger({"at": "2026-12-01T09:00+00:00"}, "Asia/Tokyo")
    assert trigger.next_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 12, 1, 9, tzinfo=UTC
    )


def test_at_accepts_a_toml_datetime_and_shifts_a_nonexistent_time():
    trigger = parse_trigger({"at": datetime(2026, 3, 8, 2, 30)}, "America/New_York")
    assert trigger.next_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 3, 8, 3, 30, tzinfo=NY
    )


@pytest.mark.parametrize("spec", [{}, {"manual": True}, {"role": "coder", "prompt": "hi"}])
def test_manual_never_fires(spec):
    trigger = parse_trigger(spec, "UTC")
    assert isinstance(trigger, ManualTrigger)
    assert trigger.next_after(datetime(2026, 1, 1, tzinfo=UTC)) is None
    assert next_fires(trigger, datetime(2026, 1, 1, tzinfo=UTC), 3) == []


@pytest.mark.parametrize(
    "spec",
    [
        {"cron": "*/5 * * * *", "timezone": "Europe/Paris"},
        {"cron": "@daily"},
        {"calendar": [{"hour": 9, "minute": 0, "weekday": 1}, {"day": 1}]},
        {"every": "1h30m", "window": "08:00-22:30"},
        {"every": "90s"},
        {"at": "2026-12-01T09:00"},
        {},
    ],
)
def test_to_spec_round_trips(spec):
    trigger = parse_trigger(spec, "America/Chicago")
    assert parse_trigger(trigger.to_spec(), None) == trigger


def test_next_fires_lists_n():
    trigger = parse_trigger({"cron": "0 */6 * * *"}, "UTC")
    assert next_fires(trigger, datetime(2026, 5, 1, 5, tzinfo=UTC), 3) == [
        datetime(2026, 5, 1, h, tzinfo=UTC) for h in (6, 12, 18)
    ]


# --- errors for people --------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "default_tz", "field", "value", "accepted"),
    [
        ({"cron": "61 * * * *"}, "UTC", "cron", "61 * * * *", "5 fields"),
        ({"cron": "* * * *"}, "UTC", "cron", "* * * *", "exactly 5"),
        ({"cron": "0 0 * * * *"}, "UTC", "cron", "0 0 * * * *", "no seconds"),
        ({"cron": "@fortnightly"}, "UTC", "cron", "@fortnightly", "@hourly"),
        ({"cron": "0 0 31 2 *"}, "UTC", "cron", "0 0 31 2 *", "a day that exists"),
        ({"cron": ""}, "UTC", "cron", "", "5 fields"),
        (
            {"cron": "* * * * *", "timezone": "Mars/Olympus"},
            "UTC",
            "timezone",
            "Mars/Olympus",
            "IANA",
        ),
        ({"cron": "* * * * *"}, "Europe/Pariss", "[daemon] timezone", "Europe/Pariss", "IANA"),
        (
            {"every": "30m", "window": "22:00-08:00"},
            "UTC",
            "window",
            "22:00-08:00",
            "start before end",
        ),
        ({"every": "30m", "window": "09:00-09:00"}, "UTC", "window", "09:00-09:00", "HH:MM"),
        ({"every": "30m", "window": "9am-5pm"}, "UTC", "window", "9am-5pm", "HH:MM"),
        ({"every": "0s"}, "UTC", "every", "0s", "1s to 1d"),
        ({"every": -5}, "UTC", "every", -5, "'1h30m'"),
        ({"every": "2d"}, "UTC", "every", "2d", "use cron"),
        ({"every": "soon"}, "UTC", "every", "soon", "'10m'"),
        ({"window": "08:00-09:00"}, "UTC", "window", "08:00-09:00", "'every'"),
        ({"calendar": [{"hour": 24}]}, "UTC", "calendar[0].hour", 24, "0-23"),
        ({"calendar": [{"minute": 0}, {"weekday": 8}]}, "UTC", "calendar[1].weekday", 8, "0-7"),
        ({"calendar": [{"Hour": 9}]}, "UTC", "calendar[0]", "Hour", "lowercase"),
        ({"calendar": [{"hour": "9"}]}, "UTC", "calendar[0].hour", "9", "integer"),
        ({"calendar": [{}]}, "UTC", "calendar[0]", {}, "at least one"),
        ({"calendar": []}, "UTC", "calendar", [], "calendar ="),
        (
            {"calendar": [{"day": 30, "month": 2}]},
            "UTC",
            "calendar[0]",
            {"day": 30, "month": 2},
            "exists",
        ),
        ({"at": "next tuesday"}, "UTC", "at", "next tuesday", "ISO"),
        ({"cron": "* * * * *", "every": "5m"}, "UTC", "trigger", "cron and every", "one of"),
        ({"manual": "yes"}, "UTC", "manual", "yes", "manual = true"),
    ],
)
def test_bad_input_names_field_value_and_accepted(spec, default_tz, field, value, accepted):
    with pytest.raises(ScheduleError) as err:
        parse_trigger(spec, default_tz)
    message = str(err.value)
    assert message.startswith(f"{field}: {value!r}"), message
    assert accepted in message


def test_window_that_crosses_midnight_says_why():
    with pytest.raises(ScheduleError, match="may not cross midnight"):
        parse_trigger({"every": "30m", "window": "22:00-08:00"}, "UTC")


@pytest.mark.parametrize("default_tz", [None, ""])
def test_timezone_is_required_with_no_silent_default(default_tz):
    with pytest.raises(ScheduleError) as err:
        parse_trigger({"cron": "* * * * *"}, default_tz)
    assert str(err.value) == TIMEZONE_REQUIRED


def test_constructors_require_a_zone_too():
    with pytest.raises(ScheduleError, match="timezone is required"):
        CronTrigger("* * * * *", None)
    with pytest.raises(ScheduleError, match="ZoneInfo"):
        ManualTrigger("UTC")


def test_job_timezone_wins_over_daemon_default():
    trigger = parse_trigger({"cron": "0 9 * * *", "timezone": "Asia/Tokyo"}, "Europe/Paris")
    assert trigger.tz == ZoneInfo("Asia/Tokyo")


def test_schedule_error_is_a_value_error():
    assert issubclass(ScheduleError, ValueError)


# --- missed fires ---------------------------------------------------------------


HOURLY = CronTrigger("0 * * * *", ZoneInfo("UTC"))


def at(hour, minute=0, second=0):
    return datetime(2026, 5, 1, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize("policy", list(MissedFire))
def test_on_time_fire_is_kept_by_every_policy(policy):
    assert due_fires(HOURLY, at(10), at(10, 0, 2), policy, 10) == [at(10)]


@pytest.mark.parametrize("policy", list(MissedFire))
def test_nothing_due_before_next_run_at(policy):
    assert due_fires(HOURLY, at(11), at(10, 59), policy, 10) == []


def test_skip_drops_missed_fires_after_downtime():
    assert due_fires(HOURLY, at(3), at(9, 30), MissedFire.SKIP, 10) == []


def test_skip_keeps_the_current_fire_when_it_is_within_grace():
    assert due_fires(HOURLY, at(3), at(9, 0, 30), MissedFire.SKIP, 10) == [at(9)]
    assert due_fires(HOURLY, at(3), at(9, 5), MissedFire.SKIP, 10, grace=timedelta(minutes=10)) == [
        at(9)
    ]


def test_once_makes_one_catch_up_fire():
    assert due_fires(HOURLY, at(3), at(9, 30), MissedFire.ONCE, 10) == [at(9)]


def test_all_makes_each_missed_fire_oldest_first():
    assert due_fires(HOURLY, at(3), at(9, 30), MissedFire.ALL, 10) == [at(h) for h in range(3, 10)]


def test_all_is_bounded_by_limit_keeping_the_newest():
    assert due_fires(HOURLY, at(3), at(9, 30), MissedFire.ALL, 2) == [at(8), at(9)]


def test_all_after_a_long_downtime_of_a_frequent_job_stays_bounded():
    every_minute = CronTrigger("* * * * *", ZoneInfo("UTC"))
    down_since = datetime(2026, 1, 1, tzinfo=UTC)
    fires = due_fires(every_minute, down_since, at(9, 30), MissedFire.ALL, 3)
    assert fires == [at(9, 28), at(9, 29), at(9, 30)]


def test_due_fires_counts_a_one_shot_once():
    trigger = AtTrigger(at(3), UTC_ZONE)
    assert due_fires(trigger, at(3), at(9), MissedFire.ALL, 10) == [at(3)]
    assert trigger.next_after(at(9)) is None


def test_due_fires_accepts_policy_strings_from_the_store():
    assert due_fires(HOURLY, at(3), at(9, 30), "all", 2) == [at(8), at(9)]


def test_due_fires_refuses_a_zero_limit():
    with pytest.raises(ValueError, match="limit"):
        due_fires(HOURLY, at(3), at(9, 30), MissedFire.ALL, 0)


def test_policy_enums_read_from_config_strings():
    assert MissedFire("once") is MissedFire.ONCE
    assert [p.value for p in OverlapPolicy] == ["skip", "allow", "queue"]


def test_a_cron_expression_that_is_not_text_is_reported_not_crashed():
    with pytest.raises(ScheduleError, match=r"^cron: \['\*'\] is not a cron expression"):
        parse_trigger({"cron": ["*"]}, "UTC")
