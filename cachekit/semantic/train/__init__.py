"""``cachekit tune``: fine-tune the packaged embedder on labelled pairs as a small adapter
(:mod:`~cachekit.semantic.train.tune`; needs the ``tune`` extra), with its settings importable
without numpy or torch (:mod:`~cachekit.semantic.train.settings`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.semantic.train.settings import TuneConfig
    from cachekit.semantic.train.tune import TuneResult, run_tune, tune

__all__ = [
    "TuneConfig",
    "TuneResult",
    "run_tune",
    "tune",
]

_LAZY = {
    "TuneConfig": "cachekit.semantic.train.settings",
    "TuneResult": "cachekit.semantic.train.tune",
    "tune": "cachekit.semantic.train.tune",
    "run_tune": "cachekit.semantic.train.tune",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
