"""Mechanism tests for :class:`cachekit.backends.redis.RedisTier`: bounded failures, recovery,
per-loop asyncio clients, URL handling. Semantics shared with other tiers live in
test_storage_conformance.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

redis = pytest.importorskip("redis")

from redis.cluster import key_slot  # noqa: E402
from redis_servers import RedisCluster, RedisServer  # noqa: E402

from cachekit.backends.redis import RedisTier, hash_tag  # noqa: E402

TIMEOUT = 0.05
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fast_tier(redis_server: RedisServer) -> Iterator[RedisTier]:
    t = RedisTier(redis_server.url, socket_timeout=TIMEOUT, connect_timeout=TIMEOUT)
    try:
        yield t
    finally:
        t.close()


class Wire:
    """Counts what failing calls do on the wire: socket connects and commands sent. A retry
    would connect or send again, so a call that did each at most once cost at most one
    (connect or read) timeout, whatever the machine's speed. Only the test's own thread is
    counted: background threads of other caches (invalidation followers) connect too."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts = {"_connect": 0, "send_packed_command": 0}
        self.thread = threading.get_ident()
        for cls in (redis.connection.Connection, redis.asyncio.connection.Connection):
            for what in self.counts:
                monkeypatch.setattr(cls, what, self._counting(what, getattr(cls, what)))

    def _counting(self, what: str, original: Any) -> Any:
        counts, mine = self.counts, self.thread
        if asyncio.iscoroutinefunction(original):

            async def acount(conn: Any, *args: Any, **kwargs: Any) -> Any:
                counts[what] += threading.get_ident() == mine
                return await original(conn, *args, **kwargs)

            return acount

        def count(conn: Any, *args: Any, **kwargs: Any) -> Any:
            counts[what] += threading.get_ident() == mine
            return original(conn, *args, **kwargs)

        return count

    def one_attempt(self) -> bool:
        """Whether the calls since the last check made one attempt (then resets)."""
        connects, sends = self.counts["_connect"], self.counts["send_packed_command"]
        self.counts.update(dict.fromkeys(self.counts, 0))
        return connects <= 1 and sends <= 1 and connects + sends >= 1


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    return Wire(monkeypatch)


@pytest.fixture
def roomy_tier(redis_server: RedisServer) -> Iterator[RedisTier]:
    """For tests of client handling, not of timeouts: 20 connects at once on a loaded machine
    must not trip a 50 ms connect timeout."""
    t = RedisTier(redis_server.url, socket_timeout=5.0, connect_timeout=5.0)
    try:
        yield t
    finally:
        t.close()


def _conn_retries(client: Any) -> int:
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        return int(conn.retry.get_retries())
    finally:
        pool.release(conn)


# -- bounded failures ------------------------------------------------------------------------


def test_retries_disabled_where_redis_py_would_retry(fast_tier: RedisTier) -> None:
    assert _conn_retries(fast_tier.client) == 0
    # Why the tier passes an explicit Retry: redis-py 8's Redis(...) constructor defaults to
    # ten retries with exponential backoff (from_url happens not to; relying on that is fragile).
    default = redis.Redis(host="127.0.0.1", port=1)
    assert default.get_retry().get_retries() > 0
    default.close()


async def test_async_retries_disabled(fast_tier: RedisTier) -> None:
    client = await fast_tier.aclient()
    conn = await client.connection_pool.get_connection()
    try:
        assert conn.retry.get_retries() == 0
        assert conn.socket_timeout == TIMEOUT
        assert conn.socket_connect_timeout == TIMEOUT
    finally:
        await client.connection_pool.release(conn)
        await fast_tier.aclose()


