"""An LLM cache's entries by what they are: list them, look at one, and purge them by tenant,
model or endpoint (``cachekit serve --admin-key``'s routes and ``cachekit purge``;
docs/admin.md).

Every stored answer carries what it is, under ``"m"`` in its wrapper (:func:`entry_meta`): its
exact key, endpoint, model, tenant id, caller namespace and the first :data:`TEXT_CHARS`
characters of its semantic text. Keys are digests, so a filter is matched against that record,
read from the entries themselves: exact entries through :meth:`cachekit.Cache.scan` (Redis:
SCAN on every node of a cluster, never KEYS, no cross-slot command), semantic entries through
:func:`cachekit.semantic.admin.scan_entries`. A purge deletes the matched exact entries with
:meth:`cachekit.Cache.delete_many` (the L1 of every replica following the Redis drops them) and
the matched semantic entries with :func:`cachekit.semantic.admin.delete_entries` (every replica
drops them and their vectors as it reads the store's log). Entries written before records were
kept match only ``{"all": true}``.

These calls block on the shared tier for as long as a scan takes (run them off an event loop)
and raise when it fails: an operator must know a purge did not happen.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from cachekit.llm.endpoints import ENDPOINTS
from cachekit.llm.errors import RequestError

if TYPE_CHECKING:
    from cachekit.llm.rules import LLMRequest
    from cachekit.llm.store import LLMCache
    from cachekit.llm.tenants import TenantResolver

__all__ = [
    "EXACT_PREFIX",
    "FILTERS",
    "MAX_COUNTED_KEYS",
    "MAX_PAGE_SIZE",
    "TEXT_CHARS",
    "EntryFilter",
    "entry_meta",
    "get_entry",
    "list_entries",
    "meta_key",
    "purge",
]

#: What every exact entry's key starts with (:func:`cachekit.llm.rules.exact_key`).
EXACT_PREFIX = "llm:x:"
#: Characters of an entry's text kept in its record and shown in listings.
TEXT_CHARS = 200
#: Distinct keys whose hits a process counts before the count restarts.
MAX_COUNTED_KEYS = 100_000
#: The filters a purge or a listing takes.
FILTERS = ("tenant_key", "tenant", "model", "endpoint", "all")
#: Largest page of :func:`list_entries`.
MAX_PAGE_SIZE = 1000
#: Entries read per shared-tier round trip while scanning.
SCAN_BATCH = 500


def entry_meta(req: LLMRequest) -> dict[str, Any]:
    """The record stored with ``req``'s answer (``"m"`` of the wrapper)."""
    model = req.body.get("model")
    return {
        "key": req.key,
        "endpoint": req.endpoint,
        "model": model if isinstance(model, str) else None,
        "tenant": req.tenant,
        "namespace": req.namespace,
        "text": None if req.text is None else req.text[:TEXT_CHARS],
    }


def _meta(value: Any) -> dict[str, Any]:
    meta = value.get("m") if isinstance(value, dict) else None
    return meta if isinstance(meta, dict) else {}


def meta_key(value: Any) -> str | None:
    """The exact key in a stored wrapper's record, or None (an entry without one)."""
    key = _meta(value).get("key")
    return key if isinstance(key, str) else None


