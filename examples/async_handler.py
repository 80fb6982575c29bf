"""An asyncio web handler: concurrent identical requests make one upstream call
(single-flight), later ones are served from the cache. python examples/async_handler.py"""

import asyncio

from cachekit import Cache

cache = Cache(namespace="async-example")
upstream_calls = 0


@cache.cached(ttl=30)
async def fetch_profile(user_id: int) -> dict[str, object]:
    global upstream_calls
    upstream_calls += 1
    await asyncio.sleep(0.05)  # stands in for a slow service call
    return {"id": user_id, "name": f"user-{user_id}"}


async def handler(user_id: int) -> dict[str, object]:  # e.g. a FastAPI route body
    return await fetch_profile(user_id)


async def main() -> None:
    results = await asyncio.gather(*(handler(7) for _ in range(20)))
    await handler(7)
    print(f"21 requests, {upstream_calls} upstream call(s): {results[0]}")
    assert upstream_calls == 1 and all(r == results[0] for r in results)


asyncio.run(main())
cache.close()
