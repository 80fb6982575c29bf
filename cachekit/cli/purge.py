"""``cachekit purge``: remove cache entries by what they are, in the shared tier (Redis or Redis
Cluster: SCAN on every node, never KEYS) and in every process following it (docs/admin.md).

Two kinds of entries:

* the LLM cache's (``cachekit serve``, ``cachekit replay``, the client adapters): ``--tenant``,
  ``--tenant-key``, ``--model``, ``--endpoint`` (all given must match) or ``--all``, as the
  proxy's ``POST /admin/purge``;
* a decorated function's or feature set's, for library users: ``--function NAME``.

Settings come as ``cachekit serve``'s do: ``--config`` and its namespace (default ``llm``),
``--redis-url`` / ``--redis-cluster-url`` over it. ``--tenant-key`` is hashed with the same
tenant secret (``tenant_secret`` or ``$CACHEKIT_TENANT_SECRET``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cachekit.cli.settings import add_cache_options, cache_config

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``purge`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "purge",
        help="remove cache entries by tenant, model, endpoint or function, on every replica",
        description="Remove the LLM cache's entries matching every filter given (or --all), or "
        "every entry of a decorated function (--function), from the shared Redis and every "
        "process following it. See docs/admin.md.",
    )
    add_cache_options(p)
    p.add_argument("--tenant", help="a tenant id, as the proxy's entries and listings show it")
    p.add_argument("--tenant-key", help="a caller's API key (hashed as the proxy hashes it)")
    p.add_argument("--model", help="the model the requests named")
    p.add_argument("--endpoint", help="the endpoint path, e.g. /v1/chat/completions")
    p.add_argument("--all", action="store_true", help="every entry of the LLM cache")
    p.add_argument(
        "--function",
        metavar="NAME",
        help="every entry of a decorated function or feature set (its cache name: name=, "
        "else module.qualname, with @version when it has one)",
    )
    return p


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    given = {k: getattr(args, k) for k in ("tenant_key", "tenant", "model", "endpoint")}
    found: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if args.all:
        found["all"] = True
    return found


def run(args: argparse.Namespace) -> int:
    from cachekit.llm import RequestError, build_cache
    from cachekit.llm.admin import EntryFilter, purge

    filters = _filters(args)
    try:
        if args.function is not None and filters:
            raise ValueError("give --function alone, or the LLM cache's filters")
        config = cache_config(args)
        flt = None if args.function else EntryFilter.parse(filters, config.tenants())
    except RequestError as exc:
        return _fail(exc.message.replace("tenant_key", "--tenant-key"))
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    llm = build_cache(config)
    try:
        if flt is None:
            result: dict[str, Any] = {"removed": llm.cache.purge(args.function)}
            result["function"] = args.function
        else:
            result = {**purge(llm, flt), "filter": flt.describe()}
    except Exception as exc:  # Redis down or refusing: say so, and that it may be partial
        return _fail(
            f"the purge failed ({type(exc).__name__}: {exc}); it may be partial: run it again"
        )
    finally:
        llm.close()
    print(json.dumps(result, sort_keys=True))
    return 0


def _fail(message: str) -> int:
    print(f"cachekit purge: {message}", file=sys.stderr)
    return 2
