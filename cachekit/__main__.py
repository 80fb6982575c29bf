"""``python -m cachekit``: the same as the ``cachekit`` command."""

import sys

from cachekit.cli.main import main

sys.exit(main())
