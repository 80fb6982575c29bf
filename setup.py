"""Package discovery, the one part of the build that pyproject.toml cannot say.

Every package under ``cachekit/`` is found, and the top-level ``adapters/`` folder is installed
as ``cachekit.adapters`` (with any packages below it): a new package cannot be left out of the
wheel by a hand-written list. ``tests/test_package.py`` builds the wheel and compares its
package folders with the tree's.
"""

from setuptools import find_packages, setup

ADAPTERS = "cachekit.adapters"

packages = find_packages(include=["cachekit", "cachekit.*"])
packages += [ADAPTERS, *(f"{ADAPTERS}.{name}" for name in find_packages("adapters"))]

setup(packages=packages, package_dir={ADAPTERS: "adapters"})
