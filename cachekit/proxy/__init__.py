"""``cachekit serve``: an OpenAI-compatible caching proxy (needs the ``proxy`` extra:
starlette, uvicorn, httpx, prometheus-client). See ``docs/proxy.md``.

* :func:`~cachekit.proxy.app.create_app`: the Starlette app for a :class:`ProxyConfig`.
* :class:`~cachekit.proxy.config.ProxyConfig`: settings from a TOML file and overrides.
* :func:`~cachekit.proxy.server.serve`: run it under uvicorn.
"""

from cachekit.proxy.config import ProxyConfig

__all__ = ["ProxyConfig"]
