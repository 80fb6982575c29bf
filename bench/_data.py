"""Reading the evaluation data (from ../shared/data at run time; never copied into the repo)."""

from __future__ import annotations

import json
from pathlib import Path


def load_texts(path: Path) -> tuple[list[str], list[str]]:
    """Distinct ``cached`` texts of a pairs file, and the ``query`` texts that are not among
    them (novel: a lookup of one misses the exact tier)."""
    cached: dict[str, None] = {}
    queries: dict[str, None] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                cached[row["cached"]] = None
                queries[row["query"]] = None
    return list(cached), [q for q in queries if q not in cached]
