"""The admin API and ``cachekit purge``: entries removed by what they are (tenant, model,
endpoint, function), listed and looked at; refused without the admin key; on one process, on two
replicas sharing a Redis and on a Redis Cluster."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from cachekit import Cache
from cachekit.llm import LLMCache, RequestError, TenantResolver
from cachekit.llm.admin import EntryFilter, get_entry, list_entries, purge
from cachekit.testing.clock import wait_until
from cachekit.testing.embedders import DeterministicTestEmbedder
from cachekit.testing.upstream import FakeUpstream

sys.path.insert(0, str(Path(__file__).parent))
from test_proxy import CHAT, PARAPHRASE, TEST_EMBEDDER, ProxyProcess, msgs
from test_proxy_coalesce import ProxyThread

ADMIN_KEY = "admin-" + "k" * 24
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
OTHER = "What is the boiling point of water at sea level"


def _answer(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def _cached(base: str, key: str, text: str, model: str) -> int:
    """The status of a lookup that never goes upstream: 200 served, 504 not in the cache."""
    body = {"model": model, "messages": msgs(text)}
    headers = {"authorization": f"Bearer {key}", "cache-control": "only-if-cached"}
    return httpx.post(base + CHAT, json=body, headers=headers, timeout=10.0).status_code


def _body(text: str, model: str) -> dict[str, Any]:
    return {"model": model, "messages": msgs(text)}


# ---------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("data", "code", "param"),
    [
        ({}, "empty_filter", None),
        ({"tenantt": "x"}, "unknown_filter", "tenantt"),
        ({"tenant": ""}, "bad_filter", "tenant"),
        ({"model": 3}, "bad_filter", "model"),
        ({"all": "yes"}, "bad_filter", "all"),
        ({"all": True, "model": "m"}, "bad_filter", "all"),
        ({"tenant": "key:1", "tenant_key": "sk-1"}, "bad_filter", "tenant"),
        ({"endpoint": "/v1/nope"}, "bad_filter", "endpoint"),
        ([], "bad_filter", None),
    ],
)
def test_a_bad_filter_is_refused_naming_the_problem(data: Any, code: str, param: Any) -> None:
    with pytest.raises(RequestError) as caught:
        EntryFilter.parse(data, TenantResolver("s"))
    assert caught.value.code == code and caught.value.param == param
    assert caught.value.status == 400


def test_tenant_key_is_hashed_as_the_proxy_hashes_callers() -> None:
    tenants = TenantResolver("secret")
    flt = EntryFilter.parse({"tenant_key": "sk-abc", "model": "m"}, tenants)
    assert flt == EntryFilter(tenant=tenants.for_key("sk-abc"), model="m")
    assert "sk-abc" not in json.dumps(flt.describe())  # never logged in clear
    assert EntryFilter.parse({"all": True}) == EntryFilter(everything=True)
    with pytest.raises(RequestError, match="a listing takes no all"):
        EntryFilter.parse({"all": True}, purge=False)


# ---------------------------------------------------------------------- one process


@pytest.fixture
def llm() -> Iterator[LLMCache]:
    cache = LLMCache(Cache(namespace="adm"), embedder=DeterministicTestEmbedder(), threshold=0.8)
    try:
        yield cache
    finally:
        cache.close()


def _fill(llm: LLMCache) -> None:
    for tenant in ("t1", "t2"):
        for model in ("m1", "m2"):
            assert llm.store(_body(PARAPHRASE[0], model), _answer("reset it", model), tenant)


def test_purge_by_tenant_and_model_removes_exact_and_semantic_entries(llm: LLMCache) -> None:
    _fill(llm)
    assert llm.lookup(_body(PARAPHRASE[1], "m1"), "t1").status.name == "SEMANTIC_HIT"
    removed = purge(llm, EntryFilter(tenant="t1", model="m1"))
    assert removed == {"removed": 2, "exact": 1, "semantic": 1}
    assert llm.lookup(_body(PARAPHRASE[0], "m1"), "t1").status.name == "MISS"
    assert llm.lookup(_body(PARAPHRASE[1], "m1"), "t1").status.name == "MISS"
    for tenant, model in (("t1", "m2"), ("t2", "m1"), ("t2", "m2")):
        assert llm.lookup(_body(PARAPHRASE[0], model), tenant).status.name == "HIT"
        assert llm.lookup(_body(PARAPHRASE[1], model), tenant).status.name == "SEMANTIC_HIT"
    assert purge(llm, EntryFilter(endpoint=CHAT)) == {"removed": 6, "exact": 3, "semantic": 3}
    assert list_entries(llm)["entries"] == []


def test_listing_pages_and_one_entry_in_full(llm: LLMCache) -> None:
    _fill(llm)
    llm.lookup(_body(PARAPHRASE[0], "m2"), "t2")  # one exact hit
    llm.lookup(_body(PARAPHRASE[1], "m2"), "t2")  # and a semantic one, of the same entry
    first = list_entries(llm, page=1, page_size=3)
    second = list_entries(llm, page=2, page_size=3)
    assert first["more"] and not second["more"]
    rows = first["entries"] + second["entries"]
    assert len({r["key"] for r in rows}) == 4
    assert {(r["tenant"], r["model"]) for r in rows} == {
        (t, m) for t in ("t1", "t2") for m in ("m1", "m2")
    }
    row = next(r for r in rows if (r["tenant"], r["model"]) == ("t2", "m2"))
    assert row["hits"] == 2 and row["endpoint"] == CHAT and row["text"] == PARAPHRASE[0]
    assert 0 <= row["age_s"] < 60 and 3500 < row["ttl_left_s"] <= 3600
    only = list_entries(llm, EntryFilter(model="m1"))["entries"]
    assert {r["model"] for r in only} == {"m1"} and len(only) == 2
    full = get_entry(llm, row["key"])
    assert full is not None and full["response"]["choices"][0]["message"]["content"] == "reset it"
    assert get_entry(llm, "llm:x:nothing") is None and get_entry(llm, "other") is None
    with pytest.raises(RequestError, match="page_size"):
        list_entries(llm, page_size=0)


def test_entries_without_a_record_match_only_all(llm: LLMCache) -> None:
    _fill(llm)
    llm.cache.set("llm:x:legacy", {"r": _answer("old", "m1"), "t": 0.0, "e": None})
    assert purge(llm, EntryFilter(model="m1"))["exact"] == 2
    assert llm.cache.get("llm:x:legacy") is not None
    assert purge(llm, EntryFilter(everything=True))["exact"] == 3


# ---------------------------------------------------------------------- the proxy's routes


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    from cachekit.testing.upstream import serving

    with serving(FakeUpstream()) as upstream:
        yield upstream


def _ask(base: str, key: str, text: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": msgs(text)}
    return httpx.post(base + CHAT, json=body, headers={"authorization": f"Bearer {key}"})


def test_admin_routes_are_absent_without_an_admin_key(fake: FakeUpstream) -> None:
    with ProxyThread(fake.url) as p:
        r = httpx.post(p.url + "/admin/purge", json={"all": True}, headers=ADMIN)
        assert r.status_code == 404
        assert httpx.get(p.url + "/admin/entries", headers=ADMIN).status_code == 404


def test_the_admin_api_through_the_proxy(
    fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    settings = {"semantic": True, "embedder": TEST_EMBEDDER, "threshold": 0.8}
    with ProxyThread(fake.url, admin_key=ADMIN_KEY, **settings) as p:
        for key in ("sk-a", "sk-b"):
            for model in ("m1", "m2"):
                assert _ask(p.url, key, PARAPHRASE[0], model).status_code == 200
        wait_until(lambda: _cached(p.url, "sk-b", PARAPHRASE[0], model="m2") == 200)
        # Without the admin key (none, a wrong one, a tenant's own): refused, nothing removed.
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Bearer sk-a"}):
            r = httpx.post(p.url + "/admin/purge", json={"all": True}, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert httpx.get(p.url + "/admin/entries", headers=headers).status_code == 401
        assert len(_entries(p.url)) == 4
        # Bad requests: a 400 naming the problem, never a purge of everything.
        for body in (b"", b"{}", b"[1]", b'{"all": 1}', b'{"modell": "m1"}', b"{nope"):
            r = httpx.post(p.url + "/admin/purge", content=body, headers=ADMIN)
            assert r.status_code == 400, body
            assert r.json()["error"]["code"] in ("empty_filter", "bad_filter", "unknown_filter")
        for query in ("page_size=0", "page_size=5000", "page=x", "all=true", "colour=red"):
            assert httpx.get(f"{p.url}/admin/entries?{query}", headers=ADMIN).status_code == 400
        assert len(_entries(p.url)) == 4
        # A purge of one (tenant, model), named by the caller's API key.
        caplog.set_level(logging.WARNING, logger="cachekit.proxy.ops.admin")
        caplog.clear()
        r = httpx.post(
            p.url + "/admin/purge", json={"tenant_key": "sk-a", "model": "m1"}, headers=ADMIN
        )
        assert r.status_code == 200 and r.json()["exact"] == 1 and r.json()["semantic"] == 1
        logged = [m for m in caplog.messages if "admin purge" in m]
        assert len(logged) == 1 and "sk-a" not in logged[0] and '"exact": 1' in logged[0]
        assert _cached(p.url, "sk-a", PARAPHRASE[0], model="m1") == 504
        assert _cached(p.url, "sk-a", PARAPHRASE[1], model="m1") == 504
        assert _cached(p.url, "sk-a", PARAPHRASE[0], model="m2") == 200
        rows = _entries(p.url)
        assert len(rows) == 3 and ("m1", _tenant(p, "sk-a")) not in {
            (r["model"], r["tenant"]) for r in rows
        }
        one = httpx.get(f"{p.url}/admin/entries/{rows[0]['key']}", headers=ADMIN)
        assert one.status_code == 200 and one.json()["response"]["object"] == "chat.completion"
        assert httpx.get(p.url + "/admin/entries/llm:x:none", headers=ADMIN).status_code == 404
        filtered = httpx.get(p.url + "/admin/entries?model=m2&tenant_key=sk-b", headers=ADMIN)
        assert [r["model"] for r in filtered.json()["entries"]] == ["m2"]


def _entries(base: str) -> list[dict[str, Any]]:
    r = httpx.get(base + "/admin/entries?page_size=100", headers=ADMIN)
    assert r.status_code == 200
    return list(r.json()["entries"])


def _tenant(p: Any, api_key: str) -> str:
    return str(p.proxy.tenants.for_key(api_key))


# ---------------------------------------------------------------------- replicas


@pytest.mark.parametrize("shared", ["redis_server", "redis_cluster"])
def test_a_purge_through_one_replica_reaches_the_other_within_a_second(
    shared: str, request: pytest.FixtureRequest, upstream: FakeUpstream
) -> None:
    server = request.getfixturevalue(shared)
    option = "--redis-url" if shared == "redis_server" else "--redis-cluster-url"
    ns = f"adm{uuid.uuid4().hex[:10]}"  # the cluster is shared by the session
    args = (option, server.url, "--namespace", ns, "--admin-key", ADMIN_KEY)
    a = ProxyProcess(upstream.url, *args).start()
    b = ProxyProcess(upstream.url, *args).start()
    keys = [f"sk-{uuid.uuid4().hex}" for _ in range(2)]
    pairs = [(k, m) for k in keys for m in ("m1", "m2")]
    try:
        for key, model in pairs:
            assert _ask(a.url, key, PARAPHRASE[0], model).status_code == 200
            assert _ask(a.url, key, OTHER, model).status_code == 200
        for proxy in (a, b):  # both serve every pair, exact and semantic
            for key, model in pairs:
                wait_until(partial(_serves, proxy, key, model, (200, 200)))
        r = httpx.post(
            a.url + "/admin/purge",
            json={"tenant_key": keys[0], "model": "m1"},
            headers=ADMIN,
            timeout=30.0,
        )
        assert r.status_code == 200, r.text
        assert r.json()["exact"] == 2 and r.json()["semantic"] == 2
        for proxy in (a, b):
            wait_until(partial(_serves, proxy, keys[0], "m1", (504, 504)), timeout=1.0)
            for key, model in pairs[1:]:
                assert _served(proxy, key, model) == (200, 200)
        # Without the admin key: refused, and nothing removed.
        r = httpx.post(b.url + "/admin/purge", json={"all": True}, headers={})
        assert r.status_code == 401
        for proxy in (a, b):
            assert all(_served(proxy, k, m) == (200, 200) for k, m in pairs[1:])
    finally:
        a.stop()
        b.stop()


def _serves(proxy: ProxyProcess, key: str, model: str, want: tuple[int, int]) -> bool:
    return _served(proxy, key, model) == want


def _is(want: int, fn: Any, *args: Any) -> bool:
    return bool(fn(*args) == want)


def _served(proxy: ProxyProcess, key: str, model: str) -> tuple[int, int]:
    """Whether ``proxy`` answers the exact request and its paraphrase from the cache."""
    exact = _cached(proxy.url, key, PARAPHRASE[0], model=model)
    return exact, _cached(proxy.url, key, PARAPHRASE[1], model=model)


# ---------------------------------------------------------------------- cachekit purge


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachekit", "purge", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CACHEKIT_TENANT_SECRET": "test-secret", "HF_HUB_OFFLINE": "1"},
    )


def test_cachekit_purge_removes_a_functions_entries(redis_server: Any) -> None:
    ns = f"fn{uuid.uuid4().hex[:8]}"
    with Cache(redis_url=redis_server.url, namespace=ns) as cache:
        calls: list[int] = []

        @cache.cached(name="app.square")
        def square(x: int) -> int:
            calls.append(x)
            return x * x

        @cache.cached(name="app.cube")
        def cube(x: int) -> int:
            calls.append(x)
            return x**3

        for x in range(5):
            square(x), cube(x)
        done = _cli("--redis-url", redis_server.url, "--namespace", ns, "--function", "app.square")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"function": "app.square", "removed": 5}
        cache.clear_local()
        calls.clear()
        square(1), cube(1)
        assert calls == [1]  # square computed again, cube still cached
        bad = _cli("--redis-url", redis_server.url, "--function", "x", "--model", "m")
        assert bad.returncode == 2 and "alone" in bad.stderr


def test_cachekit_purge_on_a_dead_redis_says_so() -> None:
    from redis_servers import free_port

    done = _cli("--redis-url", f"redis://127.0.0.1:{free_port()}/0", "--all")
    assert done.returncode == 2 and "the purge failed" in done.stderr
    assert "Traceback" not in done.stderr


def test_cachekit_purge_by_tenant_key_and_model(redis_server: Any, upstream: FakeUpstream) -> None:
    ns = f"cli{uuid.uuid4().hex[:8]}"
    p = ProxyProcess(upstream.url, "--redis-url", redis_server.url, "--namespace", ns).start()
    try:
        for key in ("sk-one", "sk-two"):
            assert _ask(p.url, key, PARAPHRASE[0], "m1").status_code == 200
            wait_until(partial(_is, 200, _cached, p.url, key, PARAPHRASE[0], "m1"))
        args = ("--redis-url", redis_server.url, "--namespace", ns)
        assert _cli(*args).returncode == 2  # no filter: never everything
        done = _cli(*args, "--tenant-key", "sk-one", "--model", "m1")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["exact"] == 1
        wait_until(lambda: _cached(p.url, "sk-one", PARAPHRASE[0], model="m1") == 504)
        assert _cached(p.url, "sk-two", PARAPHRASE[0], model="m1") == 200
    finally:
        p.stop()
