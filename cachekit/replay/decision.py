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
    from cachekit.replay.report import Outcome

__all__ = ["breakdown", "exact_only", "net_total", "wrong_hit_rows"]


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
) -> list[dict[str, Any]]:
    """Every wrong hit: the request, the request whose answer served it and that answer's id,
    how (exact or semantic) and at what similarity."""
    rows = []
    for rec, o, bad in zip(records, outcomes, wrong, strict=True):
        if not bad or o.served_by is None:
            continue
        rows.append(
            {
                "custom_id": rec.custom_id,
                "served_custom_id": records[o.served_by].custom_id,
                "served_answer_id": answer_ids[o.served_by],
                "status": o.status,
                "similarity": o.similarity,
            }
        )
    return rows


def net_total(saved_on_correct: float, wrong_hits: int, wrong_cost: float) -> float:
    """Dollars saved by right hits, less ``wrong_cost`` for each wrong one: negative when wrong
    answers cost more than the hits save."""
    return saved_on_correct - wrong_hits * wrong_cost
