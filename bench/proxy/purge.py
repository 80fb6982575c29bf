"""What the admin API's purge and listing cost on a Redis holding many LLM entries.

    python -m bench.proxy.purge [--rounds 3] [--entries 10000]

A redis-server this script starts on a free port; an :class:`~cachekit.llm.LLMCache` on it (the
proxy's) stores ``--entries`` chat answers, each with its exact and its semantic entry, spread over
10 tenants and 2 models. Per round, timed: a purge of one (tenant, model), which removes a
twentieth of them; a listing of one page of 50 filtered by model; a purge of everything. The store
is filled again before each round. Vectors are 384 wide, the bundled model's width, made by the
deterministic test embedder: embedding is not part of what is timed, and a purge reads vectors
only as bytes. Medians and ranges over the rounds. Loopback only.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common.servers import RedisServer
from cachekit import Cache
from cachekit.llm import LLMCache
from cachekit.llm.admin import EntryFilter, list_entries, purge
from cachekit.testing.embedders import DeterministicTestEmbedder

TENANTS = [f"key:tenant{i}" for i in range(10)]
MODELS = ["gpt-4o-mini", "gpt-4o"]


def _answer(i: int, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{i}",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"answer {i} " * 30},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 60, "total_tokens": 80},
    }


def _fill(llm: LLMCache, entries: int) -> None:
    for i in range(entries):
        tenant, model = TENANTS[i % len(TENANTS)], MODELS[(i // len(TENANTS)) % len(MODELS)]
        body = {"model": model, "messages": [{"role": "user", "content": f"question {i} about x"}]}
        assert llm.store(body, _answer(i, model), tenant)


def _timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--entries", type=int, default=10_000)
    args = ap.parse_args()
    server = RedisServer().start()
    times: dict[str, list[float]] = {"purge_pair": [], "list_page": [], "purge_all": []}
    try:
        for r in range(args.rounds):
            cache = Cache(redis_url=server.url, namespace=f"bench{r}")
            llm = LLMCache(cache, embedder=DeterministicTestEmbedder(384), threshold=0.9)
            try:
                _fill(llm, args.entries)
                llm.semantic_function().flush()
                t, pair = _timed(purge, llm, EntryFilter(tenant=TENANTS[0], model=MODELS[0]))
                times["purge_pair"].append(t)
                t, page = _timed(list_entries, llm, EntryFilter(model=MODELS[1]), 1, 50)
                times["list_page"].append(t)
                t, every = _timed(purge, llm, EntryFilter(everything=True))
                times["purge_all"].append(t)
                print(
                    f"round {r + 1}: purge of one pair removed {pair['removed']} in "
                    f"{times['purge_pair'][-1]:.2f} s; a page of {len(page['entries'])} in "
                    f"{times['list_page'][-1] * 1000:.0f} ms; purge of all removed "
                    f"{every['removed']} in {times['purge_all'][-1]:.2f} s",
                    flush=True,
                )
            finally:
                llm.close()
    finally:
        server.stop()
    for name, ts in times.items():
        print(
            f"{name}: median {statistics.median(ts):.3f} s, range {min(ts):.3f}-{max(ts):.3f} s "
            f"over {len(ts)} rounds ({args.entries} answers stored)"
        )


if __name__ == "__main__":
    main()
