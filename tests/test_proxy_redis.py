"""``cachekit serve`` replicas on one real Redis, Redis stopped under load, and the real
embedding model end to end."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx
import pytest
import redis as redis_py
from test_proxy import (
    PARAPHRASE,
    ProxyProcess,
    cached,
    chat,
    make_client,
    report,
    upstream_calls,
    wait_cached,
)

from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream


def test_two_replicas_share_exact_and_semantic_entries(
    redis_server: Any, upstream: FakeUpstream
) -> None:
    url = upstream.url
    a = ProxyProcess(url, "--redis-url", redis_server.url).start()
    b = ProxyProcess(url, "--redis-url", redis_server.url, script=True).start()
    key = f"sk-secret-{uuid.uuid4().hex}"
    ca, cb = make_client(a, key), make_client(b, key)
    try:
        first, h = chat(ca, PARAPHRASE[0])
        assert h["x-cachekit-cache"] == "MISS"
        wait_cached(a, key, PARAPHRASE[0])
        got, h = chat(cb, PARAPHRASE[0])
        assert h["x-cachekit-cache"] == "HIT"
        assert got.choices[0].message.content == first.choices[0].message.content
        # The paraphrase answered by A is a semantic hit on B once B's index has it.
        wait_until(lambda: cached(b, key, PARAPHRASE[1]).status_code == 200, timeout=5.0)
        para, h = chat(cb, PARAPHRASE[1])
        assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
        assert para.choices[0].message.content == first.choices[0].message.content
        assert upstream_calls(upstream, key) == 1
        # The API key is never stored in clear, in keys or values.
        r = redis_py.Redis.from_url(redis_server.url)
        stored = list(r.scan_iter(count=1000))
        assert stored
        blobs = [k for k in stored]
        for k in stored:
            kind = r.type(k)
            if kind == b"string":
                blobs.append(r.get(k) or b"")
            elif kind == b"hash":
                blobs.extend(r.hgetall(k).values())
        assert not any(key.encode() in blob for blob in blobs)
        r.close()
    finally:
        ca.close()
        cb.close()
        a.stop()
        b.stop()


def test_feedback_on_one_replica_demotes_the_entry_on_the_other(
    redis_server: Any, upstream: FakeUpstream
) -> None:
    url = upstream.url
    a = ProxyProcess(url, "--redis-url", redis_server.url).start()
    b = ProxyProcess(url, "--redis-url", redis_server.url).start()
    key = f"sk-secret-{uuid.uuid4().hex}"
    ca, cb = make_client(a, key), make_client(b, key)
    try:
        chat(ca, PARAPHRASE[0])
        wait_cached(a, key, PARAPHRASE[0])
        wait_until(lambda: cached(b, key, PARAPHRASE[1]).status_code == 200, timeout=5.0)
        para, h = chat(ca, PARAPHRASE[1])
        assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
        # The id is known to the process that sent it only.
        assert report(b, key, {"id": para.id, "correct": False}).status_code == 404
        assert report(a, key, {"id": para.id, "correct": False}).json() == {"recorded": True}
        # What it did reaches the other replica: B no longer serves the paraphrase.
        wait_until(lambda: cached(b, key, PARAPHRASE[1]).status_code == 504, timeout=5.0)
        assert cached(b, key, PARAPHRASE[0]).status_code == 200  # the exact entry stays
    finally:
        ca.close()
        cb.close()
        a.stop()
        b.stop()


def test_redis_stopped_under_load_costs_no_5xx(redis_server: Any, upstream: FakeUpstream) -> None:
    p = ProxyProcess(upstream.url, "--redis-url", redis_server.url).start()
    key = f"sk-load-{uuid.uuid4().hex}"
    statuses: list[int] = []
    lock = threading.Lock()
    half = threading.Event()

    def worker(w: int) -> None:
        with httpx.Client(timeout=20.0) as client:
            for i in range(30):
                body = {
                    "model": "gpt-4o-mini",
                    "messages": [{"role": "user", "content": f"question {w} {i % 5}"}],
                }
                r = client.post(
                    p.url + "/v1/chat/completions",
                    json=body,
                    headers={"authorization": f"Bearer {key}"},
                )
                with lock:
                    statuses.append(r.status_code)
                    if len(statuses) == 60:
                        half.set()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    try:
        for t in threads:
            t.start()
        assert half.wait(30)
        redis_server.stop()
        for t in threads:
            t.join(60)
        assert len(statuses) == 120
        assert all(s == 200 for s in statuses), sorted(set(statuses))
        health = httpx.get(p.url + "/healthz", timeout=5).json()
        # Still answering, and saying why it is degraded: Redis, with the cause and the fix.
        assert health["status"] == "degraded"
        assert any(pr.startswith("redis ") and "Fix:" in pr for pr in health["problems"])
        assert health["redis"]["reachable"] is False
        # Entries kept locally still answer.
        assert cached(p, key, "question 0 0").status_code in (200, 504)
    finally:
        p.stop()


def answered_from_cache(p: ProxyProcess, key: str, messages: list[dict[str, str]]) -> bool:
    """Whether the proxy answers ``messages`` from its cache alone (``only-if-cached``)."""
    r = httpx.post(
        p.url + "/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": messages},
        timeout=10,
        headers={"authorization": f"Bearer {key}", "cache-control": "only-if-cached"},
    )
    return r.status_code == 200


@pytest.mark.model
def test_real_model_semantic_hit(upstream: FakeUpstream) -> None:
    # The real model with the library's default threshold.
    p = ProxyProcess(upstream.url, embedder=None, threshold=None).start(timeout=120)
    key = f"sk-model-{uuid.uuid4().hex}"
    client = make_client(p, key)
    try:
        messages = [{"role": "user", "content": "How do I reset my password?"}]
        first, _ = chat(client, "", messages=messages)
        wait_until(lambda: answered_from_cache(p, key, messages), timeout=30.0)
        para = [{"role": "user", "content": "How can I reset my password?"}]
        # The semantic entry is added after the exact one (its embedding comes first).
        wait_until(lambda: answered_from_cache(p, key, para), timeout=30.0)
        got, h = chat(client, "", messages=para)
        assert h["x-cachekit-cache"] == "SEMANTIC_HIT"
        assert float(h["x-cachekit-similarity"]) >= 0.8
        assert got.choices[0].message.content == first.choices[0].message.content
        unrelated = [{"role": "user", "content": "What is the capital of Australia?"}]
        _, h = chat(client, "", messages=unrelated)
        assert h["x-cachekit-cache"] == "MISS"
    finally:
        client.close()
        p.stop()


def test_replicas_on_a_redis_cluster(redis_cluster: Any, upstream: FakeUpstream) -> None:
    url = upstream.url
    ns = f"t{uuid.uuid4().hex[:10]}"  # the cluster is shared by the session
    a = ProxyProcess(url, "--redis-cluster-url", redis_cluster.url, "--namespace", ns).start()
    b = ProxyProcess(url, "--redis-cluster-url", redis_cluster.url, "--namespace", ns).start()
    key = f"sk-cluster-{uuid.uuid4().hex}"
    ca, cb = make_client(a, key), make_client(b, key)
    try:
        first, _ = chat(ca, PARAPHRASE[0])
        wait_cached(a, key, PARAPHRASE[0])
        got, h = chat(cb, PARAPHRASE[0])
        assert h["x-cachekit-cache"] == "HIT"
        assert got.choices[0].message.content == first.choices[0].message.content
        wait_until(lambda: cached(b, key, PARAPHRASE[1]).status_code == 200, timeout=5.0)
        assert upstream_calls(upstream, key) == 1
    finally:
        ca.close()
        cb.close()
        a.stop()
        b.stop()