def test_unresponsive_server_costs_one_timeout(
    redis_server: RedisServer, fast_tier: RedisTier, wire: Wire
) -> None:
    fast_tier.set_many([("k", b"v", None)])  # a pooled, already-connected connection
    assert fast_tier.client.connection_pool.connection_kwargs["socket_timeout"] == TIMEOUT
    redis_server.pause()
    wire.one_attempt()
    for call in (
        lambda: fast_tier.get_many(["k"]),
        lambda: fast_tier.set_many([("k", b"v2", 1.0)]),
        lambda: fast_tier.delete_many(["k"]),
    ):
        with pytest.raises(redis.exceptions.TimeoutError):
            call()
        assert wire.one_attempt()  # one send, one read timeout: no retry
    # A tier with no pooled connection: connect (accepted by the kernel) then read timeout.
    fresh = RedisTier(redis_server.url, socket_timeout=TIMEOUT, connect_timeout=TIMEOUT)
    with pytest.raises(redis.exceptions.RedisError):
        fresh.incr("n")
    assert wire.one_attempt()
    redis_server.resume()
    assert fast_tier.get_many(["k"]) == [b"v"]  # timed-out connections were discarded
    fresh.close()


async def test_async_unresponsive_server_costs_one_timeout(
    redis_server: RedisServer, fast_tier: RedisTier, wire: Wire
) -> None:
    await fast_tier.aset_many([("k", b"v", None)])
    redis_server.pause()
    wire.one_attempt()
    for call in (
        lambda: fast_tier.aget_many(["k"]),
        lambda: fast_tier.aset_many([("k", b"v2", None)]),
        lambda: fast_tier.aincr("n"),
    ):
        with pytest.raises(redis.exceptions.TimeoutError):
            await call()
        assert wire.one_attempt()
    redis_server.resume()
    assert await fast_tier.aget_many(["k"]) == [b"v"]
    await fast_tier.aclose()


def test_killed_server_raises_quickly(
    redis_server: RedisServer, fast_tier: RedisTier, wire: Wire
) -> None:
    fast_tier.set_many([("k", b"v", None)])
    redis_server.kill()
    wire.one_attempt()
    for call in (
        lambda: fast_tier.get_many(["k"]),
        lambda: fast_tier.set_many([("k", b"v", None)]),
        lambda: fast_tier.delete_many(["k"]),
        lambda: fast_tier.incr("n"),
        fast_tier.ping,
    ):
        with pytest.raises(redis.exceptions.ConnectionError):
            call()
        assert wire.one_attempt()  # refused once, not retried


async def test_async_killed_server_raises_quickly(
    redis_server: RedisServer, fast_tier: RedisTier, wire: Wire
) -> None:
    await fast_tier.aset_many([("k", b"v", None)])
    redis_server.kill()
    wire.one_attempt()
    with pytest.raises(redis.exceptions.ConnectionError):
        await fast_tier.aget_many(["k"])
    assert wire.one_attempt()
    with pytest.raises(redis.exceptions.ConnectionError):
        await fast_tier.aping()
    assert wire.one_attempt()
    await fast_tier.aclose()


# -- recovery --------------------------------------------------------------------------------


def test_same_tier_recovers_after_restart(redis_server: RedisServer, fast_tier: RedisTier) -> None:
    fast_tier.set_many([("k", b"v", None)])
    redis_server.kill()
    with pytest.raises(redis.exceptions.ConnectionError):
        fast_tier.get_many(["k"])
    redis_server.restart()
    # Nothing persists across a restart (--save ""), but the same object works at once.
    assert fast_tier.get_many(["k"]) == [None]
    fast_tier.set_many([("k", b"again", None)])
    assert fast_tier.get_many(["k"]) == [b"again"]


def test_stale_pooled_connection_is_replaced(
    redis_server: RedisServer, fast_tier: RedisTier
) -> None:
    # No failing call between the kill and the restart: the pool still holds a connection to
    # the dead process. With retries off, the first call must still succeed, which relies on
    # redis-py's checkout-time health check rather than on a retry.
    fast_tier.set_many([("k", b"v", None)])
    redis_server.kill()
    redis_server.restart()
    assert fast_tier.get_many(["k"]) == [None]


async def test_async_same_tier_recovers_after_restart(
    redis_server: RedisServer, fast_tier: RedisTier
) -> None:
    await fast_tier.aset_many([("k", b"v", None)])
    redis_server.kill()
    with pytest.raises(redis.exceptions.ConnectionError):
        await fast_tier.aget_many(["k"])
    redis_server.restart()
    assert await fast_tier.aget_many(["k"]) == [None]
    # And a stale connection without a failed call in between. The restart runs in a thread
    # so the loop keeps running meanwhile, as it would in a service, and sees the EOF.
    await fast_tier.aset_many([("k", b"v", None)])
    await asyncio.to_thread(redis_server.kill)
    await asyncio.to_thread(redis_server.restart)
    assert await fast_tier.aincr("n") == 1
    await fast_tier.aclose()


