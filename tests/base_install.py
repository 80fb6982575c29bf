"""Run pytest in a stand-in for a base install: ``python tests/base_install.py [pytest args]``.

A base install is ``pip install cachekit-ml`` (no extras) plus the test runner: pytest,
pytest-asyncio, pytest-timeout and hypothesis. This script builds a throwaway venv (no pip, no
download) whose site-packages links to this environment's copies of exactly those
distributions and what they require, then runs pytest with that venv's interpreter from the
current directory. Everything else (numpy, redis, fastapi ...) is absent there, as on a base
install: an import fails and ``importlib.util.find_spec`` answers ``None``. The cachekit it
tests is this environment's (the checkout, for an editable install).

tests/test_base_install.py uses it to keep tests/base_install.txt honest; the real check is CI
running that list in a fresh venv holding only the built wheel.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import subprocess
import sys
import sysconfig
import tempfile
import venv
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# What a base install holds besides the standard library: the package and the test runner.
BASE_REQUIREMENTS = ("cachekit-ml", "pytest", "pytest-asyncio", "pytest-timeout", "hypothesis")


def installed(name: str) -> metadata.Distribution:
    """The distribution ``name`` in this environment's site-packages (never a checkout's
    ``*.egg-info`` that the current directory on ``sys.path`` would find first)."""
    paths = list(dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]))
    for dist in metadata.distributions(name=name, path=paths):
        return dist
    raise metadata.PackageNotFoundError(name)


def base_distributions(roots: Iterable[str] = BASE_REQUIREMENTS) -> list[metadata.Distribution]:
    """The installed distributions of ``roots`` and of everything they require without extras
    on this interpreter (a requirement whose marker is false here is left out)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found[name] = dist = installed(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(found.values())


def top_level_entries(dist: metadata.Distribution) -> set[Path]:
    """The site-packages entries ``dist`` installed: its packages, modules, ``.pth`` files and
    metadata directory (console scripts and ``__pycache__`` are left out)."""
    entries: set[Path] = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first not in ("..", "__pycache__"):
            entries.add(Path(str(dist.locate_file(first))))
    return entries


def make_base_venv(dest: Path) -> Path:
    """A venv at ``dest`` holding links to the base distributions; returns its interpreter."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(dest)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(dest), "platbase": str(dest)}))
    for dist in base_distributions():
        for entry in top_level_entries(dist):
            link = site / entry.name
            if not link.exists():
                link.symlink_to(entry, target_is_directory=entry.is_dir())
    return dest / "bin" / "python"


def run_pytest(args: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pytest args`` in a fresh base venv; the output is captured. ``-P`` keeps
    the current directory off ``sys.path``, as the ``pytest`` script does."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with tempfile.TemporaryDirectory(prefix="cachekit-base-") as tmp:
        python = make_base_venv(Path(tmp) / "venv")
        return subprocess.run(
            [str(python), "-P", "-m", "pytest", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )


def main(argv: list[str]) -> int:
    """Run pytest with ``argv`` in a base venv and pass its output and exit status on."""
    done = run_pytest(argv)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
