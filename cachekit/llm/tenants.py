"""Who a caller is: the API key in its credential headers, and the tenant it belongs to.

The tenant is part of every key and scope (:mod:`cachekit.llm.rules`): by default a keyed
BLAKE2b hash of the caller's API key (never the key in clear); keys listed in a shared-scope group
map to that group; an explicit tenant string overrides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from cachekit.llm.errors import RequestError

__all__ = ["CREDENTIAL_HEADERS", "TenantResolver", "bearer_token", "caller_key", "key_fingerprint"]


def key_fingerprint(api_key: str) -> str:
    """``sha256:<hex>`` of an API key: how shared-scope groups may list keys without holding
    them in clear (``cachekit.llm.key_fingerprint("sk-...")``)."""
    return "sha256:" + hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else ``None``."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


#: Request headers that carry the caller's API key: ``Authorization: Bearer <key>`` (OpenAI),
#: ``api-key: <key>`` (Azure OpenAI) and ``x-api-key: <key>`` (Anthropic).
CREDENTIAL_HEADERS: tuple[str, ...] = ("authorization", "api-key", "x-api-key")


def _credential(name: str, value: str) -> str | None:
    value = value.strip()
    if name == "authorization":
        scheme = value.partition(" ")[0]
        if scheme.lower() == "bearer":
            return bearer_token(value)
    # Another scheme (Basic ...) or an api-key: the whole value is the credential.
    return value or None


def caller_key(headers: Iterable[tuple[str, str]]) -> str | None:
    """Who the caller is: the API key in its credential headers (:data:`CREDENTIAL_HEADERS`),
    ``None`` without one. ``headers`` is every ``(name, value)`` line of the request, repeated
    names included (never a dict that kept one of them). The key decides the tenant and is what
    the upstream receives. :class:`RequestError` (400, naming the header) when a credential header
    is sent more than once, or when two headers carry different keys; the same key in both is
    accepted. ``Authorization`` with a scheme other than Bearer counts as a whole value."""
    seen: dict[str, str] = {}
    for name, value in headers:
        n = name.lower()
        if n not in CREDENTIAL_HEADERS:
            continue
        if n in seen:
            raise RequestError(
                f"header {n} was sent more than once; send one credential per request",
                param=n,
                code="ambiguous_credentials",
            )
        seen[n] = value
    found = {n: k for n, v in seen.items() if (k := _credential(n, v)) is not None}
    keys = set(found.values())
    if len(keys) > 1:
        names = " and ".join(sorted(found))
        raise RequestError(
            f"headers {names} carry different credentials; send one API key per request",
            param=sorted(found)[0],
            code="ambiguous_credentials",
        )
    return keys.pop() if keys else None


class TenantResolver:
    """Maps a caller to its tenant id.

    ``secret`` keys the BLAKE2b hash of API keys (every replica sharing entries must use the same
    secret; keep it secret so tenant ids cannot be tested against guessed keys). ``groups`` maps a
    group name to API keys or their :func:`key_fingerprint` strings: callers with any of those keys
    share one tenant, ``group:<name>``.
    """

    def __init__(
        self, secret: str | bytes, groups: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        # BLAKE2b keys are at most 64 bytes; longer secrets are hashed down first.
        self._secret = raw if len(raw) <= 64 else hashlib.blake2b(raw).digest()
        self._groups: dict[str, str] = {}
        for name, keys in (groups or {}).items():
            if isinstance(keys, str):
                raise TypeError(f"shared-scope group {name!r} must list keys, got a string")
            for k in keys:
                fp = k if k.startswith("sha256:") else key_fingerprint(k)
                self._groups[fp] = f"group:{name}"

    def for_key(self, api_key: str | None) -> str:
        """The tenant of an API key (``anonymous`` without one)."""
        if not api_key:
            return "anonymous"
        if self._groups:
            group = self._groups.get(key_fingerprint(api_key))
            if group is not None:
                return group
        h = hashlib.blake2b(api_key.encode("utf-8"), key=self._secret, digest_size=16)
        return "key:" + h.hexdigest()

    def resolve(self, authorization: str | None = None, explicit: str | None = None) -> str:
        """``explicit`` (e.g. replay's ``--tenant-field``) wins as ``explicit:<value>``;
        otherwise the tenant of the bearer token in ``authorization``."""
        if explicit is not None:
            return "explicit:" + str(explicit)
        return self.for_key(bearer_token(authorization))

    def for_headers(self, headers: Iterable[tuple[str, str]]) -> str:
        """The tenant of the caller a request's header lines name (:func:`caller_key`);
        :class:`RequestError` when they are ambiguous."""
        return self.for_key(caller_key(headers))
