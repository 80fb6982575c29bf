"""Batch multi-get of entity features in front of a slow store: one loader call for everything
the cache cannot answer. python examples/feature_store.py"""

from cachekit import Cache

cache = Cache(namespace="features-example")
loader_calls: list[list[int]] = []


def load_items(ids: list[int]) -> dict[int, dict[str, float]]:
    loader_calls.append(list(ids))  # in real code: one query to the feature store
    return {i: {"price": i * 1.5, "ctr": 0.01 * i} for i in ids if i < 1000}  # >= 1000: unknown


items = cache.features("item", loader=load_items, ttl=60, negative_ttl=10, version=1)
first = items.get_many([1, 2, 3, 5000])
second = items.get_many([3, 2, 1, 4, 5000])  # only 4 goes to the loader; 5000 is known absent
print(f"loader calls: {loader_calls}; second batch: {dict(second)}")
assert loader_calls == [[1, 2, 3, 5000], [4]] and 5000 not in second
cache.close()
