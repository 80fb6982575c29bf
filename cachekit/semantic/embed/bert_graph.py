"""An ONNX graph of a BERT encoder, built from its ``config.json`` and safetensors weights with
the ``onnx`` package alone: no torch, no exporter.

:func:`build_bert_graph` writes the graph that onnxruntime's transformer optimizer makes of a
Hugging Face export, directly: one ``EmbedLayerNormalization``, then per layer one
``Attention`` (query, key and value in one matrix), ``SkipLayerNormalization`` after the
attention output and after the feed-forward block, and ``BiasGelu`` (the exact, erf form of
BERT's ``gelu``) between its two products. These are onnxruntime's own operators (domain
``com.microsoft``, on its CPU and CUDA providers), so the graph is for onnxruntime.

Inputs are ``input_ids``, ``attention_mask`` and ``token_type_ids`` (int64, ``(batch, seq)``,
padding on the right, as :class:`~cachekit.semantic.embed.onnx_runner.OnnxRunner` feeds them); the
output is ``last_hidden_state`` (float32, ``(batch, seq, hidden)``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = ["UnsupportedModelError", "bert_config", "build_bert_graph", "weights_file"]

_MS = "com.microsoft"
_OPSET = 17
# The IR version of opset 17 (onnx 1.12). make_model writes the newest IR its onnx knows, which
# an older onnxruntime refuses ("Unsupported model IR version: 14, max supported IR version: 13"
# was onnx 1.23 with onnxruntime 1.30): the graph says the oldest that carries its operators.
IR_VERSION = 8
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"


class UnsupportedModelError(ValueError):
    """The folder holds a model this builder does not cover (not a BERT encoder, another
    activation or position scheme, or no safetensors weights)."""


def bert_config(folder: Path) -> dict[str, Any]:
    """The folder's ``config.json``, checked to be an encoder this builder reproduces exactly."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModelError(f"{folder}: no readable config.json ({exc})") from exc
    checks = {
        "model_type": ("bert",),
        "hidden_act": ("gelu",),
        "position_embedding_type": ("absolute", None),
    }
    for key, allowed in checks.items():
        if config.get(key) not in allowed:
            raise UnsupportedModelError(f"{folder}: {key}={config.get(key)!r}, not {allowed[0]}")
    if int(config["hidden_size"]) % int(config["num_attention_heads"]):
        raise UnsupportedModelError(f"{folder}: hidden_size is not a multiple of the heads")
    return dict(config)


def weights_file(folder: Path) -> Path:
    """The model's safetensors weights (one file; sharded checkpoints are not covered)."""
    path = folder / "model.safetensors"
    if not path.is_file():
        raise UnsupportedModelError(f"{folder}: no model.safetensors")
    return path


def build_bert_graph(folder: str | Path) -> onnx.ModelProto:
    """The ONNX model of the BERT encoder in ``folder`` (see the module docstring)."""
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    root = Path(folder)
    config = bert_config(root)
    weights = _Weights(load_file(str(weights_file(root))))
    eps = float(config.get("layer_norm_eps", 1e-12))
    graph = _Graph()
    for name in _INPUTS:
        graph.node("Cast", [name], f"{name}_i32", to=TensorProto.INT32)
    hidden, mask_index = "embedded", "mask_index"
    graph.node(
        "EmbedLayerNormalization",
        [
            "input_ids_i32",
            "token_type_ids_i32",
            graph.const("word", weights["embeddings.word_embeddings.weight"]),
            graph.const("position", weights["embeddings.position_embeddings.weight"]),
            graph.const("token_type", weights["embeddings.token_type_embeddings.weight"]),
            graph.const("emb_gamma", weights["embeddings.LayerNorm.weight"]),
            graph.const("emb_beta", weights["embeddings.LayerNorm.bias"]),
            "attention_mask_i32",
        ],
        [hidden, mask_index],
        domain=_MS,
        epsilon=eps,
    )
    for i in range(int(config["num_hidden_layers"])):
        hidden = _layer(graph, weights, i, hidden, mask_index, config, eps)
    graph.node("Identity", [hidden], OUTPUT)
    dims = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, dims) for n in _INPUTS]
    output = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [*dims, "hidden"])
    onnx_graph = helper.make_graph(graph.nodes, "bert", inputs, [output], graph.initializers)
    opsets = [helper.make_opsetid("", _OPSET), helper.make_opsetid(_MS, 1)]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="cachekit")
    model.ir_version = IR_VERSION
    return model


