"""What the proxy reads from a request's headers and writes into a response's: the cache controls
(``Cache-Control``, ``x-cachekit-*``), the header lines forwarded upstream and back, and a miss's
``x-cachekit-*`` headers. HTTP translation only; no caching decision is made here."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from cachekit.llm import CacheLookup, RequestError

__all__ = [
    "HOP_BY_HOP",
    "UPSTREAM_DROP_RESPONSE",
    "Controls",
    "forward_headers",
    "miss_headers",
    "parse_controls",
    "response_headers",
]

#: Header lines that belong to one connection, never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
UPSTREAM_DROP_RESPONSE = frozenset({*HOP_BY_HOP, "date", "server", "content-encoding"})
_NAMESPACE = re.compile(r"[A-Za-z0-9._:-]{1,64}")


# ---------------------------------------------------------------------- request controls


@dataclass(frozen=True)
class Controls:
    """What a request's headers ask of the cache."""

    no_cache: bool = False  # skip the lookup, still store
    no_store: bool = False  # look up, never store
    only_if_cached: bool = False  # a miss is answered 504, never sent upstream
    max_age: float | None = None
    ttl: float | None = None
    threshold: float | None = None
    namespace: str = ""


_DEFAULT_CONTROLS = Controls()
#: A number in a header: ASCII digits only (``str.isdigit`` and ``float`` accept others).
_DECIMAL = re.compile(r"[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Every line of header ``name`` joined with ``", "`` (RFC 9110, 5.3), ``None`` when absent.
    Starlette's ``Headers.get`` (and any dict) keeps one line: a second ``Cache-Control: no-store``
    line would be lost."""
    getlist = getattr(headers, "getlist", None)
    if getlist is None:
        return headers.get(name)
    values = getlist(name)
    return ", ".join(values) if values else None


def _number(
    headers: Mapping[str, str], name: str, low: float, high: float, low_open: bool
) -> float | None:
    raw = _header(headers, name)
    if raw is None:
        return None
    text = raw.strip()
    value = float(text) if _DECIMAL.fullmatch(text) else float("nan")
    ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        raise RequestError(
            f"header {name} must be a number in "
            f"{'(' if low_open else '['}{low:g}, {high:g}], got {raw!r}",
            param=name,
        )
    return value


def parse_controls(headers: Mapping[str, str]) -> Controls:
    """``Cache-Control`` (``no-cache``, ``no-store``, ``max-age=N``), ``x-cachekit-ttl``,
    ``x-cachekit-threshold`` and ``x-cachekit-namespace``; :class:`RequestError` when malformed."""
    cc = _header(headers, "cache-control")
    if cc is None and not any(
        h in headers for h in ("x-cachekit-ttl", "x-cachekit-threshold", "x-cachekit-namespace")
    ):
        return _DEFAULT_CONTROLS
    no_cache = no_store = only_if_cached = False
    max_age: float | None = None
    for part in (cc or "").split(","):
        directive = part.strip().lower()
        if directive == "no-cache":
            no_cache = True
        elif directive == "no-store":
            no_store = True
        elif directive == "only-if-cached":
            only_if_cached = True
        elif directive.startswith("max-age="):
            value = directive[8:].strip().strip('"')
            if not (value.isascii() and value.isdigit()):
                raise RequestError(
                    f"Cache-Control max-age must be whole seconds, got {value!r}",
                    param="cache-control",
                )
            max_age = float(value)
    namespace = _header(headers, "x-cachekit-namespace") or ""
    if namespace and not _NAMESPACE.fullmatch(namespace):
        raise RequestError(
            "header x-cachekit-namespace must be 1-64 characters of A-Z a-z 0-9 . _ : -",
            param="x-cachekit-namespace",
        )
    return Controls(
        no_cache,
        no_store,
        only_if_cached,
        max_age,
        _number(headers, "x-cachekit-ttl", 0.0, 10 * 365 * 86400.0, True),
        _number(headers, "x-cachekit-threshold", 0.0, 1.0, True),
        namespace,
    )


def forward_headers(headers: Mapping[str, str], *, identity: bool) -> list[tuple[str, str]]:
    """The request's header lines for the upstream, repeated lines kept (Starlette's
    ``Headers.items()`` lists every line). The credential headers reach it as :func:`caller_key`
    read them: it refuses a request carrying one of them twice."""
    out = [
        (k, v)
        for k, v in headers.items()
        if k not in HOP_BY_HOP
        and not k.startswith("x-cachekit-")
        and not (identity and k == "accept-encoding")
    ]
    if identity:  # we parse the answer: ask for it uncompressed
        out.append(("accept-encoding", "identity"))
    return out


def miss_headers(found: CacheLookup) -> dict[str, str]:
    """A miss's headers: ``x-cachekit-cache: MISS`` and, when an entry was near, its similarity
    and why it was not served (``x-cachekit-reason``: ASCII, at most 200 characters)."""
    out = {"x-cachekit-cache": "MISS"}
    if found.similarity is not None:
        out["x-cachekit-similarity"] = f"{found.similarity:.4f}"
    if found.reason:
        text = found.reason.encode("ascii", "backslashreplace").decode("ascii")
        out["x-cachekit-reason"] = "".join(c if c.isprintable() else " " for c in text)[:200]
    return out


def response_headers(headers: httpx.Headers, drop: frozenset[str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in drop}
