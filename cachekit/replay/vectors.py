"""Embedding a whole log once: every distinct text in large batches, then served from a table.

Replaying a log through a cache embeds each request's text; doing it request by request would
run the model at its one-text speed, and a threshold sweep would do it once per point. Instead
:func:`embed_all` encodes every distinct text up front in large batches (the embedder's best
throughput) and :class:`PrecomputedEmbedder` hands the vectors to each replayed cache through
the public ``embedder=`` hook, so the cache code under test is the production code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder

__all__ = ["EMBED_CHUNK", "PrecomputedEmbedder", "embed_all", "single_text_ms"]

#: Texts per call to the embedder: large enough to reach its batched ceiling, small enough to
#: report progress and bound the memory of one call.
EMBED_CHUNK = 1024


class PrecomputedEmbedder:
    """An :class:`~cachekit._core.protocols.Embedder` answering from vectors computed in advance.

    It carries the real embedder's ``name`` and ``dim``, so entries it makes are what the real
    one would make. A text not in the table (none, in a replay) is embedded by ``fallback`` and
    counted in ``fallbacks``.
    """

    def __init__(
        self,
        texts: Sequence[str],
        vectors: np.ndarray,
        *,
        name: str,
        fallback: Embedder | None = None,
    ) -> None:
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"{len(texts)} texts but vectors of shape {vectors.shape}")
        self._rows = {t: i for i, t in enumerate(texts)}
        self._vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._name = name
        self._fallback = fallback
        self.fallbacks = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return int(self._vectors.shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [self._rows.get(t, -1) for t in texts]
        if -1 not in rows:
            return self._vectors[rows]
        if self._fallback is None:
            missing = texts[rows.index(-1)]
            raise KeyError(f"text not embedded in advance: {missing[:80]!r}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing_at = [i for i, r in enumerate(rows) if r < 0]
        out[missing_at] = self._fallback.embed([texts[i] for i in missing_at])
        self.fallbacks += len(missing_at)
        known = [i for i, r in enumerate(rows) if r >= 0]
        out[known] = self._vectors[[rows[i] for i in known]]
        return out


def embed_all(
    texts: Sequence[str],
    embedder: Embedder,
    *,
    chunk: int = EMBED_CHUNK,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, float]:
    """``(vectors, seconds)``: every text embedded, in calls of ``chunk`` texts. The memory held
    is the result, ``len(texts) * dim * 4`` bytes."""
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    t0 = time.perf_counter()
    for start in range(0, len(texts), chunk):
        part = texts[start : start + chunk]
        out[start : start + len(part)] = embedder.embed(part)
        if progress is not None:
            progress(len(part))
    return out, time.perf_counter() - t0


def single_text_ms(texts: Sequence[str], embedder: Embedder, *, samples: int = 16) -> float:
    """Median milliseconds to embed one text alone (what a lone production lookup pays), over up
    to ``samples`` texts spread across ``texts``."""
    if not texts:
        return 0.0
    step = max(1, len(texts) // samples)
    picks = list(texts[::step])[:samples]
    embedder.embed(picks[:1])  # first call may load or warm the model: not a lookup's cost
    times = []
    for text in picks:
        t0 = time.perf_counter()
        embedder.embed([text])
        times.append((time.perf_counter() - t0) * 1000.0)
    return float(np.median(times))
