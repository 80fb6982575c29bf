"""Import paths that moved in 0.x, kept working for one release with a :class:`DeprecationWarning`.

``import cachekit`` installs :class:`MovedModules` on ``sys.meta_path``: importing an old path
(``cachekit.storage.redis``, say) warns once, names the new path, and binds the old name to the
very module object of the new one, so classes and module state are shared, never copied.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: Old module path -> the path it moved to. Removed in the release after next.
MOVED: dict[str, str] = {
    "cachekit.types": "cachekit._core.types",
    "cachekit.protocols": "cachekit._core.protocols",
    "cachekit.serialization": "cachekit._core.serialization",
    "cachekit.keys": "cachekit._core.keys",
    "cachekit.validation": "cachekit._core.validation",
    "cachekit.extras": "cachekit._core.extras",
    "cachekit.lazy": "cachekit._core.lazy",
    "cachekit.health": "cachekit._core.health",
    "cachekit.sansio": "cachekit._core.sansio",
    "cachekit.engine": "cachekit._engine.engine",
    "cachekit.l1": "cachekit._engine.l1",
    "cachekit.fast_path": "cachekit._engine.fast_path",
    "cachekit.namespace": "cachekit._engine.namespace",
    "cachekit.invalidations": "cachekit._engine.invalidations",
    "cachekit.guard": "cachekit._engine.guard",
    "cachekit.breaker": "cachekit._engine.breaker",
    "cachekit.singleflight": "cachekit._engine.singleflight",
    "cachekit.background": "cachekit._engine.background",
    "cachekit.telemetry": "cachekit._engine.telemetry",
    "cachekit.semantic.batcher": "cachekit._engine.batcher",
    "cachekit.storage": "cachekit.backends",
    "cachekit.storage.base": "cachekit.backends.base",
    "cachekit.storage.memory": "cachekit.backends.memory",
    "cachekit.storage.redis": "cachekit.backends.redis",
    "cachekit.decorators": "cachekit.exact.decorator",
    "cachekit.features.keys": "cachekit.features.entity_keys",
    "cachekit.semantic.embedder": "cachekit.semantic.embed.embedder",
    "cachekit.semantic.embedding_cache": "cachekit.semantic.embed.cached",
    "cachekit.semantic.onnx_runner": "cachekit.semantic.embed.onnx_runner",
    "cachekit.semantic.bert_graph": "cachekit.semantic.embed.bert_graph",
    "cachekit.semantic.model_files": "cachekit.semantic.embed.model_files",
    "cachekit.semantic.tuned": "cachekit.semantic.embed.adapter",
    "cachekit.semantic.hnsw": "cachekit.semantic.index.hnsw",
    "cachekit.semantic.rwlock": "cachekit.semantic.index.rwlock",
    "cachekit.semantic.policies": "cachekit.semantic.policy.registry",
    "cachekit.semantic.verifier": "cachekit.semantic.policy.verifier",
    "cachekit.semantic.verifier_features": "cachekit.semantic.policy.verifier_features",
    "cachekit.semantic.error_bounded": "cachekit.semantic.policy.error_bounded",
    "cachekit.semantic.slots": "cachekit.semantic.policy.slots",
    "cachekit.semantic.slot_lexicon": "cachekit.semantic.policy.slot_lexicon",
    "cachekit.semantic.slot_order": "cachekit.semantic.policy.slot_order",
    "cachekit.semantic.slot_parse": "cachekit.semantic.policy.slot_parse",
    "cachekit.semantic.pairs": "cachekit.semantic.policy.pairs",
    "cachekit.policy_options": "cachekit.semantic.policy.options",
    "cachekit.semantic.shared_store": "cachekit.backends.semantic_store",
    "cachekit.semantic.tune": "cachekit.semantic.train.tune",
    "cachekit.semantic.tune_config": "cachekit.semantic.train.settings",
    "cachekit.semantic.testing": "cachekit.testing.embedders",
    "cachekit.proxy.testing": "cachekit.testing.upstream",
    "cachekit.demo": "cachekit.cli.demo",
    "cachekit.labels": "cachekit.cli.export_labels",
    "cachekit.replay.labels": "cachekit.replay.truth_pairs",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; the old path goes in the release after next",
            DeprecationWarning,
            stacklevel=_importer_level(),
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is the new path's, already imported."""


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds an old path of :data:`MOVED` and hands back the module it moved to."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def _importer_level() -> int:
    """The stack level of the first frame outside the import machinery (the user's import)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(("<frozen", __file__)):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
