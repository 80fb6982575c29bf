"""Redis storage tier: standalone, TLS, unix socket or Redis Cluster, sync and asyncio.

This is a mechanism, not a policy. Every method raises on failure (a dead server, a timeout,
a wrong password); turning errors into misses and tripping a circuit breaker is the engine's job.
What this module does guarantee is that a failure is *cheap*: socket and connect timeouts are
always set and redis-py's automatic retries are switched off, so a dead server costs about one
timeout per call rather than redis-py's default of ten retries with exponential backoff.

Keys arrive ready-made. When several keys must be touched atomically on a cluster (MULTI,
Lua, multi-key commands) the caller puts them in one slot with :func:`hash_tag`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig

from cachekit._core.protocols import Entry
from cachekit._core.sansio import Core, adrive, drive
from cachekit.backends.base import SharedTier
from cachekit.backends.scan import scan_batches

if TYPE_CHECKING:
    from cachekit.backends.semantic_store import RedisSemanticStore

__all__ = ["RedisTier", "hash_tag"]

log = logging.getLogger("cachekit")

_DEFAULT_URL = "redis://localhost:6379/0"
_PLAIN_SCHEMES = ("redis", "rediss", "unix")
_CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def hash_tag(s: str) -> str:
    """Wrap ``s`` in a Redis Cluster hash tag: ``"{" + s + "}"``.

    Redis Cluster hashes only the part of a key between the first ``{`` and the next ``}``: keys
    with the same tag share a slot. Use it for keys used together atomically (MULTI/EXEC, Lua,
    SUNIONSTORE, a stream and its index hash; a cluster refuses cross-slot ones with
    CROSSSLOT), not for keys only batched (MGET/SET pipelines are spread across nodes by the
    tier; one slot for everything would load one node)."""
    return "{" + s + "}"


#: Batches at least this large are written by one :data:`_SET_MANY_LUA` call, not a pipeline of
#: SETs (~10 us of Python per pipelined command; one command's arguments are packed in C).
_SCRIPT_MIN = 8
#: Entries per script call: one script call blocks the server while it runs.
_SCRIPT_CHUNK = 1000
# ARGV holds (value, px) per key: px > 0 sets with that expiry, -1 without one, 0 deletes (an
# already-expired entry must not be readable, including an older value).
_SET_MANY_LUA = """
for i, k in ipairs(KEYS) do
  local px = tonumber(ARGV[2 * i])
  if px > 0 then redis.call('SET', k, ARGV[2 * i - 1], 'PX', px)
  elseif px < 0 then redis.call('SET', k, ARGV[2 * i - 1])
  else redis.call('DEL', k) end
