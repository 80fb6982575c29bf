"""The cache settings that the commands working on a running cache's shared entries take
(``cachekit reembed``, ``cachekit purge``): ``cachekit serve``'s ``--config`` file, with
``--redis-url`` / ``--redis-cluster-url`` / ``--namespace`` over it."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachekit.llm import LLMCacheConfig

__all__ = ["add_cache_options", "cache_config"]

_OVERRIDES = ("redis_url", "redis_cluster_url", "namespace")


def add_cache_options(p: argparse.ArgumentParser) -> None:
    """Add ``--config``, ``--redis-url``, ``--redis-cluster-url`` and ``--namespace`` to ``p``."""
    p.add_argument("--config", metavar="FILE", help="the cache settings (as cachekit serve's)")
    p.add_argument("--redis-url", help="the Redis the cache shares its entries through")
    p.add_argument("--redis-cluster-url", help="... or the Redis Cluster")
    p.add_argument("--namespace", help="the cache namespace (default: the config's, else llm)")


def cache_config(args: argparse.Namespace) -> LLMCacheConfig:
    """The settings ``args`` describe, checked; OSError or ValueError when they cannot be read
    or are wrong, ValueError when they name no Redis."""
    from cachekit.llm import LLMCacheConfig

    config = LLMCacheConfig.from_toml(args.config) if args.config else LLMCacheConfig()
    given: dict[str, Any] = {k: getattr(args, k) for k in _OVERRIDES}
    config = dataclasses.replace(config, **{k: v for k, v in given.items() if v is not None})
    config.check()
    if not (config.redis_url or config.redis_cluster_url):
        raise ValueError("give --redis-url (or a config file that names one)")
    return config
