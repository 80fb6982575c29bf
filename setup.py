"""The two parts of the build that pyproject.toml cannot say.

* Packages: every package under ``cachekit/`` is found, and the top-level ``adapters/`` folder is
  installed as ``cachekit.adapters`` (with any packages below it), so a new package cannot be
  left out of the wheel by a hand-written list. ``tests/test_package.py`` builds the wheel and
  compares its package folders with the tree's.
* The package index's page: README.md with its links into the repository (``docs/...``,
  ``examples/``, ``#a-heading``), which are dead on an index page, turned into text that names
  the file in the source distribution.
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

ADAPTERS = "cachekit.adapters"
# A Markdown link whose target is not a URL: [text](docs/exact.md#a-part) or [text](#heading).
RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|mailto:)([^)\s]*)\)")


def index_page(readme: str) -> str:
    """``readme`` for the package index: a link into the tree becomes its text and the path."""

    def unlink(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2).split("#")[0]
        if not target or target.rstrip("/") in text:
            return text
        return f"{text} (`{target}` in the sdist)"

    return RELATIVE_LINK.sub(unlink, readme)


packages = find_packages(include=["cachekit", "cachekit.*"])
packages += [ADAPTERS, *(f"{ADAPTERS}.{name}" for name in find_packages("adapters"))]

setup(
    packages=packages,
    package_dir={ADAPTERS: "adapters"},
    long_description=index_page(Path(__file__).with_name("README.md").read_text("utf-8")),
    long_description_content_type="text/markdown",
)
