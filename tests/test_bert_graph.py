"""The BERT graph built from safetensors (cachekit.semantic.embed.bert_graph), on a tiny random BERT
the test writes: its ONNX Runtime output against a numpy forward pass of the same weights, and
what the builder refuses. The real model's vectors are compared with sentence-transformers in
tests/test_embedder.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("safetensors")

from cachekit.semantic.embed.bert_graph import (
    IR_VERSION,
    UnsupportedModelError,
    build_bert_graph,
)
from cachekit.semantic.embed.onnx_runner import onnx_session, session_options

HIDDEN, HEADS, INNER, LAYERS, VOCAB, POSITIONS = 8, 2, 16, 2, 30, 16
EPS = 1e-12


def tiny_bert(folder: Path, seed: int = 0, prefix: str = "") -> dict[str, np.ndarray]:
    """A random BERT's config.json and model.safetensors in ``folder``; returns the weights."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)

    def r(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.5, shape).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": r(VOCAB, HIDDEN),
        "embeddings.position_embeddings.weight": r(POSITIONS, HIDDEN),
        "embeddings.token_type_embeddings.weight": r(2, HIDDEN),
        "embeddings.LayerNorm.weight": 1 + r(HIDDEN) / 5,
        "embeddings.LayerNorm.bias": r(HIDDEN) / 5,
    }
    for i in range(LAYERS):
        pre = f"encoder.layer.{i}."
        for name, shape in (
            ("attention.self.query", (HIDDEN, HIDDEN)),
            ("attention.self.key", (HIDDEN, HIDDEN)),
            ("attention.self.value", (HIDDEN, HIDDEN)),
            ("attention.output.dense", (HIDDEN, HIDDEN)),
            ("intermediate.dense", (INNER, HIDDEN)),
            ("output.dense", (HIDDEN, INNER)),
        ):
            w[f"{pre}{name}.weight"] = r(*shape)
            w[f"{pre}{name}.bias"] = r(shape[0])
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{pre}{norm}.weight"] = 1 + r(HIDDEN) / 5
            w[f"{pre}{norm}.bias"] = r(HIDDEN) / 5
    folder.mkdir(parents=True, exist_ok=True)
    save_file({prefix + k: v for k, v in w.items()}, str(folder / "model.safetensors"))
    config = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INNER,
        "max_position_embeddings": POSITIONS,
        "layer_norm_eps": EPS,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return w


def reference(w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """BERT's forward pass in numpy (float64): the hidden states the graph must give."""
    erf = np.vectorize(math.erf)

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + EPS) * w[f"{name}.weight"] + w[f"{name}.bias"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T.astype(np.float64) + w[f"{name}.bias"]

    seq = ids.shape[1]
    x = w["embeddings.word_embeddings.weight"][ids].astype(np.float64)
    x += (
        w["embeddings.position_embeddings.weight"][:seq]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = norm(x, "embeddings.LayerNorm")
    blocked = np.where(mask[:, None, None, :] == 1, 0.0, -1e9)
    size = HIDDEN // HEADS
    for i in range(LAYERS):
        pre = f"encoder.layer.{i}."

        def heads(t: np.ndarray) -> np.ndarray:
            return t.reshape(t.shape[0], seq, HEADS, size).transpose(0, 2, 1, 3)

        q, k, v = (heads(dense(x, f"{pre}attention.self.{p}")) for p in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + blocked
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attended = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = norm(
            x + dense(attended, f"{pre}attention.output.dense"), f"{pre}attention.output.LayerNorm"
        )
        inner = dense(x, f"{pre}intermediate.dense")
        inner = 0.5 * inner * (1 + erf(inner / math.sqrt(2)))
        x = norm(x + dense(inner, f"{pre}output.dense"), f"{pre}output.LayerNorm")
    return x


def run(folder: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    model = build_bert_graph(folder)
    session = onnx_session(model.SerializeToString(), session_options(1))
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (hidden,) = session.run(["last_hidden_state"], feeds)
    return np.asarray(hidden)


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_the_graph_computes_bert(tmp_path: Path, prefix: str) -> None:
    w = tiny_bert(tmp_path / "m", prefix=prefix)
    ids = np.array([[1, 5, 7, 9, 2, 0, 0], [1, 3, 4, 6, 8, 11, 2]], dtype=np.int64)
    mask = (np.arange(7) < np.array([[5], [7]])).astype(np.int64)  # right padding
    got = run(tmp_path / "m", ids, mask)
    expected = reference(w, ids, mask)
    assert got.shape == (2, 7, HIDDEN) and got.dtype == np.float32
    real = mask.astype(bool)  # padded positions' states are never read (pooling masks them)
    np.testing.assert_allclose(got[real], expected[real], atol=2e-4)


def test_padding_does_not_change_a_text_states(tmp_path: Path) -> None:
    tiny_bert(tmp_path / "m")
    alone = run(tmp_path / "m", np.array([[1, 5, 7, 2]]), np.ones((1, 4), np.int64))
    padded = run(tmp_path / "m", np.array([[1, 5, 7, 2, 0, 0]]), np.array([[1, 1, 1, 1, 0, 0]]))
    np.testing.assert_allclose(padded[:, :4], alone, atol=1e-5)


def test_the_graph_states_an_ir_version_older_runtimes_read(tmp_path: Path) -> None:
    # make_model writes the newest IR its onnx knows (14 in onnx 1.23), which onnxruntime 1.30
    # refuses: the graph states opset 17's own.
    tiny_bert(tmp_path / "m")
    model = build_bert_graph(tmp_path / "m")
    assert model.ir_version == IR_VERSION == 8
    assert {o.domain: o.version for o in model.opset_import} == {"": 17, "com.microsoft": 1}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"model_type": "roberta"}, "model_type"),
        ({"hidden_act": "relu"}, "hidden_act"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ({"num_attention_heads": 3}, "multiple of the heads"),
    ],
)
def test_what_it_does_not_reproduce_is_refused(
    tmp_path: Path, change: dict[str, object], match: str
) -> None:
    tiny_bert(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(UnsupportedModelError, match=match):
        build_bert_graph(tmp_path / "m")


def test_missing_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedModelError, match=r"config\.json"):
        build_bert_graph(tmp_path)
    tiny_bert(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(UnsupportedModelError, match=r"model\.safetensors"):
        build_bert_graph(tmp_path / "m")
