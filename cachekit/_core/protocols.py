"""The small protocols that separate cachekit's layers.

Mechanisms (storage tiers, embedders, vector indexes, serializers, clocks) implement these and
know nothing about each other; the policy in :class:`cachekit._engine.engine.Engine` composes them.

Conventions shared by every implementation:

* TTLs are seconds as ``float``; ``None`` means "no expiry".
* Storage tiers raise on failure. Failing open (a backend error costs a miss) is policy and
  lives in the engine, once, not in every backend.
* Batch operations take and return sequences in request order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # numpy is an optional dependency; only the semantic extra needs it
    import numpy as np
    import numpy.typing as npt

    FloatMatrix = npt.NDArray[np.float32]
    IdArray = npt.NDArray[np.int64]

#: One item of a batch write: ``(key, value, ttl_seconds_or_None)``.
Entry = tuple[str, bytes, "float | None"]


@runtime_checkable
class Clock(Protocol):
    """Wall-clock seconds. Injected so TTL, jitter and refresh tests are deterministic."""

    def __call__(self) -> float: ...


@runtime_checkable
class StorageTier(Protocol):
    """A bytes key-value store with TTLs and batch operations (synchronous)."""

    @property
    def name(self) -> str: ...

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values for ``keys`` in order; ``None`` where absent or expired."""
        ...

    def set_many(self, entries: Sequence[Entry]) -> None:
        """Store every ``(key, value, ttl)``; an existing key is overwritten."""
        ...

    def delete_many(self, keys: Sequence[str]) -> int:
        """Delete ``keys``; returns how many existed."""
        ...

    def incr(self, key: str) -> int:
        """Atomically add one to an integer counter (created at 0) and return the new value."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncStorageTier(Protocol):
    """The asyncio mirror of :class:`StorageTier` (same semantics, ``a``-prefixed names)."""

    @property
    def name(self) -> str: ...

    async def aget_many(self, keys: Sequence[str]) -> list[bytes | None]: ...

    async def aset_many(self, entries: Sequence[Entry]) -> None: ...

    async def adelete_many(self, keys: Sequence[str]) -> int: ...

    async def aincr(self, key: str) -> int: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Serializer(Protocol):
    """Turns Python values into bytes and back. ``tag`` is one byte written before the payload so
    a reader refuses bytes written by another serializer (pickle is never tried on msgpack data)."""

    tag: bytes

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns a batch of texts into an ``(n, dim)`` float32 matrix of L2-normalised rows."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix: ...


@runtime_checkable
class VectorIndex(Protocol):
    """Inner-product nearest-neighbour search over int64 ids. Thread-safe.

    ``add`` with an id already present replaces its vector. ``search`` returns ``(scores, ids)``,
    both ``(m, k)``; rows are padded with score ``-inf`` and id ``-1`` when fewer than ``k``
    vectors are stored.
    """

    @property
    def dim(self) -> int: ...

    def add(self, ids: IdArray, vectors: FloatMatrix) -> None: ...

    def remove(self, ids: IdArray) -> int: ...

    def search(self, vectors: FloatMatrix, k: int) -> tuple[FloatMatrix, IdArray]: ...

    def __len__(self) -> int: ...

    def save(self, path: str | Path) -> None: ...
