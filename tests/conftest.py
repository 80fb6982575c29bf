"""Shared fixtures. Redis fixtures start their own servers (never the one on :6379) and skip
with a reason when the binaries or redis-py are missing; see tests/redis_servers.py.

This module imports only what a base install has (the standard library, pytest and cachekit's
own dependencies): the suite's exact-tier tests run without any extra (tests/base_install.txt
lists them). The proxy's fixtures import Starlette and openai inside their bodies for that reason.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import openai

    from cachekit.testing.upstream import FakeUpstream

sys.path.insert(0, str(Path(__file__).parent))  # so test modules can `import redis_servers`

from redis_servers import (
    RedisCluster,
    RedisServer,
    missing_binaries_reason,
    tls_unavailable_reason,
)

# A password with URL-reserved characters, so percent-encoding in URLs is exercised too.
REDIS_TEST_PASSWORD = "ck p@ss:w/rd%"

_REDIS_FIXTURES = {
    "redis_server",
    "redis_url",
    "redis_password_server",
    "redis_tls_server",
    "redis_cluster",
}


def _cachekit_dir() -> Path:
    """Where the cachekit under test was imported from."""
    import cachekit

    return Path(cachekit.__file__).resolve().parent


def pytest_report_header(config: pytest.Config) -> str:
    """Say which cachekit runs: this checkout's sources or an installed copy."""
    return f"cachekit from {_cachekit_dir()}"


def pytest_configure(config: pytest.Config) -> None:
    """With ``CACHEKIT_TEST_INSTALLED=1`` (CI's run of tests/base_install.txt against the built
    wheel), refuse to test this checkout's sources instead: ``python -m pytest`` from the
    repository root puts them first on ``sys.path``. The Python processes the tests start
    (``python -c ...`` from the repository root) get ``PYTHONSAFEPATH=1`` for the same reason."""
    if os.environ.get("CACHEKIT_TEST_INSTALLED") != "1":
        return
    where = _cachekit_dir()
    if where == config.rootpath / "cachekit":
        raise pytest.UsageError(
            f"CACHEKIT_TEST_INSTALLED=1 but cachekit was imported from the checkout ({where}); "
            "run the venv's pytest script, not python -m pytest"
        )
    os.environ["PYTHONSAFEPATH"] = "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests that use a Redis fixture get the markers automatically, so `-m "not redis"` and
    # `-m "not cluster"` select correctly without every test remembering to mark itself.
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _REDIS_FIXTURES:
            item.add_marker(pytest.mark.redis)
        if "redis_cluster" in names:
            item.add_marker(pytest.mark.cluster)


def _skip_without_redis(cluster: bool = False) -> None:
    """Skip the test unless it can start its servers and talk to them with redis-py (a base
    install has no redis-py: the ``redis`` extra brings it)."""
    reason = missing_binaries_reason(cluster=cluster)
    if reason is None and importlib.util.find_spec("redis") is None:
        reason = "redis-py is not installed (the redis extra)"
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh, empty, started :class:`RedisServer` (no auth, no TLS) for this test only."""
    _skip_without_redis()
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """``redis://127.0.0.1:<port>/0`` of this test's :func:`redis_server`."""
    return redis_server.url


@pytest.fixture
def redis_password_server() -> Iterator[RedisServer]:
    """A started server with ``requirepass`` set; its ``url`` carries the (quoted) password."""
    _skip_without_redis()
    server = RedisServer(password=REDIS_TEST_PASSWORD).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_tls_server() -> Iterator[RedisServer]:
    """A started TLS-only server (``rediss://`` url) with a throwaway CA; pass
    ``server.client_kwargs`` (``ssl_ca_certs`` ...) to clients."""
    _skip_without_redis()
    reason = tls_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = RedisServer(tls=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-master Redis Cluster shared by the whole session (forming one takes seconds).
    Never flush it: tests must use unique key prefixes (see :func:`key_prefix`)."""
    _skip_without_redis(cluster=True)
    cluster = RedisCluster(n=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def key_prefix() -> str:
    """A prefix unique to this test, for servers shared between tests."""
    return f"ck-test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    """Register decorated functions whose background threads (and caches) must stop after the
    test; returns what it is given."""
    made: list[Any] = []

    def register(fn: Any) -> Any:
        made.append(fn)
        return fn

    yield register
    for fn in made:
        fn.close()
        fn.cache.close()


# ---------------------------------------------------------------------- the proxy's tests


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    """A fake OpenAI-compatible upstream over real HTTP, one per test module (a module may
    define its own: test_proxy_poison does). Imported here, not at the top: Starlette is an
    extra."""
    from cachekit.testing.upstream import FakeUpstream, serving

    with serving(FakeUpstream()) as fake:
        yield fake


@pytest.fixture
def key() -> str:
    """An API key of its own for this test: a tenant no other test shares."""
    return f"sk-test-{uuid.uuid4().hex}"


@pytest.fixture
def client(proxy: Any, key: str) -> Iterator[openai.OpenAI]:
    """The official openai client for the module's ``proxy`` fixture, with this test's key.
    Imported here, not at the top: openai is an extra."""
    import openai

    c = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=20.0)
    yield c
    c.close()
