"""The ``cachekit`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cachekit._version import __version__
from cachekit.proxy import server as serve_cli
from cachekit.proxy.config import load_embedder
from cachekit.replay import cli as replay_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachekit", description="Semantic and feature caching for model inference."
    )
    parser.add_argument("--version", action="version", version=f"cachekit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the embedded demo (in-process cache, no servers)")
    demo.add_argument(
        "--no-semantic",
        action="store_true",
        help="skip the semantic tier (which loads the embedding model)",
    )
    replay_cli.add_parser(sub)
    serve_cli.add_arguments(
        sub.add_parser(
            "serve", help="run the OpenAI-compatible caching proxy (needs the proxy extra)"
        )
    )
    _add_train_verifier(sub)
    return parser


def _add_train_verifier(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tv = sub.add_parser(
        "train-verifier",
        help="train the semantic hit verifier on labelled pairs (docs/hit-quality.md)",
        description="Fit the verifier on the train part of PAIRS (JSON lines: query, cached, "
        "duplicate), pick its operating point on the tune part; the test part is not read.",
    )
    tv.add_argument("pairs", help="labelled pairs, JSON lines {query, cached, duplicate}")
    tv.add_argument("--out", default="verifier-model", help="directory to write verifier.json")
    tv.add_argument(
        "--target-precision",
        type=float,
        default=0.80,
        help="share of judgeable hits that must be right at the operating point",
    )
    tv.add_argument(
        "--embedder",
        default="",
        help="module:callable returning the embedder to train with, the one the cache will "
        "use (default: the bundled model), as for `cachekit serve --embedder`",
    )


def _train_verifier(args: argparse.Namespace) -> int:
    from cachekit.semantic.verifier import train_verifier

    try:
        embedder = load_embedder(args.embedder)
        train_verifier(
            args.pairs, args.out, embedder=embedder, target_precision=args.target_precision
        )
    except (OSError, ValueError, ImportError, AttributeError) as exc:
        print(f"cachekit train-verifier: {exc}", file=sys.stderr)
        return 2
    return 0


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
    if args.command == "train-verifier":
        return _train_verifier(args)
    # No command is a usage error, as argparse's own are: exit 2, help on stderr.
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
