"""The per-call path of a mean-pooled text encoder in ONNX Runtime: tokenizer, one
``session.run`` per sub-batch, mean pooling and L2 normalisation in numpy.

:class:`OnnxRunner` computes the vectors ``SentenceTransformer.encode`` computes for a
Transformer -> mean Pooling [-> Normalize] model (to ~1e-7), with the model's own
``tokenizer.json`` (through ``tokenizers``) and no torch. :func:`onnx_session` opens the model:
an ONNX file, or the graph :func:`~cachekit.semantic.embed.bert_graph.build_bert_graph` builds from
the weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatMatrix = npt.NDArray[np.float32]

__all__ = ["OnnxRunner", "onnx_session", "session_options"]

_KNOWN_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})
_HIDDEN_OUTPUT = "last_hidden_state"
# Above this many texts, `encode_batch` (parallel, in Rust) beats a loop of `encode`; below it
# the thread pool's start costs more than it saves (about 200 vs 120 µs for 4 short texts).
_PARALLEL_TOKENIZE_FROM = 16


class OnnxRunner:
    """Tokenizer + ONNX Runtime session + numpy pooling for one mean-pooled text model.

    ``encode`` sorts a call's texts by length and runs them in sub-batches of ``batch_size``, each
    padded to its longest text, as ``SentenceTransformer.encode`` does. Not locked: the tokenizer
    and the session allow concurrent calls.
    """

    def __init__(self, tokenizer: Any, session: Any, *, pad_id: int, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._tokenizer = tokenizer
        self._session = session
        self._inputs = [i.name for i in session.get_inputs()]
        self._pad_id = pad_id
        self._batch_size = batch_size

    @classmethod
    def from_folder(
        cls, folder: Path, session: Any, *, max_seq_length: int, batch_size: int
    ) -> OnnxRunner:
        """A runner of ``session`` with the ``tokenizer.json`` in ``folder``, truncating at
        ``max_seq_length`` tokens."""
        from tokenizers import Tokenizer

        tokenizer = _tokenizer_copy(
            Tokenizer.from_file(str(folder / "tokenizer.json")), max_seq_length
        )
        return cls(tokenizer, session, pad_id=_pad_id(tokenizer), batch_size=batch_size)

    @property
    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` in use (truncating, not padding)."""
        return self._tokenizer

    def encode(self, texts: Sequence[str]) -> FloatMatrix:
        """L2-normalised float32 embeddings, one row per text, in input order."""
        encodings = self._tokenize(texts)
        out = np.empty((len(encodings), 0), dtype=np.float32)
        # The very ordering sentence-transformers uses, so that sub-batches are the same texts:
        # int8 vectors depend on their batch-mates (quantization ranges are per tensor).
        order = np.argsort([-len(text) for text in texts])
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            vectors = self._run([encodings[i] for i in rows])
            if out.shape[1] == 0:
                out = np.empty((len(encodings), vectors.shape[1]), dtype=np.float32)
            out[rows] = vectors
        return out

    def _tokenize(self, texts: Sequence[str]) -> list[Any]:
        if len(texts) >= _PARALLEL_TOKENIZE_FROM:
            return list(self._tokenizer.encode_batch(list(texts)))
        return [self._tokenizer.encode(text) for text in texts]

    def _run(self, encodings: list[Any]) -> FloatMatrix:
        ids, types, mask = _padded(encodings, self._pad_id)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        (hidden,) = self._session.run([_HIDDEN_OUTPUT], {k: feeds[k] for k in self._inputs})
        return _mean_pool_normalised(np.asarray(hidden, dtype=np.float32), mask)


def session_options(num_threads: int) -> Any:
    """ONNX Runtime options for an encoder sharing its machine: ``num_threads`` intra-op
    threads that sleep when idle, one inter-op thread, sequential execution."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    # One encoder graph has no independent branches worth a second pool.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Idle ORT workers otherwise busy-wait between calls, taking the cores faiss and the caller
    # need; on 2 shared cores that tripled single-text latency.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def onnx_session(model: bytes | Path, options: Any, device: str = "cpu") -> Any:
    """An ``InferenceSession`` of ``model`` (serialized bytes or a file) on ``device``
    (``cpu``, or ``cuda[:N]`` with onnxruntime-gpu), checked to take the known inputs and give
    ``last_hidden_state``."""
    import onnxruntime as ort

    providers: list[Any] = ["CPUExecutionProvider"]
    if device.startswith("cuda"):
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise RuntimeError("device='cuda' needs onnxruntime-gpu (CUDAExecutionProvider)")
        index = int(device.partition(":")[2] or 0)
        providers = [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]
    source = model if isinstance(model, bytes) else str(model)
    session = ort.InferenceSession(source, options, providers=providers)
    why = _session_unsupported(session)
    if why is not None:
        raise ValueError(f"the ONNX model cannot be run as a text encoder: {why}")
    return session


def _session_unsupported(session: Any) -> str | None:
    inputs = {i.name for i in session.get_inputs()}
    if not inputs <= _KNOWN_INPUTS or "input_ids" not in inputs:
        return f"unexpected ONNX inputs {sorted(inputs)}"
    if _HIDDEN_OUTPUT not in {o.name for o in session.get_outputs()}:
        return f"ONNX graph has no {_HIDDEN_OUTPUT} output"
    return None


def _tokenizer_copy(tokenizer: Any, max_length: int) -> Any:
    """``tokenizer`` set to truncate at the model's max_seq_length and not to pad: padding is
    done per sub-batch by :func:`_padded` (MiniLM's tokenizer.json fixes both at 128, while the
    model reads 256 tokens)."""
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    return tokenizer


def _pad_id(tokenizer: Any) -> int:
    """The padding token's id: from the tokenizer's padding settings as shipped, else
    ``[PAD]``'s, else 0 (a padded position is masked out of attention and pooling anyway)."""
    for token in ("[PAD]", "<pad>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return 0


def _padded(encodings: list[Any], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``input_ids``, ``token_type_ids`` and ``attention_mask`` (int64), right-padded to the
    longest encoding."""
    width = max(len(e.ids) for e in encodings)
    ids = np.full((len(encodings), width), pad_id, dtype=np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        ids[row, :n] = enc.ids
        types[row, :n] = enc.type_ids
        mask[row, :n] = 1
    return ids, types, mask


def _mean_pool_normalised(hidden: np.ndarray, mask: np.ndarray) -> FloatMatrix:
    """sentence-transformers' mean pooling (padding masked, count clamped at 1e-9) followed by
    its Normalize (norm clamped at 1e-12), in float32."""
    weights = mask.astype(np.float32)
    summed = np.einsum("bld,bl->bd", hidden, weights)
    pooled = summed / np.maximum(weights.sum(axis=1, keepdims=True), np.float32(1e-9))
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return np.ascontiguousarray(pooled / np.maximum(norms, np.float32(1e-12)), dtype=np.float32)
