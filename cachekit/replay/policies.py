"""Hit policies by name, for ``cachekit replay --policy NAME``: the one registry of
:mod:`cachekit.semantic.policy.registry`, which ``cachekit serve`` and config files use too.

A policy is built from one number, its *setting* (for ``threshold`` the cosine threshold), so
that ``--threshold`` and ``--sweep`` apply to every policy alike.
"""

from __future__ import annotations

from cachekit.semantic.policy.hit_policy import HitPolicy
from cachekit.semantic.policy.registry import (
    PolicyFactory,
    build_policy,
    policy_names,
    register_policy,
)

__all__ = ["PolicyFactory", "policy_factory", "policy_names", "register_policy"]


def policy_factory(name: str) -> PolicyFactory:
    """The factory of the policy called ``name``; ValueError naming the known ones if none."""
    build_policy(name)  # an unknown name fails here, not at the first setting

    def factory(setting: float | None) -> HitPolicy:
        return build_policy(name, setting)

    return factory
