"""Every limit text an operator has seen an agent CLI or API print is a rate limit,
and ordinary prose about limits is not."""

from datetime import UTC, datetime, timedelta

import pytest

from taskherd.runtimes.ratelimit import detect_rate_limit

NOW = datetime(2026, 1, 15, 12, 5, tzinfo=UTC)

LIMIT_TEXTS = [
    # the seeds' own detector: out of extra usage|rate limit|quota exceeded|hit your limit
    "You're out of extra usage",
    "You're out of extra usage · resets 3am",
    "quota exceeded",
    "Error: Quota exceeded for this billing period",
    "You've hit your limit",
    "You’ve hit your limit",
    "you have hit your limit",
    "rate limit",
    # Claude Code
    "Claude AI usage limit reached|1767225600",
    "Claude usage limit reached. Your limit will reset at 3pm.",
    "5-hour limit reached ∙ resets 2pm",
    "Weekly limit reached ∙ resets Nov 21, 2pm",
    "Opus limit reached, now using Sonnet 4",
    "Session limit reached",
    "API Error: Request rejected (429) · rate limited",
    "API Error: 429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}",
    # Anthropic API
    '{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens '
    'has exceeded your per-minute rate limit"}}',
    "anthropic.RateLimitError: Error code: 429",
    # OpenAI API and Codex
    "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
    "Limit 30000, Used 29000, Requested 2000. Please try again in 2.5s.",
    "You exceeded your current quota, please check your plan and billing details.",
    '{"error": {"code": "insufficient_quota", "type": "insufficient_quota"}}',
    "openai.RateLimitError: Error code: 429 - {'error': {'code': 'rate_limit_exceeded'}}",
    "■ You've hit your usage limit. Upgrade to Pro or try again in 4 days 23 hours.",
    "stream error: exceeded retry limit, last status: 429 Too Many Requests",
    '{"type":"usage_limit_reached","plans_type":"plus"}',
    # Google
    "429 RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota).",
    # HTTP
    "HTTP/1.1 429 Too Many Requests",
    "status: 429",
]


@pytest.mark.parametrize("text", LIMIT_TEXTS)
def test_limit_text_is_a_rate_limit(text):
    assert detect_rate_limit(text, NOW) is not None, text


ORDINARY_TEXTS = [
    "Refactored the limiter; all 429 tests pass",
    "line 429 of parser.py: unexpected indent",
    "time limit exceeded in test_sort",
    "Added a quota field to the User model",
    "The recursion limit was reached in the parser, fixed it",
    "ran out of memory while linking",
    "You've reached the end of the file",
    "resets 3pm (Europe/Paris)",
    "the user quota is checked on every upload",
]


@pytest.mark.parametrize("text", ORDINARY_TEXTS)
def test_ordinary_text_is_not_a_rate_limit(text):
    assert detect_rate_limit(text, NOW) is None, text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("Rate limit reached for gpt-4o … Please try again in 6ms.", 0.006),
        ("Rate limit reached … Please try again in 2.5s.", 2.5),
        ("You've hit your usage limit. Try again in 4 days.", 4 * 86400),
    ],
)
def test_relative_delays_in_api_texts(text, seconds):
    assert detect_rate_limit(text, NOW).reset_at == NOW + timedelta(seconds=seconds)


def test_try_again_at_a_clock_time():
    signal = detect_rate_limit("You've hit your usage limit. Try again at 3:05 PM.", NOW)
    assert signal.reset_at == datetime(2026, 1, 15, 15, 5, tzinfo=UTC)
