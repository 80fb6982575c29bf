"""The exact tier: hits, misses, feature sets, the engine paths, replication, hardening."""
