"""Packaging promises: a light import, the adapters subpackage, the console script."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import cachekit
from cachekit.cli.main import main


def test_import_loads_no_heavy_backend() -> None:
    code = (
        "import sys, cachekit, cachekit.adapters, cachekit.semantic, cachekit.backends;"
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
        [sys.executable, "-m", "cachekit.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert cachekit.__version__ in out.stdout


# -- what the built distributions carry ---------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[1]
SKIPPED_DIRS = {"__pycache__"}


def tree_packages() -> dict[str, set[str]]:
    """Every package folder of the tree, by its import path, with the files it holds: the
    folders under ``cachekit/``, and ``adapters/`` as ``cachekit.adapters``."""
    found: dict[str, set[str]] = {}
    for top, name in (
        (REPO_ROOT / "cachekit", "cachekit"),
        (REPO_ROOT / "adapters", "cachekit/adapters"),
    ):
        for folder in [top, *(p for p in top.rglob("*") if p.is_dir())]:
            if SKIPPED_DIRS & set(folder.relative_to(top).parts):
                continue
            files = {p.name for p in folder.iterdir() if p.is_file() and p.suffix != ".pyc"}
            found[str(Path(name) / folder.relative_to(top)).rstrip("/.")] = files
    return found


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, and the wheel built from it, as ``python -m build`` makes them (with this
    environment's setuptools: no download)."""
    pytest.importorskip("build")  # a dev tool: not in a base install
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO_ROOT)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return out


def test_the_wheel_holds_every_package_folder_and_file_of_the_tree(dist: Path) -> None:
    (wheel,) = dist.glob("cachekit_ml-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if not n.startswith("cachekit_ml-")]
        licenses = [n for n in zf.namelist() if n.endswith("/licenses/LICENSE")]
    in_wheel: dict[str, set[str]] = {}
    for name in names:
        folder, _, file = name.rpartition("/")
        in_wheel.setdefault(folder, set()).add(file)
    assert in_wheel == tree_packages()
    assert licenses, "the wheel carries the license"


def test_the_sdist_carries_docs_tests_and_license(dist: Path) -> None:
    (sdist,) = dist.glob("cachekit_ml-*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    tracked = subprocess.run(
        ["git", "ls-files", "docs", "tests", "bench", "examples", "cachekit", "adapters"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    missing = [path for path in tracked if path not in names]
    assert missing == []
    assert {"LICENSE", "README.md", "pyproject.toml", "setup.py", ".ci/smoke.py"} <= names


def test_the_index_page_has_no_link_into_the_tree(dist: Path) -> None:
    (wheel,) = dist.glob("cachekit_ml-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        page = zf.read(meta).decode()
    description = page.split("\n\n", 1)[1]
    targets = re.findall(r"\]\(([^)\s]*)\)", description)
    assert [t for t in targets if not t.startswith(("https://", "http://"))] == []
    assert "(`docs/semantic.md` in the sdist)" in description
    assert "Content-Type: text/markdown" in page
    assert "License-Expression: Apache-2.0" in page and "Requires-Python: >=3.11" in page
