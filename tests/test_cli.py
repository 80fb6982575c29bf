"""The ``cachekit`` command's exit codes, through ``python -m cachekit`` as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachekit", *args], capture_output=True, text=True, timeout=60
    )


def test_no_command_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2
    assert "usage: cachekit" in result.stderr


@pytest.mark.parametrize("args", [("--version",), ("demo", "--help")])
def test_python_dash_m_runs_the_command(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout


def test_unknown_command_exits_2() -> None:
    assert run("no-such-command").returncode == 2
