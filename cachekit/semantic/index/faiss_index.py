"""FAISS-backed :class:`cachekit._core.protocols.VectorIndex`.

Small indexes are exact (``IndexIDMap2(IndexFlatIP)``). Once more than ``exact_max`` vectors are
stored the index migrates to HNSW, whose search time grows roughly logarithmically instead of
linearly. HNSW cannot delete, so removed and replaced entries become tombstones: they stay in the
graph (still useful for navigation) but an ``IDSelectorBitmap`` keeps them out of results, and the
graph is rebuilt without them once they exceed ``rebuild_fraction`` of it.

Building a graph takes seconds at the migration (8k vectors) and minutes at a million, so both
the migration and the tombstone rebuild run on a background thread: searches and writes keep
being served by the old structure meanwhile, every write made during the build is journaled and
replayed onto the new graph, and the new graph replaces the old one under the write lock only
once it has caught up. Rebuilds smaller than ``background_min`` vectors stay synchronous.

Vectors are expected to be L2-normalised, so inner product equals cosine similarity.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import faiss
import numpy as np

from cachekit._core.extras import check_faiss_distributions
from cachekit.semantic.index.hnsw import PAD_ID, HnswGraph
from cachekit.semantic.index.rwlock import RWLock

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatMatrix = npt.NDArray[np.float32]
    IdArray = npt.NDArray[np.int64]

# faiss-cpu and faiss-gpu overwrite each other's files: refuse a mixed install with the fix.
check_faiss_distributions()

__all__ = [
    "DEFAULT_BACKGROUND_MIN",
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_EXACT_MAX",
    "FaissIndex",
    "gpu_available",
]

Device = Literal["auto", "cpu", "cuda"]

log = logging.getLogger("cachekit.semantic")

# Measured on a shared 2-core x86 box with 384-d MiniLM-like vectors (bench/semantic/index.py
# --crossover; docs/benchmarks.md, "Embedder and index alone"): batch-1 flat search is 0.1-0.3
# ms up to 6k vectors, then falls off a cliff once the vectors outgrow the CPU cache (0.8-1.4 ms
# at 10k, 2-3 ms at 20k) while HNSW stays at 0.1-0.2 ms. HNSW is faster from ~2k, but below 8k
# exact search costs well under a millisecond (noise next to a ~7 ms embedding), gives perfect
# recall and deletes for real, so the index stays exact up to 8k; the one-off migration build
# (~1.5 s) runs in the background.
DEFAULT_EXACT_MAX = 8_000
# efSearch=64 gave recall@1 0.999-1.0 on near-duplicate queries at 10k-100k for ~0.15-0.2 ms:
# the automatic efSearch at 100k entries (below it, see _MIN_AUTO_EF_SEARCH).
# efConstruction=80 gave recall@1 0.999 at 100k (200 gave 1.000, 40 gave 0.995) and builds ~2x
# faster than 200 at 8k (1.2-1.5 s vs 2.5 s), which is the stall the migration causes.
DEFAULT_EF_SEARCH = 64
# With real queries against dense clusters of paraphrases, a fixed efSearch loses accuracy as the
# graph grows: at 1M entries efSearch=64 made a different hit/miss decision than exact search
# for 8% of lookups, 512 for 1% (~1 ms per search, next to a ~8 ms embedding); at 100k, 64 made
# the same decisions as exact, and at 10k so did 32 (recall@1 0.993; at 50k 32 kept the
# decisions but recall@1 fell to 0.967, 48 gave 0.980; bench/semantic/latency.py --ef). So by
# default efSearch starts at 32 and grows half as fast as the entries' 64 per 100k (48 at 50k),
# then as fast from 100k (64), up to 512.
_EF_PER_ENTRY = DEFAULT_EF_SEARCH / 100_000
_MIN_AUTO_EF_SEARCH = 32
_MAX_AUTO_EF_SEARCH = 512
DEFAULT_EF_CONSTRUCTION = 80

_FORMAT_VERSION = 1
_F32 = np.dtype(np.float32)
_META_FILE = "meta.json"
_INDEX_FILE = "index.faiss"
_LABELS_FILE = "label_ids.npy"
# Below this many vectors a rebuild takes well under 100 ms: not worth a thread.
DEFAULT_BACKGROUND_MIN = 2_000
# Vectors copied per read-lock hold when a rebuild snapshots a graph (~12 MB of 384-d float32):
# a writer waits for that copy and searches queue behind the waiting writer, so it stays short.
_SNAPSHOT_CHUNK = 8_192
# A rebuild replays the writes journaled during its build outside the lock while many arrived,
# then the last few under the write lock as it swaps; these bound that loop.
_SWAP_OPS = 64
_CATCH_UP_ROUNDS = 8


def gpu_available() -> bool:
    """Whether this faiss build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _resolve_device(device: str) -> Literal["cpu", "cuda"]:
    if device == "cpu":
        return "cpu"
    if device == "cuda":
        if not gpu_available():
            raise RuntimeError(
                "FaissIndex(device='cuda') needs faiss-gpu and a visible GPU; this faiss has "
                f"GPU support: {hasattr(faiss, 'StandardGpuResources')}, GPUs seen: "
                f"{faiss.get_num_gpus()}. Use device='cpu' or 'auto'."
            )
        return "cuda"
    if device == "auto":
        return "cuda" if gpu_available() else "cpu"
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")


