"""What agent CLIs and model APIs print when a limit stops them, as data.

Each entry is (source, regular expression), matched case-insensitively after the forms
that carry a reset time (so "You've hit your limit · resets 3am" is read with its clock,
and a bare "You've hit your limit" still pauses the runtime). Adding a phrase a CLI prints
means adding a line here and its text to the table in the tests.

The phrases are specific on purpose: a failed run's log tail is searched, and an agent
that wrote about quotas or limits in ordinary prose must not pause the fleet.
"""

from __future__ import annotations

LIMIT_PHRASES: tuple[tuple[str, str], ...] = (
    # Claude Code subscriptions: "Claude usage limit reached.", "5-hour limit reached",
    # "Weekly limit reached", "Opus limit reached", "You've hit your limit",
    # "You're out of extra usage", "Approaching usage limit" is only a warning (not here).
    ("usage_limit",
     r"\b(?:usage|session|weekly|daily|hourly|monthly|opus|sonnet|\d+-hour)\s+limit\s+"
     r"(?:has\s+been\s+)?(?:reached|exceeded|hit)"),
    ("hit_your_limit", r"\b(?:you(?:'|’)?ve|you\s+have)\s+hit\s+your\s+(?:usage\s+)?limit"),
    ("out_of_extra_usage", r"\bout\s+of\s+extra\s+usage\b"),
    ("out_of_usage", r"\byou(?:'|’)?re\s+out\s+of\s+(?:usage|credits|messages)\b"),
    # OpenAI API and Codex: "You exceeded your current quota", "insufficient_quota",
    # "Quota exceeded for quota metric …" (Google), "usage_limit_reached" (Codex's error type).
    ("quota_exceeded", r"\bquota\s+(?:has\s+been\s+)?exceeded\b"
                       r"|\bexceeded\s+your\s+(?:current\s+)?quota\b"),
    ("insufficient_quota", r"\binsufficient_quota\b"),
    ("usage_limit_reached", r"\busage_limit_(?:reached|exceeded)\b"),
    ("resource_exhausted", r"\bRESOURCE_EXHAUSTED\b|\bresource\s+has\s+been\s+exhausted\b"),
    # Anthropic API: {"type":"error","error":{"type":"rate_limit_error",…}}; OpenAI:
    # "Rate limit reached for gpt-4o in organization …"; the seeds' own "rate limit".
    ("rate_limit_text", r"\brate[-_ ]?limit(?:ed|s|ing)?(?![a-z])"),
    ("too_many_requests", r"\btoo\s+many\s+requests\b"),
    # 429 only where it is a status, not any number in a log (line 429 of a file).
    ("http_429",
     r"(?:\b(?:http(?:/\d(?:\.\d)?)?|status|error|code|rejected|returned|got)\b[^\n\d]{0,20}"
     r"|\(|\"status\"\s*:\s*)429\b"),
)
