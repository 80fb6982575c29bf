"""``cachekit serve``: the command-line options and running the app under uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cachekit.proxy.config import ENV_VAR, ProxyConfig, base_url
from cachekit.semantic.policy.options import add_policy_arguments, policy_and_setting

__all__ = ["add_arguments", "config_from_args", "serve"]


def _shared_scope(value: str) -> tuple[str, list[str]]:
    name, sep, keys = value.partition("=")
    items = [k.strip() for k in keys.split(",") if k.strip()]
    if not sep or not name or not items:
        raise argparse.ArgumentTypeError(f"--shared-scope takes GROUP=KEY[,KEY...], got {value!r}")
    return name, items


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``cachekit serve`` (each overrides the config file)."""
    a = parser.add_argument
    a(
        "--upstream",
        metavar="URL",
        help="required (unless the --config file's [proxy] table sets upstream): the "
        "OpenAI-compatible server to forward to, e.g. https://api.openai.com",
    )
    a("--host", help="address to listen on (default 127.0.0.1)")
    a("--port", type=int, help="port to listen on (default 8080)")
    redis = parser.add_mutually_exclusive_group()
    redis.add_argument("--redis-url", help="share entries through this Redis")
    redis.add_argument("--redis-cluster-url", help="share entries through this Redis Cluster")
    add_policy_arguments(parser)
    a("--namespace", help="cache namespace (default llm)")
    a("--ttl", type=float, help="seconds an entry lives (default 3600)")
    a("--no-semantic", action="store_true", help="exact hits only (no embedding model)")
    a(
        "--no-slot-guard",
        action="store_true",
        help="serve neighbours whose numbers, names, roles or code differ (not advised)",
    )
    a("--config", help="TOML file: cache settings at top level, proxy settings in [proxy]")
    a("--workers", type=int, help="uvicorn worker processes (default 1)")
    a(
        "--shared-scope",
        action="append",
        type=_shared_scope,
        metavar="GROUP=KEY[,KEY...]",
        help="API keys (or sha256: fingerprints) that share one tenant; repeatable",
    )
    a("--max-body-bytes", type=int, help="larger request bodies get 413 (default 4 MiB)")
    a(
        "--header-timeout",
        type=float,
        help="seconds to send a request's headers, else the connection is closed (default 10)",
    )
    a("--body-timeout", type=float, help="seconds to send a request body, else 408 (default 30)")
    a(
        "--max-passthrough-body-bytes",
        type=int,
        help="larger bodies to routes not cached (/v1/files ...) get 413 (default 32 MiB)",
    )
    a(
        "--max-upstream-per-caller",
        type=int,
        help="upstream calls one API key (or keyless address) may hold at once, else 429 "
        "(default 64; 0: no bound)",
    )
    a(
        "--max-answer-bytes",
        type=int,
        help="larger upstream answers are relayed, not stored (default 8 MiB)",
    )
    a(
        "--semantic-max-bytes",
        type=int,
        help="bytes the semantic index may hold: prompts, answers, vectors (default 256 MiB)",
    )
    a("--upstream-timeout", type=float, help="seconds to wait for each upstream read")
    a(
        "--embedder",
        help="a directory written by `cachekit tune`, or module:callable returning the embedder "
        "(default: the bundled model)",
    )
    a("--log-level", help="uvicorn log level (default warning)")
    a(
        "--shadow",
        action="store_true",
        default=None,
        help="shadow mode: semantic hits are decided, scored and counted, never served "
        "(docs/shadow.md)",
    )
    a("--shadow-log", metavar="FILE", help="append shadowed pairs to FILE as JSON lines")
    a(
        "--admin-key",
        help="turn on the admin API (/admin/purge, /admin/entries) behind this bearer key; "
        "$CACHEKIT_ADMIN_KEY works too (at least 16 characters; docs/admin.md)",
    )
    a(
        "--otel",
        action="store_true",
        default=None,
        help="OpenTelemetry traces, exported as the OTEL_* variables say (the otel extra; "
        "docs/tracing.md)",
    )


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    """The settings of ``args`` over the config file's; ValueError for options that do not go
    together."""
    policy, setting = policy_and_setting(args)
    overrides: dict[str, Any] = {
        "upstream": args.upstream,
        "host": args.host,
        "port": args.port,
        "redis_url": args.redis_url,
        "redis_cluster_url": args.redis_cluster_url,
        "threshold": setting if policy == "threshold" else None,
        "namespace": args.namespace,
        "ttl": args.ttl,
        "policy": args.policy,
        "policy_setting": setting if policy != "threshold" else None,
        "workers": args.workers,
        "max_body_bytes": args.max_body_bytes,
        "header_timeout": args.header_timeout,
        "body_timeout": args.body_timeout,
        "max_passthrough_body_bytes": args.max_passthrough_body_bytes,
        "max_upstream_per_caller": args.max_upstream_per_caller,
        "max_answer_bytes": args.max_answer_bytes,
        "semantic_max_bytes": args.semantic_max_bytes,
        "upstream_timeout": args.upstream_timeout,
        "embedder": args.embedder,
        "log_level": args.log_level,
        "otel": args.otel,
        "admin_key": args.admin_key,
        "shadow": args.shadow,
        "shadow_log": args.shadow_log,
    }
    if args.no_semantic:
        overrides["semantic"] = False
    if args.no_slot_guard:
        overrides["slot_guard"] = False
    if args.shared_scope:
        overrides["shared_scope"] = dict(args.shared_scope)
    return ProxyConfig.load(args.config, overrides)


def serve(config: ProxyConfig) -> int:
    """Run the proxy until interrupted. Worker processes rebuild the app from the settings."""
    import uvicorn

    from cachekit.proxy.upstream import probe  # httpx: the proxy extra, checked by the CLI

    s = config.proxy
    logging.basicConfig(level=s.log_level.upper())
    os.environ[ENV_VAR] = config.to_env()
    for line in start_lines(config, probe(base_url(s.upstream))):
        print(f"cachekit serve: {line}", file=sys.stderr, flush=True)
    uvicorn.run(
        "cachekit.proxy.app:app_from_env",
        factory=True,
        host=s.host,
        port=s.port,
        workers=s.workers,
        log_level=s.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
        http="cachekit.proxy.protocol:HeaderDeadlineProtocol",
    )
    return 0


def start_lines(config: ProxyConfig, upstream: tuple[bool, str]) -> list[str]:
    """What ``serve`` says as it starts: where it listens, what it forwards to and what the
    upstream probe found, and the cache it serves from."""
    s, c = config.proxy, config.cache
    url = f"http://{s.host}:{s.port}"
    redis = c.redis_url or c.redis_cluster_url
    semantic = "off" if not c.semantic else f"on (policy {c.policy})"
    admin = ["admin API on: /admin/purge, /admin/entries (docs/admin.md)"]
    return [
        f"listening on {url} with {s.workers} worker(s): point OpenAI clients at {url}/v1",
        f"upstream {s.upstream}: {upstream[1]}",
        f"cache: namespace {c.namespace!r}, semantic {semantic}, "
        + (f"shared through {_redacted(redis)}" if redis else "in this process only (no Redis)"),
    ] + (admin if config.admin_key() else [])


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))
