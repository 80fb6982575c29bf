"""Exact-match caching: ``@cache.cached`` (:mod:`cachekit.exact.decorator`)."""

from cachekit.exact.decorator import CachedFunction

__all__ = ["CachedFunction"]
