"""The replay report: what the cache would have done, and its JSON contract.

Every field of :meth:`Report.to_dict` is documented in ``docs/replay.md``; the field set is a
contract (scripts read it), so add to it only with the docs.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cachekit.llm.prices import PriceTable
from cachekit.replay.capacity import Capacity, capacity_report
from cachekit.replay.decision import breakdown, net_total, wrong_hit_rows
from cachekit.replay.logs import LogRecord, Skipped
from cachekit.replay.truth import Truth
from cachekit.semantic.policy.hit_policy import DEFAULT_NUMBER_BONUS
from cachekit.semantic.policy.slots import refusal_kind

__all__ = [
    "EXACT",
    "MISS",
    "SEMANTIC",
    "NearMiss",
    "Outcome",
    "Report",
    "WrongHit",
    "build_report",
    "money_by_model",
    "pick_near_sample",
]

EXACT, SEMANTIC, MISS = "exact", "semantic", "miss"
WRONG_SAMPLE_SIZE = 10
#: The refused near misses listed: as many as the wrong hits, so neither table drowns the other.
NEAR_SAMPLE_SIZE = WRONG_SAMPLE_SIZE


@dataclass(slots=True)
class Outcome:
    """What the cache did with one request."""

    status: str  # EXACT, SEMANTIC or MISS (a lookup error is a miss, as in production)
    overhead_ms: float  # the cache's own time for this request (lookup, and store on a miss)
    served_by: int | None = None  # index of the request whose stored entry answered
    #: The cosine of the entry that answered (a semantic hit), or of the nearest refused one (a
    #: miss whose scope held a live entry).
    similarity: float | None = None
    reason: str | None = None  # on a miss: why the nearest entry was not served
    nearest_by: int | None = None  # on a miss: index of the request that stored that entry


@dataclass(frozen=True, slots=True)
class WrongHit:
    """A hit the truth file says was wrong: the request, and the one whose entry served it."""

    custom_id: str
    text: str
    served_custom_id: str
    served_text: str
    status: str
    similarity: float | None
    #: The rule that let a semantic hit through below the threshold (the number bonus), or None.
    rule: str | None = None


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A miss whose nearest entry was refused: the request, that entry's request, and why.

    ``verdict`` (with a truth file) says whether serving the entry would have been right: True is
    a paraphrase the cache missed (a saving lost), False a wrong hit it prevented; None when
    either request has no truth line, or there is no truth file."""

    custom_id: str
    text: str
    nearest_custom_id: str
    nearest_text: str
    similarity: float
    reason: str
    verdict: bool | None = None


