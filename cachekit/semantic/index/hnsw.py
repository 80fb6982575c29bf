"""An HNSW graph (faiss ``IndexHNSWSQ``, float16 vectors) whose labels are insertion positions,
mapped to caller ids, with tombstones for removed ids.
:class:`cachekit.semantic.index.faiss_index.FaissIndex`
holds one past its exact size and does the locking."""

from __future__ import annotations

import logging
from typing import Any

import faiss
import numpy as np

__all__ = ["PAD_ID", "HnswGraph"]

log = logging.getLogger("cachekit.semantic")

#: -1 is the padding id of every search result, so it cannot also name a stored vector.
PAD_ID = -1
# Pairs per dict update when a graph's id map is built (each update holds the GIL throughout).
_ID_MAP_SLICE = 65_536
_F32 = np.dtype(np.float32)


class HnswGraph:
    """An HNSW graph whose labels are insertion positions, mapped to caller ids.

    HNSW cannot delete: a removed or replaced id's label maps to ``PAD_ID`` (a tombstone) and an
    ``IDSelectorBitmap`` of the live labels keeps it out of results. Not thread-safe on its own.
    """

    def __init__(self, hnsw: Any, label_ids: np.ndarray) -> None:
        self.hnsw = hnsw
        self.dim: int = hnsw.d  # read once: a faiss attribute costs a wrapper call per read
        self._set_labels(np.asarray(label_ids, dtype=np.int64))
        alive = np.flatnonzero(self.label_ids != PAD_ID)
        self.id_label: dict[int, int] = {}
        # In slices: one dict() over a million pairs is a single C call that holds the GIL for
        # a noticeable time, stalling searches when a background rebuild builds this.
        for lo in range(0, len(alive), _ID_MAP_SLICE):
            part = alive[lo : lo + _ID_MAP_SLICE]
            self.id_label.update(zip(self.label_ids[part].tolist(), part.tolist(), strict=True))
        self.dead = len(self.label_ids) - len(alive)
        # (efSearch, the search parameters, and what they point into: the selector and its
        # live-label bitmap, which must stay referenced while they are used). Built at the first
        # search after a change, shared by concurrent searches (faiss only reads them).
        self.params: tuple[int, Any, tuple[np.ndarray, Any] | None] | None = None

    def _set_labels(self, label_ids: np.ndarray) -> None:
        # One trailing padding id: faiss's -1 for "no result" then reads as PAD_ID with no
        # masking (label_ids is a view without it, so a tombstone written there shows in both).
        self.by_label = np.append(label_ids, np.int64(PAD_ID))
        self.label_ids = self.by_label[:-1]

    @classmethod
    def build(
        cls, dim: int, m: int, ef_construction: int, ids: np.ndarray, vecs: np.ndarray
    ) -> HnswGraph:
        # Vectors held as float16: half the memory a search reads, and a search right after an
        # embedder's forward pass (which leaves the CPU caches cold) is bound by those reads;
        # scores move by under 1e-4 (bench/semantic/latency.py prints the shortfall).
        hnsw = faiss.IndexHNSWSQ(
            dim,
            faiss.ScalarQuantizer.QT_fp16,  # type: ignore[arg-type]  # an enum value (int)
            m,
            faiss.METRIC_INNER_PRODUCT,
        )
        hnsw.hnsw.efConstruction = ef_construction
        if len(ids):
            hnsw.add(np.ascontiguousarray(vecs))
        return cls(hnsw, np.array(ids, dtype=np.int64, copy=True))

    def __len__(self) -> int:
        return len(self.id_label)

    def make_room(self) -> None:
        """Double the capacity of the graph's big arrays (vectors, links) now.

        A freshly built graph's arrays are exactly full, so the first add after the build
        reallocates and copies them (1.5 GB of vectors at 1M entries: seconds), and does so
        under the index's write lock. Growing them here, on the rebuild thread, moves that copy
        out of the lock: resizing up and back down keeps the capacity. Best effort: skipped
        where this faiss does not expose the arrays."""
        try:
            storage: Any = faiss.downcast_index(self.hnsw.storage)
            arrays = [storage.codes, self.hnsw.hnsw.neighbors]
            for arr in arrays:
                size = arr.size()
                arr.resize(2 * size)
                arr.resize(size)
        except (AttributeError, RuntimeError):
            log.debug("could not pre-grow the HNSW arrays", exc_info=True)

    @property
    def ntotal(self) -> int:
        return int(self.hnsw.ntotal)

    def alive_ids(self) -> np.ndarray:
        return self.label_ids[self.label_ids != PAD_ID]

    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        for i in ids.tolist():
            self._tombstone(i)
        start = len(self.label_ids)
        self.hnsw.add(vecs)
        self._set_labels(np.concatenate([self.label_ids, ids]))
        self.id_label.update(zip(ids.tolist(), range(start, start + len(ids)), strict=True))
        self.params = None

    def remove(self, ids: np.ndarray) -> int:
        removed = sum(self._tombstone(i) for i in ids.tolist())
        if removed:
            self.params = None
        return removed

    def _tombstone(self, id_: int) -> bool:
        label = self.id_label.pop(id_, None)
        if label is None:
            return False
        self.label_ids[label] = PAD_ID
        self.dead += 1
        return True

    def search(self, queries: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of each query. ``queries`` must be a C-contiguous float32 matrix of
        the graph's width (:class:`~cachekit.semantic.index.faiss_index.FaissIndex` makes sure)."""
        ef = max(ef, k)
        params = self.params
        if params is None or params[0] != ef:
            # Racing readers may each build one; both are correct and the last one is kept.
            params = self.params = self._search_params(ef)
        if queries.dtype != _F32 or not queries.flags.c_contiguous or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be a C-contiguous float32 matrix of width {self.dim}")
        n = len(queries)
        dist = np.empty((n, k), dtype=_F32)
        labels = np.empty((n, k), dtype=np.int64)
        # The C++ search itself (faiss's `search` wrapper would parse a dtype name and re-check
        # the layout on every call: a tenth of a lookup's own work right after a forward pass).
        self.hnsw.search_c(
            n, faiss.swig_ptr(queries), k, faiss.swig_ptr(dist), faiss.swig_ptr(labels), params[1]
        )
        # Tombstoned labels map to PAD_ID, so even a graph hit the selector missed could only
        # ever come back as padding, never as a removed id.
        found = self.by_label[labels]
        del params  # keeps the selector and its bitmap alive until here
        return dist, found

    def _search_params(self, ef: int) -> tuple[int, Any, tuple[np.ndarray, Any] | None]:
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
        params.efSearch = ef
        if not self.dead:
            return ef, params, None
        alive = self.label_ids != PAD_ID
        bitmap = np.packbits(alive, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(alive), faiss.swig_ptr(bitmap))
        params.sel = selector
        return ef, params, (bitmap, selector)
