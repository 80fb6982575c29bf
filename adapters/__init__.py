"""Integrations kept at the edge of cachekit (installed as ``cachekit.adapters``)."""
