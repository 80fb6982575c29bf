"""Argument checks shared by the front and the entry points: each error names the parameter and
what it accepts, so a wrong type reads as a usage error, not as a failed comparison deep inside."""

from __future__ import annotations

from typing import Any

__all__ = ["check_fraction", "check_seconds"]


def _is_number(value: Any) -> bool:
    # bool is an int subclass, and ttl=True is never what anyone means.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_seconds(
    name: str,
    value: Any,
    *,
    allow_none: bool = True,
    allow_zero: bool = False,
    allow_callable: bool = False,
) -> None:
    """``value`` must be a number of seconds (> 0, or >= 0 with ``allow_zero``), or ``None`` /
    a function where allowed. Raises TypeError for a wrong type, ValueError for a wrong value."""
    if (value is None and allow_none) or (allow_callable and callable(value)):
        return
    accepted = "a number of seconds (int or float)"
    if allow_none:
        accepted += " or None"
    if allow_callable:
        accepted += " or a function of the result"
    if not _is_number(value):
        raise TypeError(f"{name} must be {accepted}, got {type(value).__name__} {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value != value:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} seconds, got {value!r}")


def check_fraction(name: str, value: Any) -> None:
    """``value`` must be a number in [0, 1)."""
    if not _is_number(value):
        raise TypeError(f"{name} must be a number in [0, 1), got {type(value).__name__} {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1) (a fraction of the TTL), got {value!r}")
