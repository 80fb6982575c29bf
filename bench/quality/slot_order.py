"""The slot guard's ``order`` and ``code`` rules: what they refuse on generated sets, and what they
cost in paraphrase recall on labelled pairs.

Two guards are compared on the same pairs, with no embedder (the guard alone, asked about every
pair whatever its similarity): ``before``, the guard with the two rules off
(``SlotGuard(order=False, code=False)``: the rules the guard had before them), and ``after``, the
default guard.

* ``--sets``: the pairs of ``bench/common/order_sets.py`` (role swaps, role-keeping paraphrases,
  symmetric frames, code in another case or symbol, the same code), per part (``tune``, the part
  the rules were written on, and ``test``): the share refused per kind, and the misses.
* pair files (JSON lines with ``query``, ``cached``, ``duplicate``, e.g. QQP): per label, the
  share of pairs refused before and after, and the pairs that only ``after`` refuses, by kind.
  With ``--similarity``, the cosine (all-MiniLM-L6-v2) of each such pair is shown, and how many
  are at or above the default policy's floor (0.86: only those would have been served).
* ``--sets --served``: the generated pairs through the embedder as a hit would go: the pairs at
  or above the default threshold (0.90, cosine of all-MiniLM-L6-v2), and how many of those the
  default guard lets through (served), per kind: a swap served is a wrong hit, a role-keeping
  paraphrase served a hit kept.
* ``--timing``: what a check costs (a query against four candidates, memoised, and the first
  parse of a text), on the pair files' texts. The parse reads every rule whichever are on; to
  time a version of the guard without the two rules, run this script (with
  ``bench/common/order_sets.py`` and its data file) in a checkout of that version.

Examples::

    python -m bench.quality.slot_order --sets
    python -m bench.quality.slot_order --sets --served
    python -m bench.quality.slot_order bench/data/qqp/qqp_pairs_train.jsonl --examples 20 \\
        --similarity
    python -m bench.quality.slot_order bench/data/qqp/qqp_pairs_dev.jsonl --timing
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bench.common import data
from bench.common import order_sets as sets
from cachekit.semantic.policy.slots import DEFAULT_GUARD, SlotGuard, refusal_kind, text_slots

try:
    BEFORE = SlotGuard(order=False, code=False)
except TypeError:  # a version of the guard without the two rules (timing it: --timing)
    BEFORE = DEFAULT_GUARD
AFTER = DEFAULT_GUARD
FLOOR = 0.86  # ThresholdPolicy(): 0.90 less the number bonus; nothing below is served


def pct(n: int, d: int) -> str:
    return f"{n:5d} / {d:5d} ({n / d:6.2%})" if d else "    - /     -"


def run_sets(examples: int) -> None:
    for part in sets.PARTS:
        found = sets.pairs(part)
        print(f"\n{part}: {len(found)} pairs (refused: the guard says no)")
        for kind in sets.KINDS:
            rows = [p for p in found if p.kind == kind]
            if not rows:
                continue
            before = [p for p in rows if BEFORE.check(p.query, p.cached) is not None]
            reasons = [(p, AFTER.check(p.query, p.cached)) for p in rows]
            after = [(p, r) for p, r in reasons if r is not None]
            kinds = Counter(refusal_kind(r) for _, r in after)
            want = "refuse" if kind in sets.REFUSE else "pass"
            print(
                f"  {kind:15s} ({want:6s}) before {pct(len(before), len(rows))}  "
                f"after {pct(len(after), len(rows))}  {dict(kinds.most_common())}"
            )
            wrong = (
                [p for p, r in reasons if r is None]
                if kind in sets.REFUSE
                else [p for p, _ in after]
            )
            by_template = Counter(p.template for p in wrong)
            if wrong:
                print(f"      {'missed' if want == 'refuse' else 'refused'}: {dict(by_template)}")
            for p in wrong[:examples]:
                r = AFTER.check(p.query, p.cached)
                print(f"        {p.query!r} / {p.cached!r}" + (f"  [{r}]" if r else ""))


def run_served(threshold: float = 0.90) -> None:
    for part in sets.PARTS:
        found = sets.pairs(part)
        sims = cosines([(p.query, p.cached) for p in found])
        print(f"\n{part}: through the embedder at {threshold:.2f}, then the default guard")
        for kind in sets.KINDS:
            near = [
                p for p, c in zip(found, sims, strict=True) if p.kind == kind and c >= threshold
            ]
            total = sum(p.kind == kind for p in found)
            if not total:
                continue
            served = sum(AFTER.check(p.query, p.cached) is None for p in near)
            want = "wrong hits" if kind in sets.REFUSE else "hits kept"
            print(
                f"  {kind:15s} {total:5d} pairs, {len(near):5d} near, served {served:5d} ({want})"
            )


def load(path: Path) -> list[tuple[str, str, bool]]:
    with path.open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r["query"], r["cached"], bool(r["duplicate"])) for r in rows]


def cosines(pairs: list[tuple[str, str]]) -> list[float]:
    from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

    if not pairs:
        return []
    emb = SentenceTransformerEmbedder()
    a = emb.embed([q for q, _ in pairs])
    b = emb.embed([c for _, c in pairs])
    return [float(x) for x in (a * b).sum(axis=1)]


def run_pairs(path: Path, examples: int, similarity: bool) -> None:
    rows = load(path)
    print(f"\n{path.name}: {len(rows)} pairs")
    for label in (True, False):
        sel = [(q, c) for q, c, d in rows if d is label]
        n_before = n_after = 0
        new: list[tuple[str, str, str]] = []
        for q, c in sel:
            rb, ra = BEFORE.check(q, c), AFTER.check(q, c)
            n_before += rb is not None
            n_after += ra is not None
            if rb is None and ra is not None:
                new.append((ra, q, c))
        kinds = Counter(refusal_kind(r) for r, _, _ in new)
        name = "duplicates" if label else "non-duplicates"
        print(
            f"  {name:14s} refused before {pct(n_before, len(sel))}  "
            f"after {pct(n_after, len(sel))}  newly refused {len(new)} {dict(kinds)}"
        )
        sims = cosines([(q, c) for _, q, c in new]) if similarity else [float("nan")] * len(new)
        if similarity:
            at = sum(s >= FLOOR for s in sims)
            print(f"      of those, at or above the floor {FLOOR}: {at}")
        for (r, q, c), s in list(zip(new, sims, strict=True))[:examples]:
            shown = "" if s != s else f"{s:.3f} "
            print(f"      {shown}[{r}] {q!r} / {c!r}")


def run_timing(paths: list[Path], rounds: int = 5) -> None:
    texts = sorted({t for path in paths for q, c, _ in load(path) for t in (q, c)})
    if len(texts) < 5:
        raise SystemExit("--timing needs a pair file with some texts")
    groups = [(texts[i], texts[i + 1 : i + 5]) for i in range(0, len(texts) - 5, 5)]
    guards = [(AFTER, "default")]
    if BEFORE is not AFTER:
        guards.append((BEFORE, "order and code off"))
    parse: list[float] = []
    check: dict[str, list[float]] = {name: [] for _, name in guards}
    for _ in range(rounds):
        text_slots.cache_clear()
        start = time.perf_counter()
        for t in texts:
            text_slots(t)
        parse.append((time.perf_counter() - start) / len(texts) * 1e6)
        for guard, name in guards:
            start = time.perf_counter()
            for q, cands in groups:
                for c in cands:
                    guard.check(q, c)
            check[name].append((time.perf_counter() - start) / len(groups) * 1e6)
    print(
        f"  first parse of a text {statistics.median(parse):6.1f} us (median of {rounds} rounds "
        f"over {len(texts)} texts)"
    )
    for name, took in check.items():
        print(f"  {name:20s} a query against 4 parsed candidates {statistics.median(took):6.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs", type=Path, nargs="*", help="JSON lines: query, cached, duplicate")
    ap.add_argument("--sets", action="store_true", help="the generated order and code sets")
    ap.add_argument("--examples", type=int, default=5, help="pairs shown per group")
    ap.add_argument("--similarity", action="store_true", help="cosines of newly refused pairs")
    ap.add_argument("--timing", action="store_true", help="time the guard on the files' texts")
    ap.add_argument("--served", action="store_true", help="with --sets: through the embedder")
    args = ap.parse_args()
    if not args.sets and not args.pairs:
        ap.error("give pair files or --sets")
    if args.sets:
        run_sets(args.examples)
        if args.served:
            run_served()
    for path in args.pairs:
        data.need(path)
    for path in args.pairs:
        run_pairs(path, args.examples, args.similarity)
    if args.timing and args.pairs:
        print("\ntiming (the guard alone, one thread)")
        run_timing(args.pairs)


if __name__ == "__main__":
    main()
