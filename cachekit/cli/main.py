"""The ``cachekit`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from cachekit._core.extras import MissingExtraError, require_installed
from cachekit._version import __version__
from cachekit.cli import export_labels as labels_cli
from cachekit.cli import purge as purge_cli
from cachekit.cli import reembed as reembed_cli
from cachekit.proxy import server as serve_cli
from cachekit.proxy.config import UPSTREAM_REQUIRED, load_embedder
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
    _add_serve(sub)
    _add_train_verifier(sub)
    _add_tune(sub)
    labels_cli.add_parser(sub)
    reembed_cli.add_parser(sub)
    purge_cli.add_parser(sub)
    return parser


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cachekit serve``; its settings' errors are reported with its own usage line."""
    serve = sub.add_parser(
        "serve",
        help="run the OpenAI-compatible caching proxy (needs the proxy extra)",
        description="Run the OpenAI-compatible caching proxy. Options override the --config "
        f"file's settings; {UPSTREAM_REQUIRED}.",
    )
    serve_cli.add_arguments(serve)
    serve.set_defaults(usage_error=serve.error)


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
    from cachekit.semantic.policy.verifier import train_verifier

    try:
        embedder = load_embedder(args.embedder)
        train_verifier(
            args.pairs, args.out, embedder=embedder, target_precision=args.target_precision
        )
    except (OSError, ValueError, ImportError, AttributeError) as exc:
        print(f"cachekit train-verifier: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_tune(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    steps = int(str(_tune_defaults()["steps"]))
    tu = sub.add_parser(
        "tune",
        help="fine-tune the embedder on labelled pairs into a small adapter (docs/tuning.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train a low-rank adapter for the packaged embedder on the train part of "
        "PAIRS (JSON lines: query, cached, duplicate; several files are read as one), choose its "
        "operating point on the tune part, measure base and tuned on the test part (no text is "
        "in two parts), write the adapter and tune.json to --out, and say whether to use it. "
        "Stop it at any time: the same command resumes from its last checkpoint. Expected time "
        "on a 2-core CPU (docs/benchmarks.md, 'Tuning the embedder'): the base model embeds the "
        "training texts for mining at about 320 texts/s (50,000 pairs: 4 minutes), then each "
        f"step takes 2.2-2.5 s (the default {steps} steps: {steps * 2.2 / 60:.0f}-"
        f"{steps * 2.5 / 60:.0f} minutes); a GPU takes a fraction of that.",
    )
    tu.add_argument(
        "pairs", nargs="+", help="labelled pairs, JSON lines {query, cached, duplicate}"
    )
    tu.add_argument("--out", required=True, help="directory to write the tuned adapter to")
    defaults = _tune_defaults()
    tu.add_argument("--steps", type=int, default=defaults["steps"], help="training steps")
    tu.add_argument(
        "--batch-size", type=int, default=defaults["batch_size"], help="pairs per loss per step"
    )
    tu.add_argument(
        "--learning-rate", type=float, default=defaults["learning_rate"], help="AdamW's rate"
    )
    tu.add_argument("--rank", type=int, default=defaults["rank"], help="the adapter's rank")
    tu.add_argument(
        "--seed", type=int, default=defaults["seed"], help="seeds the parts and batches"
    )
    tu.add_argument(
        "--held-back",
        type=float,
        default=defaults["held_back"],
        help="share of pairs kept out of training: half to choose the operating point, half "
        "only to report on",
    )
    tu.add_argument(
        "--max-pairs", type=int, default=None, help="use a seeded sample of this many pairs"
    )
    tu.add_argument(
        "--target-precision",
        type=float,
        default=defaults["target_precision"],
        help="share of judgeable hits that must be right at the operating point",
    )
    tu.add_argument(
        "--eval",
        action="append",
        default=[],
        metavar="NAME=PAIRS",
        help="also measure base and tuned on these labelled pairs (never trained on); repeatable",
    )
    tu.add_argument(
        "--verifier",
        action="store_true",
        help="also retrain the hit verifier on the tuned vectors (OUT/verifier.json)",
    )
    tu.add_argument(
        "--onnx",
        action="store_true",
        help="also load the tuned model in ONNX Runtime once (fp32, and the int8 copy it writes)",
    )
    tu.add_argument(
        "--recalibrate",
        action="store_true",
        help="do not train: choose the operating point of the tune already in --out again, on "
        "all of PAIRS (pairs its adapter never trained on), and store it in its tune.json",
    )
    tu.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    tu.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: a progress line every minute instead",
    )


