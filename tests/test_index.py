"""Conformance tests for :class:`cachekit._core.protocols.VectorIndex` implementations, plus
FaissIndex-specific behaviour (exact -> HNSW migration, tombstone compaction, devices).

To run the conformance suite against another implementation, add an :class:`IndexVariant` to
``VARIANTS``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from cachekit._core.protocols import VectorIndex  # noqa: E402
from cachekit.semantic.index.faiss_index import FaissIndex, gpu_available  # noqa: E402
from cachekit.semantic.index.hnsw import HnswGraph  # noqa: E402

DIM = 32


@dataclass(frozen=True)
class IndexVariant:
    name: str
    make: Callable[[int], VectorIndex]
    load: Callable[[Path], VectorIndex]
    #: How far a vector's score against itself may be from 1.0.
    self_atol: float


# An HNSW graph holds its vectors as float16: scores within a few 1e-4 of exact at this DIM
# (and under 1e-4 at the 384 dimensions of the default embedder).
HNSW_SELF_ATOL = 5e-4

VARIANTS = [
    IndexVariant("faiss-exact", lambda dim: FaissIndex(dim), FaissIndex.load, 1e-5),
    # exact_max=4 pushes everything past a handful of vectors through the HNSW + tombstone path.
    IndexVariant(
        "faiss-hnsw",
        lambda dim: FaissIndex(dim, exact_max=4, hnsw_m=16, ef_search=64, ef_construction=64),
        FaissIndex.load,
        HNSW_SELF_ATOL,
    ),
]


@pytest.fixture(params=VARIANTS, ids=[v.name for v in VARIANTS])
def variant(request: pytest.FixtureRequest) -> IndexVariant:
    return request.param


@pytest.fixture
def index(variant: IndexVariant) -> VectorIndex:
    return variant.make(DIM)


def unit_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def ids_of(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# -- conformance ---------------------------------------------------------------------------------


def test_satisfies_protocol(index: VectorIndex) -> None:
    assert isinstance(index, VectorIndex)
    assert index.dim == DIM


def test_each_vector_finds_itself(variant: IndexVariant, index: VectorIndex) -> None:
    vecs = unit_vectors(300)
    ids = np.arange(1000, 1300, dtype=np.int64)
    index.add(ids, vecs)
    assert len(index) == 300
    scores, found = index.search(vecs, 3)
    assert scores.shape == found.shape == (300, 3)
    assert scores.dtype == np.float32 and found.dtype == np.int64
    np.testing.assert_array_equal(found[:, 0], ids)
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=variant.self_atol)
    assert (np.diff(scores, axis=1) <= 1e-6).all(), "scores must be in descending order"


def test_add_existing_id_replaces(variant: IndexVariant, index: VectorIndex) -> None:
    vecs = unit_vectors(50)
    index.add(np.arange(50, dtype=np.int64), vecs)
    new = unit_vectors(1, seed=99)
    index.add(ids_of(7), new)
    assert len(index) == 50
    scores, found = index.search(new, 50)
    assert found[0, 0] == 7 and scores[0, 0] == pytest.approx(1.0, abs=variant.self_atol)
    assert list(found[0]).count(7) == 1
    # The old vector is gone: searching for it must not score 1.0 against id 7.
    scores, found = index.search(vecs[7:8], 50)
    row = dict(zip(found[0].tolist(), scores[0].tolist(), strict=True))
    assert row[7] == pytest.approx(float(vecs[7] @ new[0]), abs=1e-5)
    assert len(set(found[0].tolist())) == 50


def test_duplicate_ids_in_one_batch_last_wins(index: VectorIndex) -> None:
    vecs = unit_vectors(3)
    index.add(ids_of(5, 6, 5), vecs)
    assert len(index) == 2
    _, found = index.search(vecs[2:3], 1)
    assert found[0, 0] == 5
    scores, found = index.search(vecs[0:1], 2)
    assert found[0, 0] != 5 or scores[0, 0] < 0.999


def test_remove_counts_and_never_returns_removed(index: VectorIndex) -> None:
    vecs = unit_vectors(200, seed=1)
    ids = np.arange(200, dtype=np.int64)
    index.add(ids, vecs)
    # A small removal (tombstones only) then a large one (forces compaction in HNSW).
    for batch in (ids[:10], ids[10:120]):
        assert index.remove(np.concatenate([batch, ids_of(10_000)])) == len(batch)
        assert index.remove(batch) == 0
        remaining = 200 - int(batch[-1]) - 1
        assert len(index) == remaining
        gone = set(ids[: int(batch[-1]) + 1].tolist())
        _scores, found = index.search(vecs, 200)
        assert not gone & set(found.ravel().tolist())
        assert ((found == -1).sum(axis=1) == 200 - remaining).all()
        kept = ids[int(batch[-1]) + 1 :]
        np.testing.assert_array_equal(found[kept, 0], kept)


def test_remove_then_readd(index: VectorIndex) -> None:
    vecs = unit_vectors(20)
    index.add(np.arange(20, dtype=np.int64), vecs)
    assert index.remove(ids_of(3)) == 1
    index.add(ids_of(3), vecs[3:4])
    assert len(index) == 20
    _, found = index.search(vecs[3:4], 1)
    assert found[0, 0] == 3


def test_results_padded_when_k_exceeds_size(index: VectorIndex) -> None:
    vecs = unit_vectors(3)
    index.add(ids_of(1, 2, 3), vecs)
    scores, found = index.search(vecs[:2], 10)
    assert found.shape == (2, 10)
    assert sorted(found[0, :3].tolist()) == [1, 2, 3]
    assert (found[:, 3:] == -1).all()
    assert np.isneginf(scores[:, 3:]).all()
    assert np.isfinite(scores[:, :3]).all()


def test_empty_index_and_empty_query(index: VectorIndex) -> None:
    scores, found = index.search(unit_vectors(2), 4)
    assert found.shape == (2, 4) and (found == -1).all() and np.isneginf(scores).all()
    index.add(ids_of(1), unit_vectors(1))
    scores, found = index.search(np.empty((0, DIM), dtype=np.float32), 4)
    assert scores.shape == found.shape == (0, 4)
    assert scores.dtype == np.float32 and found.dtype == np.int64
    assert index.remove(np.empty(0, dtype=np.int64)) == 0
    index.add(np.empty(0, dtype=np.int64), np.empty((0, DIM), dtype=np.float32))
    assert len(index) == 1


def test_float64_input_is_converted(index: VectorIndex) -> None:
    vecs: Any = unit_vectors(5).astype(np.float64)  # not what the protocol promises to take
    index.add(np.arange(5), vecs)  # plain int ids / float64 vectors are accepted
    scores, found = index.search(vecs, 1)
    assert scores.dtype == np.float32
    np.testing.assert_array_equal(found[:, 0], np.arange(5))


def test_save_load_roundtrip(variant: IndexVariant, tmp_path: Path) -> None:
    index = variant.make(DIM)
    vecs = unit_vectors(120, seed=3)
    ids = np.arange(500, 620, dtype=np.int64)
    index.add(ids, vecs)
    index.remove(ids[:5])  # leaves tombstones in the HNSW variant
    index.add(ids[10:11], unit_vectors(1, seed=4))
    queries = unit_vectors(30, seed=5)
    before = index.search(queries, 8)
    index.save(tmp_path / "idx")
    restored = variant.load(tmp_path / "idx")
    assert len(restored) == len(index) == 115
    after = restored.search(queries, 8)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[0], after[0])
    # The restored index keeps working, and saving over an existing save replaces it.
    restored.add(ids_of(1), vecs[:1])
    restored.save(tmp_path / "idx")
    assert len(variant.load(tmp_path / "idx")) == 116


def test_concurrent_add_and_search(index: VectorIndex) -> None:
    threads_n, per_thread, chunk = 4, 120, 20
    vecs = unit_vectors(threads_n * per_thread, seed=6)
    errors: list[BaseException] = []
    start = threading.Barrier(threads_n)

    def worker(t: int) -> None:
        try:
            start.wait()
            base = t * per_thread
            for off in range(0, per_thread, chunk):
                sl = slice(base + off, base + off + chunk)
                index.add(np.arange(sl.start, sl.stop, dtype=np.int64), vecs[sl])
                _scores, found = index.search(vecs[sl], 2)
                assert found.shape == (chunk, 2)
                assert (found[:, 0] >= 0).all()
                if off:
                    index.remove(ids_of(base + off - 1))
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    removed = {
        t * per_thread + off - 1
        for t in range(threads_n)
        for off in range(chunk, per_thread, chunk)
    }
    assert len(index) == threads_n * per_thread - len(removed)
    _, found = index.search(vecs, 1)
    expected = np.arange(threads_n * per_thread)
    kept = np.array([i not in removed for i in expected])
    np.testing.assert_array_equal(found[kept, 0], expected[kept])
    assert not removed & set(found.ravel().tolist())


@pytest.mark.parametrize(
    ("ids", "vectors", "match"),
    [
        (np.arange(2), np.zeros((2, DIM + 1), np.float32), "shape"),
        (np.arange(2), np.zeros(DIM, np.float32), "shape"),
        (np.arange(3), np.zeros((2, DIM), np.float32), "3 ids for 2 vectors"),
        (np.arange(2.0), np.zeros((2, DIM), np.float32), "integers"),
        (np.arange(4).reshape(2, 2), np.zeros((2, DIM), np.float32), "1-D"),
        (np.array([-1, 2]), np.zeros((2, DIM), np.float32), "reserved"),
        (np.arange(2), np.full((2, DIM), np.nan, np.float32), "NaN"),
        (np.arange(2), np.array([["a"] * DIM] * 2), "numeric"),
    ],
)
def test_add_rejects_bad_input(
    index: VectorIndex, ids: np.ndarray, vectors: np.ndarray, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        index.add(ids, vectors)
    assert len(index) == 0


def test_search_rejects_bad_input(index: VectorIndex) -> None:
    index.add(ids_of(1), unit_vectors(1))
    with pytest.raises(ValueError, match="shape"):
        index.search(np.zeros((1, DIM - 1), np.float32), 1)
    with pytest.raises(ValueError, match="k must be"):
        index.search(unit_vectors(1), 0)
    one_inf = unit_vectors(1).copy()
    one_inf[0, 3] = np.inf
    bad_inputs: list[Any] = [one_inf, np.full((1, DIM), np.nan, np.float32)]
    bad_inputs.append(one_inf.astype(np.float64))  # the wrong dtype too: checked, not cast
    for bad in bad_inputs:
        with pytest.raises(ValueError, match="NaN or infinite"):
            index.search(bad, 1)
    index.search(np.full((1, DIM), 3e38, np.float32), 1)  # finite, however large: searched


def non_finite_queries() -> list[np.ndarray]:
    """Queries with a NaN or an infinity in one place or everywhere, alone and in batches."""
    out = []
    for bad in (np.nan, np.inf, -np.inf):
        for where in (slice(3, 4), slice(None)):
            one = unit_vectors(1, seed=5).copy()
            one[0, where] = bad
            out.append(one)
            out.append(np.vstack([unit_vectors(1, seed=6), one]))
    return out


@pytest.mark.parametrize("k", [1, 3, 40])
def test_search_rejects_non_finite_queries_past_the_first_entries(
    index: VectorIndex, k: int
) -> None:
    # Enough entries for the HNSW variant to search its graph, some removed (tombstones).
    index.add(ids_of(*range(30)), unit_vectors(30))
    index.remove(ids_of(*range(0, 30, 3)))
    for bad in non_finite_queries():
        with pytest.raises(ValueError, match="NaN or infinite"):
            index.search(bad, k)
    huge = unit_vectors(1, seed=7) * np.float32(1e37)  # finite; its scores overflow to inf
    scores, found = index.search(huge, k)
    assert found[0, 0] != -1 and not np.isnan(scores[0, 0])


# -- FaissIndex specifics ------------------------------------------------------------------------


def test_migrates_to_hnsw_past_exact_max_and_keeps_all_ids() -> None:
    index = FaissIndex(DIM, exact_max=50, hnsw_m=16)
    vecs = unit_vectors(200, seed=7)
    ids = np.arange(10, 210, dtype=np.int64) * 3
    for start in range(0, 200, 30):
        index.add(ids[start : start + 30], vecs[start : start + 30])
        assert index.mode == ("exact" if start + 30 <= 50 else "hnsw")
    assert len(index) == 200
    np.testing.assert_array_equal(index.ids(), ids)
    _, found = index.search(vecs, 1)
    np.testing.assert_array_equal(found[:, 0], ids)


def test_hnsw_tombstones_then_compacts_back_to_exact() -> None:
    index = FaissIndex(DIM, exact_max=50, hnsw_m=16, rebuild_fraction=0.25)
    vecs = unit_vectors(200, seed=8)
    index.add(np.arange(200, dtype=np.int64), vecs)
    assert index.mode == "hnsw"
    index.remove(np.arange(20, dtype=np.int64))
    assert index.mode == "hnsw" and index.tombstones == 20
    index.remove(np.arange(20, 60, dtype=np.int64))  # 60/200 dead > 25%: rebuilt without them
    assert index.mode == "hnsw" and index.tombstones == 0 and len(index) == 140
    index.remove(np.arange(60, 180, dtype=np.int64))
    assert index.mode == "exact" and len(index) == 20
    _, found = index.search(vecs, 1)
    np.testing.assert_array_equal(found[180:, 0], np.arange(180, 200))
    assert (found[:180, 0] >= 180).all()


def test_hnsw_replacing_same_vector_many_times_never_duplicates() -> None:
    # Replacements leave the old copy, identical to the query, as a tombstone right at the
    # query's position: the worst case for tombstone filtering.
    index = FaissIndex(DIM, exact_max=4, hnsw_m=16, rebuild_fraction=1.0)
    vecs = unit_vectors(30, seed=9)
    index.add(np.arange(30, dtype=np.int64), vecs)
    for _ in range(10):
        index.add(ids_of(0), vecs[:1])
    assert index.tombstones == 10 and len(index) == 30
    scores, found = index.search(vecs[:1], 30)
    assert found[0, 0] == 0 and scores[0, 0] == pytest.approx(1.0, abs=HNSW_SELF_ATOL)
    assert sorted(found[0].tolist()) == list(range(30))


def test_cuda_without_gpu_raises_and_auto_falls_back() -> None:
    if gpu_available():
        pytest.skip("a GPU is visible; this checks the no-GPU error path")
    with pytest.raises(RuntimeError, match="faiss-gpu"):
        FaissIndex(DIM, device="cuda")
    assert FaissIndex(DIM, device="auto").device == "cpu"
    with pytest.raises(ValueError, match="device"):
        FaissIndex(DIM, device="tpu")  # type: ignore[arg-type]


def test_load_rejects_torn_save(tmp_path: Path) -> None:
    index = FaissIndex(DIM)
    index.add(np.arange(5, dtype=np.int64), unit_vectors(5))
    index.save(tmp_path)
    other = FaissIndex(DIM)
    other.add(np.arange(3, dtype=np.int64), unit_vectors(3))
    (tmp_path / "index.faiss").write_bytes(faiss.serialize_index(other._flat).tobytes())
    with pytest.raises(ValueError, match="metadata says 5"):
        FaissIndex.load(tmp_path)


def test_ef_search_grows_with_the_index_unless_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    auto = FaissIndex(8)
    for n, expected in (
        (10, 32),
        (10_000, 35),
        (50_000, 48),
        (75_000, 56),
        (100_000, 64),
        (300_000, 192),
        (1_000_000, 512),
        (10**8, 512),
    ):
        monkeypatch.setattr(auto, "_len", lambda n=n: n)
        assert auto.effective_ef_search() == expected
    pinned = FaissIndex(8, ef_search=32)
    monkeypatch.setattr(pinned, "_len", lambda: 1_000_000)
    assert pinned.effective_ef_search() == 32
    with pytest.raises(ValueError):
        FaissIndex(8, ef_search=0)


# -- background rebuilds -------------------------------------------------------------------------


class HeldRebuild:
    """A rebuild hook that holds the rebuild thread once the new graph is built, until released:
    what the test does meanwhile happens during the rebuild, for certain."""

    def __init__(self) -> None:
        self.built = threading.Event()
        self.release = threading.Event()

    def __call__(self, phase: str) -> None:
        assert phase == "built"
        self.built.set()
        assert self.release.wait(10), "the test never released the rebuild"


def check_contents(index: FaissIndex, expected: dict[int, np.ndarray]) -> None:
    ids = np.array(sorted(expected), dtype=np.int64)
    np.testing.assert_array_equal(index.ids(), ids)
    assert len(index) == len(expected)
    _, found = index.search(np.stack([expected[i] for i in ids.tolist()]), 1)
    np.testing.assert_array_equal(found[:, 0], ids)


@pytest.mark.parametrize("kind", ["migration", "tombstone-rebuild"])
def test_writes_during_a_background_rebuild_reach_the_new_index(kind: str) -> None:
    hold = HeldRebuild()
    index = FaissIndex(
        DIM, exact_max=50, hnsw_m=16, ef_search=64, background_min=0, rebuild_hook=hold
    )
    vecs = unit_vectors(400, seed=11)
    expected = {i: vecs[i] for i in range(120)}
    if kind == "migration":
        index.add(np.arange(40, dtype=np.int64), vecs[:40])
        assert index.mode == "exact" and not index.rebuilding
        index.add(np.arange(40, 120, dtype=np.int64), vecs[40:120])  # past exact_max
        old_mode = "exact"
    else:
        index.add(np.arange(120, dtype=np.int64), vecs[:120])
        hold.release.set()
        assert index.wait_rebuilt(10) and index.mode == "hnsw"
        hold.built.clear()
        hold.release.clear()
        index.remove(np.arange(120, 160, dtype=np.int64))  # absent: no tombstones
        index.remove(np.arange(0, 40, dtype=np.int64))  # 40/120 dead > 25%: rebuild
        for i in range(40):
            del expected[i]
        old_mode = "hnsw"
    assert hold.built.wait(10) and index.rebuilding and index.mode == old_mode

    # During the rebuild: adds one at a time (more than are replayed under the lock), a
    # replacement, removals of an old and of a new id; all visible at once, from the old index.
    for i in range(120, 300):
        index.add(ids_of(i), vecs[i : i + 1])
        expected[i] = vecs[i]
    index.add(ids_of(60), vecs[399:400])
    expected[60] = vecs[399]
    assert index.remove(ids_of(70, 250, 10_000)) == 2
    del expected[70], expected[250]
    check_contents(index, expected)
    assert index.mode == old_mode

    hold.release.set()
    assert index.wait_rebuilt(10) and not index.rebuilding
    assert index.mode == "hnsw" and index.rebuilds == (1 if kind == "migration" else 2)
    check_contents(index, expected)
    _, found = index.search(vecs[[70, 250, 60]], 5)
    assert not np.isin(found, [70, 250]).any()


def test_failed_background_rebuild_keeps_the_old_index_serving() -> None:
    failures = [RuntimeError("out of memory, say")]

    def hook(phase: str) -> None:
        if failures:
            raise failures.pop()

    index = FaissIndex(DIM, exact_max=20, hnsw_m=16, background_min=0, rebuild_hook=hook)
    vecs = unit_vectors(60, seed=12)
    index.add(np.arange(30, dtype=np.int64), vecs[:30])
    assert index.wait_rebuilt(10)
    assert index.rebuild_errors == 1 and index.mode == "exact"
    check_contents(index, {i: vecs[i] for i in range(30)})
    index.add(np.arange(30, 60, dtype=np.int64), vecs[30:])  # the next write tries again
    assert index.wait_rebuilt(10)
    assert index.rebuilds == 1 and index.mode == "hnsw"
    check_contents(index, {i: vecs[i] for i in range(60)})


def test_searches_never_wait_for_a_background_build() -> None:
    hold = HeldRebuild()
    index = FaissIndex(DIM, exact_max=10, hnsw_m=16, background_min=0, rebuild_hook=hold)
    vecs = unit_vectors(40, seed=13)
    index.add(np.arange(40, dtype=np.int64), vecs)
    assert hold.built.wait(10)
    # The build is held inside the rebuild thread; a search (and a save) in this thread still
    # completes, so neither waits for it.
    _, found = index.search(vecs, 1)
    np.testing.assert_array_equal(found[:, 0], np.arange(40))
    hold.release.set()
    assert index.wait_rebuilt(10) and index.mode == "hnsw"


def test_removals_during_a_rebuild_can_chain_the_next_one() -> None:
    hold = HeldRebuild()
    index = FaissIndex(
        DIM, exact_max=20, hnsw_m=16, ef_search=64, background_min=0, rebuild_hook=hold
    )
    vecs = unit_vectors(100, seed=14)
    index.add(np.arange(100, dtype=np.int64), vecs)  # migration starts
    assert hold.built.wait(10)
    index.remove(np.arange(50, dtype=np.int64))  # journaled: half the new graph is dead
    hold.release.set()
    assert index.wait_rebuilt(10)
    # The migration swapped in, then the tombstones it inherited triggered a rebuild, which
    # wait_rebuilt waited for too.
    assert index.rebuilds == 2 and index.tombstones == 0 and not index.rebuilding
    check_contents(index, {i: vecs[i] for i in range(50, 100)})


def test_hnsw_scores_stay_within_1e4_of_exact_at_384_dimensions() -> None:
    """The graph's float16 vectors move a score by under 1e-4 at the default embedder's width,
    far below any threshold's resolution."""
    vecs = unit_vectors(400, seed=21, dim=384)
    index = FaissIndex(384, exact_max=4, background_min=10**6)
    index.add(np.arange(400, dtype=np.int64), vecs)
    assert index.mode == "hnsw"
    queries = unit_vectors(50, seed=22, dim=384) + vecs[:50]
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    scores, found = index.search(queries, 4)
    exact = np.einsum("qd,qkd->qk", queries, vecs[found])
    assert np.abs(scores - exact).max() < 1e-4


def test_hnsw_graph_refuses_queries_it_cannot_hand_to_faiss_as_they_are() -> None:
    # The graph passes the queries' memory straight to faiss: only a C-contiguous float32
    # matrix of its width may go through (FaissIndex converts anything else first).
    vecs = unit_vectors(20, seed=3)
    graph = HnswGraph.build(DIM, 16, 40, np.arange(20, dtype=np.int64), vecs)
    _, found = graph.search(vecs[:2], 1, 16)
    assert found[:, 0].tolist() == [0, 1]
    for bad in (vecs[:2].astype(np.float64), np.asfortranarray(vecs[:2]), vecs[:2, :-1]):
        with pytest.raises(ValueError, match="C-contiguous float32"):
            graph.search(bad, 1, 16)
