"""The shared tier's health: whether it is configured and reachable, and, when it is not, why and
what to do about it in words a person can act on.

Redis is optional: an unreachable or misconfigured server costs misses, never an exception. That
makes a wrong URL easy to miss, so the engine checks the connection once at start (off the
constructor's path), logs the cause and the fix once, and :meth:`cachekit.Cache.health` reports
the state at any time. Nothing here imports redis: causes are read from exception names and
messages.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Diagnosis", "Health", "diagnose"]


@dataclass(frozen=True)
class Diagnosis:
    """Why a shared-tier operation failed (``cause``) and what to change (``fix``)."""

    cause: str
    fix: str
    detail: str  # the exception, as ``Type: message``


@dataclass(frozen=True)
class Health:
    """What :meth:`cachekit.Cache.health` returns. ``to_dict()`` gives plain JSON-able data.

    * ``shared_tier``: a shared tier (Redis) is configured;
    * ``target``: where it points (a Redis URL with its password replaced by ``***``);
    * ``reachable``: the outcome of the last check or operation; ``None`` while unknown
      (the start check has not finished, or there is no shared tier);
    * ``last_error``: the last failure's :class:`Diagnosis` (kept after a recovery), or ``None``;
    * ``breaker_state``: ``closed``, ``open`` (calls skipped) or ``half_open``; ``None`` without a
      shared tier.
    """

    shared_tier: bool
    target: str | None
    reachable: bool | None
    last_error: Diagnosis | None
    breaker_state: str | None

    @property
    def ok(self) -> bool:
        """True without a shared tier, or when it is reachable and its circuit closed."""
        return not self.shared_tier or (self.reachable is True and self.breaker_state == "closed")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


_FIX_URL = "check the host and port in the URL, and that redis-server runs there"

# (words in the exception's type or message, cause, fix), first match wins.
_RULES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("cluster mode is not enabled",),
        "a cluster URL (redis+cluster://, redis_cluster_url=) points at a standalone server",
        "use redis:// (redis_url=) for a standalone server, or point the URL at a cluster node",
    ),
    (
        ("moved ", "clusterdown", "crossslot"),
        "a standalone URL (redis://, redis_url=) points at a Redis Cluster node",
        "use redis+cluster:// (redis_cluster_url=) for a cluster",
    ),
    (
        (
            "authentication",
            "wrongpass",
            "noauth",
            "invalid username-password",
            "hello must be called",
            "invalid password",
        ),
        "authentication failed",
        "set the right username and password in the URL (percent-encode reserved characters: "
        "@ : / %), as the server's requirepass or ACL expects",
    ),
    (
        ("ssl", "certificate", "tls"),
        "the TLS handshake failed",
        "use rediss:// only for a TLS server, and pass the CA as "
        "redis_options={'ssl_ca_certs': ...} for a private CA",
    ),
    (
        ("db index is out of range", "invalid db index"),
        "the URL's database number does not exist on the server",
        "use a database number below the server's `databases` setting (16 by default: "
        "redis://host:6379/0 to /15); a Redis Cluster has only database 0",
    ),
    (("connection refused",), "connection refused: nothing listens there", _FIX_URL),
    (
        (
            "name or service not known",
            "nodename nor servname",
            "getaddrinfo",
            "temporary failure in name resolution",
        ),
        "the host name does not resolve",
        "check the host name in the URL",
    ),
    (
        ("timeout", "timed out"),
        "no answer within the timeout",
        "check the host, port and firewall; a rediss:// URL to a server without TLS "
        "(or redis:// to a TLS-only one) also times out; raise redis_connect_timeout "
        "for a distant server",
    ),
    (
        ("connection reset", "connection closed", "closed by server", "eof"),
        "the server closed the connection",
        "if the server requires TLS use rediss://; else check its logs "
        "(maxclients, protected-mode)",
    ),
)


def diagnose(exc: BaseException) -> Diagnosis:
    """The cause of a shared-tier failure and its fix."""
    detail = f"{type(exc).__name__}: {exc}"
    text = f"{type(exc).__name__} {exc}".lower()
    for words, cause, fix in _RULES:
        if any(w in text for w in words):
            return Diagnosis(cause, fix, detail)
    return Diagnosis("the shared tier failed", _FIX_URL, detail)
