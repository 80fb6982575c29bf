"""``cachekit replay``: its speed against the embedder, and a synthetic request log to replay."""
