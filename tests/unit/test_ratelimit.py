from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from taskherd.runtimes.ratelimit import (
    RateLimitSignal,
    cooldown_until,
    detect_rate_limit,
    retry_after_to_reset,
)

PARIS = ZoneInfo("Europe/Paris")
# 2026-01-15 12:05 UTC is 13:05 in Paris (CET, UTC+1).
NOW = datetime(2026, 1, 15, 12, 5, tzinfo=UTC)


def reset_of(text, now=NOW, **kwargs):
    signal = detect_rate_limit(text, now, **kwargs)
    assert signal is not None, f"no signal in {text!r}"
    return signal.reset_at


def test_claude_usage_limit_with_unix_time():
    signal = detect_rate_limit("Claude AI usage limit reached|1767225600", NOW)
    assert signal == RateLimitSignal(
        datetime(2026, 1, 1, 0, 0, tzinfo=UTC),
        "usage_limit_epoch",
        "usage limit reached|1767225600",
    )


def test_usage_limit_epoch_in_milliseconds():
    assert reset_of("usage limit reached|1767225600000") == datetime(2026, 1, 1, tzinfo=UTC)


def test_resets_2pm_in_named_zone_is_later_today():
    reset = reset_of("5-hour limit reached ∙ resets 2pm (Europe/Paris)")
    assert reset == datetime(2026, 1, 15, 14, 0, tzinfo=PARIS)
    assert reset.astimezone(UTC) == datetime(2026, 1, 15, 13, 0, tzinfo=UTC)


def test_resets_time_already_past_today_is_tomorrow():
    reset = reset_of("limit reached ∙ resets 1pm (Europe/Paris)")  # it is 13:05 there
    assert reset == datetime(2026, 1, 16, 13, 0, tzinfo=PARIS)


def test_resets_with_minutes_uses_default_tz():
    assert reset_of("You've hit your limit · resets 2:30pm", default_tz=PARIS) == datetime(
        2026, 1, 15, 14, 30, tzinfo=PARIS
    )


def test_resets_without_zone_defaults_to_zone_of_now():
    now_in_paris = NOW.astimezone(PARIS)
    assert reset_of("Session limit reached ∙ resets 2:30pm", now=now_in_paris) == datetime(
        2026, 1, 15, 14, 30, tzinfo=PARIS
    )


def test_resets_on_a_date():
    assert reset_of("Weekly limit reached ∙ resets Jan 19, 9am (Europe/Paris)") == datetime(
        2026, 1, 19, 9, 0, tzinfo=PARIS
    )


def test_resets_on_a_january_date_read_in_december_is_next_year():
    december = datetime(2026, 12, 30, 12, tzinfo=UTC)
    assert reset_of("weekly limit reached ∙ resets Jan 2, 9am (UTC)", now=december) == datetime(
        2027, 1, 2, 9, 0, tzinfo=UTC
    )


def test_resets_24_hour_clock_and_pm_with_dots():
    assert reset_of("limit reached, resets 18:00 (Europe/Paris)") == datetime(
        2026, 1, 15, 18, 0, tzinfo=PARIS
    )
    assert reset_of("limit reached, resets 3 p.m. (Europe/Paris)") == datetime(
        2026, 1, 15, 15, 0, tzinfo=PARIS
    )


def test_unknown_zone_falls_back_to_default():
    assert reset_of("limit reached ∙ resets 2pm (Mars/Olympus)", default_tz=UTC) == datetime(
        2026, 1, 15, 14, 0, tzinfo=UTC
    )


def test_resets_without_clock_time_is_a_signal_without_reset():
    signal = detect_rate_limit("usage limit reached, resets 5 hours from now", NOW)
    assert signal.reset_at is None


