"""An exact-text cache of embeddings in front of any :class:`~cachekit.protocols.Embedder`
(:class:`CachedEmbedder`), bounded in entries and bytes, and the argument check every embedder
shares (:func:`validate_texts`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

import numpy as np
from cachetools import LRUCache

from cachekit.protocols import Embedder

if TYPE_CHECKING:
    from cachekit.protocols import FloatMatrix

__all__ = ["CachedEmbedder", "validate_texts"]


def validate_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, or TypeError: a bare str is itself a Sequence[str], and embedding it
    character by character is never meant."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
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
        self._pending: dict[str, Future[np.ndarray]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def operating_point(self) -> float | None:
        """The inner embedder's ``operating_point`` (a tuned embedder's threshold), if any."""
        point = getattr(self.inner, "operating_point", None)
        return point if isinstance(point, float) else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        items = validate_texts(texts)
        dim = self.dim
        out = np.empty((len(items), dim), dtype=np.float32)
        to_embed: dict[str, list[int]] = {}
        waiting: list[tuple[int, Future[np.ndarray]]] = []
        with self._lock:
            for i, text in enumerate(items):
                cached = self._cache.get(text)
                if cached is not None:
                    out[i] = cached[0]
                    self.hits += 1
                elif text in to_embed:
                    to_embed[text].append(i)
                    self.hits += 1
                elif text in self._pending:
                    waiting.append((i, self._pending[text]))
                    self.hits += 1
                else:
                    to_embed[text] = [i]
            owned: dict[str, Future[np.ndarray]] = {t: Future() for t in to_embed}
            self._pending.update(owned)
            self.misses += len(to_embed)

        if owned:
            misses = list(to_embed)
            try:
                vectors = np.asarray(self.inner.embed(misses), dtype=np.float32)
                if vectors.shape != (len(misses), dim):
                    raise ValueError(
                        f"inner embedder {self.inner.name!r} returned shape {vectors.shape}, "
                        f"expected {(len(misses), dim)}"
                    )
            except BaseException as exc:
                with self._lock:
                    for text, fut in owned.items():
                        del self._pending[text]
                        fut.set_exception(exc)
                raise
            with self._lock:
                for row, text in enumerate(misses):
                    # A private read-only copy: callers may scribble on what `embed` returns.
                    vec = vectors[row].copy()
                    vec.setflags(write=False)
                    self._keep(text, vec)
                    del self._pending[text]
                    owned[text].set_result(vec)
            for row, text in enumerate(misses):
                out[to_embed[text]] = vectors[row]

        for i, fut in waiting:
            out[i] = fut.result()
        return out

    def _keep(self, text: str, vec: np.ndarray) -> None:
        size = sys.getsizeof(text) + vec.nbytes + _CACHED_OVERHEAD
        if size > self._cache.maxsize // 16:
            return
        self._cache[text] = (vec, size)
        while len(self._cache) > self.max_entries:
            self._cache.popitem()

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, hits={self.hits}, misses={self.misses})"
