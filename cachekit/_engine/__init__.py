"""The private engine: the tiered cache's policy (:mod:`~cachekit._engine.engine`) and the
mechanisms it composes (L1, the L1 hit fast path, the namespace, invalidations, the guarded
shared tier and its breaker, single flight, micro-batching, background work, telemetry).
Imports only the core and the backends; the entry points are built on it."""
