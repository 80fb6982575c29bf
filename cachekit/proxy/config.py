"""Settings of ``cachekit serve``: the proxy's own (``[proxy]`` table of the config file, or
command-line options) and the cache's (:class:`~cachekit.llm.LLMCacheConfig`, top level)."""

from __future__ import annotations

import importlib
import json
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cachekit.llm import ENDPOINTS, LLMCacheConfig

__all__ = [
    "ADMIN_KEY_ENV",
    "ENV_VAR",
    "MIN_ADMIN_KEY_CHARS",
    "NO_UPSTREAM",
    "UPSTREAM_REQUIRED",
    "ProxyConfig",
    "base_url",
    "check_upstream_url",
    "load_embedder",
]

#: Environment variable carrying the settings to uvicorn worker processes (set by ``cachekit
#: serve`` itself: not a way to give it settings).
ENV_VAR = "CACHEKIT_SERVE_CONFIG"

#: Where the upstream comes from, for ``cachekit serve --help``: the option or the config file
#: (no environment variable sets it).
UPSTREAM_REQUIRED = (
    "--upstream is required unless the --config file sets upstream in its [proxy] table"
)
#: The error when neither gives an upstream, worded as argparse words a missing option.
NO_UPSTREAM = (
    "the following arguments are required: --upstream "
    "(or upstream in the [proxy] table of the --config file)"
)


#: Environment variable holding the admin API's key (when ``--admin-key`` and the config give
#: none).
ADMIN_KEY_ENV = "CACHEKIT_ADMIN_KEY"
#: Shortest admin key accepted.
MIN_ADMIN_KEY_CHARS = 16


@dataclass
class ProxySettings:
    """The ``[proxy]`` table."""

    upstream: str = ""
    #: An upstream per API family (``openai``, ``anthropic``; the ``[proxy.upstreams]`` table),
    #: for the families not served by :attr:`upstream` (gateways serve both: the default).
    upstreams: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    #: Largest request body accepted on cached endpoints (bytes); larger ones get 413.
    max_body_bytes: int = 4 * 2**20
    #: Seconds a client has to send a request's headers; a slower one's connection is closed.
    header_timeout: float = 10.0
    #: Seconds a client has to send a request body (any route, passthrough included); a slower
    #: one gets 408.
    body_timeout: float = 30.0
    #: Largest request body passed through to routes the cache does not answer (``/v1/files``
    #: uploads and the like; bytes): larger ones get 413. Read whole before the upstream is asked.
    max_passthrough_body_bytes: int = 32 * 2**20
    #: Upstream calls one caller (an API key, or an address without one) may have open at once;
    #: past it, 429 with ``Retry-After``. 0: no bound.
    max_upstream_per_caller: int = 64
    #: Distinct model names labelled in the metrics; later ones count as ``other``.
    metrics_max_models: int = 64
    #: Largest upstream answer stored (bytes; a stream's events): a larger one is relayed, not
    #: stored, and a stream past it is relayed unparsed, so a stream holds at most this much.
    max_answer_bytes: int = 8 * 2**20
    #: Seconds to connect to the upstream, and to wait for each read from it.
    connect_timeout: float = 5.0
    upstream_timeout: float = 600.0
    max_connections: int = 512
    #: Seconds a replica waits for the answer to an identical request another replica sharing
    #: its Redis is fetching, before asking the upstream itself (0: never waits).
    coalesce_wait: float = 2.0
    #: Parts a cached answer's content is cut into when replayed as a stream.
    stream_pieces: int = 8
    #: Ask the upstream for usage on streamed misses (and drop it from the relay when the client
    #: did not ask), so tokens saved by later hits are known. Off for upstreams that reject
    #: ``stream_options``.
    stream_usage: bool = True
    #: OpenTelemetry traces (docs/tracing.md; the ``otel`` extra), exported as the ``OTEL_*``
    #: environment variables say. ``$CACHEKIT_OTEL=1`` turns them on too.
    otel: bool = False
    #: Shadow mode for every request (docs/shadow.md): semantic hits are decided, scored against
    #: the upstream's answer and counted, never served.
    shadow: bool = False
    #: Where shadowed pairs are appended as JSON lines (empty: nowhere), and how many at most.
    shadow_log: str = ""
    shadow_sample: int = 10_000
    #: Answers that score at least this agree (the embedder's cosine, or the judge's score).
    shadow_agree: float = 0.9
    #: ``module:callable`` scoring a shadowed pair instead of the embedder (docs/shadow.md).
    shadow_judge: str = ""
    #: The admin API's bearer key (docs/admin.md); empty: ``$CACHEKIT_ADMIN_KEY``, else no
    #: admin routes. At least :data:`MIN_ADMIN_KEY_CHARS` characters.
    admin_key: str = ""
    #: ``module:callable`` returning an embedder; empty: the default model.
    embedder: str = ""
    log_level: str = "warning"


