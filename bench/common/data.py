"""The evaluation data the benchmarks read, and where it is.

The labelled QQP pairs are not in the repository: ``python -m bench.quality.build_qqp`` builds
them from their public source into ``bench/data/qqp/`` (git-ignored), and the synthetic request
log is built from those pairs by ``python -m bench.replay.build_log`` into ``bench/data/replay/``.
Every script that reads them takes a path, so your own files in the same format work as well.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data"

#: What ``python -m bench.quality.build_qqp`` writes (``--out`` names another folder).
QQP_DIR = DATA / "qqp"
QQP_DEV = QQP_DIR / "qqp_pairs_dev.jsonl"
QQP_TRAIN = QQP_DIR / "qqp_pairs_train.jsonl"
BUILD_QQP = "python -m bench.quality.build_qqp"

#: What ``python -m bench.replay.build_log`` writes: ``PREFIX.{input,output,truth}.jsonl``.
REPLAY_DIR = DATA / "replay"
REPLAY = REPLAY_DIR / "replay_dev"
BUILD_REPLAY = "python -m bench.replay.build_log"


def need(path: Path | str) -> Path:
    """``path`` if it exists, else exit with a message that says how to build the file."""
    path = Path(path)
    if path.exists():
        return path
    name = path.name
    if name.startswith("qqp_pairs"):
        how = f"the QQP pair files are built from their public source by `{BUILD_QQP}`"
        how += f" (into {QQP_DIR.relative_to(ROOT)}/)"
    elif name.startswith("replay"):
        how = f"the synthetic request log is built by `{BUILD_REPLAY}`"
        how += f" (into {REPLAY_DIR.relative_to(ROOT)}/, after `{BUILD_QQP}`)"
    else:
        how = "pass the path of an existing file"
    raise SystemExit(f"{path}: no such file; {how}, or pass your own file in the same format")


def need_replay(prefix: Path | str) -> str:
    """A replay log's prefix, once its ``.input.jsonl`` and ``.output.jsonl`` exist."""
    for part in ("input", "output"):
        need(f"{prefix}.{part}.jsonl")
    return str(prefix)


def load_texts(path: Path) -> tuple[list[str], list[str]]:
    """Distinct ``cached`` texts of a pairs file, and the ``query`` texts that are not among
    them (novel: a lookup of one misses the exact tier)."""
    cached: dict[str, None] = {}
    queries: dict[str, None] = {}
    with open(need(path), encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                cached[row["cached"]] = None
                queries[row["query"]] = None
    return list(cached), [q for q in queries if q not in cached]
