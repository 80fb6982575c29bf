"""``cachekit replay``: arguments, progress display and outputs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cachekit._core.extras import MissingExtraError
from cachekit.semantic.policy.options import add_policy_arguments, policy_and_setting

__all__ = ["add_parser", "parse_sweep", "run"]

_MAX_SWEEP_POINTS = 200


def parse_sweep(spec: str) -> list[float]:
    """``START:STOP:STEP`` (both ends included) as a list of settings."""
    try:
        start, stop, step = (float(x) for x in spec.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sweep wants START:STOP:STEP, e.g. 0.70:0.98:0.02; got {spec!r}"
        ) from None
    if step <= 0 or stop < start:
        raise argparse.ArgumentTypeError("--sweep needs STEP > 0 and STOP >= START")
    n = round((stop - start) / step) + 1
    if n > _MAX_SWEEP_POINTS:
        raise argparse.ArgumentTypeError(f"--sweep gives {n} points; at most {_MAX_SWEEP_POINTS}")
    return [round(start + i * step, 10) for i in range(n) if start + i * step <= stop + 1e-9]


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``replay`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "replay",
        help="what a cache would have saved on a request log, and how often wrong",
        description="Replay a request log through the cache `cachekit serve` builds; report "
        "hits, savings, wrong hits and capacity. See docs/replay.md.",
    )
    p.add_argument(
        "input",
        metavar="INPUT.jsonl",
        help="Batch API input file, or a JSONL of {request, response, latency_ms, "
        "timestamp} records",
    )
    p.add_argument(
        "--outputs",
        metavar="OUTPUT.jsonl",
        help="the Batch API output file (or Anthropic Message Batches results file)",
    )
    p.add_argument("--truth", metavar="TRUTH.jsonl", help="ground truth: judge every hit")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--sweep",
        type=parse_sweep,
        metavar="START:STOP:STEP",
        help="replay at every setting of the policy from START to STOP (default, for the "
        "threshold policy: 5 points 0.02 apart around its setting)",
    )
    p.add_argument(
        "--no-sweep", action="store_true", help="replay at the one setting only (faster)"
    )
    p.add_argument(
        "--max-wrong-rate",
        type=_fraction,
        default=0.01,
        metavar="R",
        help="with --truth: the recommended setting is the sweep's highest hit rate with wrong "
        "hits at most R per request (default 0.01)",
    )
    p.add_argument(
        "--no-slot-guard",
        action="store_true",
        help="replay without the slot guard (to see what it saves on your log)",
    )
    p.add_argument(
        "--embedder",
        default="",
        metavar="DIR|module:callable",
        help="the embedder to replay with: a directory written by `cachekit tune` (its "
        "operating point is the default threshold), or module:callable (default: the bundled "
        "model), as for `cachekit serve --embedder`",
    )
    add_policy_arguments(p, which)
    p.add_argument(
        "--tenant-field",
        default="metadata.tenant",
        metavar="PATH",
        help="dotted path of the tenant in each line (default: metadata.tenant)",
    )
    p.add_argument("--prices", metavar="prices.toml", help="override or extend the prices")
    p.add_argument(
        "--rate",
        type=_positive_float,
        metavar="RPS",
        help="request rate, when the log has no timestamps (or to override them)",
    )
    p.add_argument(
        "--upstream-concurrency",
        type=_positive_int,
        metavar="N",
        help="upstream slots provisioned (for utilisation and queueing)",
    )
    p.add_argument(
        "--wrong-cost",
        type=_non_negative_float,
        default=0.0,
        metavar="DOLLARS",
        help="what one wrong answer costs you, taken off the net savings (default 0)",
    )
    p.add_argument(
        "--config",
        metavar="cachekit.toml",
        help="the cache settings `cachekit serve` uses (TTL, tenants, prices)",
    )
    p.add_argument("--json", metavar="report.json", help="write the JSON report here")
    p.add_argument("--html", metavar="report.html", help="write the HTML report here")
    p.add_argument("--svg", metavar="sweep.svg", help="write the sweep plot here (with --sweep)")
    p.add_argument("--quiet", action="store_true", help="no terminal tables")
    return p


@contextmanager
def _progress(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    tasks: dict[str, Any] = {}
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:

        def hook(task: str, advance: int, total: int | None) -> None:
            if task not in tasks:
                tasks[task] = bar.add_task(task, total=total)
            bar.advance(tasks[task], advance)

        yield hook


def run(args: argparse.Namespace) -> int:
    from cachekit.llm import LLMCacheConfig
    from cachekit.proxy.config import load_embedder
    from cachekit.replay.runner import ReplayOptions, run_replay

    try:
        policy, setting = policy_and_setting(args)
        config = LLMCacheConfig.from_toml(args.config) if args.config else None
        if args.no_slot_guard:
            config = dataclasses.replace(config or LLMCacheConfig(), slot_guard=False)
        with _progress(sys.stderr.isatty()) as hook:
            report = run_replay(
                args.input,
                args.outputs,
                args.truth,
                ReplayOptions(
                    setting=setting,
                    sweep=args.sweep or (),
                    policy=policy,
                    tenant_field=args.tenant_field,
                    prices_path=args.prices,
                    rate=args.rate,
                    upstream_concurrency=args.upstream_concurrency,
                    config=config,
                    embedder=load_embedder(args.embedder),
                    progress=hook,
                    wrong_cost=args.wrong_cost,
                    default_sweep=not args.no_sweep,
                    max_wrong_rate=args.max_wrong_rate,
                ),
            )
    except (OSError, ValueError, MissingExtraError) as exc:
        print(f"cachekit replay: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        from cachekit.replay.render import print_report

        print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    if args.html:
        from cachekit.replay.html import write_html

        write_html(report, args.html, source=Path(args.input).name)
    if args.svg and report.sweep:
        from cachekit.replay.html import sweep_svg

        Path(args.svg).write_text(sweep_svg(report), encoding="utf-8")
    return 0
