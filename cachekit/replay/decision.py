"""What turns a replay report into a decision: the exact-only baseline beside it, breakdowns per
tenant and per model, every wrong hit listed, and the net savings once a wrong answer has a cost
(docs/replay.md, "Deciding")."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachekit.replay.logs import LogRecord
    from cachekit.replay.report import Outcome, Report

__all__ = [
    "SWEEP_STEP",
    "breakdown",
    "default_sweep",
    "exact_only",
    "net_total",
    "recommend",
    "wrong_hit_rows",
]

#: The default sweep's spacing: 5 points, 2 each side of the setting.
SWEEP_STEP = 0.02


def exact_only(outcomes: Sequence[Outcome], dollars: dict[str, float | None]) -> dict[str, Any]:
    """The baseline: the same log through the same cache with semantic matching off (its own
    pass: a request a semantic hit answered would have been a miss, and stored)."""
    hits = sum(o.status != "miss" for o in outcomes)
    known = [v for v in dollars.values() if v is not None]
    return {
        "hits": hits,
        "hit_rate": hits / len(outcomes) if outcomes else 0.0,
        "dollars_saved": math.fsum(known),
    }


def breakdown(
    outcomes: Sequence[Outcome],
    tenants: Sequence[str | None],
    models: Sequence[str],
    wrong: Sequence[bool],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per tenant and per model: ``requests``, ``hit_rate`` and ``wrong_hits`` (None without a
    truth file: ``wrong`` is then all False and says nothing)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, values in (("tenant", tenants), ("model", models)):
        rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for o, value, bad in zip(outcomes, values, wrong, strict=True):
            row = rows["(none)" if value is None else str(value)]
            row[0] += 1
            row[1] += o.status != "miss"
            row[2] += bad
        out[name] = {
            v: {"requests": n, "hit_rate": h / n if n else 0.0, "wrong_hits": w}
            for v, (n, h, w) in sorted(rows.items())
        }
    return out


def wrong_hit_rows(
    records: Sequence[LogRecord],
    outcomes: Sequence[Outcome],
    wrong: Sequence[bool],
    answer_ids: Sequence[str | None],
    rules: Sequence[str | None],
) -> list[dict[str, Any]]:
    """Every wrong hit: the request, the request whose answer served it and that answer's id,
    how (exact or semantic), at what similarity, and the rule that served it below the
    threshold (or None)."""
    rows = []
    for rec, o, bad, rule in zip(records, outcomes, wrong, rules, strict=True):
        if not bad or o.served_by is None:
            continue
        rows.append(
            {
                "custom_id": rec.custom_id,
                "served_custom_id": records[o.served_by].custom_id,
                "served_answer_id": answer_ids[o.served_by],
                "status": o.status,
                "similarity": o.similarity,
                "rule": rule,
            }
        )
    return rows


def net_total(saved_on_correct: float, wrong_hits: int, wrong_cost: float) -> float:
    """Dollars saved by right hits, less ``wrong_cost`` for each wrong one: negative when wrong
    answers cost more than the hits save."""
    return saved_on_correct - wrong_hits * wrong_cost


def default_sweep(setting: float) -> list[float]:
    """The threshold policy's default sweep: ``setting`` and two points each side,
    :data:`SWEEP_STEP` apart, those within (0, 1]."""
    points = [round(setting + k * SWEEP_STEP, 4) for k in (-2, -1, 0, 1, 2)]
    return [p for p in points if 0 < p <= 1]


def recommend(points: Sequence[Report], max_wrong_rate: float, judged: bool) -> dict[str, Any]:
    """The setting to use: of the sweep's points, the highest hit rate whose wrong hits per
    request are at most ``max_wrong_rate`` (ties: the higher setting). Needs a truth file and a
    sweep; otherwise ``setting`` is None and ``why`` says what is missing."""
    rule = f"the highest hit rate with wrong hits at most {max_wrong_rate:g} per request"
    if not judged:
        return {"setting": None, "why": "needs --truth: wrong hits decide it", "rule": rule}
    if not points:
        return {"setting": None, "why": "needs a sweep (not --no-sweep)", "rule": rule}
    ok = [p for p in points if (p.wrong_hit_rate or 0.0) <= max_wrong_rate]
    if not ok:
        best = min(points, key=lambda p: (p.wrong_hit_rate or 0.0, -(p.threshold or 0.0)))
        why = f"no point of the sweep meets the bound; {best.threshold:g} has the fewest wrong hits"
        return {**_point(best), "why": why, "rule": rule, "meets_bound": False}
    best = max(ok, key=lambda p: (p.hit_rate, p.threshold or 0.0))
    return {**_point(best), "why": None, "rule": rule, "meets_bound": True}


def _point(p: Report) -> dict[str, Any]:
    net = p.to_dict(with_sweep=False).get("net_dollars_saved", {}).get("total")
    return {
        "setting": p.threshold,
        "hit_rate": p.hit_rate,
        "wrong_hit_rate": p.wrong_hit_rate,
        "net_dollars_saved": net,
    }
