"""A misconfigured shared tier is checked once at start and logged once with the URL (password
redacted), the cause and the fix; ``cache.health()`` reports it. The process never fails."""

from __future__ import annotations

import logging
from urllib.parse import quote

import pytest
from redis_servers import RedisServer, free_port

from cachekit import Cache
from cachekit._core.health import diagnose
from cachekit.testing.clock import wait_until


def checked(cache: Cache) -> None:
    wait_until(lambda: cache.health().reachable is not None)


def startup_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "cachekit" and "unreachable" in r.getMessage()
    ]


def test_without_shared_tier_health_is_ok() -> None:
    h = Cache().health()
    assert (h.shared_tier, h.reachable, h.last_error, h.breaker_state, h.ok) == (
        False,
        None,
        None,
        None,
        True,
    )
    assert h.to_dict()["ok"] is True


def test_reachable_server(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cachekit")
    with Cache(redis_url=redis_url, redis_timeout=0.5) as cache:
        checked(cache)
        h = cache.health()
        assert (h.shared_tier, h.reachable, h.last_error, h.breaker_state, h.ok) == (
            True,
            True,
            None,
            "closed",
            True,
        )
        assert h.target == redis_url
    assert startup_lines(caplog) == []


def test_bad_port_is_logged_once_with_cause_and_fix(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("redis")  # the redis extra: not in a base install
    caplog.set_level(logging.INFO, logger="cachekit")
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    with Cache(redis_url=url, redis_timeout=0.2) as cache:
        checked(cache)

        @cache.cached(ttl=60)
        def f(x: int) -> int:
            return x

        assert [f(1), f(1), f(2)] == [1, 1, 2]  # misses at worst, never an exception
        h = cache.health()
        assert h.reachable is False and not h.ok
        assert h.last_error is not None and "connection refused" in h.last_error.cause
        assert h.target is not None and "s3cret" not in h.target and "***" in h.target
    (line,) = startup_lines(caplog)
    assert f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in line
    assert "connection refused" in line and "Fix: check the host and port" in line
    assert all("s3cret" not in r.getMessage() for r in caplog.records)
    # Said once: the calls failing right after the check do not log the failure again, and
    # no message repeats the logger's name.
    ours = [r.getMessage() for r in caplog.records if r.name == "cachekit"]
    assert not [m for m in ours if "served as a miss" in m]
    assert not [m for m in ours if m.startswith("cachekit:")]


def test_cluster_url_on_standalone_server(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cachekit")
    url = redis_server.url.replace("redis://", "redis+cluster://")
    with Cache(redis_cluster_url=url, redis_timeout=0.5) as cache:
        checked(cache)
        h = cache.health()
        assert h.reachable is False and h.last_error is not None
        assert "standalone server" in h.last_error.cause
    (line,) = startup_lines(caplog)
    assert url in line and "use redis:// (redis_url=)" in line


def test_wrong_password(redis_password_server: RedisServer) -> None:
    right = redis_password_server.url
    wrong = right.replace(quote("ck p@ss:w/rd%", safe=""), "not-it")
    assert wrong != right
    with Cache(redis_url=wrong, redis_timeout=0.5) as cache:
        checked(cache)
        err = cache.health().last_error
        assert err is not None and err.cause == "authentication failed"
        assert "not-it" not in str(cache.health().target)


def test_health_check_recovers(redis_server: RedisServer) -> None:
    redis_server.pause()
    try:
        with Cache(redis_url=redis_server.url, redis_timeout=0.2) as cache:
            checked(cache)
            assert cache.health().reachable is False
            err = cache.health().last_error
            assert err is not None and "timeout" in err.cause
            redis_server.resume()
            assert cache.health(check=True).reachable is True
            assert cache.health().last_error is not None  # the last failure stays readable
    finally:
        redis_server.resume()


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ("Error 111 connecting to 127.0.0.1:1. Connection refused.", "connection refused"),
        (
            "Redis Cluster cannot be connected. Please provide at least one reachable node: "
            "Cluster mode is not enabled on this node",
            "standalone server",
        ),
        ("MOVED 3999 127.0.0.1:7001", "Redis Cluster node"),
        ("invalid username-password pair or user is disabled.", "authentication failed"),
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", "TLS handshake"),
        ("Timeout connecting to server", "timeout"),
        ("Error -2 connecting to x.invalid:6379. Name or service not known.", "does not resolve"),
        ("DB index is out of range", "database number does not exist"),
    ],
)
def test_diagnoses(message: str, cause: str) -> None:
    assert cause in diagnose(ConnectionError(message)).cause


def test_a_missing_database_number_is_diagnosed_on_a_real_server(redis_url: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/99"
    with Cache(redis_url=url, redis_timeout=0.5) as cache:
        h = cache._engine.check_shared_tier()
    assert h.last_error is not None
    assert "database number does not exist" in h.last_error.cause
    assert "below the server's `databases` setting" in h.last_error.fix
