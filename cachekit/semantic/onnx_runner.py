"""The per-call path of an ONNX sentence-transformers model, without sentence-transformers.

:class:`OnnxRunner` takes the fast tokenizer and the ONNX Runtime session of a loaded
``SentenceTransformer`` (Transformer -> mean Pooling [-> Normalize]) and computes the same
vectors with the tokenizer, one ``session.run`` per sub-batch, and mean pooling plus L2
normalisation in numpy: no torch tensors, feature dicts or module dispatch per call.
Loading and exporting stay with sentence-transformers; :meth:`OnnxRunner.from_model` returns
``None`` for any model it cannot reproduce exactly, and the caller keeps ``model.encode``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatMatrix = npt.NDArray[np.float32]

__all__ = ["OnnxRunner"]

logger = logging.getLogger(__name__)

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
    def from_model(cls, model: Any, batch_size: int) -> OnnxRunner | None:
        """A runner for a loaded ONNX ``SentenceTransformer``, or ``None`` when its modules are
        not exactly Transformer (ONNX, fast tokenizer) -> mean Pooling [-> Normalize]."""
        why = _unsupported(model)
        if why is not None:
            logger.debug("ONNX fast path off for this model: %s", why)
            return None
        hf_tokenizer = model[0].tokenizer
        tokenizer = _tokenizer_copy(hf_tokenizer.backend_tokenizer, int(model.max_seq_length))
        session = model[0].auto_model.session
        return cls(tokenizer, session, pad_id=int(hf_tokenizer.pad_token_id), batch_size=batch_size)

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


def _unsupported(model: Any) -> str | None:
    """Why ``model`` cannot take the fast path, or ``None`` when it can."""
    # The module path of the pinned sentence-transformers 5.7 (`.models` is deprecated there).
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    modules = list(model)
    if len(modules) not in (2, 3) or not isinstance(modules[0], Transformer):
        return "modules are not Transformer -> Pooling [-> Normalize]"
    if len(modules) == 3 and not isinstance(modules[2], Normalize):
        return "third module is not Normalize"
    pooling = modules[1]
    if not isinstance(pooling, Pooling) or pooling.pooling_mode not in ("mean", ("mean",)):
        return "pooling is not plain mean pooling"
    if getattr(model, "default_prompt_name", None):
        return "model has a default prompt"
    if not isinstance(getattr(model, "max_seq_length", None), int):
        return "model has no max_seq_length"
    tokenizer = getattr(modules[0], "tokenizer", None)
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        return "no fast tokenizer"
    if tokenizer.pad_token_id is None:
        return "tokenizer has no padding token"
    return _session_unsupported(getattr(modules[0].auto_model, "session", None))


def _session_unsupported(session: Any) -> str | None:
    import onnxruntime as ort

    if not isinstance(session, ort.InferenceSession):
        return "no ONNX Runtime session"
    inputs = {i.name for i in session.get_inputs()}
    if not inputs <= _KNOWN_INPUTS or "input_ids" not in inputs:
        return f"unexpected ONNX inputs {sorted(inputs)}"
    if _HIDDEN_OUTPUT not in {o.name for o in session.get_outputs()}:
        return f"ONNX graph has no {_HIDDEN_OUTPUT} output"
    return None


def _tokenizer_copy(backend_tokenizer: Any, max_length: int) -> Any:
    """A private copy of a ``tokenizers.Tokenizer``: truncation at the model's max_seq_length,
    padding done per sub-batch by :func:`_padded` (tokenizer.json may fix both at 128)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(backend_tokenizer.to_str())
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    return tokenizer


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