def _layer(
    graph: _Graph,
    weights: _Weights,
    i: int,
    x: str,
    mask_index: str,
    config: dict[str, Any],
    eps: float,
) -> str:
    """One encoder layer: attention, add and norm, feed-forward, add and norm."""
    pre = f"encoder.layer.{i}."
    att = pre + "attention."
    qkv = ("query", "key", "value")
    qkv_weight = np.concatenate([weights.linear(f"{att}self.{p}.weight") for p in qkv], axis=1)
    qkv_bias = np.concatenate([weights[f"{att}self.{p}.bias"] for p in qkv])
    attended = graph.node(
        "Attention",
        [
            x,
            graph.const(f"l{i}_qkv_w", qkv_weight),
            graph.const(f"l{i}_qkv_b", qkv_bias),
            mask_index,
        ],
        f"l{i}_attention",
        domain=_MS,
        num_heads=int(config["num_attention_heads"]),
    )
    projected = graph.matmul(f"l{i}_att_out", attended, weights.linear(f"{att}output.dense.weight"))
    x = graph.skip_norm(f"l{i}_att_norm", projected, x, weights, f"{att}output.", eps)
    inner = graph.matmul(f"l{i}_inner", x, weights.linear(f"{pre}intermediate.dense.weight"))
    bias = graph.const(f"l{i}_inner_b", weights[f"{pre}intermediate.dense.bias"])
    activated = graph.node("BiasGelu", [inner, bias], f"l{i}_gelu", domain=_MS)
    out = graph.matmul(f"l{i}_out", activated, weights.linear(f"{pre}output.dense.weight"))
    return graph.skip_norm(f"l{i}_out_norm", out, x, weights, f"{pre}output.", eps)


class _Weights:
    """Tensors by their BertModel names, with or without a ``bert.`` prefix (a checkpoint saved
    from a task model carries one)."""

    def __init__(self, tensors: dict[str, np.ndarray]) -> None:
        self._tensors = tensors

    def __getitem__(self, name: str) -> np.ndarray:
        for key in (name, f"bert.{name}"):
            if key in self._tensors:
                return np.asarray(self._tensors[key], dtype=np.float32)
        raise UnsupportedModelError(f"weights have no tensor {name!r}")

    def linear(self, name: str) -> np.ndarray:
        """A ``Linear`` weight (out, in) as the (in, out) right operand of a MatMul."""
        return np.ascontiguousarray(self[name].T)


class _Graph:
    """Nodes and initializers as they are added, with unique output names."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: str | list[str], **attrs: Any) -> str:
        from onnx import helper

        outs = [outputs] if isinstance(outputs, str) else outputs
        domain = attrs.pop("domain", "")
        name = f"{op}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, domain=domain, **attrs))
        return outs[0]

    def matmul(self, name: str, x: str, weight: np.ndarray) -> str:
        return self.node("MatMul", [x, self.const(f"{name}_w", weight)], name)

    def skip_norm(
        self, name: str, x: str, skip: str, weights: _Weights, prefix: str, eps: float
    ) -> str:
        """LayerNorm(x + bias + skip): the dense layer's bias is added here, once."""
        inputs = [
            x,
            skip,
            self.const(f"{name}_gamma", weights[f"{prefix}LayerNorm.weight"]),
            self.const(f"{name}_beta", weights[f"{prefix}LayerNorm.bias"]),
            self.const(f"{name}_bias", weights[f"{prefix}dense.bias"]),
        ]
        return self.node("SkipLayerNormalization", inputs, name, domain=_MS, epsilon=eps)
