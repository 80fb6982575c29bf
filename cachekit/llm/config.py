"""The cache settings that ``cachekit serve`` and ``cachekit replay`` share (the top level of a
config file)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cachekit.llm.buckets import check_bucket
from cachekit.llm.prices import PriceTable
from cachekit.llm.tenants import TenantResolver

__all__ = ["HIT_USAGE", "LLMCacheConfig"]

#: What a hit's ``usage`` may report (:attr:`LLMCacheConfig.hit_usage`).
HIT_USAGE = frozenset({"stored", "zero"})


@dataclass
class LLMCacheConfig:
    """Cache settings shared by ``cachekit serve`` and ``cachekit replay``.

    Read from the top level of a TOML file by :meth:`from_toml` (tables ``[shared_scope]``, a
    group name to a list of API keys or ``sha256:`` fingerprints, and ``[prices]``; tables
    ``[proxy]`` and ``[replay]`` belong to those commands and are skipped)."""

    redis_url: str | None = None
    redis_cluster_url: str | None = None
    namespace: str = "llm"
    #: Seconds an entry lives (exact and semantic).
    ttl: float = 3600.0
    #: Similarity bar of the semantic hit policy; ``None``: the library default.
    threshold: float | None = None
    #: The semantic hit policy by name (``threshold``, ``verified``, ``error-bounded``: see
    #: :mod:`cachekit.semantic.policy.registry`); its setting is ``policy_setting`` (``None``: the
    #: policy's default). With ``threshold``, ``threshold`` is the setting.
    policy: str = "threshold"
    policy_setting: float | None = None
    #: ``False``: the hit policy's candidates skip the slot guard (numbers, negations, names,
    #: identifiers, roles in another order, code, long prompts; see
    #: :mod:`cachekit.semantic.policy.slots`). On by default.
    slot_guard: bool = True
    #: ``False``: exact hits only (the embedding model is never loaded).
    semantic: bool = True
    #: Store answers cut off by ``max_tokens`` (``finish_reason: length``).
    cache_length: bool = False
    #: ``False``: never store a Responses API answer that holds a refusal (nor a Message that
    #: stopped with ``refusal``).
    cache_refusals: bool = True
    #: Answers kept per key for sampled requests (temperature not 0; absent means the API's
    #: default, 1): the first ``bucket_size`` requests of a key go upstream, later ones are served
    #: one of those answers at random (:mod:`cachekit.llm.buckets`). 1: one answer per key.
    bucket_size: int = 1
    #: Requests sampled above this temperature skip the cache unless they ask for a bucket
    #: (``None``: none skips).
    max_temperature: float | None = None
    #: What a hit's ``usage`` says: ``stored`` (the original call's counts, as the upstream sent
    #: them) or ``zero`` (no tokens were spent; the proxy sends the saved count in
    #: ``x-cachekit-tokens-saved``).
    hit_usage: str = "stored"
    #: Keys the tenant hash; replicas that share entries need the same. Default: the
    #: ``CACHEKIT_TENANT_SECRET`` environment variable, else derived from the namespace.
    tenant_secret: str | None = None
    shared_scope: dict[str, list[str]] = field(default_factory=dict)
    redis_timeout: float = 0.05
    l1_max_entries: int = 10_000
    capacity: int = 100_000
    #: Bytes the semantic index may hold (prompts, answers, vectors), besides ``capacity``
    #: entries; ``None``: the library default (256 MiB). See ``docs/semantic.md``.
    semantic_max_bytes: int | None = None
    prices: PriceTable = field(default_factory=PriceTable)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> LLMCacheConfig:
        """From a parsed TOML document; unknown keys are an error (a typo must not pass)."""
        known = {f.name for f in fields(cls)} - {"prices"}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("proxy", "replay"):
                continue
            if key == "prices":
                values["prices"] = PriceTable.from_mapping(value)
            elif key in known:
                values[key] = value
            else:
                raise ValueError(f"unknown cache setting {key!r} (known: {sorted(known)})")
        config = cls(**values)
        config.check()
        return config

    @classmethod
    def from_toml(cls, path: str | Path) -> LLMCacheConfig:
        with open(path, "rb") as f:
            return cls.from_mapping(tomllib.load(f))

    def check(self) -> None:
        """Raise ``ValueError`` for settings that cannot work."""
        if not (isinstance(self.ttl, (int, float)) and self.ttl > 0):
            raise ValueError(f"ttl must be a positive number of seconds, got {self.ttl!r}")
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold!r}")
        if self.redis_url and self.redis_cluster_url:
            raise ValueError("give redis_url or redis_cluster_url, not both")
        if not isinstance(self.slot_guard, bool):
            raise ValueError(f"slot_guard must be true or false, got {self.slot_guard!r}")
        if self.policy != "threshold":
            from cachekit.semantic.policy.registry import build_policy

            build_policy(self.policy, self.policy_setting)  # ValueError naming the known ones
        if self.policy != "threshold" and self.threshold is not None:
            raise ValueError(
                f"threshold applies to the threshold policy; the {self.policy} "
                "policy takes policy_setting"
            )
        check_bucket(self.bucket_size)
        t = self.max_temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0):
            raise ValueError(f"max_temperature must be a number >= 0, got {t!r}")
        if self.hit_usage not in HIT_USAGE:
            raise ValueError(
                f"hit_usage must be one of {sorted(HIT_USAGE)}, got {self.hit_usage!r}"
            )
        n = self.semantic_max_bytes
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"semantic_max_bytes must be a positive int, got {n!r}")
        for name, keys in self.shared_scope.items():
            if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
                raise ValueError(f"shared_scope.{name} must be a list of keys")

    def tenants(self) -> TenantResolver:
        """The tenant resolver these settings describe."""
        secret = (
            self.tenant_secret
            or os.environ.get("CACHEKIT_TENANT_SECRET")
            or f"cachekit-tenant:{self.namespace}"
        )
        return TenantResolver(secret, self.shared_scope)
