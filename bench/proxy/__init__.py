"""``cachekit serve``: load, hostile upstreams and clients, Redis faults, Responses hits."""
