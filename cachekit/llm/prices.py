"""Dollar prices per million tokens, for "dollars saved" figures (proxy metrics, replay).

The built-in table holds list prices for standard (non-batch, uncached-input) use as published
by the provider, as of :data:`PRICES_AS_OF`. Prices change: override or extend them with a TOML
file (``PriceTable.load(path)``) of the form::

    [prices."gpt-4o"]
    input = 2.5        # dollars per 1M prompt tokens
    output = 10.0      # dollars per 1M completion tokens

A model is priced by its exact name, else by the longest built-in name it starts with
(``gpt-4o-2024-08-06`` is priced as ``gpt-4o``); unknown models are priced at nothing and
reported as unknown, never guessed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_PRICES", "PRICES_AS_OF", "Price", "PriceTable"]

PRICES_AS_OF = "2025-11-25"


@dataclass(frozen=True)
class Price:
    """Dollars per million input (prompt) and output (completion) tokens."""

    input: float
    output: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1e6


DEFAULT_PRICES: Mapping[str, Price] = {
    "gpt-5": Price(1.25, 10.0),
    "gpt-5-mini": Price(0.25, 2.0),
    "gpt-5-nano": Price(0.05, 0.40),
    "gpt-4.1": Price(2.0, 8.0),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "gpt-4o": Price(2.50, 10.0),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4-turbo": Price(10.0, 30.0),
    "gpt-3.5-turbo": Price(0.50, 1.50),
    "o1": Price(15.0, 60.0),
    "o3": Price(2.0, 8.0),
    "o3-mini": Price(1.10, 4.40),
    "o4-mini": Price(1.10, 4.40),
    "text-embedding-3-small": Price(0.02),
    "text-embedding-3-large": Price(0.13),
    "text-embedding-ada-002": Price(0.10),
    # Anthropic (Messages API), by the API's model ids and their dated forms.
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4-0": Price(15.0, 75.0),
    "claude-opus-4-20250514": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4-0": Price(3.0, 15.0),
    "claude-sonnet-4-20250514": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.80, 4.0),
    "claude-3-haiku": Price(0.25, 1.25),
}


_CHAT_COUNTS = ("prompt_tokens", "completion_tokens")
_RESPONSES_COUNTS = ("input_tokens", "output_tokens")


class PriceTable:
    """Prices by model name; ``PriceTable()`` is the built-in table."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self.prices: dict[str, Price] = dict(DEFAULT_PRICES if prices is None else prices)
        self._by_length = sorted(self.prices, key=len, reverse=True)

    @classmethod
    def load(cls, path: str | Path, *, base: Mapping[str, Price] | None = None) -> PriceTable:
        """The built-in table (or ``base``) updated from the ``[prices]`` table of a TOML file."""
        with open(path, "rb") as f:
            data = tomllib.load(f)
        return cls.from_mapping(data.get("prices", {}), base=base)

    @classmethod
    def from_mapping(
        cls, table: Mapping[str, Any], *, base: Mapping[str, Price] | None = None
    ) -> PriceTable:
        prices = dict(DEFAULT_PRICES if base is None else base)
        for model, entry in table.items():
            if not isinstance(entry, Mapping) or "input" not in entry:
                raise ValueError(f"price of {model!r} needs 'input' (and 'output') per 1M tokens")
            inp, out = entry["input"], entry.get("output", 0.0)
            if not all(isinstance(v, (int, float)) and v >= 0 for v in (inp, out)):
                raise ValueError(f"prices of {model!r} must be non-negative numbers")
            prices[str(model)] = Price(float(inp), float(out))
        return cls(prices)

    def price(self, model: str) -> Price | None:
        """The price of ``model``: exact name, else the longest known prefix, else ``None``."""
        p = self.prices.get(model)
        if p is not None:
            return p
        for name in self._by_length:
            if model.startswith(name + "-") or model.startswith(name + ":"):
                return self.prices[name]
        return None

    def cost(self, model: str, usage: Mapping[str, Any] | None) -> float | None:
        """Dollars an answer with this ``usage`` cost, or ``None`` when the model or usage is
        unknown or malformed (counts that are not non-negative ints). Never raises."""
        p = self.price(model) if isinstance(model, str) else None
        if p is None or not isinstance(usage, Mapping) or not usage:
            return None
        counts = []
        # Chat and completions count prompt/completion tokens; the Responses and Messages APIs
        # input/output.
        responses = "prompt_tokens" not in usage and "input_tokens" in usage
        keys: tuple[str, ...] = (
            ("input_tokens", "output_tokens")
            if responses
            else ("prompt_tokens", "completion_tokens")
        )
        # Anthropic counts the prompt's tokens read from and written to its prompt cache apart:
        # a hit saves the whole call, so they are input too.
        if responses and "cache_read_input_tokens" in usage:
            keys = (*keys, "cache_creation_input_tokens", "cache_read_input_tokens")
        for key in keys:
            n = usage.get(key)
            if n is None:
                n = 0
            # A count is a non-negative int, never a bool, str, float or list: anything else
            # (a malformed or forged stored entry) leaves the answer unpriced, never raises.
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                return None
            counts.append(n)
        return p.cost(counts[0] + sum(counts[2:]), counts[1])
