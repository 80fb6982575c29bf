"""Answer buckets: up to N answers per key, for requests sampled at temperature > 0.

A request that asks for a bucket of N (``x-cachekit-bucket-size: N``, or ``bucket_size`` in the
config) is answered by the upstream until its key holds N answers, each stored next to the
others; once full, a hit serves one of the N at random, so a client asking again still sees
variety (what a temperature above 0 is for) without paying for a call each time. A bucket is one
exact entry (shared through Redis like any other): the stored wrapper's ``b`` lists the answers
(``r``, the first, stays for readers that know no buckets) and ``k`` names the exact key, so a
semantic match (indexed once the bucket is full) draws from the bucket as it is now.

Pure functions over the stored wrappers; :class:`~cachekit.llm.LLMCache` calls them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_BUCKET",
    "answers_of",
    "bucket_for",
    "check_bucket",
    "filling",
    "pick",
    "temperature_of",
    "with_answer",
]

#: The largest bucket a request may ask for.
MAX_BUCKET = 64


def check_bucket(size: Any) -> int:
    """``size`` as a bucket size (1: no bucket); ``ValueError`` unless an int in 1..MAX_BUCKET."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BUCKET:
        raise ValueError(f"bucket size must be an integer from 1 to {MAX_BUCKET}, got {size!r}")
    return size


def temperature_of(body: Mapping[str, Any]) -> float:
    """A request's sampling temperature: its ``temperature``, else the APIs' default, 1."""
    t = body.get("temperature")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 1.0


def bucket_for(body: Mapping[str, Any], size: int) -> int:
    """The bucket a request gets from a configured ``size``: ``size`` for a sampled request
    (temperature not 0), 1 (one answer per key) for a greedy one."""
    return size if size > 1 and temperature_of(body) != 0 else 1


def answers_of(value: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The answers a stored wrapper holds: its bucket, else its one answer."""
    if "b" not in value:
        return [value["r"]]
    bucket = value.get("b")
    if isinstance(bucket, list) and bucket:
        return [a for a in bucket if isinstance(a, dict)]
    return [value["r"]]


def filling(value: Mapping[str, Any], size: int) -> str | None:
    """Why ``value`` may not answer a request asking for a bucket of ``size`` (``bucket
    filling 2/3``: that request goes upstream, its answer joins), or ``None``."""
    if size == 1:
        return None  # any entry holds one answer
    held = len(answers_of(value))
    return f"bucket filling {held}/{size}" if held < size else None


def pick(value: Mapping[str, Any], rng: random.Random | None = None) -> dict[str, Any]:
    """One of the stored answers, at random."""
    if "b" not in value:
        return value["r"]
    answers = answers_of(value)
    return answers[0] if len(answers) == 1 else (rng or random).choice(answers)


def with_answer(
    value: Mapping[str, Any] | None, new: dict[str, Any], size: int
) -> list[dict[str, Any]] | None:
    """The bucket's answers once ``new`` joins (``value``: the live wrapper, or ``None``), or
    ``None`` when the bucket is full already (a concurrent caller filled it)."""
    answers = answers_of(value) if value is not None else []
    if len(answers) >= size:
        return None
    return [*answers, new]