@dataclass(frozen=True)
class EntryFilter:
    """Which entries: all of the given fields must match (``everything``: every entry). Build it
    from a request with :meth:`parse`."""

    tenant: str | None = None
    model: str | None = None
    endpoint: str | None = None
    everything: bool = False

    @classmethod
    def parse(
        cls, data: Any, tenants: TenantResolver | None = None, *, purge: bool = True
    ) -> EntryFilter:
        """The filter in ``data`` (a JSON object, or a query's parameters): any of
        :data:`FILTERS`; ``tenant_key`` (an API key) is hashed by ``tenants`` as the proxy
        hashes callers. :class:`RequestError` naming the problem for anything else: an unknown
        filter, a value that is not a non-empty string, ``all`` not ``true`` or not alone, both
        tenant filters, an unknown endpoint, and (``purge``) no filter at all: a purge of
        everything is only ever ``{"all": true}``."""
        if not isinstance(data, Mapping):
            raise RequestError("the body must be a JSON object of filters", code="bad_filter")
        unknown = sorted(set(data) - set(FILTERS))
        if unknown:
            raise RequestError(
                f"unknown filter(s) {unknown}; known: {list(FILTERS)}",
                param=str(unknown[0]),
                code="unknown_filter",
            )
        if not data:
            what = "a purge" if purge else "this listing"
            raise RequestError(
                f"{what} needs at least one filter of {list(FILTERS[:-1])}, or "
                '{"all": true} to remove every entry',
                code="empty_filter",
            )
        if "all" in data:
            return cls._everything(data, purge)
        for name, value in data.items():
            if not isinstance(value, str) or not value.strip():
                raise RequestError(
                    f"filter {name} must be a non-empty string", param=name, code="bad_filter"
                )
        return cls._fields(data, tenants)

    @classmethod
    def _everything(cls, data: Mapping[str, Any], purge: bool) -> EntryFilter:
        if data["all"] is not True:
            raise RequestError('"all" must be true', param="all", code="bad_filter")
        if len(data) > 1 or not purge:
            why = "give it alone" if purge else "a listing takes no all (give no filter)"
            raise RequestError(f'"all" removes every entry; {why}', param="all", code="bad_filter")
        return cls(everything=True)

    @classmethod
    def _fields(cls, data: Mapping[str, Any], tenants: TenantResolver | None) -> EntryFilter:
        if "tenant_key" in data and "tenant" in data:
            raise RequestError(
                "give tenant_key or tenant, not both", param="tenant", code="bad_filter"
            )
        tenant = data.get("tenant")
        if "tenant_key" in data:
            if tenants is None:
                raise RequestError(
                    "tenant_key needs the proxy's tenant secret; give tenant (the hashed id)",
                    param="tenant_key",
                    code="bad_filter",
                )
            tenant = tenants.for_key(data["tenant_key"])
        path = data.get("endpoint")
        if path is not None and path not in ENDPOINTS:  # a registered API's path
            raise RequestError(
                f"unknown endpoint {path!r}; known: {sorted(ENDPOINTS)}",
                param="endpoint",
                code="bad_filter",
            )
        return cls(tenant, data.get("model"), path)

    def matches(self, value: Any) -> bool:
        """Whether the stored wrapper ``value`` is one of the filter's entries."""
        if self.everything:
            return True
        meta = _meta(value)
        return bool(meta) and all(meta.get(k) == v for k, v in self.describe().items())

    def describe(self) -> dict[str, Any]:
        """The fields the filter asks for (``{"all": True}``: every entry), as logged: never an
        API key, a tenant is its hashed id."""
        if self.everything:
            return {"all": True}
        items = (("tenant", self.tenant), ("model", self.model), ("endpoint", self.endpoint))
        return {k: v for k, v in items if v is not None}


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def _info(llm: LLMCache, key: str, value: Any, expires: float | None, now: float) -> dict[str, Any]:
    """What a listing shows of one entry."""
    meta = _meta(value)
    wrapper = value if isinstance(value, dict) else {}
    stored, ends = _number(wrapper.get("t")), _number(wrapper.get("e"))
    ends = ends if ends is not None else expires
    answers = wrapper.get("b")
    return {
        "key": key,
        "endpoint": meta.get("endpoint"),
        "model": meta.get("model"),
        "tenant": meta.get("tenant"),
        "namespace": meta.get("namespace"),
        "age_s": None if stored is None else round(max(0.0, now - stored), 3),
        "ttl_left_s": None if ends is None else round(max(0.0, ends - now), 3),
        "hits": llm.hits.get(key, 0),
        "answers": len(answers) if isinstance(answers, list) else 1,
        "text": meta.get("text"),
    }


def _matching(llm: LLMCache, flt: EntryFilter) -> Iterator[tuple[str, Any, float | None]]:
    for batch in llm.cache.scan(EXACT_PREFIX, batch=SCAN_BATCH):
        for key, value, expires in batch:
            if flt.matches(value):
                yield key, value, expires


