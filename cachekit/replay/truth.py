"""Ground truth for a replay: which requests share an answer.

One JSON object a line: ``custom_id``, ``kind`` (``new``, ``repeat``, ``paraphrase``,
``near_miss``), ``answer`` (an id naming the answer), ``equivalent_to`` (the earliest request
whose answer serves this one, or null). A hit is correct when the entry that served it was
stored by a request with the same ``answer``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cachekit.replay.logs import MISSING_FIELD, NOT_JSON, Skipped

__all__ = ["KINDS", "Truth", "TruthLine", "read_truth"]

KINDS = ("new", "repeat", "paraphrase", "near_miss")


@dataclass(frozen=True, slots=True)
class TruthLine:
    kind: str
    answer: str
    #: The earliest request whose answer serves this one (a ``custom_id``), or None.
    equivalent_to: str | None = None


@dataclass
class Truth:
    lines: dict[str, TruthLine]

    def same_answer(self, request_id: str, served_by: str) -> bool | None:
        """Whether the entry stored by ``served_by`` answers ``request_id``; None if unknown."""
        a, b = self.lines.get(request_id), self.lines.get(served_by)
        if a is None or b is None:
            return None
        return a.answer == b.answer


def read_truth(path: str | Path, skipped: Skipped) -> Truth:
    """Read a truth file; bad lines are counted in ``skipped`` under ``truth_*`` reasons."""
    p = Path(path)
    lines: dict[str, TruthLine] = {}
    with p.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            where = f"{p.name}:{number}"
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                skipped.add(f"truth_{NOT_JSON}", where)
                continue
            cid = obj.get("custom_id") if isinstance(obj, dict) else None
            answer = obj.get("answer") if isinstance(obj, dict) else None
            if not isinstance(cid, str) or answer is None:
                skipped.add(f"truth_{MISSING_FIELD}", where)
                continue
            kind = obj.get("kind")
            eq = obj.get("equivalent_to")
            lines[cid] = TruthLine(
                kind if isinstance(kind, str) else "",
                str(answer),
                eq if isinstance(eq, str) else None,
            )
    return Truth(lines)