def test_retry_after_in_text():
    assert reset_of('HTTP 429, headers: {"retry-after": "120"}') == NOW + timedelta(seconds=120)
    assert reset_of("Retry-After: Thu, 15 Jan 2026 13:00:00 GMT") == datetime(
        2026, 1, 15, 13, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "text, source",
    [
        ("Error: rate limit exceeded", "rate_limit_text"),
        ('{"type":"error","error":{"type":"rate_limit_error"}}', "rate_limit_text"),
        ("you are being rate-limited", "rate_limit_text"),
        ("429 Too Many Requests", "too_many_requests"),
        ("API Error: Request rejected (429) · slow down", "http_429"),
        ("HTTP/1.1 429", "http_429"),
        ('{"status": 429}', "http_429"),
        ("got status code 429 from upstream", "http_429"),
        ("5-hour limit reached", "usage_limit"),
    ],
)
def test_signals_without_reset_time(text, source):
    signal = detect_rate_limit(text, NOW)
    assert signal is not None and signal.reset_at is None and signal.source == source


@pytest.mark.parametrize(
    "text",
    [
        "",
        "all tests passed",
        "see tests/test_queue.py line 429",
        "took 429 ms",
        "the cache resets 3pm daily",  # a clock time, but no limit
        "TASK_COMPLETE: added the limiter module",
    ],
)
def test_no_signal(text):
    assert detect_rate_limit(text, NOW) is None


def test_reset_time_form_wins_over_generic_one_earlier_in_text():
    text = "rate limit hit.\nClaude AI usage limit reached|1767225600"
    assert detect_rate_limit(text, NOW).source == "usage_limit_epoch"


def test_extra_patterns_with_and_without_reset_groups():
    assert detect_rate_limit("quota exhausted", NOW) is None  # not a built-in phrase
    signal = detect_rate_limit("quota exhausted", NOW, extra_patterns=[r"quota exhausted"])
    assert signal.source == "extra:quota exhausted" and signal.reset_at is None
    assert reset_of(
        "quota exhausted until 1767225600", extra_patterns=[r"quota exhausted until (?P<epoch>\d+)"]
    ) == datetime(2026, 1, 1, tzinfo=UTC)
    assert reset_of(
        "quota exhausted, wait 30s", extra_patterns=[r"quota exhausted, wait (?P<seconds>\d+)s"]
    ) == NOW + timedelta(seconds=30)


def test_naive_now_is_taken_as_utc():
    naive = datetime(2026, 1, 15, 12, 5)
    assert reset_of("limit reached ∙ resets 2pm (UTC)", now=naive) == datetime(
        2026, 1, 15, 14, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        ("120", NOW + timedelta(seconds=120)),
        (" 0 ", NOW),
        ("-5", NOW),
        ("1.5", NOW + timedelta(seconds=1.5)),
        ("Thu, 15 Jan 2026 13:00:00 GMT", datetime(2026, 1, 15, 13, 0, tzinfo=UTC)),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_to_reset(value, expected):
    assert retry_after_to_reset(value, NOW) == expected


def test_cooldown_uses_future_reset_time():
    later = NOW + timedelta(minutes=20)
    assert cooldown_until(RateLimitSignal(later, "x"), NOW) == later


def test_cooldown_defaults_to_one_hour_without_or_with_past_reset():
    assert cooldown_until(RateLimitSignal(None, "x"), NOW) == NOW + timedelta(hours=1)
    past = NOW - timedelta(minutes=1)
    assert cooldown_until(RateLimitSignal(past, "x"), NOW) == NOW + timedelta(hours=1)


def test_cooldown_default_is_configurable():
    signal = RateLimitSignal(None, "x")
    assert cooldown_until(signal, NOW, default_cooldown=90) == NOW + timedelta(seconds=90)
    assert cooldown_until(signal, NOW, default_cooldown=timedelta(minutes=5)) == NOW + timedelta(
        minutes=5
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("Rate limit exceeded, try again in 20 seconds", 20),
        ("5-hour limit reached · resets in 2 hours", 7200),
        ("API rate limit hit; retry in 90s", 90),
        ("usage limit: available in 15 min", 900),
    ],
)
def test_a_relative_reset_after_a_limit_is_read(text, seconds):
    now = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    signal = detect_rate_limit(text, now)
    assert signal is not None and signal.reset_at == now + timedelta(seconds=seconds)