@dataclass
class Report:
    requests: int
    exact_hits: int
    semantic_hits: int
    misses: int
    prompt_tokens_saved: int
    completion_tokens_saved: int
    dollars_by_model: dict[str, float | None]
    prices: str
    latency_saved_s: float
    overhead_ms: dict[str, float | None]
    skipped: Skipped
    capacity: Capacity
    policy: str
    threshold: float | None = None
    correct_hits: int | None = None
    wrong_hits: int | None = None
    semantic_precision: float | None = None
    net_dollars_by_model: dict[str, float | None] | None = None
    wrong_sample: list[WrongHit] = field(default_factory=list)
    #: Misses by the kind of their refusal (``cachekit.semantic.policy.slots.refusal_kind``).
    refusals: dict[str, int] = field(default_factory=dict)
    near_sample: list[NearMiss] = field(default_factory=list)
    sweep: list[Report] = field(default_factory=list)
    #: The one-text embedding time included in ``overhead_ms`` where a request embeds.
    embed_ms: float | None = None
    #: The same log with semantic matching off (:func:`cachekit.replay.decision.exact_only`).
    exact_only: dict[str, Any] | None = None
    #: Per tenant and per model (:func:`cachekit.replay.decision.breakdown`).
    breakdown: dict[str, Any] = field(default_factory=dict)
    #: Every wrong hit (with a truth file), and what one costs (``--wrong-cost``, dollars).
    wrong_hits_list: list[dict[str, Any]] = field(default_factory=list)
    wrong_cost: float = 0.0
    #: Semantic hits served below the policy's threshold, and the rule that served them.
    below_threshold: int = 0
    #: The setting to use (:func:`cachekit.replay.decision.recommend`), on the headline only.
    recommended: dict[str, Any] | None = None

    @property
    def hits(self) -> int:
        return self.exact_hits + self.semantic_hits

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def judged(self) -> bool:
        return self.correct_hits is not None

    @property
    def wrong_hit_rate(self) -> float | None:
        """Wrong hits per request (the x axis of the sweep curves)."""
        if self.wrong_hits is None or not self.requests:
            return None
        return self.wrong_hits / self.requests

    def to_dict(self, *, with_sweep: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests,
            "hits": {"exact": self.exact_hits, "semantic": self.semantic_hits},
            "misses": self.misses,
            "hit_rate": self.hit_rate,
            "tokens_saved": {
                "prompt": self.prompt_tokens_saved,
                "completion": self.completion_tokens_saved,
            },
            "dollars_saved": _dollars(self.dollars_by_model, self.prices),
            "latency_saved_s": self.latency_saved_s,
            "overhead_ms": dict(self.overhead_ms),
            "skipped": dict(self.skipped.counts),
            "capacity": self.capacity.to_dict(),
            "refusals": dict(sorted(self.refusals.items())),
            "near_sample": [dataclasses.asdict(n) for n in self.near_sample],
            "breakdown": self.breakdown,
            "below_threshold_hits": {
                "count": self.below_threshold,
                "rule": below_rule(self.policy) if self.below_threshold else None,
            },
        }
        if self.exact_only is not None:
            out["exact_only"] = self.exact_only
        if self.recommended is not None:
            out["recommended"] = self.recommended
        if self.judged:
            out["correct_hits"] = self.correct_hits
            out["wrong_hits"] = self.wrong_hits
            out["semantic_precision"] = self.semantic_precision
            net = _dollars(self.net_dollars_by_model or {}, self.prices)
            net["on_right_hits"] = net["total"]
            net["wrong_cost"] = self.wrong_cost
            net["total"] = net_total(net["total"], self.wrong_hits or 0, self.wrong_cost)
            out["net_dollars_saved"] = net
            out["wrong_sample"] = [dataclasses.asdict(w) for w in self.wrong_sample]
            out["wrong_hits_list"] = self.wrong_hits_list
        if self.threshold is not None and not with_sweep:
            out["threshold"] = self.threshold
        if with_sweep and self.sweep:
            out["sweep"] = [point.to_dict(with_sweep=False) for point in self.sweep]
        return out


def _dollars(by_model: dict[str, float | None], prices: str) -> dict[str, Any]:
    known = [v for v in by_model.values() if v is not None]
    return {
        "total": math.fsum(known),
        "by_model": dict(sorted(by_model.items())),
        "prices": prices,
        "unpriced_models": sorted(m for m, v in by_model.items() if v is None),
    }


@dataclass(frozen=True, slots=True)
class Usage:
    prompt: int
    completion: int


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    arr = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99))}


def threshold_of(policy: str) -> float | None:
    """The threshold in a report's policy name (``threshold:0.9``), or None for other policies."""
    name, _, value = policy.partition(":")
    try:
        return float(value) if name == "threshold" and value else None
    except ValueError:
        return None


def below_rule(policy: str) -> str | None:
    """Why the threshold policy serves a hit below its threshold: the number bonus."""
    t = threshold_of(policy)
    if t is None:
        return None
    return (
        f"number bonus: the texts state the same numbers, so the bar is "
        f"{t - DEFAULT_NUMBER_BONUS:g} instead of {t:g}"
    )


