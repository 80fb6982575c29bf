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
import sys
from typing import Any

from cachekit.cli.settings import add_cache_options, cache_config

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
    add_cache_options(p)
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
    from cachekit.llm import build_cache
    from cachekit.proxy.config import load_embedder

    try:
        config = cache_config(args)
        embedder = load_embedder(args.embedder) if args.embedder else None
    except (OSError, ValueError, ImportError) as exc:
        print(f"cachekit reembed: {exc}", file=sys.stderr)
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
