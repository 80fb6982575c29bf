"""What the proxy reads from a request's headers and writes into a response's: the cache controls
(``Cache-Control``, ``x-cachekit-*``), the header lines forwarded upstream and back, and a miss's
``x-cachekit-*`` headers. HTTP translation only; no caching decision is made here."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from cachekit.llm import CacheLookup, RequestError
from cachekit.llm.buckets import MAX_BUCKET, bucket_for, temperature_of

__all__ = [
    "BODY_CONTROLS",
    "HOP_BY_HOP",
    "NO_CONTROLS",
    "UPSTREAM_DROP_RESPONSE",
    "Controls",
    "body_controls",
    "forward_headers",
    "miss_headers",
    "parse_controls",
    "response_headers",
    "sampling",
    "strip_body_controls",
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
    #: Answers kept per key for sampled requests (``x-cachekit-bucket-size``); ``None``: the
    #: config's ``bucket_size``.
    bucket: int | None = None
    #: Requests sampled above this temperature skip the cache (``x-cachekit-max-temperature``);
    #: ``None``: the config's ``max_temperature``.
    max_temperature: float | None = None
    #: Shadow mode asked for this request (``x-cachekit-shadow: 1``; docs/shadow.md).
    shadow: bool = False
    #: Set by the proxy, not a header: the semantic hit shadow mode did not serve, whose stored
    #: answer the upstream's is compared with.
    shadowed: Any = None


_DEFAULT_CONTROLS = Controls()
#: What :func:`parse_controls` returns for a request without control headers (this one object).
NO_CONTROLS = _DEFAULT_CONTROLS
_CONTROL_HEADERS = (
    "x-cachekit-ttl",
    "x-cachekit-threshold",
    "x-cachekit-namespace",
    "x-cachekit-bucket-size",
    "x-cachekit-max-temperature",
    "x-cachekit-shadow",
)
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


def _shadow(headers: Mapping[str, str]) -> bool:
    raw = _header(headers, "x-cachekit-shadow")
    value = None if raw is None else raw.strip().lower()
    if value in (None, "0", "false", "off"):
        return False
    if value in ("1", "true", "on"):
        return True
    raise RequestError(
        f"header x-cachekit-shadow must be 1 or 0 (true/false, on/off), got {raw!r}",
        param="x-cachekit-shadow",
    )


def _has_controls(headers: Mapping[str, str]) -> bool:
    """Whether any control header was sent: one pass over Starlette's raw header lines (each
    ``name in headers`` is a pass of its own), any mapping's keys otherwise."""
    raw = getattr(headers, "raw", None)
    if raw is None:
        return any(h in headers for h in ("cache-control", *_CONTROL_HEADERS))
    for name, _ in raw:
        if name == b"cache-control" or name[:11] == b"x-cachekit-":
            return True
    return False


def parse_controls(headers: Mapping[str, str]) -> Controls:
    """``Cache-Control`` (``no-cache``, ``no-store``, ``max-age=N``), ``x-cachekit-ttl``,
    ``x-cachekit-threshold``, ``x-cachekit-namespace``, ``x-cachekit-bucket-size`` and
    ``x-cachekit-max-temperature``; :class:`RequestError` when malformed."""
    if not _has_controls(headers):
        return _DEFAULT_CONTROLS
    cc = _header(headers, "cache-control")
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
        _bucket(headers),
        _number(headers, "x-cachekit-max-temperature", 0.0, 2.0, False),
        _shadow(headers),
    )


def _bucket(headers: Mapping[str, str]) -> int | None:
    raw = _header(headers, "x-cachekit-bucket-size")
    if raw is None:
        return None
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 3 and 1 <= int(text) <= MAX_BUCKET):
        raise RequestError(
            f"header x-cachekit-bucket-size must be an integer from 1 to {MAX_BUCKET}, "
            f"got {raw[:40]!r}",
            param="x-cachekit-bucket-size",
        )
    return int(text)


