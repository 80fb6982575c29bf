"""Prepared requests remembered by their body, bounded in bytes.

A repeated request (what an exact hit is) skips parsing, validation and key hashing. Entries are
found by the body itself (with the endpoint, tenant and namespace) and charged the body's bytes
plus what the parsed request costs in memory, estimated from above from the body's characters
(:func:`estimated_size`): a body built to inflate when parsed (thousands of ``{}``) is charged
its parsed size, not its length, and one costing more than a sixteenth of the budget is not kept
at all. Oldest entries go first.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

from cachekit.llm import LLMRequest

__all__ = [
    "MEMO_MAX_BODY",
    "MEMO_MAX_BYTES",
    "MemoKey",
    "RequestMemo",
    "estimated_size",
    "parsed_size",
]

#: ``(endpoint, tenant, namespace, keyed headers, body)``.
MemoKey = tuple[str, str, str, tuple[tuple[str, str], ...], bytes]

#: Bytes of parsed requests remembered in all.
MEMO_MAX_BYTES = 32 * 2**20
#: Bodies longer than this (bytes) are prepared every time, never remembered.
MEMO_MAX_BODY = 16_384
#: What one entry costs besides its body and its parse: the key tuple, the request object.
ENTRY_OVERHEAD = 600

#: What one JSON container or value parsed from a body costs at most, besides its characters:
#: ``{}`` parses into a 64-byte dict held by an 8-byte slot, ``{"a":1}`` into a 184-byte one.
_PER_OPEN = 128
_PER_ITEM = 96


def estimated_size(raw: bytes) -> int:
    """Bytes the parsed form of JSON ``raw`` holds, estimated from above without parsing it: every
    ``{``, ``[``, ``,`` and ``:`` may open an object or hold a value (counted by ``bytes.count``, in
    C), and every character may become up to two bytes of a string (``sys.getsizeof`` of the
    parse of bodies of empty objects, short strings, numbers and prose stays below it: tested)."""
    opens = raw.count(b"{") + raw.count(b"[")
    items = raw.count(b",") + raw.count(b":")
    return 2 * len(raw) + _PER_OPEN * opens + _PER_ITEM * items + sys.getsizeof(b"")


def parsed_size(obj: Any) -> int:
    """What parsed JSON ``obj`` holds by ``sys.getsizeof`` of every node (a walk: for tests and
    benchmarks that check :func:`estimated_size`, never on the request path)."""
    total, todo = 0, [obj]
    while todo:
        node = todo.pop()
        total += sys.getsizeof(node)
        if isinstance(node, dict):
            todo.extend(node.keys())
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return total


class RequestMemo:
    """Prepared requests by ``(endpoint, tenant, namespace, body)``: :meth:`get` one, :meth:`put`
    one after preparing it (never a bad body: :func:`prepare` raised before)."""

    def __init__(self, max_bytes: int = MEMO_MAX_BYTES, max_body: int = MEMO_MAX_BODY) -> None:
        self.max_bytes = max_bytes
        self.max_body = max_body
        self.bytes = 0
        self._entries: OrderedDict[MemoKey, tuple[LLMRequest, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: MemoKey) -> LLMRequest | None:
        if len(key[-1]) > self.max_body:  # never kept: not worth hashing a large body for
            return None
        found = self._entries.get(key)
        return None if found is None else found[0]

    def put(self, key: MemoKey, req: LLMRequest) -> None:
        """Remember ``req`` under ``key`` (whose last item is the body) if it fits."""
        raw = key[-1]
        if len(raw) > self.max_body or key in self._entries:
            return
        size = sys.getsizeof(raw) + estimated_size(raw) + 2 * sys.getsizeof(req.text or "")
        size += ENTRY_OVERHEAD
        if size > self.max_bytes // 16:
            return
        self._entries[key] = (req, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, old) = self._entries.popitem(last=False)
            self.bytes -= old
