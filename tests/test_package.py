"""Packaging promises: a light import, the adapters subpackage, the console script."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cachekit
from cachekit.cli import main


def test_import_loads_no_heavy_backend() -> None:
    code = (
        "import sys, cachekit, cachekit.adapters, cachekit.semantic, cachekit.storage;"
        "heavy = [m for m in ('redis', 'faiss', 'torch', 'fastapi', 'openai', "
        "'sentence_transformers', 'numpy', 'prometheus_client') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_adapters_is_a_subpackage_not_a_top_level_module() -> None:
    import cachekit.adapters

    assert cachekit.adapters.__name__ == "cachekit.adapters"


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"cachekit {cachekit.__version__}"


def test_console_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cachekit.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert cachekit.__version__ in out.stdout