#: The body field LiteLLM's clients send cache controls in (``"cache": {"no-cache": true}``):
#: honoured, and stripped before the request is keyed or forwarded.
BODY_CONTROLS = "cache"
_BODY_KEYS = {"no-cache": bool, "no-store": bool, "ttl": float, "s-maxage": float, "namespace": str}


def body_controls(controls: Controls, value: Any) -> Controls:
    """``controls`` with a request body's ``"cache"`` object (LiteLLM's per-request controls:
    ``no-cache``, ``no-store``, ``ttl``, ``s-maxage``, ``namespace``) applied on top;
    :class:`RequestError` naming the field when it is not such an object."""
    if not isinstance(value, dict) or not set(value) <= set(_BODY_KEYS):
        raise RequestError(
            f"'cache' must be an object of {sorted(_BODY_KEYS)} (LiteLLM's cache controls)",
            param=BODY_CONTROLS,
        )
    for name, kind in _BODY_KEYS.items():
        v = value.get(name)
        ok = v is None or (isinstance(v, kind) if kind is not float else _is_seconds(v))
        if not ok:
            raise RequestError(f"'cache.{name}' must be a {kind.__name__}", param=BODY_CONTROLS)
    namespace = value.get("namespace")
    if namespace is not None and not _NAMESPACE.fullmatch(namespace):
        raise RequestError(
            "'cache.namespace' must be 1-64 characters of A-Z a-z 0-9 . _ : -", param=BODY_CONTROLS
        )
    return dataclasses.replace(
        controls,
        no_cache=controls.no_cache or bool(value.get("no-cache")),
        no_store=controls.no_store or bool(value.get("no-store")),
        ttl=value["ttl"] if value.get("ttl") is not None else controls.ttl,
        max_age=value["s-maxage"] if value.get("s-maxage") is not None else controls.max_age,
        namespace=namespace or controls.namespace,
    )


def _is_seconds(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 10 * 365 * 86400


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


def miss_headers(found: CacheLookup, exact_only: str | None = None) -> dict[str, str]:
    """A miss's headers: ``x-cachekit-cache: MISS`` and, when an entry was near, its similarity
    and why it was not served (``x-cachekit-reason``: ASCII, at most 200 characters); for a
    request compared exactly only, why (``exact only: tool result``)."""
    out = {"x-cachekit-cache": "MISS"}
    if found.similarity is not None:
        out["x-cachekit-similarity"] = f"{found.similarity:.4f}"
    reason = found.reason or (f"exact only: {exact_only}" if exact_only else None)
    if reason:
        text = reason.encode("ascii", "backslashreplace").decode("ascii")
        out["x-cachekit-reason"] = "".join(c if c.isprintable() else " " for c in text)[:200]
    return out


def response_headers(headers: httpx.Headers, drop: frozenset[str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in drop}


def strip_body_controls(body: dict[str, Any], controls: Controls) -> Controls:
    """``controls`` with a body's LiteLLM ``"cache"`` object (:func:`body_controls`) applied,
    the object taken out of ``body``: it is neither keyed nor forwarded (the upstream would
    refuse it)."""
    if BODY_CONTROLS not in body:
        return controls
    return body_controls(controls, body.pop(BODY_CONTROLS))


def sampling(
    body: Mapping[str, Any], controls: Controls, bucket_size: int, max_temperature: float | None
) -> tuple[Controls, str | None]:
    """``controls`` with the request's bucket size resolved (asked for, else ``bucket_size`` for
    a sampled request: temperature not 0, absent meaning the APIs' default of 1), and why a
    request sampled above the maximum temperature (the header's, else ``max_temperature``)
    skips the cache when it asked for no bucket, else ``None``."""
    bucket = controls.bucket
    if bucket is None and bucket_for(body, bucket_size) > 1:
        bucket = bucket_size
    limit = max_temperature if controls.max_temperature is None else controls.max_temperature
    if bucket is None and limit is not None and temperature_of(body) > limit:
        skip = f"temperature {temperature_of(body):g} > {limit:g}"
        return dataclasses.replace(controls, no_store=True), skip
    if bucket == controls.bucket:
        return controls, None  # the common case: nothing to change (no copy on the hit path)
    return dataclasses.replace(controls, bucket=bucket), None