def test_close_then_reuse(fast_tier: RedisTier) -> None:
    fast_tier.set_many([("k", b"v", None)])
    first = fast_tier.client
    fast_tier.close()
    assert fast_tier.get_many(["k"]) == [b"v"]
    assert fast_tier.client is not first


# -- asyncio clients per loop ----------------------------------------------------------------


def test_async_client_per_loop_across_asyncio_run(roomy_tier: RedisTier) -> None:
    seen: list[Any] = []

    async def work(n: int) -> list[bytes | None]:
        client = await roomy_tier.aclient()
        assert await roomy_tier.aclient() is client  # one client per loop, reused
        seen.append(client)
        await asyncio.gather(*(roomy_tier.aincr("counter") for _ in range(20)))
        await roomy_tier.aset_many([(f"k{n}", str(n).encode(), None)])
        return await roomy_tier.aget_many(["k1", "k2"])

    # No aclose(): the tier must cope with a loop that just ended, and close that loop's
    # client during the loop's shutdown rather than leak its sockets.
    assert asyncio.run(work(1)) == [b"1", None]
    pool = seen[0].connection_pool
    assert pool._available_connections, "the first loop made connections"
    assert not any(c.is_connected for c in pool._available_connections)
    assert asyncio.run(work(2)) == [b"1", b"2"]
    assert seen[0] is not seen[1]
    # The closed loop's client was dropped, not kept forever.
    assert seen[0] not in roomy_tier._async.values()
    assert roomy_tier.get_many(["counter"]) == [b"40"]


def test_async_clients_in_concurrent_threads(roomy_tier: RedisTier) -> None:
    import threading

    errors: list[BaseException] = []

    def run(i: int) -> None:
        async def work() -> None:
            for _ in range(10):
                await roomy_tier.aincr("c")
            await roomy_tier.aclose()

        try:
            asyncio.run(work())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    assert roomy_tier.get_many(["c"]) == [b"40"]


# -- URLs and construction -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "cluster", "expected"),
    [
        ("redis://h:1/0", None, False),
        ("rediss://h:1", None, False),
        ("unix:///tmp/r.sock", None, False),
        ("redis+cluster://h:1", None, True),
        ("rediss+cluster://u:p@h:1", None, True),
        ("REDIS+CLUSTER://h:1", None, True),
        ("redis://h:1", True, True),
        ("redis+cluster://h:1", True, True),
    ],
)
def test_cluster_detection(url: str, cluster: bool | None, expected: bool) -> None:
    # Construction is lazy, so these hosts are never contacted.
    assert RedisTier(url, cluster=cluster).is_cluster is expected


