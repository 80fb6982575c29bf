"""Cache keys: stable across processes and runs, typed, independent of keyword order.

Two forms are built from a call's normalised arguments:

* the *stable key*: a typed canonical encoding of the arguments hashed with BLAKE2b. It is what
  Redis sees, so it never uses ``hash()`` (randomised per process for ``str``) and it tells
  ``1``, ``1.0``, ``"1"`` and ``True`` apart;
* the *local key*: a hashable tuple used for the in-process tier when every argument is a plain
  scalar (or a flat tuple of them). It skips hashing bytes on the L1 hit path, which is what makes
  an L1 hit cost about as much as ``cachetools.cached``. Types are part of it, so it separates
  exactly what the stable key separates.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import inspect
import math
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "SCALAR_SIGNATURES",
    "ArgNormalizer",
    "KeyError_",
    "all_scalar",
    "local_key",
    "stable_digest",
]


class KeyError_(TypeError):
    """An argument cannot be turned into a cache key."""


_SCALARS = frozenset({int, float, str, bytes, bool, type(None)})
_PACK_DOUBLE = struct.Struct(">d").pack
_CANON_NAN = _PACK_DOUBLE(math.nan)
_FLOAT_ONLY = {float}


def _encode(obj: Any, out: bytearray) -> None:
    t = type(obj)
    if obj is None:
        out += b"N"
    elif t is bool:
        out += b"T" if obj else b"F"
    elif t is int:
        s = str(obj).encode()
        out += b"i%d:" % len(s) + s
    elif t is float:
        out += b"f" + (_CANON_NAN if obj != obj else _PACK_DOUBLE(obj))
    elif t is str:
        s = obj.encode("utf-8", "surrogatepass")
        out += b"s%d:" % len(s) + s
    elif t is bytes or t is bytearray or t is memoryview:
        b = bytes(obj)
        out += b"b%d:" % len(b) + b
    elif t is tuple or t is list:
        n = len(obj)
        if n and set(map(type, obj)) == _FLOAT_ONLY and all(x == x for x in obj):
            # Feature vectors: one struct call instead of one recursion per element. The tag
            # differs from the generic form, and which form applies depends only on the value.
            out += (b"u" if t is tuple else b"v") + b"%d:" % n + struct.pack(f">{n}d", *obj)
            return
        out += (b"t" if t is tuple else b"l") + b"%d:" % n
        for item in obj:
            _encode(item, out)
    elif t is dict or isinstance(obj, Mapping):
        items = []
        for k, v in obj.items():
            kbuf = bytearray()
            _encode(k, kbuf)
            vbuf = bytearray()
            _encode(v, vbuf)
            items.append((bytes(kbuf), bytes(vbuf)))
        items.sort()
        out += b"d%d:" % len(items)
        for kbytes, vbytes in items:
            out += kbytes + vbytes
    elif t is set or t is frozenset:
        parts = []
        for item in obj:
            buf = bytearray()
            _encode(item, buf)
            parts.append(bytes(buf))
        parts.sort()
        out += (b"S" if t is set else b"Z") + b"%d:" % len(parts) + b"".join(parts)
    elif isinstance(obj, enum.Enum):
        out += b"E"
        _encode(f"{t.__module__}.{t.__qualname__}", out)
        _encode(obj.value, out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out += b"C"
        _encode(f"{t.__module__}.{t.__qualname__}", out)
        fields = dataclasses.fields(obj)
        out += b"%d:" % len(fields)
        for f in fields:
            _encode(f.name, out)
            _encode(getattr(obj, f.name), out)
    elif t.__module__ == "numpy":
        import numpy as np

        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise KeyError_("numpy arrays of dtype object cannot be part of a cache key")
            arr = np.ascontiguousarray(obj)
            out += b"A"
            _encode(arr.dtype.str, out)
            _encode(tuple(arr.shape), out)
            raw = arr.tobytes()
            out += b"%d:" % len(raw) + raw
        elif isinstance(obj, np.generic):
            out += b"G"
            _encode(obj.dtype.str, out)
            out += obj.tobytes()
        else:
            raise KeyError_(f"cannot build a cache key from {t.__qualname__}")
    elif isinstance(obj, _dt.datetime | _dt.date | _dt.time | _dt.timedelta):
        out += b"D"
        _encode(t.__name__, out)
        _encode(str(obj), out)
    elif t is decimal.Decimal:
        out += b"M"
        _encode(str(obj), out)
    elif t is uuid.UUID:
        out += b"U" + obj.bytes
    elif hasattr(obj, "__cachekit_key__"):
        out += b"K"
        _encode(f"{t.__module__}.{t.__qualname__}", out)
        _encode(obj.__cachekit_key__(), out)
    elif hasattr(obj, "model_dump") and callable(obj.model_dump):  # pydantic v2 models
        out += b"P"
        _encode(f"{t.__module__}.{t.__qualname__}", out)
        _encode(obj.model_dump(mode="python"), out)
    elif t in (int, float, str) or isinstance(obj, int | float | str):
        # Subclasses of builtins (IntFlag aside, handled as Enum above) keep their own type name.
        out += b"X"
        _encode(f"{t.__module__}.{t.__qualname__}", out)
        base = int if isinstance(obj, int) else float if isinstance(obj, float) else str
        _encode(base(obj), out)
    else:
        raise KeyError_(
            f"cannot build a cache key from an argument of type {t.__module__}.{t.__qualname__}; "
            "pass key=... to the decorator, define __cachekit_key__() on the type, "
            "or exclude the argument with ignore=(...)"
        )


def stable_digest(obj: Any) -> str:
    """A 32-hex-digit digest of ``obj``'s typed canonical encoding."""
    out = bytearray()
    _encode(obj, out)
    return hashlib.blake2b(out, digest_size=16).hexdigest()