@dataclass
class ProxyConfig:
    """Everything ``cachekit serve`` needs: :attr:`proxy` and :attr:`cache` settings, plus the
    config file they came from (so worker processes can read it again)."""

    proxy: ProxySettings = field(default_factory=ProxySettings)
    cache: LLMCacheConfig = field(default_factory=LLMCacheConfig)
    config_file: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(
        cls, config_file: str | Path | None = None, overrides: Mapping[str, Any] | None = None
    ) -> ProxyConfig:
        """Settings from ``config_file`` (TOML) with ``overrides`` on top: a flat mapping whose
        keys are ``ProxySettings`` or ``LLMCacheConfig`` field names (``None`` values skipped)."""
        data: dict[str, Any] = {}
        if config_file is not None:
            with open(config_file, "rb") as f:
                data = tomllib.load(f)
        proxy_table = dict(data.get("proxy", {}))
        proxy_names = {f.name for f in fields(ProxySettings)}
        unknown = set(proxy_table) - proxy_names
        if unknown:
            raise ValueError(f"unknown [proxy] settings: {sorted(unknown)}")
        clean = {k: v for k, v in (overrides or {}).items() if v is not None}
        cache_data = {k: v for k, v in data.items() if k != "proxy"}
        for key, value in clean.items():
            if key in proxy_names:
                proxy_table[key] = value
            elif key == "shared_scope":
                cache_data["shared_scope"] = {**cache_data.get("shared_scope", {}), **value}
            else:
                cache_data[key] = value
        settings = ProxySettings(**proxy_table)
        config = cls(
            settings,
            LLMCacheConfig.from_mapping(cache_data),
            None if config_file is None else str(config_file),
            dict(clean),
        )
        config.check()
        return config

    def check(self) -> None:
        """ValueError, naming the setting and its fix, for settings that cannot run a proxy."""
        p = self.proxy
        if not p.upstream:
            raise ValueError(NO_UPSTREAM)
        check_upstream_url(p.upstream)
        families = {api.family for api in ENDPOINTS.values()}
        for family, url in p.upstreams.items():
            if family not in families:
                raise ValueError(
                    f"unknown API family {family!r} in [proxy.upstreams]; known: {sorted(families)}"
                )
            check_upstream_url(url)
        positive: tuple[str, ...] = ("max_body_bytes", "max_passthrough_body_bytes", "workers")
        positive += ("max_answer_bytes", "stream_pieces", "metrics_max_models", "max_connections")
        bad = [f"{n}={getattr(p, n)!r}" for n in positive if not _count_at_least(getattr(p, n), 1)]
        if bad:
            raise ValueError(f"these settings must be positive integers: {', '.join(bad)}")
        if not _count_at_least(p.max_upstream_per_caller, 0):
            raise ValueError(
                "max_upstream_per_caller must be an integer >= 0 (0: no bound), got "
                f"{p.max_upstream_per_caller!r}"
            )
        wait = p.coalesce_wait
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 600:
            raise ValueError(
                "coalesce_wait must be a number of seconds from 0 (never wait) to 600, "
                f"got {wait!r}"
            )
        if min(p.upstream_timeout, p.connect_timeout, p.body_timeout, p.header_timeout) <= 0:
            raise ValueError("timeouts must be positive")
        agree = p.shadow_agree
        if isinstance(agree, bool) or not isinstance(agree, (int, float)) or not 0 <= agree <= 1:
            raise ValueError(f"shadow_agree must be a number from 0 to 1, got {agree!r}")
        if not _count_at_least(p.shadow_sample, 0):
            raise ValueError(f"shadow_sample must be an integer >= 0, got {p.shadow_sample!r}")
        key = self.admin_key()
        if key and (len(key) < MIN_ADMIN_KEY_CHARS or key != key.strip()):
            raise ValueError(
                f"the admin key must be at least {MIN_ADMIN_KEY_CHARS} characters without "
                "surrounding spaces (make one: python -c 'import secrets; "
                "print(secrets.token_urlsafe())')"
            )

    def admin_key(self) -> str:
        """The admin API's key: ``--admin-key`` / ``[proxy] admin_key``, else
        ``$CACHEKIT_ADMIN_KEY``; empty: no admin API."""
        return self.proxy.admin_key or os.environ.get(ADMIN_KEY_ENV, "")

    def to_env(self) -> str:
        """JSON for :data:`ENV_VAR`: the file and the overrides, re-read by each worker."""
        return json.dumps({"config_file": self.config_file, "overrides": self.overrides})

    @classmethod
    def from_env(cls, value: str) -> ProxyConfig:
        data = json.loads(value)
        return cls.load(data.get("config_file"), data.get("overrides"))

    def describe(self) -> dict[str, Any]:
        """The proxy settings for logs (no secrets: tenant secret and keys left out)."""
        settings = asdict(self.proxy)
        settings["admin_key"] = "***" if self.admin_key() else ""
        return settings


def _count_at_least(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def load_embedder(spec: str) -> Any:
    """The embedder named by ``spec``: a directory written by ``cachekit tune`` (the tuned
    embedder, with its operating point), or ``module:callable`` (the callable is called with no
    arguments); ``None`` for an empty spec (the default model)."""
    if not spec:
        return None
    if Path(spec).is_dir():
        from cachekit.semantic.embed.adapter import load_embedder as load_tuned

        return load_tuned(spec)
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"embedder must be 'module:callable', got {spec!r}")
    factory: Callable[[], Any] = getattr(importlib.import_module(module), attr)
    return factory()


#: Endpoint paths that an ``--upstream`` URL must not end with (it is the server's base URL).
_ENDPOINTS = ("/chat/completions", "/completions", "/embeddings", "/responses", "/models")


def base_url(upstream: str) -> str:
    """The upstream without a trailing ``/v1``: ``https://api.openai.com/v1`` and
    ``https://api.openai.com`` mean the same server (the proxy adds each request's path)."""
    u = upstream.rstrip("/")
    return u[:-3] if u.endswith("/v1") else u


def check_upstream_url(url: str) -> None:
    """ValueError, with the fix, for an upstream URL that is not a server's base URL."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"upstream must be an http(s) URL, got {url!r}")
    path = urlsplit(url).path.rstrip("/")
    for endpoint in _ENDPOINTS:
        if path.endswith(endpoint):
            base = url.rstrip("/")[: -len(endpoint)]
            raise ValueError(
                f"upstream {url!r} names an endpoint ({endpoint}); give the server's base URL, "
                f"e.g. --upstream {base}: the proxy adds each request's path itself"
            )