end
return #KEYS
"""


def _script_chunks(entries: Sequence[Entry]) -> Iterator[tuple[list[Any], list[Any]]]:
    """The (KEYS, ARGV) of the :data:`_SET_MANY_LUA` calls that write ``entries``, in chunks."""
    for start in range(0, len(entries), _SCRIPT_CHUNK):
        keys: list[Any] = []
        argv: list[Any] = []
        for key, value, ttl in entries[start : start + _SCRIPT_CHUNK]:
            keys.append(key)
            argv.append(value)
            argv.append(-1 if ttl is None else _px(ttl) if ttl > 0 else 0)
        yield keys, argv


def _refused(exc: Exception) -> bool:
    """Whether a script call failed because the server does not allow scripts (not because of
    the data or the server's state, say out of memory)."""
    msg = str(exc).lower()
    return (
        isinstance(exc, redis.exceptions.NoPermissionError)
        or "unknown command" in msg
        or "noscript" in msg
        or ("not allowed" in msg and "oom" not in msg)
    )


def _px(ttl: float) -> int:
    # Round up: a tiny positive TTL still stores for a millisecond (PX 0 is a Redis error).
    return max(1, math.ceil(ttl * 1000.0))


class RedisTier(SharedTier):
    """A :class:`~cachekit.backends.base.SharedTier` over Redis, sync and asyncio, with every
    optional ability: counters re-seeded atomically (Lua), invalidations published and followed
    (pub/sub), and a semantic store (:class:`~cachekit.backends.semantic_store.RedisSemanticStore`).

    ``url`` schemes: ``redis://``, ``rediss://`` (TLS), ``unix://``, and ``redis+cluster://`` /
    ``rediss+cluster://`` for Redis Cluster (or ``cluster=True`` with a plain TCP URL). Username
    and password may be given in the URL; query-string options and ``client_kwargs`` (e.g.
    ``ssl_ca_certs``, ``ssl_cert_reqs``, ``client_name``) are passed through to redis-py.

    ``client`` lets several components share one pre-built client: a sync ``redis.Redis`` /
    ``redis.cluster.RedisCluster``, or an asyncio client (then only the ``a``-methods work and the
    caller is responsible for using it on a single event loop). A passed-in client is not closed
    by :meth:`close` / :meth:`aclose`.

    Sync clients are created lazily on first use. asyncio clients are bound to the event loop
    that created their connections, so one is kept per running loop; clients of loops that have
    since been closed are dropped on the next async call.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        cluster: bool | None = None,
        client: Any = None,
        socket_timeout: float = 0.05,
        connect_timeout: float = 0.05,
        max_connections: int = 64,
        name: str = "redis",
        **client_kwargs: Any,
    ) -> None:
        if socket_timeout <= 0 or connect_timeout <= 0:
            raise ValueError("socket_timeout and connect_timeout must be positive")
        if max_connections <= 0:
            raise ValueError("max_connections must be positive")
        for banned in ("retry", "socket_connect_timeout"):
            if banned in client_kwargs:
                # Both would silently undo the bounded-failure guarantee or duplicate an argument.
                raise ValueError(f"{banned!r} is managed by RedisTier; use connect_timeout")
        self.name = name
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._client_kwargs = dict(client_kwargs)
        self._lock = threading.Lock()
        self._sync: Any = None
        # loop -> (asyncio client, generator that closes it when the loop shuts down, its ops)
        self._async: dict[asyncio.AbstractEventLoop, tuple[Any, Any, dict[str, Any]]] = {}
        self._shared_async: Any = None
        self._owns_sync = True
        self._scripts = True  # cleared when the server refuses scripts: see _set_many
        # What cores run on (_ops_of): the sync client's, filled at first use; the loop's client's.
        self._ops = _Ops(self._sync_op)
        self._aops = _Ops(self._loop_op)

        if client is not None:
            if url is not None:
                raise ValueError("pass either url or client, not both")
            self._url = ""
            self._is_cluster = isinstance(
                client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster)
            )
            if cluster is not None and cluster != self._is_cluster:
                raise ValueError(f"cluster={cluster} contradicts the client passed in")
            if isinstance(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)):
                self._shared_async = client
                self._aops.update(self._ops_of(client))  # for good: _loop_op is not consulted
            else:
                self._sync = client
            self._owns_sync = False
            return

        self._url, self._is_cluster = self._parse_url(url or _DEFAULT_URL, cluster)

    @staticmethod
    def _parse_url(url: str, cluster: bool | None) -> tuple[str, bool]:
        """Validate ``url`` and return ``(url for redis-py, is_cluster)``."""
        if not isinstance(url, str) or "://" not in url:
            raise ValueError(
                f"invalid Redis URL {url!r}: expected redis://, rediss://, unix://, "
                "redis+cluster:// or rediss+cluster://"
            )
        scheme, rest = url.split("://", 1)
        scheme = scheme.lower()
        if scheme in _CLUSTER_SCHEMES:
            if cluster is False:
                raise ValueError(f"URL scheme {scheme}:// asks for a cluster but cluster=False")
            scheme, is_cluster = _CLUSTER_SCHEMES[scheme], True
        elif scheme in _PLAIN_SCHEMES:
            is_cluster = bool(cluster)
        else:
            raise ValueError(
                f"unsupported Redis URL scheme {scheme + '://'!r} in {_redact(url)!r}: expected "
                "redis://, rediss://, unix://, redis+cluster:// or rediss+cluster://"
            )
        plain = f"{scheme}://{rest}"
        parts = urlsplit(plain)
        if scheme == "unix":
            if is_cluster:
                raise ValueError("Redis Cluster cannot be reached over a unix socket")
            if not parts.path:
                raise ValueError(f"unix URL without a socket path: {_redact(url)!r}")
        else:
            try:
                parts.port  # noqa: B018 - urlsplit validates the port lazily
            except ValueError as e:
                raise ValueError(f"invalid port in Redis URL {_redact(url)!r}") from e
            if not parts.hostname:
                raise ValueError(f"Redis URL without a host: {_redact(url)!r}")
            if is_cluster and parts.path.strip("/") not in ("", "0"):
                raise ValueError("Redis Cluster only has database 0")
        return plain, is_cluster

    # -- introspection -------------------------------------------------------------------

    @property
    def is_cluster(self) -> bool:
        return self._is_cluster

    @property
    def target(self) -> str:
        """Where this tier points, for logs: the URL with its password replaced by ``***``."""
        if not self._url:
            return "<shared client>"
        url = _redact(self._url)
        if self._is_cluster and url.startswith(("redis://", "rediss://")):
            scheme, rest = url.split("://", 1)
            url = f"{scheme}+cluster://{rest}"
        return url

    def __repr__(self) -> str:
        target = _redact(self._url) if self._url else "<shared client>"
        return f"RedisTier(name={self.name!r}, url={target!r}, cluster={self._is_cluster})"

    def semantic_store(self, base: str, log_maxlen: int = 100_000) -> RedisSemanticStore:
        """A :class:`~cachekit.backends.semantic_store.SemanticStore` on this tier's client, with
        its keys under ``base``: how a semantic tier shares its entries through Redis."""
        from cachekit.backends.semantic_store import RedisSemanticStore

        return RedisSemanticStore(
            lambda: self.client,
            self._is_cluster,
            base,
            log_maxlen,
            reader=self.dedicated_client if self._url else None,
        )

    def dedicated_client(self, socket_timeout: float) -> Any:
        """A new sync client of its own (one connection) with ``socket_timeout``: for blocking
        reads (XREAD BLOCK, pub/sub) that must neither hold a pooled connection nor be cut
        short by the pool's short timeout. The caller closes it."""
        if not self._url:
            raise RuntimeError("a RedisTier built on a passed-in client cannot open connections")
        # Nothing waits on this connection's setup (it serves background readers), so a loaded
        # machine's slow connect must not count as a dead server.
        kw = {"socket_timeout": socket_timeout, "max_connections": 2}
        return self._new_sync(
            **kw, socket_connect_timeout=max(self.connect_timeout, socket_timeout)
        )

    # -- clients -------------------------------------------------------------------------

    def _common_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.connect_timeout,
            "max_connections": self.max_connections,
        }
        # redis-py 8 speaks RESP3 and enables maintenance notifications in "auto" mode. While
        # they are enabled the pool skips its checkout-time check for dead sockets, so after a
        # server restart every pooled connection would fail one call (no retries here to hide
        # it). They only matter for Redis Enterprise/Cloud; pass maint_notifications_config to
        # opt back in.
        kwargs["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
        kwargs.update(self._client_kwargs)
        return kwargs

    def _new_sync(self, **overrides: Any) -> Any:
        # redis-py 8 defaults to Retry(ExponentialWithJitterBackoff, 10) on both the standalone
        # client and the cluster client; zero retries keep a dead server at one timeout.
        no_retry = redis.retry.Retry(NoBackoff(), 0)
        cls: Any = redis.cluster.RedisCluster if self._is_cluster else redis.Redis
        return cls.from_url(self._url, retry=no_retry, **{**self._common_kwargs(), **overrides})

    def _new_async(self) -> Any:
        # The asyncio clients take their own Retry class; the sync one would not type-check
        # and is not awaited correctly.
        no_retry = redis.asyncio.retry.Retry(NoBackoff(), 0)
        cls: Any = redis.asyncio.cluster.RedisCluster if self._is_cluster else redis.asyncio.Redis
        return cls.from_url(self._url, retry=no_retry, **self._common_kwargs())

    @property
    def client(self) -> Any:
        """The synchronous redis-py client (created on first use), for commands beyond the
        tier's own (hashes, streams, scripts) that should share its connection pool."""
        c = self._sync
        if c is None:
            if self._shared_async is not None:
                raise RuntimeError("this RedisTier wraps an asyncio client; use the a-methods")
            with self._lock:
                c = self._sync
                if c is None:
                    c = self._sync = self._new_sync()
        return c

    async def aclient(self) -> Any:
        """The asyncio client for the running event loop (created on first use in that loop)."""
        if self._shared_async is not None:
            return self._shared_async
        if not self._url:
            raise RuntimeError("this RedisTier wraps a sync client; pass a URL for asyncio use")
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is not None:
            return entry[0]
        started: AsyncGenerator[None, None] | None = None
        with self._lock:
            # Entries of closed loops are dead weight (their clients were closed at loop
            # shutdown, see below). A WeakKeyDictionary would not drop them by itself: the
            # client's transports keep the loop alive.
            self._drop_closed_loops()
            entry = self._async.get(loop)
            if entry is None:
                client = self._new_async()
                started = _close_at_loop_shutdown(client)
                entry = self._async[loop] = (client, started, self._ops_of(client))
        if started is not None:
            # The first step registers the generator with the running loop, whose
            # shutdown_asyncgens() (run by asyncio.run / asyncio.Runner before closing the loop)
            # then closes the client while the loop can still run its transports' cleanup.
            await anext(started)
        return entry[0]

    def _drop_closed_loops(self) -> None:
        for dead in [lp for lp in self._async if lp.is_closed()]:
            del self._async[dead]

    # -- the rules, once: cores (cachekit._core.sansio) that yield what they need of a client
    # by its name in _ops_of's table, driven over a sync or the running loop's asyncio client's.

    def _get_many(self, keys: Sequence[str]) -> Core[list[bytes | None]]:
        if not keys:
            return []
        # On a cluster "mget" is mget_nonatomic: one MGET per slot, pipelined per node.
        return list((yield ("mget", (list(keys),))))

    def _set_many(self, entries: Sequence[Entry]) -> Core[None]:
        if not entries:
            return
        # Not on a cluster: one script's keys must share a slot, and batches do not.
        if self._scripts and not self._is_cluster and len(entries) >= _SCRIPT_MIN:
            try:
                for keys, argv in _script_chunks(entries):
                    yield ("set_script", (keys, argv))
                return
            except redis.exceptions.ResponseError as exc:
                if not _refused(exc):
                    raise
                # A server that refuses scripts (an ACL without @scripting, say) gets pipelines
                # from now on, and this batch too.
                self._scripts = False
        yield ("set_pipelined", (entries,))

    def _delete_many(self, keys: Sequence[str]) -> Core[int]:
        if not keys:
            return 0
        # On a cluster, redis-py's delete() splits the keys by slot and sums the replies.
        return int((yield ("delete", tuple(keys))))

    def _incr(self, key: str) -> Core[int]:
        return int((yield ("incr", (key,))))

    def _incr_from(self, key: str, floor: int, epoch: int, exhausted: int) -> Core[int]:
        return int((yield ("incr_from", ([key], (int(floor), int(epoch), int(exhausted))))))

    def _raise_counter(self, key: str, floor: int) -> Core[int]:
        return int((yield ("raise_counter", ([key], (int(floor),)))))

    def _publish(self, channel: str, payload: bytes) -> Core[None]:
        yield ("publish", (channel, payload))

    def _ping(self) -> Core[bool]:
        return bool((yield ("ping", ())))

    def _ops_of(self, c: Any) -> dict[str, Callable[..., Any]]:
        """The operations the cores yield, on a sync or asyncio client ``c`` (same method names;
        a script registered on an asyncio client is an AsyncScript). Scripts go as EVALSHA;
        redis-py loads one the server lacks (NOSCRIPT: after a restart or SCRIPT FLUSH)."""
        return {
            "mget": c.mget_nonatomic if self._is_cluster else c.mget,
            "set_script": c.register_script(_SET_MANY_LUA),
            "set_pipelined": partial(_write_pipelined, c, self._is_cluster),
            "delete": c.delete,
            "incr": c.incr,
            "incr_from": c.register_script(_INCR_FROM),
            "raise_counter": c.register_script(_RAISE),
            "publish": c.publish,
            "ping": c.ping,
        }

    def _sync_op(self, name: str) -> Callable[..., Any]:
        ops = self._ops_of(self.client)
        self._ops.update(ops)  # kept until close() drops the client
        return ops[name]

    def _loop_op(self, name: str) -> Callable[..., Any]:
        entry = self._async.get(asyncio.get_running_loop())
        if entry is None:  # the loop's first call: make its client, then call
            return partial(self._first_op, name)
        return entry[2][name]

    async def _first_op(self, name: str, *args: Any) -> Any:
        await self.aclient()
        return await self._loop_op(name)(*args)

    # -- StorageTier ---------------------------------------------------------------------

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return drive(self._get_many(keys), self._ops)

    def set_many(self, entries: Sequence[Entry]) -> None:
        drive(self._set_many(entries), self._ops)

    def delete_many(self, keys: Sequence[str]) -> int:
        return drive(self._delete_many(keys), self._ops)

    def incr(self, key: str) -> int:
        return drive(self._incr(key), self._ops)

    def incr_from(self, key: str, floor: int, epoch: int = 0, exhausted: int = 2**52) -> int:
        """Atomically raise the counter ``key`` to at least ``floor``, then add one, and return
        the new value. A counter lost to eviction thus restarts above what the caller has seen.
        A malformed value (anything but the digits of an integer below 2**53) restarts at
        ``max(floor + 1, epoch)``, and a new value at or above ``exhausted`` is replaced by
        ``epoch``: the counter only ever holds such digits."""
        return drive(self._incr_from(key, floor, epoch, exhausted), self._ops)

    def raise_counter(self, key: str, floor: int) -> int:
        """Atomically raise the counter ``key`` to at least ``floor`` and return its value:
        re-seeds a lost or malformed counter (see :meth:`incr_from`) without undoing a
        concurrent increment."""
        return drive(self._raise_counter(key, floor), self._ops)

    #: Deletes are published on a channel every process follows (:meth:`follow_invalidations`).
    publishes_invalidations = True

    def publish_invalidation(self, channel: str, payload: bytes) -> None:
        """Publish ``payload`` on ``channel``: the keys one process deleted, for every follower
        to drop from its in-process tier."""
        drive(self._publish(channel, payload), self._ops)

    def follow_invalidations(
        self,
        channel: str,
        on_message: Callable[[bytes], None],
        on_gap: Callable[[], None],
        on_subscribed: Callable[[], None] | None = None,
    ) -> Callable[[], None] | None:
        """Follow ``channel`` in a daemon thread on a connection of its own: ``on_message``
        gets each payload; ``on_gap`` runs after a reconnection, since messages published
        while disconnected are lost (pub/sub keeps none); ``on_subscribed`` runs at each
        subscription. Returns the function that stops it (None when this tier cannot open
        connections of its own)."""
        if not self._url:
            return None
        follower = _InvalidationFollower(self, channel, on_message, on_gap, on_subscribed)
        follower.start()
        return follower.stop

    def scan_keys(self, prefix: str, batch: int = 1000) -> Iterator[list[str]]:
        """SCAN, on every primary of a cluster (:func:`~cachekit.backends.scan.scan_batches`)."""
        return scan_batches(self.client, prefix, batch)

    def ping(self) -> bool:
        return drive(self._ping(), self._ops)

    def close(self) -> None:
        """Close the sync client's connections (a later call reconnects). asyncio clients
        belong to their loops: close them with :meth:`aclose` from inside the loop."""
        with self._lock:
            c, self._sync = (self._sync, None) if self._owns_sync else (None, self._sync)
            self._ops.clear()  # refilled from the next client
            self._drop_closed_loops()
        if c is not None:
            c.close()

    # -- AsyncStorageTier ----------------------------------------------------------------

    async def aget_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return await adrive(self._get_many(keys), self._aops)

    async def aset_many(self, entries: Sequence[Entry]) -> None:
        await adrive(self._set_many(entries), self._aops)

    async def adelete_many(self, keys: Sequence[str]) -> int:
        return await adrive(self._delete_many(keys), self._aops)

    async def aincr(self, key: str) -> int:
        return await adrive(self._incr(key), self._aops)

    async def aincr_from(self, key: str, floor: int, epoch: int = 0, exhausted: int = 2**52) -> int:
        return await adrive(self._incr_from(key, floor, epoch, exhausted), self._aops)

    async def araise_counter(self, key: str, floor: int) -> int:
        return await adrive(self._raise_counter(key, floor), self._aops)

    async def apublish_invalidation(self, channel: str, payload: bytes) -> None:
        await adrive(self._publish(channel, payload), self._aops)

    async def aping(self) -> bool:
        return await adrive(self._ping(), self._aops)

    async def aclose(self) -> None:
        """Close the running loop's asyncio client (a later call reconnects)."""
        if self._shared_async is not None:
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._async.pop(loop, None)
        if entry is not None:
            await entry[1].aclose()  # runs the generator's finally: closes the client


class _Ops(dict[str, Callable[..., Any]]):
    """An operations table for :func:`~cachekit._core.sansio.drive` that ``lookup(name)`` answers
    for each name it does not hold: a call with nothing to do touches no client."""

    def __init__(self, lookup: Callable[[str], Callable[..., Any]]) -> None:
        super().__init__()
        self._lookup = lookup

    def __missing__(self, name: str) -> Callable[..., Any]:
        return self._lookup(name)


#: A namespace version counter as the scripts below read it: the decimal digits of an integer
#: below 2**53 (what a Lua number holds exactly), else nil; anything else (float text, a sign,
#: hex, 2**63-1) counts as malformed, and the scripts never write anything but such digits.
_COUNTER = """
local function counter(raw)
  if not raw then return nil end
  if string.len(raw) > 16 or not string.match(raw, '^%d+$') then return false end
  local n = tonumber(raw)
  if n >= 9007199254740992 then return false end
  return n
end
"""

_RAISE = f"""{_COUNTER}
local cur = counter(redis.call('GET', KEYS[1]))
local floor = tonumber(ARGV[1])
if not cur or cur < floor then
  redis.call('SET', KEYS[1], string.format('%.0f', floor))
  return floor
end
return cur
"""

# ARGV: the caller's version (a lost key restarts above it), a fresh epoch (where a malformed
# value, or a counter at ARGV[3], restarts), and the exhaustion threshold.
_INCR_FROM = f"""{_COUNTER}
local cur = counter(redis.call('GET', KEYS[1]))
local floor = tonumber(ARGV[1])
local epoch = tonumber(ARGV[2] or ARGV[1] + 1)
local exhausted = tonumber(ARGV[3] or 4503599627370496)
local new
if cur == false then
  new = math.max(floor + 1, epoch)
else
  if cur == nil or cur < floor then cur = floor end
  new = cur + 1
end
if new >= exhausted then new = epoch end
redis.call('SET', KEYS[1], string.format('%.0f', new))
return new
"""

#: Seconds one wait for a pub/sub message lasts: how long a follower takes to see stop().
_FOLLOW_POLL_S = 1.0
_FOLLOW_BACKOFF_MAX_S = 5.0


class _InvalidationFollower:
    """The thread behind :meth:`RedisTier.follow_invalidations`."""

    def __init__(
        self,
        tier: RedisTier,
        channel: str,
        on_message: Callable[[bytes], None],
        on_gap: Callable[[], None],
        on_subscribed: Callable[[], None] | None,
    ) -> None:
        self._tier = tier
        self._channel = channel
        self._on_message = on_message
        self._on_gap = on_gap
        self._on_subscribed = on_subscribed
        self._stop = threading.Event()
        self._client: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"cachekit-invalidations:{channel}"
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()  # ends a wait for a message at once
        if self._thread is not threading.current_thread():
            self._thread.join(_FOLLOW_POLL_S + 1.0)

    def _run(self) -> None:
        backoff = 0.05
        subscribed_before = False
        while not self._stop.is_set():
            try:
                subscribed_before = self._follow(subscribed_before)
                backoff = 0.05
            except Exception as exc:
                if self._stop.is_set():
                    break
                log.debug("invalidation channel %s lost: %r", self._channel, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _FOLLOW_BACKOFF_MAX_S)

    def _follow(self, subscribed_before: bool) -> bool:
        client = self._tier.dedicated_client(_FOLLOW_POLL_S + self._tier.connect_timeout + 1.0)
        with self._lock:
            if self._stop.is_set():
                client.close()
                return subscribed_before
            self._client = client
        pubsub = client.pubsub()
        try:
            pubsub.subscribe(self._channel)
            while not self._stop.is_set():
                msg = pubsub.get_message(timeout=_FOLLOW_POLL_S)
                if msg is None:
                    continue
                if msg.get("type") == "subscribe":
                    if subscribed_before:
                        self._on_gap()  # what was published while we were away is lost
                    subscribed_before = True
                    if self._on_subscribed is not None:
                        self._on_subscribed()
                elif msg.get("type") == "message" and isinstance(msg.get("data"), bytes):
                    self._on_message(msg["data"])
        finally:
            pubsub.close()
            client.close()
        return subscribed_before


async def _close_at_loop_shutdown(client: Any) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.aclose()


def _write_pipelined(c: Any, cluster: bool, entries: Sequence[Entry]) -> Any:
    """Write ``entries`` with one command each on a non-transactional pipeline of client ``c``
    (queueing is synchronous on both kinds of client; ``execute`` an awaitable on asyncio's)."""
    pipe = c.pipeline() if cluster else c.pipeline(transaction=False)
    for key, value, ttl in entries:
        if ttl is None:
            pipe.set(key, value)
        elif ttl > 0:
            pipe.set(key, value, px=_px(ttl))
        else:
            # An already-expired entry must not be readable, including an older value.
            pipe.delete(key)
    return pipe.execute()


def _redact(url: str) -> str:
    """``url`` with any password replaced, for error messages and reprs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{netloc}").geturl()
