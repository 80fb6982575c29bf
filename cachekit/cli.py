"""The ``cachekit`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cachekit._version import __version__
from cachekit.proxy import server as serve_cli
from cachekit.replay import cli as replay_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachekit", description="Semantic and feature caching for model inference."
    )
    parser.add_argument("--version", action="version", version=f"cachekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the embedded demo (in-process cache, no servers)")
    demo.add_argument("--no-semantic", action="store_true",
                      help="skip the semantic tier (which loads the embedding model)")
    replay_cli.add_parser(sub)
    serve_cli.add_arguments(sub.add_parser(
        "serve", help="run the OpenAI-compatible caching proxy (needs the proxy extra)"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from cachekit.demo import run_demo

        return run_demo(semantic=not args.no_semantic)
    if args.command == "replay":
        return replay_cli.run(args)
    if args.command == "serve":
        try:
            config = serve_cli.config_from_args(args)
        except (OSError, ValueError) as exc:
            parser.error(str(exc))
        return serve_cli.serve(config)
    # No command is a usage error, as argparse's own are: exit 2, help on stderr.
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
