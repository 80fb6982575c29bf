"""The docs name only paths a reader of the repository has: no ``../`` path out of it, and every
benchmark script or module they cite exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
#: What the build scripts write (git-ignored): cited as paths, present only once built.
BUILT = ("bench/data/qqp/", "bench/data/replay/")

LINK = re.compile(r"\]\(([^)\s]+)\)")
UP = re.compile(r"(?<![\w.])(?:\.\./)+[\w.~-][^\s`'\")\]]*")
# bench/... as a path of this checkout: not inside another path (/path/to/old/bench/x.py)
BENCH_PATH = re.compile(r"(?<![\w/.-])bench/[\w/.-]*\w")
BENCH_MODULE = re.compile(r"python -m (bench(?:\.\w+)+)")


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def test_there_are_docs_to_check() -> None:
    assert len(DOCS) > 5


@pytest.mark.parametrize("doc", DOCS, ids=ids(DOCS))
def test_no_path_leaves_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    outside = []
    for target in LINK.findall(text):  # a link resolves from the file's folder
        if target.startswith("../") and not (doc.parent / target).resolve().is_relative_to(ROOT):
            outside.append(target)
    for path in UP.findall(LINK.sub("]()", text)):  # commands and prose: from the root
        if not (ROOT / path).resolve().is_relative_to(ROOT):
            outside.append(path)
    assert outside == [], f"{doc.name} cites paths outside the repository"


@pytest.mark.parametrize("doc", DOCS, ids=ids(DOCS))
def test_every_cited_bench_script_and_module_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = []
    for path in BENCH_PATH.findall(text):
        if path.startswith(BUILT) or path in ("bench/data/qqp", "bench/data/replay"):
            continue
        if not (ROOT / path).exists():
            missing.append(path)
    for module in BENCH_MODULE.findall(text):
        if not (ROOT / (module.replace(".", "/") + ".py")).is_file():
            missing.append(f"python -m {module}")
    assert missing == [], f"{doc.name} cites what the repository does not have"


def test_the_checks_see_what_they_look_for() -> None:
    text = "see ../shared/data/x.jsonl and [a](../README.md); python -m bench.nope.x bench/gone.py"
    assert UP.findall(LINK.sub("]()", text)) == ["../shared/data/x.jsonl"]
    assert BENCH_MODULE.findall(text) == ["bench.nope.x"]
    assert BENCH_PATH.findall(text + " /old/bench/x.py") == ["bench/gone.py"]
