"""What tokens cost: a model's prices, in USD per million tokens, from the config's `[prices]`.

Codex (and any runtime that reports tokens only) gets its run's cost from here; a run whose
model has no price keeps an unknown cost (None), never a zero.
"""

from __future__ import annotations

from dataclasses import dataclass

PER = 1_000_000


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input tokens (not read from the cache)
    output: float  # USD per million output tokens (reasoning included)
    cached_input: float | None = None  # USD per million cached input tokens; None: as input

    def cost(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> float:
        """The cost of one run; `input_tokens` counts the cached ones too, as the OpenAI
        Responses API does."""
        cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return ((input_tokens - cached) * self.input + cached * cached_rate
                + output_tokens * self.output) / PER
