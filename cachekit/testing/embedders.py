"""Test doubles for the semantic layer. For unit tests only; never use these in production.

:class:`DeterministicTestEmbedder` gives stable, model-free vectors so tests of cache policy,
indexes and serialisation run in milliseconds and give the same answer on every machine.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatMatrix = npt.NDArray[np.float32]

__all__ = ["DeterministicTestEmbedder"]

_WORD = re.compile(r"\w+")
# Words carry the meaning; trigrams only make near-spellings ("cache"/"caches") overlap a bit.
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.35


class DeterministicTestEmbedder:
    """A hashing embedder for tests (not a language model; for tests only).

    Lower-cased word tokens and character trigrams are hashed with BLAKE2b (stable across
    processes, unlike ``hash()``) into ``dim`` signed buckets, and each row is L2-normalised.
    Identical texts give identical vectors, texts sharing most words score a high cosine, and
    unrelated texts score near zero (up to hash-collision noise of about ``1/sqrt(dim)``).
    ``calls`` and ``texts_embedded`` count usage so tests can assert on caching.
    """

    def __init__(self, dim: int = 64, *, name: str | None = None) -> None:
        if dim < 2:
            raise ValueError(f"dim must be >= 2, got {dim}")
        self.dim = dim
        self.name = name or f"deterministic-test-{dim}"
        self.calls = 0
        self.texts_embedded = 0

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        sign = 1.0 if (value >> 63) & 1 else -1.0
        return value % self.dim, sign

    def vector(self, text: str) -> np.ndarray:
        """The normalised vector of one text."""
        vec = np.zeros(self.dim, dtype=np.float64)
        lowered = text.lower()
        words = _WORD.findall(lowered)
        for word in words:
            bucket, sign = self._bucket("w:" + word)
            vec[bucket] += sign * _WORD_WEIGHT
        joined = " " + " ".join(words) + " "
        for i in range(len(joined) - 2):
            bucket, sign = self._bucket("c:" + joined[i : i + 3])
            vec[bucket] += sign * _TRIGRAM_WEIGHT
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # Text with no word characters still needs a unit vector; all such texts coincide.
            bucket, sign = self._bucket("empty:" + lowered)
            vec[bucket] = sign
            norm = 1.0
        return (vec / norm).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
            raise TypeError(f"texts must be a sequence of str, got {type(texts).__name__}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] must be str, got {type(text).__name__}")
        self.calls += 1
        self.texts_embedded += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self.vector(text)
        return out