def rule_of(policy: str, out: Outcome) -> str | None:
    """The rule that served ``out`` below its policy's threshold, or None."""
    t, sim = threshold_of(policy), out.similarity
    if out.status != SEMANTIC or sim is None or t is None or sim >= t - 1e-9:
        return None
    return below_rule(policy)


def _judge(
    records: Sequence[LogRecord],
    outcomes: Sequence[Outcome],
    texts: Sequence[str],
    truth: Truth,
    policy: str = "",
) -> tuple[int, int, float | None, list[bool], list[WrongHit], list[bool]]:
    """``(correct, wrong, semantic precision, correct flags, wrong sample, wrong flags)``; hits
    with no truth line on either side are left unjudged (neither correct nor wrong)."""
    correct = wrong = sem_correct = sem_judged = 0
    flags = [False] * len(records)
    bad = [False] * len(records)
    sample: list[WrongHit] = []
    for i, (rec, out) in enumerate(zip(records, outcomes, strict=True)):
        if out.served_by is None or out.status == MISS:
            continue
        src = records[out.served_by]
        verdict = truth.same_answer(rec.custom_id, src.custom_id)
        if verdict is None:
            continue
        if out.status == SEMANTIC:
            sem_judged += 1
            sem_correct += verdict
        if verdict:
            correct += 1
            flags[i] = True
            continue
        wrong += 1
        bad[i] = True
        if len(sample) < WRONG_SAMPLE_SIZE:
            sample.append(
                WrongHit(
                    rec.custom_id,
                    texts[i],
                    src.custom_id,
                    texts[out.served_by],
                    out.status,
                    out.similarity,
                    rule_of(policy, out),
                )
            )
    precision = sem_correct / sem_judged if sem_judged else None
    return correct, wrong, precision, flags, sample, bad


