"""Optional dependencies: import them by feature, and say which extra to install when one is
missing, once, where the feature is set up (decoration or registration), not deep in a call.

``import cachekit`` imports none of these; each entry point calls :func:`require` for the modules
it needs when it is created.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from types import ModuleType

__all__ = ["MissingExtraError", "check_faiss_distributions", "require", "require_installed"]

# The faiss distributions that provide the module ``faiss``; they overwrite each other's files.
FAISS_CPU = ("faiss-cpu",)
FAISS_GPU = ("faiss-gpu", "faiss-gpu-cu11", "faiss-gpu-cu12")


class MissingExtraError(ImportError):
    """An optional dependency of a feature is not installed; the message says which extra."""


def _missing(module: str, extra: str, feature: str) -> MissingExtraError:
    hint = ""
    if extra in ("torch", "model", "tune", "gpu", "all"):
        hint = " (install torch==2.13.0 first: a bare torch requirement pulls a CUDA build)"
    return MissingExtraError(
        f"{feature} needs the {extra!r} extra ({module} is missing): in a cachekit checkout, "
        f"pip install -e '.[{extra}]'; from a package index, pip install 'cachekit-ml[{extra}]'"
        f"{hint}"
    )


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature`` or raise :class:`MissingExtraError` naming the extra.

    >>> require("json", extra="none", feature="tests").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise _missing(module, extra, feature) from exc


def require_installed(module: str, *, extra: str, feature: str) -> None:
    """Like :func:`require` without importing: for modules that take seconds to import (torch,
    sentence-transformers) and are loaded later, on first use."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, or a blocked module
        found = False
    if not found:
        raise _missing(module, extra, feature)


def installed(distributions: tuple[str, ...]) -> list[str]:
    """Which of ``distributions`` are installed."""
    found = []
    for name in distributions:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


def check_faiss_distributions() -> None:
    """Refuse a mixed faiss install: faiss-cpu and faiss-gpu both provide the module ``faiss``
    and whichever was installed last silently wins, file by file."""
    cpu, gpu = installed(FAISS_CPU), installed(FAISS_GPU)
    if cpu and gpu:
        raise ImportError(
            f"both {cpu[0]} and {gpu[0]} are installed; they provide the same module 'faiss' and "
            f"overwrite each other. Keep one: on a GPU machine `pip uninstall -y {cpu[0]} && "
            f"pip install --force-reinstall {gpu[0]}` (the 'gpu' extra), elsewhere "
            f"`pip uninstall -y {gpu[0]} && pip install --force-reinstall {cpu[0]}` "
            "(the 'semantic' extra)."
        )
