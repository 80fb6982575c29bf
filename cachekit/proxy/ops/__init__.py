"""What operators of ``cachekit serve`` use besides its metrics: the admin API (``admin``), the
live dashboard (``dashboard`` and its page, ``dashboard_page``) and shadow mode (``shadow``)."""
