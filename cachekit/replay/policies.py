"""Hit policies by name, for ``cachekit replay --policy NAME``.

A policy is built from one number, its *setting* (for ``threshold`` the cosine threshold), so
that ``--threshold`` and ``--sweep`` apply to every policy alike. Policies defined elsewhere are
listed in :data:`_LAZY` as ``module:factory`` (imported only when named) or registered at run
time with :func:`register_policy`; a factory is ``f(setting: float | None) -> HitPolicy``, with
``None`` meaning the policy's own default.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachekit.semantic.policy import HitPolicy

__all__ = ["PolicyFactory", "policy_factory", "policy_names", "register_policy"]

PolicyFactory = Callable[[float | None], "HitPolicy"]


def _threshold(setting: float | None) -> HitPolicy:
    from cachekit.semantic.policy import DEFAULT_THRESHOLD, ThresholdPolicy

    return ThresholdPolicy(DEFAULT_THRESHOLD if setting is None else setting)


def _named(name: str) -> PolicyFactory:
    def build(setting: float | None) -> HitPolicy:
        from cachekit.semantic.policies import build_policy

        return build_policy(name, setting)

    return build


_FACTORIES: dict[str, PolicyFactory] = {
    "threshold": _threshold,
    "verified": _named("verified"),
    "error-bounded": _named("error-bounded"),
}
#: Policies in other modules, by name: "module:callable", imported when first named.
_LAZY: dict[str, str] = {}


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``--policy name`` build its policy with ``factory``."""
    if not name or not callable(factory):
        raise ValueError("register_policy needs a name and a callable factory")
    _FACTORIES[name] = factory


def policy_names() -> list[str]:
    return sorted({*_FACTORIES, *_LAZY})


def policy_factory(name: str) -> PolicyFactory:
    """The factory of the policy called ``name``; ValueError naming the known ones if none."""
    if name not in _FACTORIES and name in _LAZY:
        module, _, attr = _LAZY[name].partition(":")
        _FACTORIES[name] = getattr(importlib.import_module(module), attr)
    try:
        return _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(policy_names())}") from None
