"""Hit policies by name, for settings files and command lines (``cachekit serve --policy``,
``cachekit replay --policy``, the ``policy`` entry of a config file).

Each policy is built from one number, its *setting*, so a sweep applies to every policy alike:

========================  ==================================================================
``threshold``             :class:`~cachekit.semantic.policy.ThresholdPolicy`; the setting is
                          the cosine threshold (default ``DEFAULT_THRESHOLD``).
``verified``              :class:`~cachekit.semantic.verifier.VerifiedPolicy` with the shipped
                          verifier; the setting is the minimum probability of a right hit
                          (default: the model's operating point).
``error-bounded``         :class:`~cachekit.semantic.error_bounded.ErrorBoundedPolicy`; the
                          setting is ``max_error``, the bound on wrong hits per lookup
                          (default 0.05).
========================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cachekit.semantic.error_bounded import ErrorBoundedPolicy
from cachekit.semantic.policy import DEFAULT_THRESHOLD, HitPolicy, ThresholdPolicy
from cachekit.semantic.slots import DEFAULT_GUARD, SlotCheck
from cachekit.semantic.verifier import VerifiedPolicy

__all__ = ["POLICY_NAMES", "build_policy"]

DEFAULT_MAX_ERROR = 0.05


def _threshold(setting: float | None, comparator: Comparator | None, guard: Guard) -> HitPolicy:
    return ThresholdPolicy(DEFAULT_THRESHOLD if setting is None else setting, guard=guard)


def _verified(setting: float | None, comparator: Comparator | None, guard: Guard) -> HitPolicy:
    return VerifiedPolicy(min_probability=setting, guard=guard)


def _error_bounded(setting: float | None, comparator: Comparator | None, guard: Guard) -> HitPolicy:
    return ErrorBoundedPolicy(
        max_error=DEFAULT_MAX_ERROR if setting is None else setting,
        comparator=comparator,
        guard=guard,
    )


#: Whether a fresh answer and a cached one agree (used by policies that learn from checks).
Comparator = Callable[[Any, Any], bool]
Guard = SlotCheck | None

_BUILDERS: dict[str, Callable[[float | None, Comparator | None, Guard], HitPolicy]] = {
    "threshold": _threshold,
    "verified": _verified,
    "error-bounded": _error_bounded,
}
POLICY_NAMES = tuple(_BUILDERS)


def build_policy(
    name: str,
    setting: float | None = None,
    *,
    comparator: Comparator | None = None,
    guard: bool | SlotCheck | None = True,
) -> HitPolicy:
    """The policy called ``name`` at ``setting`` (``None``: its default). ``comparator``: how a
    learning policy tells whether a fresh answer agrees with the cached one (default: equal
    values). ``guard``: True for the default slot guard, False or None for none, or a
    :class:`~cachekit.semantic.slots.SlotCheck`. ValueError naming the known policies for an
    unknown name, or for a setting the policy refuses."""
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown hit policy {name!r}; known: {', '.join(POLICY_NAMES)}") from None
    if setting is not None and (isinstance(setting, bool) or not isinstance(setting, (int, float))):
        raise ValueError(f"the {name} policy's setting must be a number, got {setting!r}")
    check: Guard = DEFAULT_GUARD if guard is True else None if guard is False else guard
    return builder(None if setting is None else float(setting), comparator, check)
