"""tests/base_install.txt lists the test modules that run on a base install (the package without
extras); CI runs exactly that list against the built wheel. These checks keep the list in step
with the suite: the whole suite is collected in a stand-in base venv (tests/base_install.py),
every listed module must import there, and every other module that imports there must be left
out on purpose, below."""

from __future__ import annotations

import re
from pathlib import Path

import base_install
import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
LIST = TESTS / "base_install.txt"

# Modules that import on a base install but are not in the list, and why.
LEFT_OUT = {
    "tests/test_base_install.py": "this guard: it builds its own base venv",
    "tests/test_cache_redis.py": "every test needs redis-py and a redis-server",
    "tests/test_extras.py": "expects the dev environment's extras and checkout install hints",
    "tests/test_extras_wired.py": "hides one extra at a time from an environment with all of them",
    "tests/test_model_files.py": "finds the embedding model's files through the embedder (numpy)",
    "tests/test_replay_model.py": "loads the real embedding model (the model extra)",
    "tests/test_semantic_model.py": "loads the real embedding model (the model extra)",
}

_COLLECTED = re.compile(r"^(tests/\S+\.py): \d+$", re.MULTILINE)
_FAILED = re.compile(r"^ERROR (tests/\S+\.py)", re.MULTILINE)


def listed() -> list[str]:
    """The module paths in tests/base_install.txt, in order (comments and blanks skipped)."""
    lines = (line.strip() for line in LIST.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def importable() -> set[str]:
    """The test modules that collect at least one test in a base venv, without errors."""
    done = base_install.run_pytest(
        ["--collect-only", "-qq", "--tb=no", "-p", "no:cacheprovider", "tests"], cwd=ROOT
    )
    collected = set(_COLLECTED.findall(done.stdout))
    assert collected, f"nothing collected in the base venv:\n{done.stdout}\n{done.stderr}"
    return collected - set(_FAILED.findall(done.stdout))


def test_the_list_names_existing_test_modules_once() -> None:
    names = listed()
    assert len(names) == len(set(names)), "a module is listed twice"
    assert all(re.fullmatch(r"tests/test_\w+\.py", name) for name in names), names
    missing = [name for name in names if not (ROOT / name).is_file()]
    assert not missing, f"tests/base_install.txt lists modules that do not exist: {missing}"
    assert not set(names) & set(LEFT_OUT), "a module is both listed and left out"


def test_every_listed_module_imports_on_a_base_install(importable: set[str]) -> None:
    broken = sorted(set(listed()) - importable)
    assert not broken, (
        f"{broken} no longer import on a base install (run `python tests/base_install.py "
        "--collect-only <module>` to see why): import the extra inside the tests that need "
        "it (pytest.importorskip), or take the module out of tests/base_install.txt"
    )


def test_every_module_that_imports_on_a_base_install_is_listed(importable: set[str]) -> None:
    unlisted = sorted(importable - set(listed()) - set(LEFT_OUT))
    assert not unlisted, (
        f"{unlisted} import on a base install: add them to tests/base_install.txt, or to "
        "LEFT_OUT in tests/test_base_install.py with the reason"
    )
