"""Labelled pairs from a replay log's ground truth, for ``cachekit tune`` (docs/labels.md).

A request log with a truth file (:mod:`cachekit.replay.truth`) already says which requests share
an answer. :func:`truth_pairs` turns it into ``(query, cached, duplicate)`` pairs, with each
request's text taken as replay takes it (:func:`~cachekit.replay.runner.prepare_log`: the
semantic text of ``cachekit serve``'s rules, tenant from ``tenant_field``):

* a ``paraphrase`` with the text of its ``equivalent_to`` request: a duplicate;
* a ``near_miss`` with the earlier request it is near. The truth file does not name that request
  (``equivalent_to`` is null for a near miss), so it is the **nearest earlier request of the
  same tenant and model** by cosine under the replay's embedder (the default model, as
  ``cachekit replay`` uses, unless one is given); its label is the truth's (whether the two share
  an answer: for a near miss, no).

``new`` and ``repeat`` requests give no pair, and no pair of identical texts is kept (an exact
hit, nothing to learn). What is left out is counted by reason in :attr:`TruthPairs.skipped`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cachekit.llm import LLMCacheConfig
from cachekit.replay.logs import read_log
from cachekit.replay.runner import Prepared, endpoint_ok, prepare_log
from cachekit.replay.truth import Truth, read_truth
from cachekit.replay.vectors import embed_all

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder

__all__ = ["TruthPairs", "truth_pairs"]

Pair = tuple[str, str, bool]


@dataclass
class TruthPairs:
    """The pairs, in log order, how many came from each kind, what was left out and why, and
    the embedder that picked the near misses' requests (None when none was needed)."""

    pairs: list[Pair] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    embedder: str | None = None


def truth_pairs(
    input_path: str | Path,
    outputs_path: str | Path | None,
    truth_path: str | Path,
    *,
    tenant_field: str = "metadata.tenant",
    embedder: Embedder | None = None,
    config: LLMCacheConfig | None = None,
) -> TruthPairs:
    """Labelled pairs from a log and its truth file (see the module docstring). Raises
    ``OSError``/``ValueError`` on files that cannot be read (as ``cachekit replay`` does)."""
    parsed = read_log(input_path, outputs_path, endpoint_ok=endpoint_ok, tenant_field=tenant_field)
    truth = read_truth(truth_path, parsed.skipped)
    prep = prepare_log(parsed, config or LLMCacheConfig())
    out = TruthPairs()
    for reason, n in prep.skipped.counts.items():
        out.skipped[f"log_{reason}"] += n
    at = {rec.custom_id: i for i, rec in enumerate(prep.records)}
    near: list[int] = []
    for i, rec in enumerate(prep.records):
        line = truth.lines.get(rec.custom_id)
        if line is None or line.kind not in ("paraphrase", "near_miss"):
            continue
        if line.kind == "near_miss":
            near.append(i)
            continue
        j = at.get(line.equivalent_to or "")
        if j is None:
            out.skipped["paraphrase_without_equivalent"] += 1
            continue
        _add(out, "paraphrase", prep.texts[i], prep.texts[j], True)
    if near:
        _near_pairs(out, prep, truth, near, embedder)
    return out


def _add(out: TruthPairs, kind: str, query: str, cached: str, duplicate: bool) -> None:
    if not query or not cached:
        out.skipped[f"{kind}_without_semantic_text"] += 1
    elif query == cached:
        out.skipped[f"{kind}_identical_text"] += 1
    else:
        out.pairs.append((query, cached, duplicate))
        out.kinds[kind] += 1


def _near_pairs(
    out: TruthPairs, prep: Prepared, truth: Truth, near: Sequence[int], embedder: Embedder | None
) -> None:
    """Each near miss with the nearest earlier request of its tenant and model."""
    if embedder is None:
        from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    texts = list(dict.fromkeys(t for t in prep.texts if t))
    vectors, _ = embed_all(texts, embedder)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    row = {t: k for k, t in enumerate(texts)}
    out.embedder = embedder.name
    for i in near:
        j = _nearest_earlier(prep, i, row, vectors)
        if j is None:
            out.skipped["near_miss_without_earlier_request"] += 1
            continue
        same = truth.same_answer(prep.records[i].custom_id, prep.records[j].custom_id)
        if same is None:
            out.skipped["near_miss_nearest_without_truth"] += 1
            continue
        _add(out, "near_miss", prep.texts[i], prep.texts[j], same)


def _nearest_earlier(
    prep: Prepared, i: int, row: dict[str, int], vectors: np.ndarray
) -> int | None:
    """The earlier request of request ``i``'s tenant and model whose text is nearest to its
    own (another text: an identical one is a repeat), or None."""
    text = prep.texts[i]
    if not text:
        return None
    req = prep.requests[i]
    earlier = [
        j
        for j in range(i)
        if prep.texts[j]
        and prep.texts[j] != text
        and prep.requests[j].tenant == req.tenant
        and prep.requests[j].model == req.model
    ]
    if not earlier:
        return None
    sims = vectors[[row[prep.texts[j]] for j in earlier]] @ vectors[row[text]]
    return earlier[int(np.argmax(sims))]
