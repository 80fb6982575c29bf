"""Upstream calls under way that identical misses share: :mod:`.flights` (one call's answer,
whole or streamed, shared in one process), :mod:`.relay` (the task reading a stream into its
flight) and :mod:`.replicas` (waiting for another replica's call through Redis)."""
