"""Exact caching of an embedding function that returns numpy arrays (stored as msgpack, never
pickle). python examples/embedding_function.py"""

import numpy as np

from cachekit import Cache

cache = Cache(namespace="embed-example")
calls: list[object] = []


@cache.cached(ttl=7 * 24 * 3600, version="model-2024-06")  # bump version when the model changes
def embed(text: str) -> np.ndarray:
    calls.append(text)
    rng = np.random.default_rng(abs(hash(text)) % 2**32)  # stands in for a model
    return rng.standard_normal(384).astype(np.float32)


a = embed("hello world")
b = embed("hello world")
assert len(calls) == 1 and np.array_equal(a, b) and b.dtype == np.float32
print(f"embedding computed {len(calls)} time(s), shape {b.shape}, dtype {b.dtype}")
cache.close()
