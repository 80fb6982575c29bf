"""Missing optional dependencies are named by their extra, with the install command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cachekit._core.extras import MissingExtraError, check_faiss_distributions, require


def test_require_names_the_extra_and_the_command() -> None:
    with pytest.raises(MissingExtraError) as info:
        require("cachekit_no_such_module", extra="semantic", feature="@cache.semantic")
    message = str(info.value)
    assert "@cache.semantic" in message and "pip install 'cachekit-ml[semantic]'" in message
    assert "in a cachekit checkout, pip install -e '.[semantic]'" in message
    assert "torch" not in message  # the semantic extra brings no torch
    assert isinstance(info.value, ImportError)  # code catching ImportError keeps working


def test_require_returns_the_module() -> None:
    assert require("json", extra="none", feature="tests").__name__ == "json"


def test_the_installed_faiss_is_not_mixed() -> None:
    check_faiss_distributions()  # this environment has one faiss only


def test_a_mixed_faiss_install_is_refused(tmp_path) -> None:
    # A fake faiss-gpu distribution next to the real faiss-cpu, visible through sys.path.
    dist = tmp_path / "faiss_gpu-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: faiss-gpu\nVersion: 1.0\n")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from cachekit._core.extras import check_faiss_distributions\n"
        "try:\n    check_faiss_distributions()\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "faiss-cpu and faiss-gpu are installed" in out.stdout
    assert "pip uninstall -y faiss-cpu" in out.stdout