@pytest.mark.parametrize(
    ("url", "kwargs", "match"),
    [
        ("http://h:1", {}, "unsupported Redis URL scheme 'http://'"),
        ("localhost:6379", {}, "invalid Redis URL"),
        ("redis://:6379", {}, "without a host"),
        ("redis://h:notaport", {}, "invalid port"),
        ("unix://", {}, "socket path"),
        ("redis+cluster://h:1", {"cluster": False}, "cluster=False"),
        ("unix:///tmp/r.sock", {"cluster": True}, "unix socket"),
        ("redis+cluster://h:1/3", {}, "database 0"),
        ("redis://h:1", {"retry": None}, "managed by RedisTier"),
        ("redis://h:1", {"socket_timeout": 0}, "positive"),
    ],
)
def test_bad_url_or_options_raise_value_error(url: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RedisTier(url, **kwargs)


def test_errors_and_repr_hide_password() -> None:
    with pytest.raises(ValueError) as info:
        RedisTier("http://user:hunter2@h:1")
    assert "hunter2" not in str(info.value)
    assert "hunter2" not in repr(RedisTier("redis://user:hunter2@h:1"))


def test_import_cachekit_storage_does_not_import_redis() -> None:
    code = "import cachekit.backends, sys; assert 'redis' not in sys.modules, 'redis imported'"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr.decode()


def test_hash_tag_puts_keys_in_one_slot() -> None:
    assert hash_tag("user:1") == "{user:1}"
    a, b = f"{hash_tag('user:1')}:profile", f"stream:{hash_tag('user:1')}"
    assert key_slot(a.encode()) == key_slot(b.encode())
    assert key_slot(b"user:1:profile") != key_slot(b"stream:user:1")


# -- transports and auth ---------------------------------------------------------------------


def test_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "r.sock"
    server = RedisServer(extra_args=("--unixsocket", str(sock), "--unixsocketperm", "700"))
    if (reason := _missing()) is not None:
        pytest.skip(reason)
    server.start()
    try:
        tier = RedisTier(f"unix://{sock}", socket_timeout=1.0, connect_timeout=1.0)
        tier.set_many([("k", b"v", None)])
        assert tier.get_many(["k"]) == [b"v"]
        tier.close()
    finally:
        server.stop()


def _missing() -> str | None:
    from redis_servers import missing_binaries_reason

    return missing_binaries_reason()


def test_password_required_and_checked(redis_password_server: RedisServer) -> None:
    server = redis_password_server
    no_auth = RedisTier(f"redis://127.0.0.1:{server.port}/0", socket_timeout=1.0)
    with pytest.raises(redis.exceptions.AuthenticationError):
        no_auth.get_many(["k"])
    wrong = RedisTier(f"redis://:wrong@127.0.0.1:{server.port}/0", socket_timeout=1.0)
    with pytest.raises(redis.exceptions.AuthenticationError):
        wrong.get_many(["k"])
    # The fixture's password has URL-reserved characters, percent-encoded in server.url.
    right = RedisTier(server.url, socket_timeout=1.0)
    assert right.incr("n") == 1
    for t in (no_auth, wrong, right):
        t.close()


def test_tls_verifies_server_and_passes_ssl_options(redis_tls_server: RedisServer) -> None:
    server = redis_tls_server
    unverified = RedisTier(server.url, socket_timeout=1.0, connect_timeout=1.0)
    with pytest.raises(redis.exceptions.ConnectionError, match=r"(?i)certificate"):
        unverified.get_many(["k"])  # the system CAs do not know the throwaway CA
    via_kwargs = RedisTier(
        server.url, socket_timeout=1.0, connect_timeout=1.0, ssl_ca_certs=str(server.ca_cert)
    )
    via_query = RedisTier(
        f"{server.url}?ssl_ca_certs={server.ca_cert}", socket_timeout=1.0, connect_timeout=1.0
    )
    via_kwargs.set_many([("k", b"v", None)])
    assert via_query.get_many(["k"]) == [b"v"]
    plain = RedisTier(f"redis://127.0.0.1:{server.port}/0", socket_timeout=TIMEOUT)
    with pytest.raises(redis.exceptions.ConnectionError):
        plain.get_many(["k"])  # a TLS-only port does not speak plain RESP
    for t in (unverified, via_kwargs, via_query, plain):
        t.close()


def test_shared_client_is_used_and_not_closed(redis_url: str) -> None:
    shared = redis.Redis.from_url(redis_url)
    tier = RedisTier(client=shared, name="shared")
    tier.set_many([("k", b"v", None)])
    assert shared.get("k") == b"v"
    assert tier.client is shared and not tier.is_cluster
    tier.close()
    assert shared.ping()  # still usable: the tier did not own it
    shared.close()
    with pytest.raises(ValueError):
        RedisTier(redis_url, client=shared)


def test_client_exposes_other_commands_on_the_same_pool(fast_tier: RedisTier) -> None:
    fast_tier.client.hset("h", mapping={"a": "1"})
    assert fast_tier.client.hgetall("h") == {b"a": b"1"}
    assert fast_tier.ping()


def test_tiny_positive_ttl_is_valid(fast_tier: RedisTier) -> None:
    # ttl * 1000 rounds to 0 ms; PX 0 would be a Redis error, so it must round up.
    fast_tier.set_many([("k", b"v", 1e-6), ("k2", b"v", 0.0015)])
    assert 0 < fast_tier.client.pttl("k2") <= 2 or fast_tier.get_many(["k2"]) == [None]


# -- cluster ---------------------------------------------------------------------------------


@pytest.fixture
def cluster_tier(redis_cluster: RedisCluster) -> Iterator[RedisTier]:
    t = RedisTier(redis_cluster.url, socket_timeout=1.0, connect_timeout=1.0)
    try:
        yield t
    finally:
        t.close()


def test_cluster_client_and_no_retries(cluster_tier: RedisTier) -> None:
    assert cluster_tier.is_cluster
    client = cluster_tier.client
    assert isinstance(client, redis.cluster.RedisCluster)
    assert client.retry.get_retries() == 0
    for node in client.get_nodes():
        assert _conn_retries(node.redis_connection) == 0


def test_cluster_multi_slot_delete_and_get(cluster_tier: RedisTier, key_prefix: str) -> None:
    keys = [f"{key_prefix}{i}" for i in range(60)]
    assert len({cluster_tier.client.get_node_from_key(k).name for k in keys}) == 3
    cluster_tier.set_many([(k, k.encode(), None) for k in keys])
    assert cluster_tier.get_many(keys) == [k.encode() for k in keys]
    assert cluster_tier.delete_many([*keys, f"{key_prefix}absent"]) == 60
    # Same-slot keys via hash_tag work with plain multi-key commands too.
    tagged = [f"{hash_tag(key_prefix)}{i}" for i in range(5)]
    cluster_tier.client.mset({k: b"t" for k in tagged})
    assert cluster_tier.client.mget(tagged) == [b"t"] * 5


async def test_async_cluster(cluster_tier: RedisTier, key_prefix: str) -> None:
    client = await cluster_tier.aclient()
    assert isinstance(client, redis.asyncio.cluster.RedisCluster)
    assert client.retry.get_retries() == 0
    keys = [f"{key_prefix}{i}" for i in range(60)]
    await cluster_tier.aset_many([(k, b"v", 30.0) for k in keys])
    assert await cluster_tier.aget_many(keys) == [b"v"] * 60
    assert await cluster_tier.adelete_many(keys) == 60
    assert await cluster_tier.aincr(f"{key_prefix}n") == 1
    assert await cluster_tier.aping()
    await cluster_tier.aclose()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("scripts_allowed", [True, False])
def test_large_batches_write_every_ttl_kind(
    redis_server: RedisServer, mode: str, scripts_allowed: bool
) -> None:
    """Batches go through one script when the server allows it, and through a pipeline when
    an ACL refuses scripts: the same entries either way."""
    admin = redis.Redis.from_url(redis_server.url)
    user = f"noscript{mode}"
    admin.acl_setuser(
        user,
        enabled=True,
        nopass=True,
        keys=["*"],
        commands=["+@all"] + ([] if scripts_allowed else ["-@scripting"]),
    )
    host, port = admin.connection_pool.connection_kwargs["host"], redis_server.port
    tier = RedisTier(f"redis://{user}@{host}:{port}/0")
    sent: list[str] = []
    execute = tier.client.execute_command

    def counting(*a: Any, **k: Any) -> Any:
        sent.append(a[0])
        return execute(*a, **k)

    tier.client.execute_command = counting
    admin.set(f"{mode}:expired", b"old")
    entries: list[tuple[str, bytes, float | None]] = [
        (f"{mode}:ttl{i}", b"v%d" % i, 60.0) for i in range(10)
    ]
    entries += [
        (f"{mode}:forever", b"f", None),
        (f"{mode}:expired", b"new", 0.0),
        (f"{mode}:tiny", b"t", 1e-6),
    ]
    try:
        if mode == "sync":
            tier.set_many(entries)
        else:
            asyncio.run(tier.aset_many(entries))
        got = tier.get_many([k for k, _, _ in entries[:11]])
        assert got == [v for _, v, _ in entries[:11]]
        assert admin.get(f"{mode}:expired") is None
        assert 0 < admin.pttl(f"{mode}:ttl3") <= 60_000 and admin.pttl(f"{mode}:forever") == -1
        assert admin.pttl(f"{mode}:tiny") != -1  # a tiny TTL is still a TTL
        if mode == "sync":  # the script was tried, and written through when allowed
            assert sent[0] == "EVALSHA"
    finally:
        tier.close()
        admin.close()
