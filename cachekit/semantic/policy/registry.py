"""Hit policies by name, for settings files and command lines (``cachekit serve --policy``,
``cachekit replay --policy``, the ``policy`` entry of a config file).

Each policy is built from one number, its *setting*, so a sweep applies to every policy alike:

========================  ==================================================================
``threshold``             :class:`~cachekit.semantic.policy.hit_policy.ThresholdPolicy`;
                          the setting is the cosine threshold (default ``DEFAULT_THRESHOLD``).
``verified``              :class:`~cachekit.semantic.policy.verifier.VerifiedPolicy` with
                          the shipped verifier; the setting is the minimum probability of a
                          right hit (default: the model's operating point).
``error-bounded``         :class:`~cachekit.semantic.policy.error_bounded.ErrorBoundedPolicy`;
                          the setting is ``max_error``, the bound on wrong hits per lookup
                          (default 0.05).
========================  ==================================================================

Other policies join by name: :func:`register_policy` (in the process that builds them), or a
``module:callable`` name, imported when first built (what a command line or a config file
names, and every proxy worker imports). Either way the factory is ``f(setting: float | None) ->
HitPolicy``, ``None`` meaning the policy's own default. One registry serves ``serve``,
``replay`` and the config files.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from cachekit.semantic.policy.error_bounded import ErrorBoundedPolicy
from cachekit.semantic.policy.hit_policy import DEFAULT_THRESHOLD, HitPolicy, ThresholdPolicy
from cachekit.semantic.policy.slots import DEFAULT_GUARD, SlotCheck
from cachekit.semantic.policy.verifier import VerifiedPolicy

__all__ = ["POLICY_NAMES", "PolicyFactory", "build_policy", "policy_names", "register_policy"]

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

#: A policy built from its setting alone (``None``: the policy's default).
PolicyFactory = Callable[[float | None], HitPolicy]
_Builder = Callable[[float | None, Comparator | None, Guard], HitPolicy]

_BUILDERS: dict[str, _Builder] = {
    "threshold": _threshold,
    "verified": _verified,
    "error-bounded": _error_bounded,
}
#: The policies this module defines.
POLICY_NAMES = tuple(_BUILDERS)
_LOCK = threading.Lock()


def _from_factory(factory: PolicyFactory) -> _Builder:
    def build(setting: float | None, comparator: Comparator | None, guard: Guard) -> HitPolicy:
        return factory(setting)

    return build


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make the policy ``name`` (``--policy name``, ``policy = "name"``) build with
    ``factory``. The built-in names cannot be replaced."""
    if not isinstance(name, str) or not name or not callable(factory):
        raise ValueError("register_policy needs a name and a callable factory")
    if name in POLICY_NAMES:
        raise ValueError(f"{name!r} is a built-in policy; register yours under another name")
    with _LOCK:
        _BUILDERS[name] = _from_factory(factory)


def policy_names() -> list[str]:
    """Every policy name :func:`build_policy` knows now (built-in and registered)."""
    with _LOCK:
        return sorted(_BUILDERS)


def _builder(name: str) -> _Builder:
    with _LOCK:
        builder = _BUILDERS.get(name)
    if builder is not None:
        return builder
    module, _, attr = name.partition(":")
    if not module or not attr:
        raise ValueError(
            f"unknown hit policy {name!r}; known: {', '.join(policy_names())} "
            "(or module:callable, a factory of the setting)"
        )
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"hit policy {name!r} cannot be imported: {exc}") from exc
    if not callable(factory):
        raise ValueError(f"hit policy {name!r} is not callable")
    register_policy(name, factory)
    return _builder(name)


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
    :class:`~cachekit.semantic.policy.slots.SlotCheck`. ValueError naming the known policies for an
    unknown name, or for a setting the policy refuses."""
    builder = _builder(name)
    if setting is not None and (isinstance(setting, bool) or not isinstance(setting, (int, float))):
        raise ValueError(f"the {name} policy's setting must be a number, got {setting!r}")
    check: Guard = DEFAULT_GUARD if guard is True else None if guard is False else guard
    return builder(None if setting is None else float(setting), comparator, check)
