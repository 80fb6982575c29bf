"""Hit policies: which neighbour may answer for a request. The protocol and the threshold policy
(:mod:`~cachekit.semantic.policy.hit_policy`), the slot guard inside every policy (``slots`` and the
``slot_*`` modules it reads texts with), the verifier, the error-bounded policy, labelled pairs and
their measures, and the registry of policies by name that ``serve``, ``replay`` and config files
share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.semantic.policy.error_bounded import ErrorBoundedPolicy
    from cachekit.semantic.policy.hit_policy import (
        DEFAULT_NUMBER_BONUS,
        DEFAULT_THRESHOLD,
        MISS,
        NO_STATS,
        AcceptPolicy,
        AcceptPolicyAdapter,
        Candidate,
        Decision,
        EntryStats,
        HitPolicy,
        ThresholdPolicy,
    )
    from cachekit.semantic.policy.registry import build_policy, policy_names, register_policy
    from cachekit.semantic.policy.slots import DEFAULT_GUARD, SlotCheck
    from cachekit.semantic.policy.verifier import VerifiedPolicy

__all__ = [
    "DEFAULT_GUARD",
    "DEFAULT_NUMBER_BONUS",
    "DEFAULT_THRESHOLD",
    "MISS",
    "NO_STATS",
    "AcceptPolicy",
    "AcceptPolicyAdapter",
    "Candidate",
    "Decision",
    "EntryStats",
    "ErrorBoundedPolicy",
    "HitPolicy",
    "SlotCheck",
    "ThresholdPolicy",
    "VerifiedPolicy",
    "build_policy",
    "policy_names",
    "register_policy",
]

_LAZY = {
    "HitPolicy": "cachekit.semantic.policy.hit_policy",
    "ThresholdPolicy": "cachekit.semantic.policy.hit_policy",
    "AcceptPolicy": "cachekit.semantic.policy.hit_policy",
    "AcceptPolicyAdapter": "cachekit.semantic.policy.hit_policy",
    "Candidate": "cachekit.semantic.policy.hit_policy",
    "Decision": "cachekit.semantic.policy.hit_policy",
    "EntryStats": "cachekit.semantic.policy.hit_policy",
    "MISS": "cachekit.semantic.policy.hit_policy",
    "NO_STATS": "cachekit.semantic.policy.hit_policy",
    "DEFAULT_THRESHOLD": "cachekit.semantic.policy.hit_policy",
    "DEFAULT_NUMBER_BONUS": "cachekit.semantic.policy.hit_policy",
    "SlotCheck": "cachekit.semantic.policy.slots",
    "DEFAULT_GUARD": "cachekit.semantic.policy.slots",
    "VerifiedPolicy": "cachekit.semantic.policy.verifier",
    "ErrorBoundedPolicy": "cachekit.semantic.policy.error_bounded",
    "register_policy": "cachekit.semantic.policy.registry",
    "build_policy": "cachekit.semantic.policy.registry",
    "policy_names": "cachekit.semantic.policy.registry",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
