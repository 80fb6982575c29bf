"""The first semantic run, as a new user meets it: quiet, and its one-off costs kept out of the
request telemetry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cachekit import Cache
from cachekit.testing.embedders import DeterministicTestEmbedder

FIRST_LOAD = """
import json, sys, warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
    emb = SentenceTransformerEmbedder()
    emb.embed(["hello"])
heavy = [m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules]
print(json.dumps({"backend": emb.backend, "heavy": heavy,
                  "warnings": [f"{w.category.__name__}: {w.message}" for w in seen]}))
"""


@pytest.mark.model
def test_first_load_is_quiet_runs_without_torch_and_writes_nothing(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CACHEKIT_CACHE_DIR": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "PYTHONWARNINGS": "default",
    }
    out = subprocess.run(
        [sys.executable, "-c", FIRST_LOAD],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["warnings"] == []
    # Third-party libraries log through their own handlers to stderr: nothing may get there.
    assert out.stderr.strip() == "", out.stderr
    assert report["backend"] == "onnx"
    assert report["heavy"] == []  # the default embedder imports no torch, even where it is there
    assert list(tmp_path.iterdir()) == []  # the graph is built in memory: no export on disk


class LoadingEmbedder:
    """A test embedder whose first call "loads a model": it blocks until the test releases it,
    so the load is as long as the test makes it, with no clock involved."""

    def __init__(self, release: threading.Event) -> None:
        self.inner = DeterministicTestEmbedder()
        self.name = self.inner.name
        self.dim = self.inner.dim
        self.release = release
        self.loaded = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not self.loaded:
            assert self.release.wait(30)
            self.loaded = True
        return self.inner.embed(texts)


def test_model_load_is_reported_apart_from_embed_latency(closing: Callable[[Any], Any]) -> None:
    release = threading.Event()
    emb = LoadingEmbedder(release)
    cache = Cache()

    @cache.semantic(embedder=emb, threshold=0.9, ttl=60, batching=False)
    def answer(prompt: str) -> str:
        return prompt.upper()

    closing(answer)
    sec = cache.stats().extra["semantic:" + f"{answer.__module__}.{answer.__qualname__}"]
    assert sec["model_load_ms"] is None  # nothing loaded at decoration
    loader = threading.Thread(target=answer, args=("first question",))
    loader.start()
    # The load lasts as long as the test holds it: hold it for a good while in CPU terms.
    sum(range(2_000_000))
    release.set()
    loader.join(30)
    for i in range(5):
        answer(f"question number {i}")
    sec = cache.stats().extra["semantic:" + f"{answer.__module__}.{answer.__qualname__}"]
    assert sec["model_load_ms"] is not None
    assert sec["embed_p99_ms"] is not None  # later calls are request latency
    # ...and the loading call is not among them.
    assert answer.tier.embed_time.max * 1e3 < sec["model_load_ms"]
