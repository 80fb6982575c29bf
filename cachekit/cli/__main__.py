"""``python -m cachekit.cli``: the same as the ``cachekit`` command (and ``python -m cachekit``)."""

from cachekit.cli.main import main

raise SystemExit(main())
