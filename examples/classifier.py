"""A classifier behind the exact cache: identical feature vectors are scored once, the model
version is part of every key. python examples/classifier.py"""

from cachekit import Cache

cache = Cache(namespace="clf-example", default_ttl=600)
scored: list[tuple[float, ...]] = []


@cache.cached(version="clf-v7")
def score(features: tuple[float, ...], threshold: float = 0.5) -> dict[str, float | bool]:
    scored.append(features)
    p = min(1.0, max(0.0, sum(features) / len(features)))  # stands in for model.predict_proba
    return {"p": p, "positive": p >= threshold}


batch = [(0.9, 0.8), (0.1, 0.2), (0.9, 0.8), (0.1, 0.2), (0.9, 0.8)]
results = [score(x) for x in batch]
print(f"{len(batch)} requests, {len(scored)} model calls; stats: hits={cache.stats().hits}")
assert len(scored) == 2 and results[0] == results[2]
cache.close()
