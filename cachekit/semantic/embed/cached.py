"""An exact-text cache of embeddings in front of any :class:`~cachekit._core.protocols.Embedder`
(:class:`CachedEmbedder`), bounded in entries and bytes, and the argument check every embedder
shares (:func:`validate_texts`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from cachetools import LRUCache

from cachekit._core.protocols import Embedder

if TYPE_CHECKING:
    from cachekit._core.protocols import FloatMatrix

__all__ = ["CachedEmbedder", "validate_texts"]


def validate_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, or TypeError: a bare str is itself a Sequence[str], and embedding it
    character by character is never meant."""
    if type(texts) is not list and (
        isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence)
    ):
        raise TypeError(f"texts must be a sequence of str, got {type(texts).__name__}")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be str, got {type(text).__name__}")
    return items


#: Bytes counted per cached embedding besides its text and vector (the LRU's links, the tuple).
_CACHED_OVERHEAD = 200


def _held_bytes(item: tuple[np.ndarray, int]) -> int:
    return item[1]


class CachedEmbedder:
    """An exact-text LRU of embeddings in front of ``inner``.

    A text is encoded at most once while it stays cached: misses of one call are embedded in a
    single batch, and a text already being embedded by another thread is waited for rather than
    encoded again. ``hits`` counts texts served without calling ``inner`` (including repeats
    within one batch); ``misses`` counts texts passed to ``inner``.

    The cache holds read-only copies of its own; what :meth:`embed` returns is the caller's to
    change. When every text of a call is a distinct miss, that is the inner embedder's result
    itself (as float32), with no further copy.
    """

    def __init__(
        self, inner: Embedder, max_entries: int = 10_000, max_bytes: int = 64 * 2**20
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(
                f"max_entries and max_bytes must be >= 1, got {max_entries}, {max_bytes}"
            )
        self.inner = inner
        self.max_entries = max_entries
        # Values are (vector, bytes held: the text as Python holds it and the vector), so the
        # LRU is bounded in bytes; a text over a sixteenth of them is embedded but not kept.
        self._cache: LRUCache[str, tuple[np.ndarray, int]] = LRUCache(
            maxsize=max_bytes, getsizeof=_held_bytes
        )
        self._max_kept = max_bytes // 16
        # Texts being embedded by some call; callers wanting one wait on `_landed` (counted in
        # `_waiters`, so a call nobody waits for notifies nobody).
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._landed = threading.Condition(self._lock)
        self._waiters = 0
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def fingerprint(self) -> str:
        """The inner embedder's fingerprint (``name|dim`` when it has none of its own)."""
        fingerprint = getattr(self.inner, "fingerprint", None)
        if isinstance(fingerprint, str) and fingerprint:
            return fingerprint
        return f"{self.inner.name}|{self.inner.dim}"

    @property
    def operating_point(self) -> float | None:
        """The inner embedder's ``operating_point`` (a tuned embedder's threshold), if any."""
        point = getattr(self.inner, "operating_point", None)
        return point if isinstance(point, float) else None

    @property
    def in_flight(self) -> frozenset[str]:
        """The texts some call is embedding now."""
        with self._lock:
            return frozenset(self._pending)

    @property
    def waiters(self) -> int:
        """How many calls wait for a text another call is embedding."""
        with self._lock:
            return self._waiters

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        items = validate_texts(texts)
        to_embed: dict[str, list[int]] = {}
        found: list[tuple[int, np.ndarray]] = []
        waiting: list[int] = []
        get = self._cache.get
        with self._lock:
            for i, text in enumerate(items):
                cached = get(text)
                if cached is not None:
                    found.append((i, cached[0]))
                    self.hits += 1
                elif text in to_embed:
                    to_embed[text].append(i)
                    self.hits += 1
                elif text in self._pending:
                    waiting.append(i)
                    self.hits += 1
                else:
                    to_embed[text] = [i]
            self._pending.update(to_embed)
            self.misses += len(to_embed)
        if to_embed and len(to_embed) == len(items):
            # Every text a distinct miss, in order (a lookup's one new text): the inner
            # embedder's rows are the answer as they are.
            return self._embed_owned(list(to_embed))
        out = np.empty((len(items), self.dim), dtype=np.float32)
        for i, vec in found:
            out[i] = vec
        if to_embed:
            vectors = self._embed_owned(list(to_embed))
            for row, rows in enumerate(to_embed.values()):
                out[rows[0] if len(rows) == 1 else rows] = vectors[row]
        if waiting:
            self._wait_into(out, items, waiting)
        return out

    def _embed_owned(self, misses: list[str]) -> np.ndarray:
        """Embed the texts this call owns (registered as pending), keep them, and wake callers
        waiting for them, whether or not the inner embedder succeeds. Returns the inner
        embedder's rows (the cache keeps copies of its own)."""
        try:
            vectors = np.asarray(self.inner.embed(misses), dtype=np.float32)
            if vectors.shape != (len(misses), self.dim):
                raise ValueError(
                    f"inner embedder {self.inner.name!r} returned shape {vectors.shape}, "
                    f"expected {(len(misses), self.dim)}"
                )
            # Private read-only copies: callers may scribble on what `embed` returns.
            kept = [vectors[row].copy() for row in range(len(misses))]
            for vec in kept:
                vec.setflags(write=False)
        except BaseException:
            with self._lock:
                self._landed_or_failed(misses)
            raise
        with self._lock:
            for text, vec in zip(misses, kept, strict=True):
                self._keep(text, vec)
            self._landed_or_failed(misses)
        return vectors

    def _landed_or_failed(self, misses: list[str]) -> None:
        """No longer pending (under the lock): wake whoever waits for them."""
        self._pending.difference_update(misses)
        if self._waiters:
            self._landed.notify_all()

    def _wait_into(self, out: np.ndarray, items: list[str], waiting: list[int]) -> None:
        """Fill the rows whose texts another call was embedding, once it is done. A text it
        did not leave in the cache (it failed, or the vector was too large to keep, or was
        evicted since) is embedded here."""
        missing: list[int] = []
        with self._lock:
            self._waiters += 1
            try:
                for i in waiting:
                    while items[i] in self._pending:
                        self._landed.wait()
                    cached = self._cache.get(items[i])
                    if cached is None:
                        missing.append(i)
                    else:
                        out[i] = cached[0]
            finally:
                self._waiters -= 1
        if missing:
            out[missing] = self.embed([items[i] for i in missing])

    def _keep(self, text: str, vec: np.ndarray) -> None:
        size = sys.getsizeof(text) + vec.nbytes + _CACHED_OVERHEAD
        if size > self._max_kept:
            return
        self._cache[text] = (vec, size)
        while len(self._cache) > self.max_entries:
            self._cache.popitem()

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, hits={self.hits}, misses={self.misses})"
