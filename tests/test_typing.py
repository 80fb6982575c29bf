"""The public API keeps the decorated function's types: mypy rejects a wrongly typed call of a
function decorated by ``cached``, ``semantic`` or ``features`` (each ``# E:`` line of
``tests/typed_calls/decorated.py``), and accepts the rest; ``help()`` shows every parameter."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cachekit import Cache

SAMPLE = Path(__file__).parent / "typed_calls" / "decorated.py"


def _expected() -> set[tuple[int, str]]:
    marks = set()
    for n, line in enumerate(SAMPLE.read_text().splitlines(), start=1):
        m = re.search(r"# E: ([\w-]+)", line)
        if m:
            marks.add((n, m.group(1)))
    return marks


def test_mypy_rejects_wrongly_typed_calls_and_only_those() -> None:
    pytest.importorskip("mypy")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--show-error-codes", str(SAMPLE)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[1],
    )
    found = {
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"decorated\.py:(\d+): error: .*\[([\w-]+)\]", run.stdout)
    }
    assert _expected(), "the sample marks no error"
    assert found == _expected(), run.stdout


@pytest.mark.parametrize(
    ("method", "some"),
    [
        ("cached", {"ttl", "stale_ttl", "jitter", "key", "ignore", "name", "version"}),
        ("semantic", {"threshold", "policy", "ttl", "text", "scope", "ignore", "embedder"}),
        ("features", {"loader", "ttl", "version", "negative_ttl", "jitter", "write_behind"}),
    ],
)
def test_help_shows_every_parameter(method: str, some: set[str]) -> None:
    params = set(inspect.signature(getattr(Cache, method)).parameters)
    assert some <= params
    assert not {"args", "kwargs"} & params


def test_shared_options_have_the_same_defaults() -> None:
    """``version``, ``ttl``, ``name`` and ``cache_none`` default alike on every entry point
    (``jitter`` differs on purpose: docs/api.md)."""
    sigs = {m: inspect.signature(getattr(Cache, m)).parameters for m in ("cached", "semantic")}
    sigs["features"] = inspect.signature(Cache.features).parameters
    for option in ("version", "ttl"):
        assert {sig[option].default for sig in sigs.values()} == {None}, option
    for option in ("name", "cache_none", "ignore"):
        assert sigs["cached"][option].default == sigs["semantic"][option].default, option
