"""``cachekit export-labels``: labelled pairs for ``cachekit tune`` from a team's own traffic.

Two sources (docs/labels.md), either or both:

* ``--replay PREFIX``: a replay log with its ground truth (``PREFIX.input.jsonl``,
  ``PREFIX.output.jsonl`` when the input is a Batch API file, ``PREFIX.truth.jsonl``), turned
  into pairs by :func:`cachekit.replay.truth_pairs.truth_pairs`;
* ``--redis URL --namespace NS``: the verdicts every process of a shared cache recorded (the
  capped lists ``{key_prefix}:{NS}:sem:{function}:labels``, one per semantic function);
* ``--shadow FILE``: the pairs ``cachekit serve --shadow --shadow-log FILE`` scored
  (docs/shadow.md): each shadowed hit's query and matched text, a duplicate when the answers agreed.

Pairs are written as JSON lines ``{"query", "cached", "duplicate"}``. When one ``(query,
cached)`` is labelled more than once the latest label is kept (the Redis verdicts oldest first,
then the truth file in log order, so the truth has the last word), and pairs whose labels
disagreed are counted.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachekit.semantic.arbiter import Label

__all__ = ["Collected", "add_parser", "read_redis_labels", "run"]

Pair = tuple[str, str, bool]
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")
#: Seconds a Redis command of the export may take.
_REDIS_TIMEOUT_S = 10.0


@dataclass
class Collected:
    """Pairs gathered from the sources, oldest first, and what to tell the user about them."""

    pairs: list[Pair] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``export-labels`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "export-labels",
        help="labelled pairs for `cachekit tune` from a replay truth file or shared verdicts",
        description="Write labelled pairs (JSON lines: query, cached, duplicate) from a replay "
        "log's ground truth and/or the verdicts a shared cache recorded in Redis. "
        "See docs/labels.md.",
    )
    p.add_argument(
        "--replay",
        metavar="PREFIX",
        help="PREFIX.input.jsonl, PREFIX.truth.jsonl and (Batch API input) PREFIX.output.jsonl",
    )
    p.add_argument(
        "--tenant-field",
        default="metadata.tenant",
        metavar="PATH",
        help="with --replay: dotted path of the tenant in each line (default: metadata.tenant)",
    )
    p.add_argument(
        "--embedder",
        default="",
        metavar="MODULE:CALLABLE",
        help="with --replay: the embedder that finds each near miss's nearest earlier request "
        "(default: the bundled model, as `cachekit replay` uses)",
    )
    p.add_argument("--redis", metavar="URL", help="the Redis the cache shares (needs --namespace)")
    p.add_argument("--namespace", metavar="NS", help="the cache's namespace (with --redis)")
    p.add_argument(
        "--key-prefix", default="ck", metavar="P", help="the cache's key_prefix (default: ck)"
    )
    p.add_argument(
        "--shadow",
        metavar="FILE",
        help="the shadow log of `cachekit serve --shadow --shadow-log FILE` (docs/shadow.md)",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the pairs")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        _check_args(args)
        got = Collected()
        if args.redis:
            _from_redis(args, got)
        if args.shadow:
            _from_shadow(args.shadow, got)
        if args.replay:
            _from_replay(args, got)
        # Imported here: pairs needs numpy, which `cachekit --help` must not.
        from cachekit.semantic.policy.pairs import latest_labels, write_pairs

        pairs, disagreed = latest_labels(got.pairs)
        if not pairs:
            raise ValueError("no labelled pairs found; nothing written")

        written = write_pairs(args.out, pairs)
    except (OSError, ValueError, ImportError, AttributeError) as exc:
        print(f"cachekit export-labels: {exc}", file=sys.stderr)
        return 2
    dup = sum(d for _, _, d in pairs)
    print(f"wrote {written} pairs to {args.out}: {dup} duplicates, {written - dup} not")
    for note in got.notes:
        print(f"  {note}")
    if disagreed:
        print(f"  {disagreed} pairs had contradictory labels; the latest was kept")
    return 0


def _check_args(args: argparse.Namespace) -> None:
    if not args.replay and not args.redis and not args.shadow:
        raise ValueError("give --replay PREFIX, --redis URL --namespace NS and/or --shadow FILE")
    if bool(args.redis) != bool(args.namespace):
        raise ValueError("--redis and --namespace go together")


# ---------------------------------------------------------------------- replay truth


def _from_replay(args: argparse.Namespace, got: Collected) -> None:
    from cachekit.proxy.config import load_embedder
    from cachekit.replay.truth_pairs import truth_pairs

    prefix = args.replay
    inp, out, truth = (Path(f"{prefix}.{part}.jsonl") for part in ("input", "output", "truth"))
    for p in (inp, truth):
        if not p.is_file():
            raise ValueError(f"--replay {prefix}: {p} not found")
    found = truth_pairs(
        inp,
        out if out.is_file() else None,
        truth,
        tenant_field=args.tenant_field,
        embedder=load_embedder(args.embedder),
    )
    got.pairs.extend(found.pairs)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(found.kinds.items())) or "none"
    note = f"replay truth: {len(found.pairs)} pairs ({kinds})"
    if found.embedder:
        note += f"; near misses paired by {found.embedder}"
    got.notes.append(note)
    if found.skipped:
        got.notes.append("left out: " + _counts(found.skipped))


# ---------------------------------------------------------------------- shadow mode


def _from_shadow(path: str, got: Collected) -> None:
    """Pairs from a shadow log: ``(query, matched, agree)`` of each line that has both texts."""
    kept = bad = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
                query, matched, agree = rec["query"], rec["matched"], rec["agree"]
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            ok = isinstance(query, str) and isinstance(matched, str) and isinstance(agree, bool)
            if not ok or query == matched:
                bad += 1
                continue
            got.pairs.append((query, matched, agree))
            kept += 1
    got.notes.append(f"shadow log: {kept} pairs" + (f", {bad} lines left out" if bad else ""))


# ---------------------------------------------------------------------- shared verdicts


def _from_redis(args: argparse.Namespace, got: Collected) -> None:
    import redis

    try:
        client = redis.Redis.from_url(
            args.redis, socket_timeout=_REDIS_TIMEOUT_S, socket_connect_timeout=_REDIS_TIMEOUT_S
        )
        try:
            labels, lists, bad = read_redis_labels(client, args.key_prefix, args.namespace)
        finally:
            client.close()
    except redis.RedisError as exc:
        raise ValueError(f"cannot read the labels from Redis: {exc}") from None
    same = sum(label.query == label.candidate for label in labels)
    got.pairs.extend((x.query, x.candidate, x.correct) for x in labels if x.query != x.candidate)
    sources = Counter(label.source for label in labels)
    got.notes.append(
        f"shared verdicts: {len(labels)} from {lists} lists ({_counts(sources) or 'none'})"
    )
    if bad or same:
        got.notes.append(f"left out: {bad} unreadable records, {same} identical texts")


def read_redis_labels(client: Any, key_prefix: str, namespace: str) -> tuple[list[Label], int, int]:
    """``(labels oldest first, lists read, unreadable records)``: every semantic function's
    shared verdicts in ``namespace`` (keys ``{key_prefix}:{namespace}:sem:*:labels``)."""
    from cachekit.backends.semantic_store import LABELS_SUFFIX
    from cachekit.semantic.arbiter import Label
    from cachekit.semantic.tier import semantic_base

    pattern = semantic_base(_glob(key_prefix), _glob(namespace), "*") + LABELS_SUFFIX
    labels: list[Label] = []
    lists = bad = 0
    for key in client.scan_iter(match=pattern, count=1000):
        if _decode(client.type(key)) != "list":
            continue
        lists += 1
        for raw in reversed(client.lrange(key, 0, -1)):  # the list is newest first
            try:
                labels.append(Label.from_dict(json.loads(raw)))
            except (ValueError, UnicodeDecodeError):
                bad += 1
    labels.sort(key=lambda label: label.at_s)
    return labels, lists, bad


def _glob(s: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", s)


def _decode(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(c.items()))
