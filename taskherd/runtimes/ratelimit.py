"""Rate-limit signals in agent output, and how long to pause for them.

Pure functions: the caller passes the text and the time (`now`, aware), so a
test can say "at 13:05 in Paris, 'resets 2pm' means 14:00 today" without a
clock. A signal only says a limit was hit and, where the text tells, when it
lifts; whether that makes a run `rate_limited` is the runtime's decision
(a run that already completed stays a success).

Forms recognised, most informative first (the first pattern that matches
wins, so a message that carries a reset time is never read as a bare
"rate limit"):

- ``Claude AI usage limit reached|1767225600``: reset at a unix time
- ``5-hour limit reached ∙ resets 2pm (Europe/Paris)``, ``resets 2:30pm``,
  ``resets Nov 21, 2pm``: the next such wall-clock time in that zone
- ``Retry-After: 120`` or an HTTP-date, as printed in a log
- caller's extra patterns (a ``(?P<epoch>…)`` or ``(?P<seconds>…)`` group
  gives a reset time)
- the phrases of `ratelimit_phrases` ("rate limit", "out of extra usage",
  "quota exceeded", HTTP 429…): no reset time, so the caller's cooldown applies
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from email.utils import parsedate_to_datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from taskherd.runtimes.ratelimit_phrases import LIMIT_PHRASES

DEFAULT_COOLDOWN_SECONDS = 3600
# The first pause for a limit whose text says nothing of its reset (most are per-minute).
FIRST_GUESSED_COOLDOWN = 60.0

# How much of the matched text a signal keeps, for logs and `taskherd show`.
_EXCERPT_LIMIT = 200


@dataclass(frozen=True)
class RateLimitSignal:
    """A limit was hit. `reset_at` is when it lifts, if the text said;
    `source` names the form that matched (e.g. ``usage_limit_epoch``,
    ``http_429``, ``extra:<pattern>``), `excerpt` the text that matched."""

    reset_at: datetime | None
    source: str
    excerpt: str = ""


def detect_rate_limit(
    text: str,
    now: datetime,
    extra_patterns: Iterable[str] = (),
    default_tz: tzinfo | None = None,
) -> RateLimitSignal | None:
    """The rate-limit signal in `text`, or None.

    `default_tz` reads a clock time printed without a zone (default: the
    zone of `now`); `extra_patterns` are regular expressions, matched
    case-insensitively, after the built-in forms that carry a reset time.
    """
    if not text:
        return None
    zone = default_tz or now.tzinfo or UTC  # a naive `now` is UTC, as _aware takes it
    now = _aware(now)
    for source, pattern, reset_from_match in _detectors(extra_patterns):
        match = pattern.search(text)
        if match:
            reset_at = reset_from_match(match, now, zone)
            return RateLimitSignal(reset_at, source, match.group(0)[:_EXCERPT_LIMIT].strip())
    return None


def retry_after_to_reset(header_value: str | None, now: datetime) -> datetime | None:
    """An HTTP Retry-After value (delay in seconds, or an HTTP-date) as the
    time the limit lifts; None when absent or unreadable."""
    if header_value is None:
        return None
    value = header_value.strip()
    now = _aware(now)
    try:
        return now + timedelta(seconds=max(0.0, float(value)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return _aware(when) if when is not None else None


def cooldown_until(
    signal: RateLimitSignal,
    now: datetime,
    default_cooldown: float | timedelta = DEFAULT_COOLDOWN_SECONDS,
) -> datetime:
    """When spawns of the limited runtime may start again: the signal's
    reset time if it is still ahead, else `now` plus the default cooldown
    (a reset already past means the text was stale or the clocks disagree,
    and we were limited just now either way)."""
    now = _aware(now)
    if signal.reset_at is not None and signal.reset_at > now:
        return signal.reset_at
    if not isinstance(default_cooldown, timedelta):
        default_cooldown = timedelta(seconds=default_cooldown)
    return now + default_cooldown


def known_reset(signal: RateLimitSignal, now: float) -> float | None:
    """When the limit lifts as the text said (unix seconds), or None: no reset time, or one
    already past (stale text, or clocks that disagree), leaves the length to the daemon."""
    if signal.reset_at is not None and signal.reset_at.timestamp() > now:
        return signal.reset_at.timestamp()
    return None


def guessed_cooldown(previous_until: float | None, previous_span: float | None, now: float,
                     cap: float) -> float:
    """How long to pause when the text gave no reset time: a per-minute limit is over in a
    minute, a daily one is not, so start at FIRST_GUESSED_COOLDOWN and double while limits
    repeat (a new one within twice the last guess after it lifted), up to `cap`."""
    first = min(FIRST_GUESSED_COOLDOWN, cap)
    if previous_until is None or previous_span is None:
        return first
    if previous_until > now:
        return previous_span  # runs that hit the same limit together: one step, not several
    if now - previous_until > 2 * previous_span:
        return first  # the limits stopped for a while: this is a new episode
    return min(cap, previous_span * 2)


# -- reset times from matches ---------------------------------------------

ResetFromMatch = Callable[[re.Match, datetime, tzinfo], datetime | None]


def _no_reset(match: re.Match, now: datetime, default_tz: tzinfo) -> None:
    return None


def _reset_from_epoch(match: re.Match, now: datetime, default_tz: tzinfo) -> datetime:
    epoch = int(match.group("epoch"))
    if epoch > 10**11:  # milliseconds, as JavaScript prints Date.now()
        epoch //= 1000
    return datetime.fromtimestamp(epoch, tz=UTC)


def _reset_from_retry_after(match: re.Match, now: datetime, default_tz: tzinfo):
    return retry_after_to_reset(match.group("value"), now)


def _reset_from_delay(match: re.Match, now: datetime, default_tz: tzinfo) -> datetime:
    seconds = float(match.group("amount")) * _UNIT_SECONDS[match.group("unit").lower()]
    return now + timedelta(seconds=seconds)


def _reset_from_extra(match: re.Match, now: datetime, default_tz: tzinfo):
    groups = match.groupdict()
    if groups.get("epoch"):
        return _reset_from_epoch(match, now, default_tz)
    if groups.get("seconds"):
        return retry_after_to_reset(groups["seconds"], now)
    return None


_MONTHS = {
    name: number
    for number, name in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}


def _reset_from_clock(match: re.Match, now: datetime, default_tz: tzinfo) -> datetime | None:
    """'resets 2pm (Europe/Paris)': the next 14:00 in Paris after `now`
    (or on the date given, if one is)."""
    if not (match.group("minute") or match.group("ampm")):
        return None  # "resets 5 hours from now" is no clock time
    zone = _zone(match.groupdict().get("tz"), default_tz)
    hour = _hour_24(int(match.group("hour")), match.group("ampm"))
    minute = int(match.group("minute") or 0)
    if hour is None or minute > 59:
        return None
    local_now = now.astimezone(zone)
    if match.group("month"):
        return _on_given_date(local_now, match, hour, minute, zone)
    candidate = _at_local(local_now.date(), hour, minute, zone)
    if candidate <= local_now:
        candidate = _at_local(local_now.date() + timedelta(days=1), hour, minute, zone)
    return candidate


def _on_given_date(local_now: datetime, match: re.Match, hour: int, minute: int,
                   zone: tzinfo) -> datetime | None:
    month = _MONTHS[match.group("month")[:3].lower()]
    day = int(match.group("day"))
    year = match.groupdict().get("year")
    try:
        if year:  # "try again at Nov 25th, 2026 6:12 PM": no guessing the year
            return _at_local(date(int(year), month, day), hour, minute, zone)
        candidate = _at_local(date(local_now.year, month, day), hour, minute, zone)
        # "resets Jan 2" read on Dec 30 is next year's January.
        if candidate < local_now - timedelta(days=180):
            candidate = _at_local(date(local_now.year + 1, month, day), hour, minute, zone)
    except ValueError:  # Feb 30 and friends
        return None
    return candidate


def _at_local(day: date, hour: int, minute: int, zone: tzinfo) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)


def _hour_24(hour: int, ampm: str | None) -> int | None:
    if ampm is None:
        return hour if hour <= 23 else None
    if not 1 <= hour <= 12:
        return None
    return hour % 12 + (12 if ampm.lower().startswith("p") else 0)


def _zone(name: str | None, default_tz: tzinfo) -> tzinfo:
    if not name:
        return default_tz
    if name.upper() in ("UTC", "GMT", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return default_tz


def _aware(moment: datetime) -> datetime:
    # A naive time is taken as UTC: every time in taskherd's store is UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- the patterns ---------------------------------------------------------

_I = re.IGNORECASE

_USAGE_LIMIT_EPOCH = re.compile(r"usage limit reached\s*\|\s*(?P<epoch>\d{9,13})", _I)

# "5-hour limit reached ∙ resets 2pm (Europe/Paris)", "You've hit your limit
# · resets 2:30pm", "Weekly limit reached ∙ resets Nov 21, 2pm": "limit" must
# come first on the same line, so a stray "resets 3pm" in a diff is no signal.
_LIMIT_RESETS_AT_CLOCK = re.compile(
    r"limit[^\n]{0,80}?\b(?:resets?\s+(?:at\s+|on\s+)?|try\s+again\s+at\s+)"
    r"(?:(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+"
    r"(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?"
    r"(?:\s*\((?P<tz>[A-Za-z_]+(?:/[A-Za-z0-9_+\-]+)*)\))?",
    _I,
)

# Codex CLI: "You’ve hit your usage limit. Upgrade to Pro (https://…), visit https://… to
# purchase more credits or try again at 12:39 PM." or "… try again at Nov 25th, 2026 6:12 PM."
# (in the CLI's own zone): the advice between the two can be long, so the span is wider.
_USAGE_LIMIT_TRY_AGAIN_AT = re.compile(
    r"usage\s+limit\b[^\n]{0,300}?\btry\s+again\s+at\s+"
    r"(?:(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+"
    r"(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4})\s+)?)?"
    r"(?P<hour>\d{1,2}):(?P<minute>\d{2})\s*(?P<ampm>[ap]\.?m\.?)?",
    _I,
)

# "rate limit exceeded, try again in 20 seconds", "limit reached · resets in 2 hours":
# a limit first on the same line, then a relative delay.
_LIMIT_RESETS_IN = re.compile(
    r"limit[^\n]{0,80}?\b(?:resets?|try again|retry|available)\s+in\s+"
    r"(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|sec|second|m|min|minute|h|hr|hour|d|day)s?\b",
    _I,
)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
                 "h": 3600, "hr": 3600, "hour": 3600, "d": 86400, "day": 86400}

_RETRY_AFTER = re.compile(
    r"retry[-_ ]after[\"']?\s*[:=]\s*[\"']?(?P<value>\d+(?:\.\d+)?|"
    r"[A-Za-z]{3},\s+\d{1,2}\s+[A-Za-z]{3}\s+\d{4}\s+\d{2}:\d{2}:\d{2}\s+GMT)",
    _I,
)

_GENERIC = [(source, re.compile(pattern, _I)) for source, pattern in LIMIT_PHRASES]


def _detectors(extra_patterns: Iterable[str]) -> list[tuple[str, re.Pattern, ResetFromMatch]]:
    detectors: list[tuple[str, re.Pattern, ResetFromMatch]] = [
        ("usage_limit_epoch", _USAGE_LIMIT_EPOCH, _reset_from_epoch),
        # Before the general clock form, which would stop at "try again at Jan 2nd, 20".
        ("usage_limit_try_again_at", _USAGE_LIMIT_TRY_AGAIN_AT, _reset_from_clock),
        ("limit_resets_at_clock", _LIMIT_RESETS_AT_CLOCK, _reset_from_clock),
        ("retry_after", _RETRY_AFTER, _reset_from_retry_after),
        ("limit_resets_in", _LIMIT_RESETS_IN, _reset_from_delay),
    ]
    detectors += [(f"extra:{p}", _compile_extra(p), _reset_from_extra) for p in extra_patterns]
    detectors += [(source, pattern, _no_reset) for source, pattern in _GENERIC]
    return detectors


_extra_cache: dict[str, re.Pattern] = {}


def _compile_extra(pattern: str) -> re.Pattern:
    compiled = _extra_cache.get(pattern)
    if compiled is None:
        compiled = _extra_cache[pattern] = re.compile(pattern, _I)
    return compiled
