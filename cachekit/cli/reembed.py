"""``cachekit reembed``: after an embedder is rolled out (a tuned adapter, another model), embed
the shared semantic entries other embedders wrote again with it, so replicas embedding as it
does can use them (docs/semantic.md, "Embedder fingerprints").

Entries are found in the shared tier (Redis or Redis Cluster) of the LLM cache that ``cachekit
serve`` and ``cachekit replay`` use (the same ``--config`` file, namespace and Redis), embedded in
batches, and written back under their own ids with this embedder's fingerprint and their
remaining TTL. ``--dry-run`` counts them only.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``reembed`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "reembed",
        help="embed the shared semantic entries of other embedders again with this one",
        description="Embed again, with this embedder, every shared semantic entry of the LLM "
        "cache that another embedder (another name, width or weights) wrote, and write it back. "
        "See docs/semantic.md.",
    )
    p.add_argument("--config", metavar="FILE", help="the cache settings (as cachekit serve's)")
    p.add_argument("--redis-url", help="the Redis the cache shares its entries through")
    p.add_argument("--redis-cluster-url", help="... or the Redis Cluster")
    p.add_argument("--namespace", help="the cache namespace (default: the config's, else llm)")
    p.add_argument(
        "--embedder",
        metavar="MODULE:CALLABLE",
        help="a factory returning the embedder to embed with (default: the bundled model)",
    )
    p.add_argument(
        "--batch", type=_positive, default=256, help="texts embedded at once (default 256)"
    )
    p.add_argument("--dry-run", action="store_true", help="count what would be embedded again")
    return p


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from cachekit.llm import LLMCacheConfig, build_cache
    from cachekit.proxy.config import load_embedder

    try:
        config = LLMCacheConfig.from_toml(args.config) if args.config else LLMCacheConfig()
        changes = {
            k: getattr(args, k)
            for k in ("redis_url", "redis_cluster_url", "namespace")
            if getattr(args, k) is not None
        }
        config = dataclasses.replace(config, **changes)
        config.check()
        embedder = load_embedder(args.embedder) if args.embedder else None
    except (OSError, ValueError, ImportError) as exc:
        print(f"cachekit reembed: {exc}", file=sys.stderr)
        return 2
    if not (config.redis_url or config.redis_cluster_url):
        print(
            "cachekit reembed: give --redis-url (or a config file that names one)", file=sys.stderr
        )
        return 2
    llm = build_cache(config, embedder=embedder)
    try:
        replication = llm.semantic_function().tier.replication
        if replication is None:
            print("cachekit reembed: the cache shares no semantic entries", file=sys.stderr)
            return 2
        counts = replication.reembed(batch=args.batch, dry_run=args.dry_run)
    finally:
        llm.close()
    verb = "would embed again" if args.dry_run else "embedded again"
    print(
        f"cachekit reembed: {counts['entries']} shared entries; {verb} {counts['reembedded']} "
        f"(as {replication.fingerprint}); {counts['already']} were this embedder's already; "
        f"{counts['expired']} expired"
    )
    for fingerprint, n in sorted(counts["foreign"].items()):
        print(f"  {n} written by {fingerprint}")
    return 0