def _refusals(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """Misses by the kind of their refusal: which rule (a slot, the threshold, the policy) costs
    the hits, so a user knows what to look at first."""
    kinds = Counter(refusal_kind(o.reason) for o in outcomes if o.status == MISS and o.reason)
    return dict(sorted(kinds.items()))


def _near_misses(
    records: Sequence[LogRecord],
    outcomes: Sequence[Outcome],
    texts: Sequence[str],
    truth: Truth | None,
) -> list[NearMiss]:
    """Every miss whose nearest entry was refused, judged where the truth file can."""
    found: list[NearMiss] = []
    for rec, out, text in zip(records, outcomes, texts, strict=True):
        if out.reason is None or out.nearest_by is None or out.similarity is None:
            continue  # a hit, or a miss with nothing near in its scope
        src = records[out.nearest_by]
        verdict = truth.same_answer(rec.custom_id, src.custom_id) if truth else None
        found.append(
            NearMiss(
                rec.custom_id,
                text,
                src.custom_id,
                texts[out.nearest_by],
                out.similarity,
                out.reason,
                verdict,
            )
        )
    return found


def _allot(sizes: Sequence[int], total: int) -> list[int]:
    """How many to take from each group: ``total`` shared out one at a time, in turn, so every
    group that has some is shown and a group with fewer leaves its share to the others."""
    take = [0] * len(sizes)
    left = total
    while left > 0 and any(t < n for t, n in zip(take, sizes, strict=True)):
        for k, n in enumerate(sizes):
            if left > 0 and take[k] < n:
                take[k] += 1
                left -= 1
    return take


def pick_near_sample(
    candidates: Sequence[NearMiss], *, judged: bool, size: int = NEAR_SAMPLE_SIZE
) -> list[NearMiss]:
    """The refused near misses worth reading, most similar first within each group.

    With a truth file, the missed paraphrases (verdict True: the refusal cost a right hit) come
    first, then the prevented wrong hits (verdict False), each group given an even share of
    ``size`` so neither hides the other; unjudged ones only fill what is left. Without one, the
    most similar (the refusals a threshold alone would have served)."""
    by_sim = sorted(candidates, key=lambda n: -n.similarity)
    if not judged:
        return by_sim[:size]
    groups = [[n for n in by_sim if n.verdict is v] for v in (True, False)]
    take = _allot([len(g) for g in groups], size)
    chosen = [n for g, k in zip(groups, take, strict=True) for n in g[:k]]
    rest = [n for n in by_sim if n.verdict is None]
    return chosen + rest[: size - len(chosen)]


def build_report(
    records: Sequence[LogRecord],
    outcomes: Sequence[Outcome],
    *,
    usage: Sequence[Usage],
    models: Sequence[str],
    texts: Sequence[str],
    prices: PriceTable,
    prices_label: str,
    skipped: Skipped,
    policy: str,
    truth: Truth | None = None,
    rate: float | None = None,
    rate_source: str | None = None,
    upstream_concurrency: int | None = None,
    threshold: float | None = None,
    tenants: Sequence[str | None] | None = None,
    answer_ids: Sequence[str | None] | None = None,
    wrong_cost: float = 0.0,
) -> Report:
    """Aggregate per-request outcomes into a :class:`Report`."""
    hit = [o.status != MISS for o in outcomes]
    dollars = money_by_model(hit, usage, models, prices)
    report = Report(
        requests=len(records),
        exact_hits=sum(o.status == EXACT for o in outcomes),
        semantic_hits=sum(o.status == SEMANTIC for o in outcomes),
        misses=sum(o.status == MISS for o in outcomes),
        prompt_tokens_saved=sum(u.prompt for u, h in zip(usage, hit, strict=True) if h),
        completion_tokens_saved=sum(u.completion for u, h in zip(usage, hit, strict=True) if h),
        dollars_by_model=dollars,
        prices=prices_label,
        latency_saved_s=math.fsum(
            r.latency_ms
            for r, h in zip(records, hit, strict=True)
            if h and r.latency_ms is not None
        )
        / 1000.0,
        overhead_ms=_percentiles([o.overhead_ms for o in outcomes]),
        skipped=skipped,
        capacity=capacity_report(
            latency_ms=[r.latency_ms for r in records],
            hit=hit,
            overhead_ms=[o.overhead_ms for o in outcomes],
            rate=rate,
            rate_source=rate_source,
            upstream_concurrency=upstream_concurrency,
        ),
        policy=policy,
        threshold=threshold,
        refusals=_refusals(outcomes),
        near_sample=pick_near_sample(
            _near_misses(records, outcomes, texts, truth), judged=truth is not None
        ),
    )
    bad = [False] * len(records)
    rules = [rule_of(policy, o) for o in outcomes]
    if truth is not None:
        correct, wrong, precision, flags, sample, bad = _judge(
            records, outcomes, texts, truth, policy
        )
        report.correct_hits, report.wrong_hits = correct, wrong
        report.semantic_precision = precision
        report.net_dollars_by_model = money_by_model(flags, usage, models, prices)
        report.wrong_sample = sample
        ids = answer_ids if answer_ids is not None else [None] * len(records)
        report.wrong_hits_list = wrong_hit_rows(records, outcomes, bad, ids, rules)
    report.wrong_cost = wrong_cost
    report.below_threshold = sum(r is not None for r in rules)
    who = tenants if tenants is not None else [r.tenant for r in records]
    report.breakdown = breakdown(outcomes, who, models, bad)
    return report


def money_by_model(
    counted: Sequence[bool], usage: Sequence[Usage], models: Sequence[str], prices: PriceTable
) -> dict[str, float | None]:
    """Dollars per model over the requests flagged in ``counted``; None for a model with no
    price (its tokens still count)."""
    out: dict[str, float | None] = {}
    for flag, u, model in zip(counted, usage, models, strict=True):
        if model not in out:
            out[model] = 0.0 if prices.price(model) is not None else None
        if flag:
            usage_ = {"prompt_tokens": u.prompt, "completion_tokens": u.completion}
            cost = prices.cost(model, usage_)
            if cost is not None:
                out[model] = (out[model] or 0.0) + cost
    return out
