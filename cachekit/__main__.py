"""``python -m cachekit``: the ``cachekit`` command."""

import sys

from cachekit.cli import main

sys.exit(main())
