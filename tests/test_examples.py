"""The README's tour is the file CI runs, word for word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_tour_is_examples_tour() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## A quick tour") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    assert block.group(1) == (ROOT / "examples" / "tour.py").read_text()


def test_every_example_is_listed_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for path in sorted((ROOT / "examples").glob("*.py")):
        assert path.name in readme or path.name == "tour.py", path.name
