"""``cachekit serve``: an OpenAI-compatible caching proxy (needs the ``proxy`` extra:
fastapi, uvicorn, httpx, prometheus-client). See ``docs/proxy.md``.

* :func:`~cachekit.proxy.app.create_app`: the FastAPI app for a :class:`ProxyConfig`.
* :class:`~cachekit.proxy.config.ProxyConfig`: settings from a TOML file and overrides.
* :func:`~cachekit.proxy.server.serve`: run it under uvicorn.
"""

from cachekit.proxy.config import ProxyConfig

__all__ = ["ProxyConfig"]
