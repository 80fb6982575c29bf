"""Tests for cachekit.semantic.embed.embedder and the test double in cachekit.testing.embedders.

Tests marked ``model`` load the packaged all-MiniLM-L6-v2 (offline) with both backends.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from cachekit._core.protocols import Embedder
from cachekit.semantic.embed.embedder import (
    CachedEmbedder,
    CallableEmbedder,
    SentenceTransformerEmbedder,
    as_embedder,
    cut_to_readable,
    default_cache_dir,
    readable_chars,
)
from cachekit.semantic.embed.onnx_runner import OnnxRunner
from cachekit.testing.clock import wait_until
from cachekit.testing.embedders import DeterministicTestEmbedder

REPO_ROOT = Path(__file__).resolve().parents[1]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- DeterministicTestEmbedder ---------------------------------------------------------------


def test_test_embedder_shapes_and_norms() -> None:
    emb = DeterministicTestEmbedder(dim=48)
    out = emb.embed(["hello world", "", "!!!", "A much longer sentence about caches."])
    assert out.shape == (4, 48) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert emb.embed([]).shape == (0, 48)
    assert isinstance(emb, Embedder)


def test_test_embedder_similarity_properties() -> None:
    emb = DeterministicTestEmbedder()
    a, a2, near, far = emb.embed(
        [
            "How do I reset my password?",
            "How do I reset my password?",
            "how do I reset my password please",
            "Quarterly revenue grew in the Nordic region",
        ]
    )
    np.testing.assert_array_equal(a, a2)
    assert cos(a, near) > 0.7
    assert abs(cos(a, far)) < 0.35
    assert cos(a, near) > cos(a, far) + 0.4


def test_test_embedder_is_stable_across_processes() -> None:
    # Python's hash() is salted per process; the embedder must not depend on it.
    code = (
        "from cachekit.testing.embedders import DeterministicTestEmbedder as D;"
        "import sys; sys.stdout.write(D(16).embed(['stable text'])[0].tobytes().hex())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    here = DeterministicTestEmbedder(16).embed(["stable text"])[0].tobytes().hex()
    assert out == here


# -- text validation (shared by every embedder) ----------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: DeterministicTestEmbedder(),
        lambda: CallableEmbedder(lambda t: np.ones((len(t), 3)), dim=3),
        lambda: CachedEmbedder(DeterministicTestEmbedder()),
        lambda: SentenceTransformerEmbedder(),  # validation runs before any model load
    ],
)
def test_texts_must_be_sequence_of_str(make: object) -> None:
    emb = make()  # type: ignore[operator]
    with pytest.raises(TypeError, match="sequence of str"):
        emb.embed("not a list")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        emb.embed(["fine", 3])


# -- CallableEmbedder ------------------------------------------------------------------------


def test_callable_embedder_converts_and_normalises() -> None:
    emb = CallableEmbedder(lambda texts: [[3.0, 4.0], [0.0, 0.0]][: len(texts)], name="fixed")
    out = emb.embed(["a", "b"])
    assert out.dtype == np.float32 and emb.dim == 2 and emb.name == "fixed"
    np.testing.assert_allclose(out[0], [0.6, 0.8], atol=1e-7)
    np.testing.assert_array_equal(out[1], [0.0, 0.0])  # a zero row stays zero, never NaN


def test_callable_embedder_infers_dim_then_enforces_it() -> None:
    width = {"n": 5}
    emb = CallableEmbedder(lambda texts: np.ones((len(texts), width["n"])))
    assert emb.embed(["x"]).shape == (1, 5)
    assert emb.dim == 5
    width["n"] = 6
    with pytest.raises(ValueError, match="width 6, expected 5"):
        emb.embed(["x"])


def test_callable_embedder_dim_probe_and_empty_input() -> None:
    calls: list[list[str]] = []

    def fn(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return np.ones((len(texts), 4))

    assert CallableEmbedder(fn, dim=4).embed([]).shape == (0, 4)
    assert calls == []
    assert CallableEmbedder(fn).dim == 4  # unknown dim is probed with one text
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("output", "match"),
    [
        (np.ones((2, 3)), "shape"),  # 2 rows for 1 text
        (np.ones(3), "shape"),
        (np.ones((1, 3, 1)), "shape"),
        ([["a", "b"]], "numeric"),
        (np.array([[np.nan, 1.0]]), "NaN"),
    ],
)
def test_callable_embedder_rejects_bad_output(output: object, match: str) -> None:
    emb = CallableEmbedder(lambda texts: output)
    with pytest.raises(ValueError, match=match):
        emb.embed(["one"])


# -- as_embedder ---------------------------------------------------------------------------


def test_as_embedder() -> None:
    default = as_embedder(None)
    assert isinstance(default, SentenceTransformerEmbedder)
    assert not default.loaded and default.dim == 384  # lazy: nothing loaded yet
    test_double = DeterministicTestEmbedder()
    assert as_embedder(test_double) is test_double
    wrapped = as_embedder(lambda texts: np.ones((len(texts), 2)))
    assert isinstance(wrapped, CallableEmbedder)
    assert wrapped.embed(["a"]).shape == (1, 2)
    with pytest.raises(TypeError, match="embedder must be"):
        as_embedder(42)


def test_default_cache_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CACHEKIT_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "models"
    emb = SentenceTransformerEmbedder(backend="onnx")
    assert emb.onnx_export_dir == tmp_path / "models" / "all-MiniLM-L6-v2-onnx"
    assert emb.name == "all-MiniLM-L6-v2:onnx"


def test_sentence_transformer_embedder_rejects_bad_args() -> None:
    with pytest.raises(ValueError, match="backend"):
        SentenceTransformerEmbedder(backend="tensorrt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_threads"):
        SentenceTransformerEmbedder(num_threads=0)


# -- CachedEmbedder ------------------------------------------------------------------------


class CountingEmbedder:
    """Records every text it is asked to embed."""

    def __init__(self) -> None:
        self.inner = DeterministicTestEmbedder(dim=16)
        self.name = "counting"
        self.dim = 16
        self.batches: list[list[str]] = []
        self.per_text: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.fail_next = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("inner failed")
            self.batches.append(list(texts))
            self.per_text.update(texts)
        return self.inner.embed(texts)


def test_cached_embedder_embeds_each_text_once() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    assert cached.name == "counting" and cached.dim == 16
    first = cached.embed(["a", "b", "a"])
    assert inner.batches == [["a", "b"]]
    np.testing.assert_array_equal(first, inner.inner.embed(["a", "b", "a"]))
    second = cached.embed(["a", "c", "b"])
    assert inner.batches == [["a", "b"], ["c"]]
    np.testing.assert_array_equal(second, inner.inner.embed(["a", "c", "b"]))
    cached.embed(["c", "a"])
    assert len(inner.batches) == 2  # all hits: inner not called at all
    assert (cached.hits, cached.misses) == (1 + 2 + 2, 3)
    assert cached.embed([]).shape == (0, 16)
    assert len(inner.batches) == 2  # nothing to embed: inner not called


def test_cached_embedder_returns_copies() -> None:
    cached = CachedEmbedder(CountingEmbedder())
    out = cached.embed(["x"])
    out[:] = 0.0
    assert np.linalg.norm(cached.embed(["x"])[0]) == pytest.approx(1.0)


def test_cached_embedder_lru_eviction() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, max_entries=2)
    cached.embed(["a", "b"])
    cached.embed(["a"])  # refreshes a; b is now least recently used
    cached.embed(["c"])  # evicts b
    assert len(cached) == 2
    cached.embed(["a", "b"])
    assert inner.batches[-1] == ["b"]


def test_cached_embedder_is_bounded_in_bytes() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, max_bytes=16 * 4096)
    texts = [f"{i:03d}" + "x" * 3000 for i in range(40)]  # ~3.3 KB held each
    cached.embed(texts)
    assert 10 <= len(cached) < 20  # ~64 KiB of them, newest kept
    cached.embed(texts[-1:])
    assert inner.per_text[texts[-1]] == 1
    # A text over a sixteenth of the bound is embedded but never held.
    huge = "y" * 5000
    cached.embed([huge, huge])
    cached.embed([huge])
    assert inner.per_text[huge] == 2


def test_cached_embedder_failure_is_not_cached() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    inner.fail_next = True
    with pytest.raises(RuntimeError, match="inner failed"):
        cached.embed(["a"])
    assert cached.embed(["a"]).shape == (1, 16)
    assert inner.per_text["a"] == 1


def test_cached_embedder_concurrent_callers_share_work() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    texts = [f"text {i}" for i in range(40)]
    expected = inner.inner.embed(texts)
    barrier = threading.Barrier(6)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            barrier.wait()
            order = texts[offset:] + texts[:offset]
            out = cached.embed(order)
            results.append(np.roll(out, offset, axis=0))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i * 7,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert set(inner.per_text.values()) == {1}, "a text was embedded more than once"
    assert len(inner.per_text) == 40
    for out in results:
        np.testing.assert_array_equal(out, expected)
    assert cached.misses == 40 and cached.hits == 6 * 40 - 40


# -- real model ------------------------------------------------------------------------------
# The ONNX backend runs without torch; the torch backend (sentence-transformers) is the
# reference it must match, so these tests need the `torch` extra as the dev install has it.

PARAPHRASES = ("How do I reset my password?", "What are the steps to change my password?")
UNRELATED = "The recipe needs two cups of flour and an egg."
# Empty, whitespace, non-ASCII, between the 128 tokens tokenizer.json pads/truncates to and the
# model's 256, and past 256 (truncated): every case where a hand-written path could drift.
ODD_TEXTS = [
    "",
    "  spaced \t text\n",
    "Ünïcödé, 日本語 and an emoji 🙂",
    " ".join(f"word{i}" for i in range(60)),
    "what is the longest river in the world " * 60,
]
MIXED = [*PARAPHRASES, UNRELATED, *ODD_TEXTS, "a", "short one", "How do I learn Python fast?"]
# The fixed set the ONNX vectors are held to (cosine >= 0.99999 to sentence-transformers):
# questions, code, numbers, other scripts, casing, punctuation, long and truncated texts.
FIXED_SET = [
    *MIXED,
    "Translate 'good morning' into Spanish.",
    "def add(a, b):\n    return a + b",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;",
    "Order #A-1234 shipped on 2026-03-04 for $19.99",
    "WHAT IS THE CAPITAL OF FRANCE???",
    "what is the capital of france",
    "Wie spät ist es in Berlin?",
    "Какая погода в Москве завтра?",
    "東京から大阪まで新幹線で何時間かかりますか",
    "¿Dónde está la biblioteca?",
    "e = mc^2 and F = ma",
    "https://example.com/path?query=1&b=2",
    "I didn't say that. I did NOT say that!",
    "    leading and trailing spaces    ",
    "tab\tseparated\tvalues",
    "The quick brown fox jumps over the lazy dog. " * 12,
    "supercalifragilisticexpialidocious" * 4,
    "😀😃😄😁",
    "Is 7 a prime number?",
    "Summarize the following article in three bullet points: " + "lorem ipsum " * 100,
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_embedder(onnx_cache: Path) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(backend="onnx", cache_dir=onnx_cache).load()


@pytest.fixture(scope="module")
def torch_embedder() -> SentenceTransformerEmbedder:
    pytest.importorskip("sentence_transformers")
    return SentenceTransformerEmbedder(backend="torch").load()


def reference(torch_embedder: SentenceTransformerEmbedder, texts: list[str]) -> np.ndarray:
    """The texts through ``SentenceTransformer.encode`` itself (torch), uncut."""
    model = torch_embedder.sentence_transformer
    return model.encode(texts, batch_size=4, normalize_embeddings=True, convert_to_numpy=True)


@pytest.mark.model
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_model_shapes_and_normalisation(
    backend: str,
    onnx_embedder: SentenceTransformerEmbedder,
    torch_embedder: SentenceTransformerEmbedder,
) -> None:
    emb = onnx_embedder if backend == "onnx" else torch_embedder
    assert emb.backend == backend and emb.name == f"all-MiniLM-L6-v2:{backend}"
    assert isinstance(emb, Embedder)
    out = emb.embed([*PARAPHRASES, UNRELATED, ""])
    assert out.shape == (4, 384) and out.dtype == np.float32 and emb.dim == 384
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert emb.embed([]).shape == (0, 384)
    para = float(out[0] @ out[1])
    assert para > float(out[0] @ out[2]) + 0.3
    assert para > float(out[1] @ out[2]) + 0.3


@pytest.mark.model
def test_onnx_vectors_match_sentence_transformers_on_the_fixed_set(
    onnx_embedder: SentenceTransformerEmbedder, torch_embedder: SentenceTransformerEmbedder
) -> None:
    assert onnx_embedder.fast_path and onnx_embedder.sentence_transformer is None
    expected = reference(torch_embedder, FIXED_SET)
    one_by_one = np.vstack([onnx_embedder.embed([text]) for text in FIXED_SET])
    batch = onnx_embedder.embed(FIXED_SET)  # several sub-batches of mixed lengths
    assert batch.shape == (len(FIXED_SET), 384) and batch.dtype == np.float32
    assert batch.flags.c_contiguous
    for got in (one_by_one, batch):
        cosines = np.sum(got * expected, axis=1)
        assert cosines.min() >= 0.99999, FIXED_SET[int(cosines.argmin())]


@pytest.mark.model
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_a_long_text_is_cut_to_what_the_model_reads(
    backend: str,
    onnx_embedder: SentenceTransformerEmbedder,
    torch_embedder: SentenceTransformerEmbedder,
) -> None:
    from tokenizers import Tokenizer

    emb = onnx_embedder if backend == "onnx" else torch_embedder
    assert emb.model_folder is not None
    tokenizer = Tokenizer.from_file(str(emb.model_folder / "tokenizer.json"))
    limit = readable_chars(tokenizer, 256)
    assert limit == 256 * 101
    # Whitespace runs, a word longer than WordPiece reads, then 300 KB the model never reads.
    text = "tell me  about\n\n rivers " + "x" * 150 + " " + "\t".join(["forest"] * 60_000)
    cut = cut_to_readable(text, limit)
    assert len(cut) == limit and cut.startswith("tell me about rivers x")
    np.testing.assert_allclose(emb.embed([text]), reference(torch_embedder, [text]), atol=1e-5)
    assert cut_to_readable("short  text", limit) == "short  text"  # untouched below the bound


@pytest.mark.model
def test_onnx_load_writes_nothing(
    onnx_embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    # The graph is built in memory from the weights: no export, no cache, no file beside them.
    again = SentenceTransformerEmbedder(backend="onnx", cache_dir=tmp_path).load()
    assert list(tmp_path.iterdir()) == []
    assert again.model_folder is not None and not (again.model_folder / "onnx").exists()
    np.testing.assert_array_equal(again.embed(["x"]), onnx_embedder.embed(["x"]))


@pytest.mark.model
def test_model_concurrent_calls(onnx_embedder: SentenceTransformerEmbedder) -> None:
    texts = [f"question number {i} about caching" for i in range(8)]
    expected = onnx_embedder.embed(texts)
    results: dict[int, np.ndarray] = {}

    def worker(i: int) -> None:
        results[i] = onnx_embedder.embed(texts[i:] + texts[:i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, out in results.items():
        np.testing.assert_allclose(np.roll(out, i, axis=0), expected, atol=1e-5)


@pytest.mark.model
def test_auto_falls_back_to_torch(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    torch_embedder: SentenceTransformerEmbedder,
) -> None:
    def broken(self: SentenceTransformerEmbedder, folder: Path) -> None:
        raise ImportError("onnxruntime missing (simulated)")

    monkeypatch.setattr(SentenceTransformerEmbedder, "_load_onnx", broken)
    emb = SentenceTransformerEmbedder(backend="auto")
    with caplog.at_level(logging.WARNING, logger="cachekit.semantic.embed.embedder"):
        emb.load()
    assert emb.backend == "torch" and emb.name == "all-MiniLM-L6-v2:torch"
    assert "simulated" in caplog.text
    np.testing.assert_allclose(emb.embed(["x"]), torch_embedder.embed(["x"]), atol=1e-6)


@pytest.mark.model
def test_onnx_requested_does_not_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: SentenceTransformerEmbedder, folder: Path) -> None:
        raise ImportError("onnxruntime missing (simulated)")

    monkeypatch.setattr(SentenceTransformerEmbedder, "_load_onnx", broken)
    with pytest.raises(ImportError, match="simulated"):
        SentenceTransformerEmbedder(backend="onnx").load()


def test_quantize_argument_is_validated() -> None:
    with pytest.raises(ValueError, match="ONNX"):
        SentenceTransformerEmbedder(backend="torch", quantize="int8")
    with pytest.raises(ValueError, match="quantize"):
        SentenceTransformerEmbedder(quantize="int4")  # type: ignore[arg-type]


@pytest.mark.model
def test_int8_embedder_is_close_to_fp32_and_made_once(
    onnx_embedder: SentenceTransformerEmbedder, onnx_cache: Path
) -> None:
    q = SentenceTransformerEmbedder(backend="onnx", quantize="int8", cache_dir=onnx_cache).load()
    assert q.name == "all-MiniLM-L6-v2:onnx-int8" != onnx_embedder.name
    a, b = onnx_embedder.embed(MIXED), q.embed(MIXED)
    assert b.shape == a.shape and b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(a * b, axis=1)
    assert (cosines > 0.97).all() and (cosines < 0.99999).all()  # close, but not the same model
    made = list(q.onnx_export_dir.glob("model_int8_*.onnx"))
    assert len(made) == 1 and made[0].parent.parent == onnx_cache
    assert [p.name for p in q.onnx_export_dir.iterdir()] == [made[0].name]  # no temporaries
    mtime = made[0].stat().st_mtime_ns
    again = SentenceTransformerEmbedder(backend="onnx", quantize="int8", cache_dir=onnx_cache)
    np.testing.assert_array_equal(again.embed(MIXED), b)  # int8 depends on batch-mates
    assert made[0].stat().st_mtime_ns == mtime


@pytest.mark.model
def test_fast_path_truncates_at_max_seq_length(onnx_embedder: SentenceTransformerEmbedder) -> None:
    from tokenizers import Tokenizer

    assert onnx_embedder.model_folder is not None
    shipped = Tokenizer.from_file(str(onnx_embedder.model_folder / "tokenizer.json"))
    shipped.no_truncation()
    words = [f"token{i}" for i in range(400)]
    long_a, long_b = " ".join(words), " ".join([*words[:300], "entirely", "different", "tail"])
    middle = " ".join(words[:70])
    assert 128 < len(shipped.encode(middle).ids) < 250  # past tokenizer.json's 128, within 256
    out = onnx_embedder.embed([long_a, long_b, f"{middle} apple", f"{middle} quantum"])
    np.testing.assert_array_equal(out[0], out[1])  # both cut at 256 tokens, before they differ
    assert float(out[2] @ out[3]) < 0.9999  # a last word past token 128 still counts


@pytest.mark.model
def test_onnx_runner_concurrent_calls(onnx_embedder: SentenceTransformerEmbedder) -> None:
    from cachekit.semantic.embed.bert_graph import build_bert_graph
    from cachekit.semantic.embed.onnx_runner import onnx_session, session_options

    folder = onnx_embedder.model_folder
    assert folder is not None
    session = onnx_session(build_bert_graph(folder).SerializeToString(), session_options(1))
    runner = OnnxRunner.from_folder(folder, session, max_seq_length=256, batch_size=4)
    expected = runner.encode(MIXED)
    np.testing.assert_allclose(expected, onnx_embedder.embed(MIXED), atol=1e-6)
    results: dict[int, np.ndarray] = {}

    def worker(i: int) -> None:
        for _ in range(3):
            results[i] = runner.encode(MIXED[i:] + MIXED[:i])  # no lock: shared session

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2, 3]
    for i, out in results.items():
        np.testing.assert_allclose(np.roll(out, i, axis=0), expected, atol=1e-5)


def test_onnx_runner_rejects_bad_batch_size() -> None:
    class Session:
        def get_inputs(self) -> list[object]:
            return []

    with pytest.raises(ValueError, match="batch_size"):
        OnnxRunner(object(), Session(), pad_id=0, batch_size=0)


@pytest.mark.model
def test_a_model_the_onnx_path_does_not_cover_is_refused_or_run_on_torch(
    tmp_path: Path,
    onnx_embedder: SentenceTransformerEmbedder,
    torch_embedder: SentenceTransformerEmbedder,
) -> None:
    # The same weights behind CLS pooling: the ONNX path would compute the wrong vectors.
    assert onnx_embedder.model_folder is not None
    folder = tmp_path / "cls-pooled"
    shutil.copytree(onnx_embedder.model_folder, folder)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="not plain mean pooling"):
        SentenceTransformerEmbedder(folder, backend="onnx").load()
    auto = SentenceTransformerEmbedder(folder, backend="auto").load()
    assert auto.backend == "torch" and auto.name == "cls-pooled:torch"
    assert float(auto.embed(["x"])[0] @ torch_embedder.embed(["x"])[0]) < 0.9999


def test_cached_embedder_waiter_embeds_a_text_its_owner_failed_on() -> None:
    """A caller waiting for a text another call is embedding gets it from the cache once that
    call is done; when that call failed, the waiter embeds the text itself (not the failure)."""
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    release = threading.Event()
    real_embed = inner.embed

    def blocking_embed(texts: Sequence[str]) -> np.ndarray:
        if threading.current_thread().name == "owner":
            release.wait(10)
            raise RuntimeError("owner failed")
        return real_embed(texts)

    inner.embed = blocking_embed  # type: ignore[method-assign]
    owner_error: list[BaseException] = []

    def owner() -> None:
        try:
            cached.embed(["shared"])
        except RuntimeError as exc:
            owner_error.append(exc)

    t = threading.Thread(target=owner, name="owner")
    t.start()
    wait_until(lambda: "shared" in cached.in_flight)
    got: list[np.ndarray] = []
    w = threading.Thread(target=lambda: got.append(cached.embed(["shared", "other"])))
    w.start()
    wait_until(lambda: cached.waiters == 1)
    release.set()
    t.join(10)
    w.join(10)
    assert len(owner_error) == 1 and len(got) == 1
    np.testing.assert_array_equal(got[0], inner.inner.embed(["shared", "other"]))
    assert inner.per_text["shared"] == 1  # the waiter's own embed; the owner's never landed
