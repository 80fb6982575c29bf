"""The README's tour, runnable as it stands: python examples/tour.py

Embedded by default (in-process L1 and a local FAISS index, no servers). Set
CACHEKIT_REDIS_URL=redis://127.0.0.1:6379/0 to share entries through a Redis you run.
"""

import os

from cachekit import Cache, Status

cache = Cache(redis_url=os.environ.get("CACHEKIT_REDIS_URL"), namespace="tour")
calls: list[object] = []


@cache.cached(ttl=300)  # sync or async functions alike
def predict(features: tuple[float, ...], model: str = "v1") -> float:
    calls.append(features)  # stands in for model inference
    return sum(features) / len(features)


predict((0.1, 0.2))  # computed once ...
predict((0.1, 0.2))  # ... then served from L1 (or Redis)
assert len(calls) == 1
print(predict.cache_key((0.1, 0.2)))  # the key a call uses: stable across processes
print(predict.lookup((0.1, 0.2)))  # LookupResult(status=HIT, value=0.15..., tier='l1', ...)
predict.invalidate((0.1, 0.2))  # drop one entry from every tier
assert predict.lookup((0.1, 0.2)).status is Status.MISS


@cache.semantic(ttl=3600)  # paraphrases of an earlier prompt hit
def answer(prompt: str, *, model: str) -> str:  # every other argument is scope
    return f"[{model}] answer to: {prompt}"


answer("How do I reset my router password?", model="small")
hit = answer.lookup("How can I reset the password of my router?", model="small")
print(hit.status, round(hit.similarity or 0.0, 3))  # Status.SEMANTIC_HIT 0.9...
assert hit.status is Status.SEMANTIC_HIT
assert answer.lookup("How can I reset the password of my router?", model="large").status is (
    Status.MISS
)  # another model is another scope


def load_users(ids: list[int]) -> dict[int, dict[str, int]]:
    return {i: {"id": i, "age": 20 + i} for i in ids if i > 0}  # one call for all of them


users = cache.features("user", loader=load_users, ttl=60, version=3)
print(users.get_many([1, 2, 3]))  # one L1 pass, one Redis round trip, one loader call
print(cache.stats().to_dict()["hit_rate"])  # hits, misses, p50/p95/p99 per tier, time saved
cache.close()
