"""What a semantic tier counts, and the rules of counting: the decorator reports what each call
found (``count_*``); the tier records its own events (evictions, expirations, errors) and
timings. A probe (``f.lookup``) is counted apart from calls, never as a hit."""

from __future__ import annotations

from collections import deque
from typing import Any

from cachekit._engine.telemetry import LatencyHistogram

__all__ = ["SIMILARITY_SAMPLES", "TierCounters"]

#: Hit similarities kept for the stats' median (a sliding window).
SIMILARITY_SAMPLES = 10_000


def ms(h: LatencyHistogram, q: float) -> float | None:
    """Quantile ``q`` of ``h`` in milliseconds (None when empty)."""
    v = h.percentile(q)
    return None if v is None else v * 1e3


class TierCounters:
    """The counters of :class:`~cachekit.semantic.tier.SemanticTier` (its base class)."""

    def __init__(self) -> None:
        self.lookups = 0  # of calls; probes (``f.lookup``) are counted apart
        self.probes = 0
        self.probe_hits = 0
        self.exact_hits = 0
        self.semantic_hits = 0
        self.misses = 0
        self.evictions = 0
        self.too_large = 0  # entries over max_bytes // MAX_ENTRY_SHARE, not held
        self.expirations = 0
        self.errors = 0
        self.embed_time = LatencyHistogram()
        #: Seconds of the first embedding call, which loads the model; None until it ran.
        self.model_load_s: float | None = None
        self.search_time = LatencyHistogram()
        self._similarities: deque[float] = deque(maxlen=SIMILARITY_SAMPLES)
        self._min_similarity: float | None = None

    def count_lookup(self, probe: bool) -> None:
        if probe:
            self.probes += 1
        else:
            self.lookups += 1

    def count_exact_hit(self, probe: bool) -> None:
        if probe:
            self.probe_hits += 1
        else:
            self.exact_hits += 1

    def count_semantic_hit(self, similarity: float, probe: bool) -> None:
        if probe:
            self.probe_hits += 1
            return
        self.semantic_hits += 1
        self.record_hit(similarity)

    def count_miss(self, probe: bool) -> None:
        if not probe:
            self.misses += 1

    def count_error(self) -> None:
        self.errors += 1

    def record_hit(self, similarity: float) -> None:
        self._similarities.append(similarity)
        if self._min_similarity is None or similarity < self._min_similarity:
            self._min_similarity = similarity

    def counter_stats(self) -> dict[str, Any]:
        """The counters' part of the tier's ``stats()``."""
        lookups = self.lookups
        sims = sorted(self._similarities)
        return {
            "lookups": lookups,
            "exact_hits": self.exact_hits,
            "semantic_hits": self.semantic_hits,
            "misses": self.misses,
            "hit_rate": (self.exact_hits + self.semantic_hits) / lookups if lookups else 0.0,
            "probes": self.probes,
            "probe_hits": self.probe_hits,
            "embed_p50_ms": ms(self.embed_time, 0.5),
            "embed_p99_ms": ms(self.embed_time, 0.99),
            "model_load_ms": None if self.model_load_s is None else self.model_load_s * 1e3,
            "search_p50_ms": ms(self.search_time, 0.5),
            "search_p99_ms": ms(self.search_time, 0.99),
            "hit_similarity_p50": sims[len(sims) // 2] if sims else None,
            "hit_similarity_min": self._min_similarity,
            "evictions": self.evictions,
            "too_large": self.too_large,
            "expirations": self.expirations,
            "errors": self.errors,
        }
