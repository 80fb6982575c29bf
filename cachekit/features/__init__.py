"""Feature sets: batch multi-get of entity features in front of any feature source.

``cache.features("user", loader=load_users, ttl=60, version=3)`` returns a :class:`FeatureSet`.
``get_many(ids)`` answers what it can from L1, then looks the rest up in L2 in one round trip,
then calls the loader once for what is still missing; every tier, TTL, fail-open and
serialization rule is the engine's (:meth:`cachekit._engine.engine.Engine.lookup_lazy` and
friends). What this package adds is the translation between entity ids and cache keys, the loader
contract, negative entries for ids the loader does not know, and sharing of in-flight loads per id
between overlapping requests.

Loader contract
---------------
``loader(ids: list) -> Mapping[id, features]``, sync or async, called with distinct ids only.

* An id present in the mapping is cached with its features (``None`` is a valid value).
* An id absent from the mapping does not exist: it is cached as *absent* for ``negative_ttl``
  seconds and left out of the result.
* Ids the loader could not load (a shard timed out, ...) are reported, not cached: return
  ``FeatureResult(found={...}, failed={id: exception})`` or raise
  ``PartialLoadError(found, failed)``. They are left out of the result and listed in the
  result's :attr:`FeatureBatch.failed`; the next request loads them again.
* Any other exception from the loader propagates to the caller (to every caller waiting on that
  load); nothing is cached for the ids of that call.
"""

from cachekit.features.entity_keys import READABLE_ID_MAX
from cachekit.features.feature_set import FeatureSet
from cachekit.features.outcomes import (
    NEGATIVE_MARK,
    FeatureBatch,
    FeatureResult,
    PartialLoadError,
)

__all__ = [
    "NEGATIVE_MARK",
    "READABLE_ID_MAX",
    "FeatureBatch",
    "FeatureResult",
    "FeatureSet",
    "PartialLoadError",
]