def _tune_defaults() -> dict[str, object]:
    # The defaults live with TuneConfig; reading them here keeps one source of truth without
    # importing torch for `cachekit --help`.
    from dataclasses import fields

    from cachekit.semantic.train.settings import TuneConfig

    return {f.name: f.default for f in fields(TuneConfig)}


def _tune(args: argparse.Namespace) -> int:
    from cachekit.semantic.train.settings import TuneConfig
    from cachekit.semantic.train.tune import run_tune

    try:
        config = TuneConfig(
            steps=args.steps,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            rank=args.rank,
            alpha=2 * args.rank,
            seed=args.seed,
            max_pairs=args.max_pairs,
            held_back=args.held_back,
            target_precision=args.target_precision,
            threads=args.threads,
        )
        return run_tune(
            args.pairs,
            args.out,
            config,
            evals=args.eval,
            verifier=args.verifier,
            onnx=args.onnx,
            progress=not args.no_progress,
            recalibrate_only=args.recalibrate,
        )
    except (OSError, ValueError, ImportError) as exc:
        print(f"cachekit tune: {exc}", file=sys.stderr)
        return 2


#: What each command imports, by extra: checked before it starts, so a missing one is named
#: with its install command instead of ending in a traceback.
SERVE_NEEDS = (("uvicorn", "proxy"), ("starlette", "proxy"), ("httpx", "proxy"))
REPLAY_NEEDS = (("rich", "replay"), ("numpy", "semantic"), ("faiss", "semantic"))
REEMBED_NEEDS = (("numpy", "semantic"), ("faiss", "semantic"), ("redis", "redis"))


def _with_extras(command: str, needs: tuple[tuple[str, str], ...], run: Callable[[], int]) -> int:
    try:
        for module, extra in needs:
            require_installed(module, extra=extra, feature=f"cachekit {command}")
    except MissingExtraError as exc:
        print(f"cachekit {command}: {exc}", file=sys.stderr)
        return 2
    return run()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from cachekit.cli.demo import run_demo

        return run_demo(semantic=not args.no_semantic)
    if args.command == "replay":
        # Its reports are drawn with matplotlib: needed only when one is asked for.
        drawn = (("matplotlib", "replay"),) if args.html or args.svg else ()
        return _with_extras("replay", REPLAY_NEEDS + drawn, lambda: replay_cli.run(args))
    if args.command == "serve":
        try:
            config = serve_cli.config_from_args(args)
        except (OSError, ValueError) as exc:
            usage_error: Callable[[str], NoReturn] = args.usage_error
            usage_error(str(exc))  # exits 2 with the usage, as argparse's own errors do
        needs = SERVE_NEEDS + ((("opentelemetry.sdk", "otel"),) if config.proxy.otel else ())
        return _with_extras("serve", needs, lambda: serve_cli.serve(config))
    if args.command == "train-verifier":
        return _train_verifier(args)
    if args.command == "tune":
        return _tune(args)
    if args.command == "export-labels":
        return labels_cli.run(args)
    if args.command == "reembed":
        return _with_extras("reembed", REEMBED_NEEDS, lambda: reembed_cli.run(args))
    if args.command == "purge":
        return _with_extras("purge", REEMBED_NEEDS, lambda: purge_cli.run(args))
    # No command is a usage error, as argparse's own are: exit 2, help on stderr.
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