def _flat_vectors(index: Any, dim: int) -> np.ndarray:
    """A copy of every vector stored in a flat or HNSW index, in storage order (from the graph,
    rounded to float16 as it stores them)."""
    n = index.ntotal
    if n == 0:
        return np.empty((0, dim), dtype=np.float32)
    return index.reconstruct_n(0, n).reshape(n, dim).astype(np.float32, copy=False)


# A journaled write: (ids, vectors) for an add, (ids, None) for a removal.
_Op = tuple[np.ndarray, "np.ndarray | None"]
# Called on the rebuild thread with "built" once the new graph is built and before it catches up
# with the journal and replaces the old one; an observation point for tests and telemetry.
RebuildHook = Callable[[str], None]


class FaissIndex:
    """Inner-product nearest-neighbour search over caller-chosen int64 ids (thread-safe).

    ``add`` with an id already present replaces its vector; ``remove`` returns how many ids
    existed; ``search`` returns ``(scores, ids)`` of shape ``(m, k)`` padded with ``-inf``/``-1``.
    The id ``-1`` is reserved for padding and rejected by ``add``.

    The exact-to-HNSW migration and the tombstone rebuild of at least ``background_min`` vectors
    run on a background thread (:attr:`rebuilding`, :meth:`wait_rebuilt`); every call keeps
    its meaning meanwhile, answered by the old structure until the new one has every write.

    ``device="cuda"`` keeps an exact GPU copy (``GpuIndexFlatIP``) of the vectors for search and
    never migrates to HNSW (which faiss only has on CPU); ``"auto"`` uses a GPU when faiss-gpu
    sees one.
    """

    def __init__(
        self,
        dim: int,
        *,
        exact_max: int = DEFAULT_EXACT_MAX,
        hnsw_m: int = 32,
        ef_search: int | None = None,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        device: Device = "cpu",
        rebuild_fraction: float = 0.25,
        background_min: int = DEFAULT_BACKGROUND_MIN,
        rebuild_hook: RebuildHook | None = None,
    ) -> None:
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if exact_max < 0:
            raise ValueError(f"exact_max must be >= 0, got {exact_max}")
        if hnsw_m < 2 or (ef_search is not None and ef_search < 1) or ef_construction < 1:
            raise ValueError("hnsw_m must be >= 2 and ef_search, ef_construction >= 1")
        if not 0.0 < rebuild_fraction <= 1.0:
            raise ValueError(f"rebuild_fraction must be in (0, 1], got {rebuild_fraction}")
        if background_min < 0:
            raise ValueError(f"background_min must be >= 0, got {background_min}")
        self.dim = int(dim)
        self.exact_max = int(exact_max)
        self.hnsw_m = int(hnsw_m)
        #: None: grows with the index (see _EF_PER_ENTRY); an int pins it.
        self.ef_search = None if ef_search is None else int(ef_search)
        self.ef_construction = int(ef_construction)
        self.rebuild_fraction = float(rebuild_fraction)
        self.background_min = int(background_min)
        self.device: Literal["cpu", "cuda"] = _resolve_device(device)
        self._lock = RWLock()

        self._flat: Any = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        self._graph: HnswGraph | None = None  # None while exact

        # Background rebuild: writes made while one runs are journaled here (None: none runs).
        self._journal: list[_Op] | None = None
        self._rebuilt = threading.Event()
        self._rebuilt.set()
        self.rebuild_hook = rebuild_hook
        #: Background rebuilds finished (swapped in) and failed (old structure kept).
        self.rebuilds = 0
        self.rebuild_errors = 0

        self._gpu_res: Any = faiss.StandardGpuResources() if self.device == "cuda" else None
        self._gpu_index: Any = None
        self._gpu_ids: np.ndarray | None = None

    # -- introspection -------------------------------------------------------------------------

    @property
    def mode(self) -> Literal["exact", "hnsw"]:
        return "exact" if self._graph is None else "hnsw"

    @property
    def tombstones(self) -> int:
        graph = self._graph
        return 0 if graph is None else graph.dead

    @property
    def rebuilding(self) -> bool:
        """Whether a background migration or rebuild is under way."""
        return not self._rebuilt.is_set()

    def wait_rebuilt(self, timeout: float | None = None) -> bool:
        """Wait until no background rebuild runs. Returns False on timeout."""
        return self._rebuilt.wait(timeout)

    def __len__(self) -> int:
        with self._lock.read():
            return self._len()

    def _len(self) -> int:
        return int(self._flat.ntotal) if self._graph is None else len(self._graph)

    def ids(self) -> IdArray:
        """Every stored id, sorted."""
        with self._lock.read():
            if self._graph is None:
                stored = faiss.vector_to_array(self._flat.id_map).astype(np.int64)
            else:
                stored = self._graph.alive_ids()
            return np.sort(stored)

    def __repr__(self) -> str:
        return (
            f"FaissIndex(dim={self.dim}, len={len(self)}, mode={self.mode!r}, "
            f"device={self.device!r}, tombstones={self.tombstones})"
        )

    # -- validation ----------------------------------------------------------------------------

    def _as_matrix(self, vectors: Any, what: str) -> np.ndarray:
        arr = vectors
        if not (
            type(arr) is np.ndarray
            and arr.dtype == _F32
            and arr.ndim == 2
            and arr.flags.c_contiguous
            and arr.shape[1] == self.dim
        ):
            arr = np.asarray(vectors)
            if arr.dtype.kind not in "fiu" or arr.dtype.kind == "b":
                raise ValueError(f"{what} must be a numeric array, got dtype {arr.dtype}")
            if arr.ndim != 2 or arr.shape[1] != self.dim:
                raise ValueError(f"{what} must have shape (n, {self.dim}), got {arr.shape}")
            arr = np.ascontiguousarray(arr, dtype=np.float32)
        return arr

    @staticmethod
    def _as_ids(ids: Any) -> np.ndarray:
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise ValueError(f"ids must be a 1-D array, got shape {arr.shape}")
        if arr.size and arr.dtype.kind not in "iu":
            raise ValueError(f"ids must be integers, got dtype {arr.dtype}")
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError("ids must fit in int64")
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        return arr

    # -- mutations -----------------------------------------------------------------------------

    def add(self, ids: IdArray, vectors: FloatMatrix) -> None:
        id_arr = self._as_ids(ids)
        vecs = self._as_matrix(vectors, "vectors")
        _check_finite(vecs, "vectors")
        if len(id_arr) != len(vecs):
            raise ValueError(f"got {len(id_arr)} ids for {len(vecs)} vectors")
        if (id_arr == PAD_ID).any():
            raise ValueError(f"id {PAD_ID} is reserved for padding search results")
        if len(id_arr) == 0:
            return
        id_arr, vecs = _last_wins(id_arr, vecs)
        with self._lock.write():
            if self._journal is not None:
                # Copies: the caller may reuse its arrays before the rebuild replays them.
                self._journal.append((id_arr.copy(), vecs.copy()))
            if self._graph is None:
                self._flat.remove_ids(id_arr)
                self._flat.add_with_ids(vecs, id_arr)
                if (
                    self.device == "cpu"
                    and self._flat.ntotal > self.exact_max
                    and self._journal is None
                ):
                    self._migrate()
            else:
                self._graph.add(id_arr, vecs)
                self._maybe_compact()
            self._invalidate()

    def remove(self, ids: IdArray) -> int:
        id_arr = np.unique(self._as_ids(ids))
        if len(id_arr) == 0:
            return 0
        with self._lock.write():
            if self._journal is not None:
                self._journal.append((id_arr, None))
            if self._graph is None:
                removed = int(self._flat.remove_ids(id_arr))
            else:
                removed = self._graph.remove(id_arr)
                self._maybe_compact()
            if removed:
                self._invalidate()
            return removed

    def _migrate(self) -> None:
        """Exact -> HNSW, holding the write lock. The flat copy is small (a few MB)."""
        ids_all = faiss.vector_to_array(self._flat.id_map).astype(np.int64)
        vecs = _flat_vectors(self._flat.index, self.dim)
        if len(ids_all) < self.background_min:
            self._rebuild(ids_all, vecs)
        else:
            self._start_background(lambda: (ids_all, vecs))

    def _maybe_compact(self) -> None:
        graph = self._graph
        if graph is None or self._journal is not None:
            return
        if graph.dead <= self.rebuild_fraction * graph.ntotal:
            return
        alive = graph.label_ids != PAD_ID
        n_alive = int(alive.sum())
        if n_alive <= self.exact_max or n_alive < self.background_min:
            self._rebuild(graph.label_ids[alive], _flat_vectors(graph.hnsw, self.dim)[alive])
            return
        # Labels below `upto` never change vector (the graph only appends), so the snapshot
        # can be copied in chunks later, each under the read lock, while writes go on.
        upto, labels = graph.ntotal, graph.label_ids.copy()
        self._start_background(lambda: self._snapshot(graph, upto, labels))

    def _rebuild(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        """Replace all state with exactly these (unique) ids and vectors, in this thread."""
        if self.device == "cuda" or len(ids) <= self.exact_max:
            flat = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
            if len(ids):
                flat.add_with_ids(np.ascontiguousarray(vecs), np.ascontiguousarray(ids))
            self._flat, self._graph = flat, None
            return
        self._install(HnswGraph.build(self.dim, self.hnsw_m, self.ef_construction, ids, vecs))

    def _install(self, graph: HnswGraph) -> None:
        self._graph = graph
        # The exact copy is dropped: the graph keeps its own (float16) vectors for rebuilds.
        self._flat = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        self._invalidate()

    def _invalidate(self) -> None:
        self._gpu_index = None
        self._gpu_ids = None

    # -- background rebuild --------------------------------------------------------------------

    def _start_background(self, source: Callable[[], tuple[np.ndarray, np.ndarray]]) -> None:
        """Start building a graph from ``source()``'s (ids, vectors); writes from now on are
        journaled for it. Called holding the write lock."""
        self._journal = []
        self._rebuilt.clear()
        threading.Thread(
            target=self._background, args=(source,), name="cachekit-index-rebuild", daemon=True
        ).start()

    def _snapshot(
        self, graph: HnswGraph, upto: int, labels: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        alive = np.flatnonzero(labels[:upto] != PAD_ID)
        vecs = np.empty((len(alive), self.dim), dtype=np.float32)
        done = 0
        for lo in range(0, upto, _SNAPSHOT_CHUNK):
            hi = min(upto, lo + _SNAPSHOT_CHUNK)
            rows = alive[(alive >= lo) & (alive < hi)]
            with self._lock.read():
                chunk = graph.hnsw.reconstruct_n(lo, hi - lo).reshape(hi - lo, self.dim)
            vecs[done : done + len(rows)] = chunk[rows - lo]
            done += len(rows)
        return labels[alive], vecs

    def _background(self, source: Callable[[], tuple[np.ndarray, np.ndarray]]) -> None:
        try:
            ids, vecs = source()
            # One OpenMP thread fewer than the machine has: lookups need a core meanwhile.
            with _OmpThreads(max(1, (os.cpu_count() or 2) - 1)):
                graph = HnswGraph.build(self.dim, self.hnsw_m, self.ef_construction, ids, vecs)
            del ids, vecs
            graph.make_room()
            if self.rebuild_hook is not None:
                self.rebuild_hook("built")
            self._catch_up_and_swap(graph)
        except Exception:
            self.rebuild_errors += 1
            log.warning("index rebuild failed; the old index keeps serving", exc_info=True)
            with self._lock.write():
                self._journal = None
                self._rebuilt.set()

    def _catch_up_and_swap(self, graph: HnswGraph) -> None:
        for round_ in range(_CATCH_UP_ROUNDS + 1):
            with self._lock.write():
                pending = self._journal or []
                if len(pending) <= _SWAP_OPS or round_ == _CATCH_UP_ROUNDS:
                    # Freed on return, once the lock is released: dropping a big graph and its
                    # id map takes a while.
                    retired = self._graph  # noqa: F841
                    _replay(graph, pending)
                    self._journal = None
                    self._install(graph)
                    self.rebuilds += 1
                    # Removals journaled during the build may already call for the next one;
                    # waiters wake only once no rebuild follows.
                    self._maybe_compact()
                    if self._journal is None:
                        self._rebuilt.set()
                    return
                self._journal = []
            _replay(graph, pending)  # the new graph is this thread's alone until installed

    # -- search --------------------------------------------------------------------------------

    def search(self, vectors: FloatMatrix, k: int) -> tuple[FloatMatrix, IdArray]:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        k = int(k)
        queries = self._as_matrix(vectors, "query vectors")
        m = len(queries)
        if m == 0:
            return _padding(0, k)
        if m > 1:
            # Checked before a batch: each row's results would otherwise need a check of its own.
            _check_finite(queries, "query vectors")
        # One thread for small batches: waking an OpenMP team costs more than the search. A
        # single query never wakes one (faiss parallelises over queries).
        lock = self._lock
        lock.acquire_read()
        try:
            if 1 < m <= _SMALL_BATCH:
                with _OmpThreads(1):
                    dist, found, k_eff = self._search_locked(queries, k)
            else:
                dist, found, k_eff = self._search_locked(queries, k)
        finally:
            lock.release_read()
        if m == 1:
            # A single query is checked by its best score: every stored vector is finite, so a
            # query with a NaN or an infinity scores NaN or infinite against all of them, or
            # faiss finds nothing. A finite best score proves a finite query, and the lookup
            # skips a pass over it (tens of microseconds right after a forward pass).
            if found.item(0) == PAD_ID or not math.isfinite(dist.item(0)):
                _check_finite(queries, "query vectors")
        # faiss hands back fresh arrays, best first: where the last column is padding, the
        # padding's scores are set in place
        if m > 1 or found.item(k_eff - 1) == PAD_ID:
            dist[found == PAD_ID] = -np.inf
        if k_eff < k:
            pad_scores, pad_ids = _padding(m, k - k_eff)
            return np.hstack([dist, pad_scores]), np.hstack([found, pad_ids])
        return dist, found

    def _search_locked(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, int]:
        """The search under the read lock: scores, ids and how many columns they hold."""
        n = self._len()
        if n == 0:
            dist, found = _padding(len(queries), k)
            return dist, found, k
        # Asking faiss for more than is stored only costs allocation; pad afterwards instead.
        k_eff = min(k, n)
        graph = self._graph
        if graph is None:
            dist, found = self._search_exact(queries, k_eff)
        else:
            dist, found = graph.search(queries, k_eff, self._ef_search(n))
        return dist, found, k_eff

    def _search_exact(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.device == "cuda":
            gpu_index, gpu_ids = self._gpu_mirror()
            dist, pos = gpu_index.search(queries, k)
            return dist, np.where(pos >= 0, gpu_ids[np.maximum(pos, 0)], PAD_ID)
        dist, found = self._flat.search(queries, k)
        return dist, found.astype(np.int64, copy=False)

    def _gpu_mirror(self) -> tuple[Any, np.ndarray]:
        # Rebuilt after any mutation: a full upload is simple and, for a read-mostly cache,
        # cheap next to keeping positions in sync with IndexIDMap2's compaction on remove.
        gpu_index, gpu_ids = self._gpu_index, self._gpu_ids
        if gpu_index is None or gpu_ids is None:
            gpu_index = faiss.GpuIndexFlatIP(self._gpu_res, self.dim)
            gpu_index.add(_flat_vectors(self._flat.index, self.dim))
            gpu_ids = faiss.vector_to_array(self._flat.id_map).astype(np.int64)
            self._gpu_index, self._gpu_ids = gpu_index, gpu_ids
        return gpu_index, gpu_ids

    def effective_ef_search(self) -> int:
        """The efSearch an HNSW search uses now."""
        return self._ef_search(self._len())

    def _ef_search(self, n: int) -> int:
        if self.ef_search is not None:
            return self.ef_search
        grown = n * _EF_PER_ENTRY
        return min(_MAX_AUTO_EF_SEARCH, int(max(_MIN_AUTO_EF_SEARCH + grown / 2, grown)))

    # -- persistence ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the index into directory ``path`` (created if needed).

        Each file is written under a temporary name and renamed into place, metadata last;
        :meth:`load` checks the stored count against the metadata, so a save torn by a crash is
        reported rather than silently misread.
        """
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock.read():
            meta: dict[str, Any] = {
                "format": _FORMAT_VERSION,
                "dim": self.dim,
                "mode": self.mode,
                "exact_max": self.exact_max,
                "hnsw_m": self.hnsw_m,
                "ef_search": self.ef_search,
                "ef_construction": self.ef_construction,
                "rebuild_fraction": self.rebuild_fraction,
                "tombstones": self.tombstones,
                "count": self._len(),
            }
            graph = self._graph
            index = self._flat if graph is None else graph.hnsw
            _atomic_write(directory / _INDEX_FILE, faiss.serialize_index(index).tobytes())
            if graph is not None:
                tmp = directory / (_LABELS_FILE + ".tmp")
                with open(tmp, "wb") as fh:
                    np.save(fh, graph.label_ids)
                os.replace(tmp, directory / _LABELS_FILE)
            else:
                (directory / _LABELS_FILE).unlink(missing_ok=True)
        _atomic_write(directory / _META_FILE, json.dumps(meta, indent=2).encode())

    @classmethod
    def load(cls, path: str | Path, *, device: Device = "cpu") -> FaissIndex:
        directory = Path(path)
        meta = json.loads((directory / _META_FILE).read_text())
        if meta.get("format") != _FORMAT_VERSION:
            raise ValueError(f"unsupported FaissIndex format {meta.get('format')!r} in {path}")
        obj = cls(
            int(meta["dim"]),
            exact_max=int(meta["exact_max"]),
            hnsw_m=int(meta["hnsw_m"]),
            ef_search=None if meta["ef_search"] is None else int(meta["ef_search"]),
            ef_construction=int(meta["ef_construction"]),
            device=device,
            rebuild_fraction=float(meta["rebuild_fraction"]),
        )
        index = faiss.read_index(str(directory / _INDEX_FILE))
        if index.d != obj.dim:
            raise ValueError(f"{path}: index dim {index.d} does not match metadata {obj.dim}")
        if meta["mode"] == "exact":
            obj._flat = index
        else:
            label_ids = np.load(directory / _LABELS_FILE).astype(np.int64)
            if len(label_ids) != index.ntotal:
                raise ValueError(f"{path}: {len(label_ids)} labels for {index.ntotal} vectors")
            obj._install(HnswGraph(index, label_ids))
            alive = np.flatnonzero(label_ids != PAD_ID)
            if obj.device == "cuda":
                # GPU search is exact only; fold the graph back into a flat index.
                obj._rebuild(label_ids[alive], _flat_vectors(index, obj.dim)[alive])
        if obj._len() != int(meta["count"]):
            raise ValueError(f"{path}: holds {obj._len()} vectors, metadata says {meta['count']}")
        return obj


def _replay(graph: HnswGraph, ops: list[_Op]) -> None:
    for ids, vecs in ops:
        if vecs is None:
            graph.remove(ids)
        else:
            graph.add(ids, vecs)


def _last_wins(ids: np.ndarray, vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop all but the last occurrence of each id (a batch is applied as sequential adds)."""
    if len(np.unique(ids)) == len(ids):
        return ids, vecs
    _, first_in_reversed = np.unique(ids[::-1], return_index=True)
    keep = np.sort(len(ids) - 1 - first_in_reversed)
    return ids[keep], vecs[keep]


def _atomic_write(target: Path, data: bytes) -> None:
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)


# A cache searches a few queries at a time. For those, starting FAISS's OpenMP team and its
# spin-waiting afterwards cost milliseconds on a small machine (measured on 2 cores: 8-11 ms
# per single-query search with 2 threads, 0.1 ms with 1) and steal the cores the callers need.
_SMALL_BATCH = 64


class _OmpThreads:
    """Run FAISS with ``n`` OpenMP threads in the calling thread only (OpenMP thread counts are
    per thread), restoring the previous count afterwards."""

    __slots__ = ("n", "previous")

    def __init__(self, n: int) -> None:
        self.n = n
        self.previous = 0

    def __enter__(self) -> None:
        self.previous = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(self.n)

    def __exit__(self, *exc: object) -> None:
        faiss.omp_set_num_threads(self.previous)


def _check_finite(arr: np.ndarray, what: str) -> None:
    # A float64 sum of float32 values is finite exactly when every value is: one numpy call.
    if not math.isfinite(arr.sum(dtype=np.float64)):
        raise ValueError(f"{what} contain NaN or infinite values")


def _padding(m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` rows of ``k`` empty results: scores ``-inf``, ids ``PAD_ID``."""
    return (
        np.full((m, k), -np.inf, dtype=np.float32),
        np.full((m, k), PAD_ID, dtype=np.int64),
    )
