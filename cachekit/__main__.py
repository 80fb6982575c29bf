"""``python -m cachekit``: the same as the ``cachekit`` command."""

import sys

from cachekit.cli import main

sys.exit(main())
