"""The hit-policy options that ``cachekit serve`` and ``cachekit replay`` share, checked together.

Both commands take ``--policy NAME`` and the policy's one number under the name that says what it
is: ``--threshold`` (threshold: the cosine a hit must reach), ``--max-error`` (error-bounded: the
bound on wrong hits per request), ``--min-probability`` (verified: the verifier's probability a
hit must reach), or ``--policy-setting`` for any policy (a custom ``module:callable`` one
included). A named setting given with another policy is refused with the fix, never read as
another policy's number: ``--max-error 0.05`` alone would otherwise run a threshold of 0.05.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["NAMED_SETTINGS", "add_policy_arguments", "policy_and_setting"]

#: The option of each built-in policy's setting, by policy name.
NAMED_SETTINGS = {
    "threshold": "threshold",
    "error-bounded": "max_error",
    "verified": "min_probability",
}


def add_policy_arguments(parser: argparse.ArgumentParser, settings: Any = None) -> None:
    """Add ``--policy`` and the setting options (into ``settings`` when given: a group that
    also holds options exclusive with them, such as replay's ``--sweep``)."""
    parser.add_argument(
        "--policy",
        metavar="NAME",
        help="semantic hit policy: threshold (default), verified, error-bounded, or "
        "module:callable",
    )
    group = settings if settings is not None else parser.add_mutually_exclusive_group()
    group.add_argument(
        "--threshold",
        type=float,
        metavar="T",
        help="with the threshold policy: the similarity a hit must reach, in (0, 1]",
    )
    group.add_argument(
        "--max-error",
        type=float,
        metavar="DELTA",
        help="with --policy error-bounded: the bound on wrong hits per request",
    )
    group.add_argument(
        "--min-probability",
        type=float,
        metavar="P",
        help="with --policy verified: the probability of a right hit a hit must reach",
    )
    group.add_argument(
        "--policy-setting",
        type=float,
        metavar="X",
        help="the policy's one setting, for any policy (custom ones included)",
    )


def policy_and_setting(args: argparse.Namespace) -> tuple[str, float | None]:
    """The policy named by ``args`` and its setting (``None``: the policy's default). Raises
    ValueError, naming the fix, for a setting given with a policy it does not belong to."""
    policy = args.policy or "threshold"
    for name, option in NAMED_SETTINGS.items():
        value = getattr(args, option, None)
        if value is None:
            continue
        if policy != name:
            flag = "--" + option.replace("_", "-")
            fix = (
                f"add --policy {name}"
                if args.policy is None
                else f"use --policy-setting, or {_flag_of(policy)}"
            )
            raise ValueError(
                f"{flag} is the {name} policy's setting, but the policy is {policy}: {fix}"
            )
        return policy, value
    return policy, getattr(args, "policy_setting", None)


def _flag_of(policy: str) -> str:
    option = NAMED_SETTINGS.get(policy)
    return "--" + option.replace("_", "-") if option else "--policy-setting"