# Type tuples already seen to hold only scalars. A set membership test costs a third of
# frozenset.issuperset on a tuple (which builds a temporary set); bounded by clearing.
SCALAR_SIGNATURES: set[tuple[type, ...]] = set()


def all_scalar(types: tuple[type, ...]) -> bool:
    if types in SCALAR_SIGNATURES:
        return True
    if not _SCALARS.issuperset(types):
        return False
    if len(SCALAR_SIGNATURES) > 1024:
        SCALAR_SIGNATURES.clear()
    SCALAR_SIGNATURES.add(types)
    return True


def local_key(
    values: tuple[Any, ...], types: tuple[type, ...] | None = None
) -> tuple[Any, ...] | None:
    """A hashable typed key for plain arguments, or ``None`` when the stable digest is needed.
    ``types`` (the values' types) may be passed by a caller that has them already."""
    if types is None:
        types = tuple(map(type, values))
        if all_scalar(types):  # the common case
            return (values, types)
    sig: list[Any] = []
    for v in values:
        t = type(v)
        if t is tuple:
            element_types = tuple(map(type, v))
            if not all_scalar(element_types):
                return None
            sig.append(element_types)
        elif t in _SCALARS:
            sig.append(t)
        else:
            return None
    return (values, tuple(sig))


_EMPTY = inspect.Parameter.empty


class ArgNormalizer:
    """Maps ``(args, kwargs)`` of calls to one function onto a canonical tuple of values in
    parameter order, with defaults applied, so ``f(1, b=2)``, ``f(b=2, a=1)`` and ``f(1, 2)``
    give the same key. The common call shape (all positional, or positional + defaults) takes a
    fast path with no ``inspect`` work."""

    def __init__(self, fn: Callable[..., Any], ignore: tuple[str, ...] = ()) -> None:
        sig = inspect.signature(fn)
        self._sig = sig
        params = list(sig.parameters.values())
        unknown = set(ignore) - {p.name for p in params}
        if unknown:
            raise ValueError(f"ignore names parameters {sorted(unknown)} that {fn!r} does not have")
        self._ignore = frozenset(ignore)
        simple = all(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params
        )
        self._names = tuple(p.name for p in params)
        self._keep = tuple(i for i, p in enumerate(params) if p.name not in self._ignore)
        self._fast = simple and not self._ignore
        self._defaults = tuple(p.default for p in params)
        self._nparams = len(params)
        self._first_default = next(
            (i for i, p in enumerate(params) if p.default is not _EMPTY), len(params)
        )
        self.param_names = self._names
        #: (first index with a default, parameter count, defaults) when calls with positional
        #: arguments only can skip binding; None otherwise.
        self.positional_fast_path = (
            (self._first_default, self._nparams, self._defaults) if self._fast else None
        )

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if self._fast and not kwargs:
            n = len(args)
            if n == self._nparams:
                return args
            if self._first_default <= n < self._nparams:
                return args + self._defaults[n:]
        return self._slow(args, kwargs)

    def _slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(
                f"arguments do not match the cached function's signature: {exc}"
            ) from exc
        bound.apply_defaults()
        values: list[Any] = []
        for name, param in self._sig.parameters.items():
            if name in self._ignore:
                continue
            value = bound.arguments[name]
            if param.kind is param.VAR_KEYWORD:
                value = dict(sorted(value.items()))
            values.append(value)
        return tuple(values)

    def named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, defaults applied (ignored ones included)."""
        bound = self._sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)