def list_entries(
    llm: LLMCache, flt: EntryFilter | None = None, page: int = 1, page_size: int = 50
) -> dict[str, Any]:
    """Page ``page`` (from 1) of the exact entries ``flt`` matches (every entry without one), in
    the shared tier's scan order: ``{"entries": [...], "page", "page_size", "more"}``. Each
    entry: ``key``, ``endpoint``, ``model``, ``tenant``, ``namespace``, ``age_s``,
    ``ttl_left_s``, ``hits`` (served by this process), ``answers`` and ``text``."""
    for name, n, top in (("page", page, None), ("page_size", page_size, MAX_PAGE_SIZE)):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or (top and n > top):
            bound = f"from 1 to {top}" if top else "from 1"
            raise RequestError(f"{name} must be a whole number {bound}", param=name)
    flt = flt or EntryFilter(everything=True)
    now = llm.cache.clock()
    skip, more = (page - 1) * page_size, False
    out: list[dict[str, Any]] = []
    for key, value, expires in _matching(llm, flt):
        if skip:
            skip -= 1
        elif len(out) == page_size:
            more = True
            break
        else:
            out.append(_info(llm, key, value, expires, now))
    return {"entries": out, "page": page, "page_size": page_size, "more": more}


def get_entry(llm: LLMCache, key: str) -> dict[str, Any] | None:
    """One exact entry in full (what a listing shows, plus the stored ``response`` and, for a
    bucket, every answer), or None when there is none under ``key``."""
    if not key.startswith(EXACT_PREFIX):
        return None
    value = llm.cache.get(key, count=False)
    if not isinstance(value, dict):
        return None
    info = _info(llm, key, value, None, llm.cache.clock())
    info["response"] = value.get("r")
    if isinstance(value.get("b"), list):
        info["bucket"] = value["b"]
    return info


def purge(llm: LLMCache, flt: EntryFilter) -> dict[str, int]:
    """Remove every entry ``flt`` matches, exact and semantic, from this process, the shared
    tier and every replica following it. Returns ``{"removed", "exact", "semantic"}``."""
    exact = 0
    for batch in llm.cache.scan(EXACT_PREFIX, batch=SCAN_BATCH):
        keys = [key for key, value, _ in batch if flt.matches(value)]
        if keys:
            llm.cache.delete_many(keys)
            for key in keys:
                llm.hits.pop(key, None)
            exact += len(keys)
    semantic = _purge_semantic(llm, flt) if llm.semantic_enabled else 0
    return {"removed": exact + semantic, "exact": exact, "semantic": semantic}


def _purge_semantic(llm: LLMCache, flt: EntryFilter) -> int:
    """The semantic side of :func:`purge`: through the tier when this process built one (its
    own index loses the entries at once), else straight from the shared store (``cachekit
    purge``: no index, no model loaded)."""
    from cachekit.semantic.admin import (
        decoded,
        delete_entries,
        delete_stored,
        scan_entries,
        scan_store,
    )
    from cachekit.semantic.tier import semantic_base

    tier, cache = llm.semantic_tier, llm.cache
    origin = b"admin-" + uuid.uuid4().hex.encode()
    if tier is not None:
        batches = scan_entries(tier, SCAN_BATCH)
        remove = partial(delete_entries, tier)
    else:
        base = semantic_base(cache.key_prefix, cache.namespace, llm.semantic_name)
        store = None if cache.l2 is None else cache.l2.semantic_store(base)
        if store is None:
            return 0  # no tier built and none shared: there are no semantic entries
        batches, remove = scan_store(store, SCAN_BATCH), partial(delete_stored, store)
    removed = 0
    for batch in batches:
        ids = []
        for entry in batch:
            readable, value = decoded(cache.serializer, entry)
            if flt.matches(value) if readable else flt.everything:
                ids.append(entry.id)
        if ids:
            removed += remove(ids, origin)
    return removed
