"""Shared by the index and GPU benchmarks: synthetic support-style texts and size arguments."""

from __future__ import annotations

#: What the synthetic questions are about, and what they ask to do with it.
SUBJECTS = [
    "password",
    "account",
    "invoice",
    "order",
    "subscription",
    "refund",
    "laptop",
    "phone",
    "router",
    "printer",
    "api key",
    "database",
    "email",
    "profile photo",
    "shipping address",
    "credit card",
    "license",
    "calendar",
    "backup",
    "vpn",
]
VERBS = [
    "reset",
    "change",
    "cancel",
    "update",
    "delete",
    "recover",
    "export",
    "share",
    "verify",
    "renew",
    "configure",
    "download",
]


def parse_size(text: str) -> int:
    """``"100k"`` -> 100000, ``"1m"`` -> 1000000."""
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * mult)
