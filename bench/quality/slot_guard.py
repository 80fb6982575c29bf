"""Slot guard: how often the semantic tier serves another request's answer to a prompt that
differs from a cached one only in a number, a negation, a name, or the question after a long
shared preamble, and how many true paraphrases it still serves.

Data: ``bench/common/slot_sets.py`` generates the prompt families (seeded, nothing downloaded)
from the templates of ``bench/data/slot_sets.json``, split into a ``tune`` and a ``test`` part
by template; rules are tuned on one and reported on the other.

Protocol ("stream"): per part, a fresh in-process ``Cache`` and one ``@cache.semantic`` function
``answer(prompt)`` that returns the prompt's meaning key. Every request of the part's stream is
looked up (``answer.lookup``, a probe) and then called, in order. A value different from the
request's own meaning is a WRONG answer served (``cross``: taken from another family). A
paraphrase whose meaning was requested earlier is *hittable*; ``served`` counts those answered
from the cache with the right value. Two configurations run on the same stream, interleaved per
repetition: ``default`` (``@cache.semantic`` with no policy: the library's default, the slot
guard at 0.90) and ``unguarded``, the former default (``ThresholdPolicy(0.92, guard=None,
number_bonus=0)``). Both share one embedder, so each text is encoded once.

Exposure (independent of the cache): for each first request of a meaning, the cosine to the
nearest earlier request of its own family with another meaning (``sibling``) and of any other
meaning (``other``); for each paraphrase, to the nearest earlier request of its own meaning.
A slot swap whose sibling sits below 0.92 is no attack on the 0.92 threshold. Variant pairs
(also independent of the cache): every pair of a template's fills that differ in one slot, in the
same wording, over all templates and wordings of the part: how many are attacks at all.

Examples::

    python -m bench.quality.slot_guard --part both
    python -m bench.quality.slot_guard --part test --size 3000 --seed 1 --examples 5
    python -m bench.quality.slot_guard --part tune --repeat 3 --embedder torch
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from bench.common import slot_sets as sets
from cachekit import Cache, LookupResult
from cachekit.semantic.embed.embedder import CachedEmbedder, SentenceTransformerEmbedder
from cachekit.semantic.policy.hit_policy import ThresholdPolicy

BASELINE_THRESHOLD = 0.92
SHORT = {
    sets.NUMBERS: "numbers",
    sets.NEGATION: "negation",
    sets.NAMES: "names",
    sets.LONG: "long",
}
ROW_ORDER = [*sets.KINDS, *(f"{sets.PARAPHRASE}/{s}" for s in SHORT.values()), "all"]


@dataclass(frozen=True)
class Config:
    name: str
    policy: Callable[[], Any] | None  # None: @cache.semantic's default


@dataclass
class Row:
    requests: int = 0
    wrong: int = 0
    cross: int = 0  # wrong answers taken from another family
    hittable: int = 0
    served: int = 0  # hittable paraphrases answered from the cache, rightly

    def add(self, other: Row) -> None:
        for name in ("requests", "wrong", "cross", "hittable", "served"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class Example:
    query: str
    matched: str | None
    similarity: float | None
    served: str


@dataclass
class Result:
    rows: dict[str, Row] = field(default_factory=lambda: defaultdict(Row))
    examples: dict[str, list[Example]] = field(default_factory=lambda: defaultdict(list))
    refusals: dict[str, float] = field(default_factory=dict)
    policy: str = ""
    seconds: float = 0.0

    def add(self, other: Result) -> None:
        for label, row in other.rows.items():
            self.rows[label].add(row)
        for kind, found in other.examples.items():
            self.examples[kind].extend(found)
        for key, value in other.refusals.items():
            self.refusals[key] = self.refusals.get(key, 0) + value
        self.policy = other.policy
        self.seconds += other.seconds


# ---------------------------------------------------------------------------- configurations


def unguarded_policy() -> Any:
    """The former default: a threshold of 0.92 and no slot work at all."""
    return ThresholdPolicy(BASELINE_THRESHOLD, guard=None, number_bonus=0.0)


CONFIGS = (Config("default", None), Config("unguarded", unguarded_policy))


def make_embedder(backend: Literal["onnx", "torch"]) -> CachedEmbedder:
    return CachedEmbedder(SentenceTransformerEmbedder(backend=backend), max_entries=200_000)


# ---------------------------------------------------------------------------- the protocol


def run_stream(
    stream: Sequence[sets.Prompt],
    config: Config,
    embedder: CachedEmbedder,
    namespace: str,
    examples: int,
) -> Result:
    meaning_of = {p.text: p.meaning for p in stream}
    kwargs: dict[str, Any] = {"embedder": embedder}
    if config.policy is not None:
        kwargs["policy"] = config.policy()
    cache = Cache(namespace=namespace)

    @cache.semantic(**kwargs)
    def answer(prompt: str) -> str:
        return meaning_of[prompt]

    out = Result(policy=repr(answer.policy))
    start = time.perf_counter()
    try:
        for p in stream:
            found = answer.lookup(p.text)
            record(out, p, found, answer(p.text), examples)
        out.refusals = refusal_counts(cache.stats().to_dict())
    finally:
        answer.close()
        cache.close()
    out.seconds = time.perf_counter() - start
    return out


def record(out: Result, p: sets.Prompt, found: LookupResult, served: str, examples: int) -> None:
    wrong = served != p.meaning
    row = Row(
        requests=1,
        wrong=int(wrong),
        cross=int(wrong and served.split("|")[0] != p.template),
        hittable=int(p.kind == sets.PARAPHRASE),
        served=int(p.kind == sets.PARAPHRASE and found.hit and not wrong),
    )
    labels = [p.kind, "all"]
    if p.kind == sets.PARAPHRASE:
        labels.append(f"{sets.PARAPHRASE}/{SHORT[p.family]}")
    for label in labels:
        out.rows[label].add(row)
    if wrong and len(out.examples[p.kind]) < examples:
        out.examples[p.kind].append(Example(p.text, found.matched_text, found.similarity, served))


def refusal_counts(stats: dict[str, Any]) -> dict[str, float]:
    """Every numeric entry whose key contains "refus" in the ``semantic:`` sections."""
    out: dict[str, float] = {}
    for _, section in sections(stats):
        for key, value in flatten(section):
            if "refus" in key.lower() and isinstance(value, (int, float)):
                out[key] = out.get(key, 0) + value
    return out


def sections(tree: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(tree, dict):
        return []
    found = [(k, v) for k, v in tree.items() if k.startswith("semantic:") and isinstance(v, dict)]
    for key, value in tree.items():
        if not key.startswith("semantic:"):
            found += sections(value)
    return found


def flatten(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        name = f"{prefix}{key}"
        out += flatten(value, name + ".") if isinstance(value, dict) else [(name, value)]
    return out


# ---------------------------------------------------------------------------- exposure


def embed_all(embedder: CachedEmbedder, texts: Sequence[str], batch: int = 64) -> np.ndarray:
    """Unit vectors of ``texts`` (also warms the embedder's cache for the runs)."""
    rows = [embedder.embed(list(texts[i : i + batch])) for i in range(0, len(texts), batch)]
    return np.vstack(rows)


def exposure(stream: Sequence[sets.Prompt], vectors: np.ndarray) -> dict[str, list[float]]:
    """Per label, the cosine of each request to its nearest relevant earlier request (see the
    module docstring): ``<kind>/sibling``, ``<kind>/other``, ``paraphrase/same``."""
    sims = vectors @ vectors.T
    meanings = np.array([p.meaning for p in stream])
    families = np.array([p.template for p in stream])
    out: dict[str, list[float]] = defaultdict(list)
    for i, p in enumerate(stream):
        earlier = sims[i, :i]
        same = meanings[:i] == p.meaning
        if p.kind == sets.PARAPHRASE:
            out[f"{p.kind}/same"].append(float(earlier[same].max()))
            continue
        sibling = (families[:i] == p.template) & ~same
        if sibling.any():
            out[f"{p.kind}/sibling"].append(float(earlier[sibling].max()))
        if (~same).any():
            out[f"{p.kind}/other"].append(float(earlier[~same].max()))
    return out


def variant_pairs(part: str, seed: int, embedder: CachedEmbedder) -> dict[str, list[float]]:
    """Cosines of the pairs of a template's fills that differ in one slot, in one wording,
    by kind (and for negation and long preambles, by which slot differs)."""
    rendered = [
        (t, form, [t.render(f, form) for f in t.fills(seed)], t.fills(seed))
        for t in sets.templates(part)
        for form in range(len(t.forms))
    ]
    texts = sorted({text for _, _, texts, _ in rendered for text in texts})
    row_of = {text: i for i, text in enumerate(texts)}
    vectors = embed_all(embedder, texts)
    out: dict[str, list[float]] = defaultdict(list)
    for t, _, texts_, fills in rendered:
        block = vectors[[row_of[x] for x in texts_]]
        sims = block @ block.T
        for i, j in itertools.combinations(range(len(fills)), 2):
            label = pair_label(t, fills[i].parts, fills[j].parts)
            if label is not None:
                out[label].append(float(sims[i, j]))
    return out


def pair_label(t: sets.Template, a: Sequence[str], b: Sequence[str]) -> str | None:
    """What differs between two fills when it is one slot, else None."""
    diff = [x for x, y in zip(a, b, strict=True) if x != y]
    if len(diff) != 1:
        return None
    if diff[0].startswith("~"):
        return f"{t.kind} (polarity, opposite)"
    if t.kind == sets.LONG:
        return f"{t.kind} ({'question' if diff[0].startswith('q=') else 'first sentence'})"
    return f"{t.kind} (other slot)" if t.kind == sets.NEGATION else t.kind


# ---------------------------------------------------------------------------- report


def pct(n: int, d: int) -> str:
    return f"{100 * n / d:5.1f}%" if d else "    -"


def print_cosines(title: str, found: dict[str, list[float]]) -> None:
    t = BASELINE_THRESHOLD
    print(f"  {title}; share >= {t}:")
    print(f"    {'':<42}{'n':>6}{'>=':>8}{'median':>8}{'p10':>7}{'p90':>7}")
    for label in sorted(found):
        print(f"    {label:<42}{summary(found[label])}")


def summary(values: Iterable[float]) -> str:
    v = sorted(values)
    share = pct(sum(x >= BASELINE_THRESHOLD for x in v), len(v))
    p10, p90 = v[len(v) // 10], v[(9 * len(v)) // 10]
    return f"{len(v):>6}{share:>8}{statistics.median(v):>8.3f}{p10:>7.3f}{p90:>7.3f}"


def print_result(name: str, result: Result) -> None:
    print(f"  {name}: {result.policy}  ({result.seconds:.1f} s)")
    head = f"{'kind':<30}{'requests':>9}{'wrong':>7}{'wrong%':>8}{'cross':>7}"
    print(f"    {head}{'hittable':>10}{'served%':>9}")
    for label in ROW_ORDER:
        row = result.rows.get(label)
        if row is None:
            continue
        hit = f"{row.hittable:>10}{pct(row.served, row.hittable):>9}" if row.hittable else ""
        print(
            f"    {label:<30}{row.requests:>9}{row.wrong:>7}"
            f"{pct(row.wrong, row.requests):>8}{row.cross:>7}{hit}"
        )
    refusals = result.refusals or "none in the stats"
    print(
        f"    misses by refusal reason (per semantic lookup; probe and call each count): {refusals}"
    )


def print_examples(result: Result, limit: int) -> None:
    for kind, found in sorted(result.examples.items()):
        for e in found[:limit]:
            sim = "-" if e.similarity is None else f"{e.similarity:.3f}"
            print(f"    [{kind}] sim {sim}: {clip(e.query)!r}")
            print(f"        served for {clip(e.matched or '?')!r}  ({e.served})")


def clip(text: str, width: int = 110) -> str:
    """Long prompts as their first and last words (a preamble's question is at the end)."""
    text = " ".join(text.split())
    return text if len(text) <= width else f"{text[:35]} ... {text[-(width - 40) :]}"


# ---------------------------------------------------------------------------- main


def run_part(part: str, args: argparse.Namespace, embedder: CachedEmbedder) -> None:
    results = {c.name: Result() for c in CONFIGS}
    found: dict[str, list[float]] = defaultdict(list)
    for rep in range(args.repeat):
        stream = sets.streams(part, seed=args.seed + rep, size=args.size)
        vectors = embed_all(embedder, [p.text for p in stream])
        for label, values in exposure(stream, vectors).items():
            found[label] += values
        order = CONFIGS if rep % 2 == 0 else CONFIGS[::-1]
        for config in order:
            namespace = f"slot-guard-{part}-{config.name}-{rep}"
            results[config.name].add(run_stream(stream, config, embedder, namespace, args.examples))
    templates = len(sets.templates(part))
    requests = results[CONFIGS[0].name].rows["all"].requests
    print(f"\n== {part}: {templates} templates, {requests} requests ({args.repeat} streams) ==")
    print_cosines("stream exposure (cosine to the nearest earlier request)", found)
    if args.pairs:
        pairs = variant_pairs(part, args.seed, embedder)
        print_cosines("variant pairs (one slot changed, same wording)", pairs)
    for name, result in results.items():
        print_result(name, result)
        print_examples(result, args.examples)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("tune", "test", "both"), default="both")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=1500, help="requests per part and repetition")
    ap.add_argument("--repeat", type=int, default=1, help="repetitions (seeds seed, seed+1, ...)")
    ap.add_argument("--examples", type=int, default=3, help="wrong answers shown per kind")
    ap.add_argument("--embedder", choices=("onnx", "torch"), default="onnx")
    ap.add_argument(
        "--no-pairs", dest="pairs", action="store_false", help="skip the variant-pair cosines"
    )
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    sets.check(args.seed)
    start = time.perf_counter()
    embedder = make_embedder(args.embedder)
    print(f"embedder: {embedder.name}; baseline threshold {BASELINE_THRESHOLD}")
    for part in sets.PARTS if args.part == "both" else (args.part,):
        run_part(part, args, embedder)
    print(f"\ntotal {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
