"""The ``cachekit`` command (:mod:`~cachekit.cli.main`) and the subcommands that are applications
of their own: ``demo`` and ``export-labels``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.cli.main import build_parser, main

__all__ = [
    "build_parser",
    "main",
]

_LAZY = {
    "main": "cachekit.cli.main",
    "build_parser": "cachekit.cli.main",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
