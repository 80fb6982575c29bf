"""Listing Redis keys by prefix without ``KEYS``: ``SCAN MATCH`` in batches, on every primary of
a Redis Cluster (redis-py's cluster ``scan_iter`` walks each node's cursor in turn), each key
once. For admin listings and purges (:meth:`cachekit.backends.base.SharedTier.scan_keys`) and
semantic snapshots; never on a request's path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["glob_escape", "scan_batches"]

_GLOB_SPECIAL = frozenset("*?[]\\")


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (``*``, ``?``, ``[``, ``]``, ``\\``
    escaped)."""
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in text)


def scan_batches(client: Any, prefix: str, batch: int = 1000) -> Iterator[list[str]]:
    """Every key of ``client`` (a sync redis-py client, standalone or cluster) that starts with
    ``prefix``, decoded, in lists of at most ``batch``. SCAN may return a key twice while the
    keyspace is rehashed; each is yielded once."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch!r}")
    seen: set[str] = set()
    out: list[str] = []
    for raw in client.scan_iter(match=glob_escape(prefix) + "*", count=batch):
        key = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else str(raw)
        if key in seen:
            continue
        seen.add(key)
        out.append(key)
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out
