"""The ``cachekit`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cachekit._version import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachekit", description="Semantic and feature caching for model inference."
    )
    parser.add_argument("--version", action="version", version=f"cachekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the embedded demo (in-process cache, no servers)")
    demo.add_argument("--no-semantic", action="store_true",
                      help="skip the semantic tier (which loads the embedding model)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from cachekit.demo import run_demo

        return run_demo(semantic=not args.no_semantic)
    # No command is a usage error, as argparse's own are: exit 2, help on stderr.
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
