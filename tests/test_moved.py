"""Old import paths keep working for one release: each warns, names its new path, and is
the very module object of the new path (docs/api.md, "Moved import paths")."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from cachekit._core.moved import MOVED

#: Old paths whose new module needs no extra (a base install has them).
BASE = ["cachekit.types", "cachekit.storage", "cachekit.storage.memory", "cachekit.decorators"]


@pytest.mark.parametrize("old", BASE)
def test_an_old_path_warns_and_is_the_new_module(old: str) -> None:
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "assert old is new, (old, new)\n"
        "assert caught and all(w.category is DeprecationWarning for w in caught)\n"
        "print(caught[-1].message)\n"  # a moved package's submodule: the package warns too
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert MOVED[old] in out.stdout and "release after next" in out.stdout


def test_every_new_path_exists() -> None:
    missing = []
    for new in sorted(set(MOVED.values())):
        try:
            spec = importlib.util.find_spec(new)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            missing.append(new)
    assert not missing, missing


def test_a_path_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("cachekit.backends.nope")
