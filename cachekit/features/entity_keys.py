"""How a feature set keys its entities: local keys, shared-tier keys, and request ids.

Local keys are ``(token, id)`` with one token per id type, so ``1`` and ``"1"`` never share an
entry; ids of other types are keyed by their typed stable digest. Shared-tier keys end in the
entity's *part*: ``i<int>``, ``s<string>`` for short printable strings (readable in redis-cli),
``h<digest>`` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any

from cachekit._core.keys import stable_digest
from cachekit._core.types import CacheKey

if TYPE_CHECKING:
    from cachekit._engine.engine import Engine

__all__ = ["BAD_NAME_CHARS", "READABLE_ID_MAX", "FeatureKeys", "validate"]

#: String ids up to this length (printable ASCII, no braces) appear as themselves in shared-tier
#: keys, readable in redis-cli; longer or other ids are digested.
READABLE_ID_MAX = 100
#: Characters a feature set's name or version may not hold.
BAD_NAME_CHARS = frozenset(":@{} \t\n")


class FeatureKeys:
    """The keys of feature set ``name`` at ``kname`` (``name@v<version>``) on ``engine``.
    ``copy=False`` sets keep their entries under local keys of their own: a copying reader of
    the same set must never be handed an object another caller holds."""

    def __init__(self, engine: Engine, name: str, kname: str, copy: bool) -> None:
        self._engine = engine
        self.name = name
        self.kname = kname
        base = f"feat\x00{kname}\x00{'' if copy else 'shared'}\x00"
        self.tok_int = base + "i"
        self.tok_str = base + "s"
        self.tok_digest = base + "h"
        self._toks: dict[type, str] = {int: self.tok_int, str: self.tok_str}

    def local_keys(self, ids: list[Any]) -> tuple[list[Hashable], str | None]:
        """The local keys of ``ids``, and their one token when all ids are of one plain type
        (ints or strings), else ``None``."""
        types = set(map(type, ids))
        if len(types) == 1:
            tok = self._toks.get(next(iter(types)))
            if tok is not None:  # the common case: all ints or all strings
                return [(tok, i) for i in ids], tok
        toks = self._toks
        out: list[Hashable] = []
        for i in ids:
            tok = toks.get(type(i))
            out.append((tok, i) if tok is not None else (self.tok_digest, self.digest(i)))
        return out, None

    def digest(self, entity_id: Any) -> str:
        try:
            hash(entity_id)
        except TypeError:
            raise TypeError(
                f"feature set {self.name!r}: ids must be hashable, got "
                f"{type(entity_id).__qualname__} {entity_id!r:.60}"
            ) from None
        try:
            return stable_digest(entity_id)
        except TypeError as exc:
            raise TypeError(
                f"feature set {self.name!r}: cannot key id {entity_id!r:.60}: {exc}"
            ) from None

    def part(self, local: Hashable, entity_id: Any) -> str:
        """The entity's part of its shared-tier key."""
        tok: str
        val: Any
        tok, val = local  # type: ignore[misc]
        if tok is self.tok_int:
            return f"i{val}"
        if (
            tok is self.tok_str
            and len(val) <= READABLE_ID_MAX
            and val.isascii()
            and val.isprintable()
            and "{" not in val
            and "}" not in val
        ):
            # readable in redis-cli; braces would act as a cluster hash tag
            return "s" + val
        if tok is self.tok_digest:
            return "h" + val
        return "h" + stable_digest(entity_id)

    def make_keys(self, locals_: list[Hashable], ids: list[Any]) -> list[CacheKey]:
        """The full keys of ``ids`` (with their local keys), built as one batch."""
        tok_int = self.tok_int
        if all(local[0] is tok_int for local in locals_):  # type: ignore[index]
            # the common case, int ids: part "i<id>", as part makes it
            return self._engine.make_id_keys("feat", self.kname, "i", ids, locals_)
        parts = [self.part(lk, i) for lk, i in zip(locals_, ids, strict=True)]
        return self._engine.make_keys("feat", self.kname, parts, locals_)

    def remotes_at(
        self, locals_: list[Hashable], ids: list[Any], tok: str | None
    ) -> Callable[[list[int]], list[str]]:
        """``remotes_of`` for :meth:`Engine.lookup_lazy`: the shared-tier keys of the entries
        at some indexes of a request (``tok``: the request's one token, see local_keys)."""

        def remotes_of(idx: list[int]) -> list[str]:
            prefix = self._engine.remote_prefix("feat", self.kname)
            every = len(idx) == len(ids)
            if tok is self.tok_int:  # the common case, int ids: part "i<id>", as part makes it
                return [f"{prefix}i{i}" for i in (ids if every else [ids[i] for i in idx])]
            part = self.part
            return [prefix + part(locals_[i], ids[i]) for i in idx]

        return remotes_of

    def request(self, ids: Iterable[Any]) -> tuple[list[Any], list[Hashable], int, str | None]:
        """Validated distinct ids in request order, their local keys, the request size and
        the ids' one token (see local_keys)."""
        if isinstance(ids, str | bytes):
            raise TypeError(
                f"feature set {self.name!r}: pass a list of ids, not one {type(ids).__name__}"
            )
        try:
            seq = list(ids)
        except TypeError:
            raise TypeError(
                f"feature set {self.name!r}: ids must be an iterable of ids, got "
                f"{type(ids).__qualname__}"
            ) from None
        locals_, tok = self.local_keys(seq)
        if tok is not None and len(set(seq)) == len(seq):
            return seq, locals_, len(seq), tok  # ids of one plain type, all distinct
        distinct = dict(zip(locals_, seq, strict=True))  # typed dedupe, first occurrence order
        if len(distinct) == len(seq):
            return seq, locals_, len(seq), tok
        return list(distinct.values()), list(distinct), len(seq), tok

    def cache_key(self, entity_id: Any) -> str:
        """The shared-tier key of ``entity_id``."""
        locals_, _ = self.local_keys([entity_id])
        return self.make_keys(locals_, [entity_id])[0].remote


def validate(
    name: str,
    version: int | str,
    loader: Any,
    ttl: float | None,
    negative_ttl: float | None,
    stale_ttl: float,
    jitter: float,
    max_batch: int | None,
) -> None:
    if not isinstance(name, str) or not name or BAD_NAME_CHARS.intersection(name):
        raise ValueError("feature set name must be a non-empty string without : @ { } or spaces")
    if not isinstance(version, int | str) or BAD_NAME_CHARS.intersection(str(version)):
        raise ValueError("version must be an int or a string without : @ { } or spaces")
    if not callable(loader):
        raise TypeError("loader must be callable: loader(ids: list) -> dict[id, features]")
    if ttl is not None and ttl <= 0:
        raise ValueError(f"ttl must be positive or None, got {ttl!r}")
    if negative_ttl is not None and negative_ttl < 0:
        raise ValueError(f"negative_ttl must be >= 0 or None, got {negative_ttl!r}")
    if stale_ttl < 0 or not 0.0 <= jitter < 1.0:
        raise ValueError("stale_ttl must be >= 0 and jitter in [0, 1)")
    if max_batch is not None and (not isinstance(max_batch, int) or max_batch <= 0):
        raise ValueError(f"max_batch must be a positive int or None, got {max_batch!r}")
