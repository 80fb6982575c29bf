"""Cache keys: stable across processes and runs, typed, independent of keyword order.

Two forms are built from a call's normalised arguments:

* the *stable key*: a typed canonical encoding of the arguments hashed with BLAKE2b. It is what
  Redis sees, so it never uses ``hash()`` (randomised per process for ``str``) and it tells
  ``1``, ``1.0``, ``"1"`` and ``True`` apart;
* the *local key*: a hashable tuple used for the in-process tier when every argument is a plain
  scalar (or a flat tuple of them). It skips hashing bytes on the L1 hit path, which is what makes
  an L1 hit cost about as much as ``cachetools.cached``. Types are part of it, so it separates
  exactly what the stable key separates; floats whose ``==`` would not (zeros, since
  ``-0.0 == 0.0``, and NaNs, since ``nan != nan``) are keyed by the stable key instead.

Arguments that cannot be keyed (unknown types, ints over ``MAX_INT_BITS``, nesting deeper than
``MAX_KEY_DEPTH`` or containers that hold themselves) raise :class:`UnkeyableArgument`, a TypeError.
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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "FLOAT_SIGNATURES",
    "MAX_INT_BITS",
    "MAX_KEY_DEPTH",
    "SCALAR_SIGNATURES",
    "ArgNormalizer",
    "KeyError_",
    "UnkeyableArgument",
    "all_scalar",
    "float_positions",
    "local_key",
    "stable_digest",
    "strings_digest",
]


class UnkeyableArgument(TypeError):
    """An argument cannot be turned into a cache key."""


#: The former name of :class:`UnkeyableArgument`, kept for code that catches it.
KeyError_ = UnkeyableArgument


#: Deepest nesting of containers (and of ``__cachekit_key__``/model results) in a key; past it,
#: and for containers that hold themselves, the argument is refused rather than recursed into.
MAX_KEY_DEPTH = 64
#: Largest int in a key: about 4,200 decimal digits, under Python's default limit on int-to-str
#: conversion (4,300 digits), so the limit is the same in every process whatever its settings.
MAX_INT_BITS = 14_000

_PACK_DOUBLE = struct.Struct(">d").pack
_CANON_NAN = _PACK_DOUBLE(math.nan)
_FLOAT_ONLY = {float}

_Encoder = Callable[[Any, bytearray, int], None]


def _encode(obj: Any, out: bytearray, depth: int) -> None:
    enc = _BY_TYPE.get(type(obj))
    if enc is None:
        enc = _encoder_for(obj)
    enc(obj, out, depth)


def _deeper(depth: int) -> int:
    if depth >= MAX_KEY_DEPTH:
        raise UnkeyableArgument(
            f"argument nests deeper than {MAX_KEY_DEPTH} levels (or contains itself)"
        )
    return depth + 1


def _enc_none(obj: None, out: bytearray, depth: int) -> None:
    out += b"N"


def _enc_bool(obj: bool, out: bytearray, depth: int) -> None:
    out += b"T" if obj else b"F"


def _enc_int(obj: int, out: bytearray, depth: int) -> None:
    if obj.bit_length() > MAX_INT_BITS:
        raise UnkeyableArgument(
            f"an int of {obj.bit_length()} bits is too large for a cache key "
            f"(limit {MAX_INT_BITS} bits); pass key=... or ignore=(...)"
        )
    s = str(obj).encode()
    out += b"i%d:" % len(s) + s


def _enc_float(obj: float, out: bytearray, depth: int) -> None:
    # Bits, not value: -0.0 and 0.0 are different keys; every NaN is the same key.
    out += b"f" + (_CANON_NAN if obj != obj else _PACK_DOUBLE(obj))


def _enc_str(obj: str, out: bytearray, depth: int) -> None:
    s = obj.encode("utf-8", "surrogatepass")
    out += b"s%d:" % len(s) + s


def _enc_bytes(obj: bytes | bytearray | memoryview, out: bytearray, depth: int) -> None:
    b = bytes(obj)
    out += b"b%d:" % len(b) + b


def _enc_sequence(obj: tuple[Any, ...] | list[Any], out: bytearray, depth: int) -> None:
    n = len(obj)
    is_tuple = type(obj) is tuple
    if (
        n
        and type(obj[0]) is float
        and set(map(type, obj)) == _FLOAT_ONLY
        and all(x == x for x in obj)
    ):
        # Feature vectors: one struct call instead of one recursion per element. The tag
        # differs from the generic form, and which form applies depends only on the value.
        out += (b"u" if is_tuple else b"v") + b"%d:" % n + struct.pack(f">{n}d", *obj)
        return
    depth = _deeper(depth)
    out += (b"t" if is_tuple else b"l") + b"%d:" % n
    for item in obj:
        _encode(item, out, depth)


def _encoded(obj: Any, depth: int) -> bytes:
    buf = bytearray()
    _encode(obj, buf, depth)
    return bytes(buf)


def _enc_mapping(obj: Mapping[Any, Any], out: bytearray, depth: int) -> None:
    depth = _deeper(depth)
    items = sorted((_encoded(k, depth), _encoded(v, depth)) for k, v in obj.items())
    out += b"d%d:" % len(items)
    for kbytes, vbytes in items:
        out += kbytes + vbytes


def _enc_set(obj: set[Any] | frozenset[Any], out: bytearray, depth: int) -> None:
    depth = _deeper(depth)
    parts = sorted(_encoded(item, depth) for item in obj)
    out += (b"S" if type(obj) is set else b"Z") + b"%d:" % len(parts) + b"".join(parts)


def _qualname(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _enc_enum(obj: enum.Enum, out: bytearray, depth: int) -> None:
    depth = _deeper(depth)
    out += b"E"
    _enc_str(_qualname(obj), out, depth)
    _encode(obj.value, out, depth)


def _enc_dataclass(obj: Any, out: bytearray, depth: int) -> None:
    depth = _deeper(depth)
    out += b"C"
    _enc_str(_qualname(obj), out, depth)
    fields = dataclasses.fields(obj)
    out += b"%d:" % len(fields)
    for f in fields:
        _enc_str(f.name, out, depth)
        _encode(getattr(obj, f.name), out, depth)


def _enc_numpy(obj: Any, out: bytearray, depth: int) -> None:
    import numpy as np

    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise UnkeyableArgument("numpy arrays of dtype object cannot be part of a cache key")
        arr = np.ascontiguousarray(obj)
        out += b"A"
        _enc_str(arr.dtype.str, out, depth)
        _enc_sequence(tuple(arr.shape), out, depth)
        raw = arr.tobytes()
        out += b"%d:" % len(raw) + raw
    elif isinstance(obj, np.generic):
        out += b"G"
        _enc_str(obj.dtype.str, out, depth)
        out += obj.tobytes()
    else:
        raise UnkeyableArgument(f"cannot build a cache key from {type(obj).__qualname__}")


def _enc_datetime(obj: Any, out: bytearray, depth: int) -> None:
    out += b"D"
    _enc_str(type(obj).__name__, out, depth)
    _enc_str(str(obj), out, depth)


def _enc_decimal(obj: decimal.Decimal, out: bytearray, depth: int) -> None:
    out += b"M"
    _enc_str(str(obj), out, depth)


def _enc_uuid(obj: uuid.UUID, out: bytearray, depth: int) -> None:
    out += b"U" + obj.bytes


def _enc_custom(obj: Any, out: bytearray, depth: int) -> None:
    depth = _deeper(depth)
    out += b"K"
    _enc_str(_qualname(obj), out, depth)
    _encode(obj.__cachekit_key__(), out, depth)


def _enc_pydantic(obj: Any, out: bytearray, depth: int) -> None:
    depth = _deeper(depth)
    out += b"P"
    _enc_str(_qualname(obj), out, depth)
    _encode(obj.model_dump(mode="python"), out, depth)


def _enc_builtin_subclass(obj: Any, out: bytearray, depth: int) -> None:
    # Subclasses of builtins (IntFlag aside, handled as Enum) keep their own type name.
    out += b"X"
    _enc_str(_qualname(obj), out, depth)
    base = int if isinstance(obj, int) else float if isinstance(obj, float) else str
    _encode(base(obj), out, depth)


def _enc_unkeyable(obj: Any, out: bytearray, depth: int) -> None:
    raise UnkeyableArgument(
        f"cannot build a cache key from an argument of type {_qualname(obj)}; "
        "pass key=... to the decorator, define __cachekit_key__() on the type, "
        "or exclude the argument with ignore=(...)"
    )


_BY_TYPE: dict[type, _Encoder] = {
    type(None): _enc_none,
    bool: _enc_bool,
    int: _enc_int,
    float: _enc_float,
    str: _enc_str,
    bytes: _enc_bytes,
    bytearray: _enc_bytes,
    memoryview: _enc_bytes,
    tuple: _enc_sequence,
    list: _enc_sequence,
    dict: _enc_mapping,
    set: _enc_set,
    frozenset: _enc_set,
    decimal.Decimal: _enc_decimal,
    uuid.UUID: _enc_uuid,
}


def _encoder_for(obj: Any) -> _Encoder:
    """The encoder for a type not in the table; the order of the checks is part of the key
    format (a dataclass that is also a Mapping encodes as a Mapping)."""
    if isinstance(obj, Mapping):
        return _enc_mapping
    if isinstance(obj, enum.Enum):
        return _enc_enum
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _enc_dataclass
    if type(obj).__module__ == "numpy":
        return _enc_numpy
    if isinstance(obj, _dt.datetime | _dt.date | _dt.time | _dt.timedelta):
        return _enc_datetime
    if hasattr(obj, "__cachekit_key__"):
        return _enc_custom
    if hasattr(obj, "model_dump") and callable(obj.model_dump):  # pydantic v2 models
        return _enc_pydantic
    if isinstance(obj, int | float | str):
        return _enc_builtin_subclass
    return _enc_unkeyable


def _name_failure(exc: Exception, obj: Any, names: Sequence[str] | None) -> UnkeyableArgument:
    """The error for an argument tuple that could not be keyed, naming the parameter that failed
    when ``names`` (the tuple's parameter names) is given. Runs only on the error path."""
    reason = (
        str(exc)
        if isinstance(exc, UnkeyableArgument)
        else (f"argument nests too deeply (or contains itself): {type(exc).__name__}")
    )
    if type(obj) is tuple:
        for i, item in enumerate(obj):
            try:
                _encoded(item, 1)
            except (UnkeyableArgument, RecursionError) as item_exc:
                detail = str(item_exc) if isinstance(item_exc, UnkeyableArgument) else reason
                where = f"parameter {names[i]!r}" if names and i < len(names) else f"item {i}"
                return UnkeyableArgument(f"{where}: {detail}")
    return UnkeyableArgument(reason)


def stable_digest(obj: Any, names: Sequence[str] | None = None) -> str:
    """A 32-hex-digit digest of ``obj``'s typed canonical encoding. ``names``: when ``obj`` is a
    call's argument tuple, its parameter names (``ArgNormalizer.value_names``), so that an
    unkeyable argument's :class:`UnkeyableArgument` names its parameter."""
    out = bytearray()
    try:
        _encode(obj, out, 0)
    except (UnkeyableArgument, RecursionError) as exc:
        raise _name_failure(exc, obj, names) from None
    return hashlib.blake2b(out, digest_size=16).hexdigest()


def strings_digest(*parts: str) -> str:
    """``stable_digest(parts)`` for a tuple of strings, without the general walk (every
    semantic lookup keys its exact entry by ``(scope key, text)``)."""
    out = bytearray(b"t%d:" % len(parts))
    for part in parts:
        if type(part) is not str:
            return stable_digest(parts)
        _enc_str(part, out, 0)
    return hashlib.blake2b(out, digest_size=16).hexdigest()


# Types whose values are equal exactly when their keys must be: float is not one (-0.0 == 0.0,
# nan != nan), so float arguments take the checked path in local_key.
_SCALARS = frozenset({int, str, bytes, bool, type(None)})

# Type tuples already seen to hold only scalars. A set membership test costs a third of
# frozenset.issuperset on a tuple (which builds a temporary set); bounded by clearing.
SCALAR_SIGNATURES: set[tuple[type, ...]] = set()

_SCALARS_AND_FLOAT = _SCALARS | {float}
_PROD_MAX_LEN = 16
_prod = math.prod


# Type tuples already seen to hold something else, float included: the hit path asks about them
# on every call with such arguments, and a set lookup is cheaper than issuperset.
_OTHER_SIGNATURES: set[tuple[type, ...]] = set()


def all_scalar(types: tuple[type, ...]) -> bool:
    if types in SCALAR_SIGNATURES:
        return True
    if types in _OTHER_SIGNATURES:
        return False
    if not _SCALARS.issuperset(types):
        if len(_OTHER_SIGNATURES) > 1024:
            _OTHER_SIGNATURES.clear()
        _OTHER_SIGNATURES.add(types)
        return False
    if len(SCALAR_SIGNATURES) > 1024:
        SCALAR_SIGNATURES.clear()
    SCALAR_SIGNATURES.add(types)
    return True


def _plain_floats(v: tuple[float, ...]) -> bool:
    """Whether a tuple of floats holds no zero and no NaN, in one C loop where it can: the
    product is zero or NaN exactly when one is, or when it underflows (or is inf * 0), which
    only sends that tuple to the digest; long tuples, where underflow is likely, take two."""
    if len(v) <= _PROD_MAX_LEN:
        p = _prod(v)
        return p != 0.0 and p == p
    total = sum(v)
    return total == total and 0.0 not in v


_ALL_SCALAR, _FEW_FLOATS, _MANY_FLOATS, _MIXED_FLOATS, _OTHER = range(5)
# Element-type signatures of tuple arguments -> one of the kinds above. Bounded by clearing.
_TUPLE_KINDS: dict[tuple[type, ...], int] = {}


def _tuple_kind(types: tuple[type, ...]) -> int:
    """How a tuple argument with these element types is keyed locally: as is (scalars), after a
    check for zeros and NaNs (floats, alone or among scalars), or not at all (digest)."""
    if all_scalar(types):
        kind = _ALL_SCALAR
    elif not _SCALARS_AND_FLOAT.issuperset(types):
        kind = _OTHER
    else:
        kind = _MIXED_FLOATS
        if set(types) == _FLOAT_ONLY:
            kind = _FEW_FLOATS if len(types) <= _PROD_MAX_LEN else _MANY_FLOATS
    if len(_TUPLE_KINDS) > 1024:
        _TUPLE_KINDS.clear()
    _TUPLE_KINDS[types] = kind
    return kind


#: Argument-type signatures of scalars and floats -> the positions of their floats, which a hit
#: path must check on each call (a float keys by value only when it is neither a zero nor a NaN);
#: None for signatures holding anything else. Filled by :func:`float_positions`, bounded by
#: clearing. A hit path that finds its signature here with a value of ``None`` calls
#: :func:`local_key`.
FLOAT_SIGNATURES: dict[tuple[type, ...], tuple[int, ...] | None] = {}


def float_positions(types: tuple[type, ...]) -> tuple[int, ...] | None:
    """Where the floats are in an argument-type signature of scalars and floats (so a hit path
    can key such calls as ``(values, types)`` after checking just those), or None for any other
    signature."""
    try:
        return FLOAT_SIGNATURES[types]
    except KeyError:
        pass
    if len(FLOAT_SIGNATURES) > 1024:
        FLOAT_SIGNATURES.clear()
    positions = (
        tuple(i for i, t in enumerate(types) if t is float)
        if _SCALARS_AND_FLOAT.issuperset(types)
        else None
    )
    FLOAT_SIGNATURES[types] = positions
    return positions


def local_key(
    values: tuple[Any, ...], types: tuple[type, ...] | None = None
) -> tuple[Any, ...] | None:
    """A hashable typed key for plain arguments, or ``None`` when the stable digest is needed
    (anything but scalars and flat tuples of them, and floats that are zero or NaN, whose ``==``
    does not tell keys apart). ``types`` (the values' types) may be passed by a caller that has
    them already. It is on the L1 hit path for float arguments, hence one function."""
    if types is None:
        types = tuple(map(type, values))
        if all_scalar(types):  # the common case
            return (values, types)
    try:
        floats = FLOAT_SIGNATURES[types]
    except KeyError:
        floats = float_positions(types)
    if floats is not None:  # scalars and floats
        for i in floats:
            x = values[i]
            if x == 0.0 or x != x:
                return None
        return (values, types)
    sig: list[Any] = []
    for v in values:
        t = type(v)
        if t is tuple:
            element_types = tuple(map(type, v))
            try:
                kind = _TUPLE_KINDS[element_types]  # one hash of the signature
            except KeyError:
                kind = _tuple_kind(element_types)
            if kind is _FEW_FLOATS:  # the feature-vector case
                p = _prod(v)  # as in _plain_floats
                if p == 0.0 or p != p:
                    return None
            elif kind is _MANY_FLOATS:
                if not _plain_floats(v):
                    return None
            elif kind is _MIXED_FLOATS:
                if not all(x != 0.0 and x == x for x in v if type(x) is float):
                    return None
            elif kind is not _ALL_SCALAR:
                return None
            sig.append(element_types)
        elif t in _SCALARS:
            sig.append(t)
        elif t is float:
            if v == 0.0 or v != v:
                return None
            sig.append(t)
        else:
            return None
    return (values, tuple(sig))


_EMPTY = inspect.Parameter.empty


class ArgNormalizer:
    """Maps ``(args, kwargs)`` of calls to one function onto a canonical tuple of values in
    parameter order, with defaults applied, so ``f(1, b=2)``, ``f(b=2, a=1)`` and ``f(1, 2)``
    give the same key. Calls with positional arguments only (keyword-only parameters left to
    their defaults) take a fast path with no binding; calls with keyword arguments are bound by
    a table of parameter positions; only functions with ``*args``/``**kwargs`` and calls that
    do not match the signature go through ``inspect``."""

    def __init__(self, fn: Callable[..., Any], ignore: tuple[str, ...] = ()) -> None:
        sig = inspect.signature(fn)
        self._sig = sig
        params = list(sig.parameters.values())
        unknown = set(ignore) - {p.name for p in params}
        if unknown:
            raise ValueError(f"ignore names parameters {sorted(unknown)} that {fn!r} does not have")
        self._ignore = frozenset(ignore)
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        keyword_only = [p for p in params if p.kind is p.KEYWORD_ONLY]
        #: No ``*args``/``**kwargs``: every call binds by the table below.
        self._bindable = len(positional) + len(keyword_only) == len(params)
        self._defaults = tuple(p.default for p in params)
        self._max_positional = len(positional)
        self._first_default = next(
            (i for i, p in enumerate(positional) if p.default is not _EMPTY), len(positional)
        )
        # Positional calls need no binding when keyword-only parameters all have defaults.
        self._fast = (
            self._bindable
            and not self._ignore
            and all(p.default is not _EMPTY for p in keyword_only)
        )
        # A call with every positional argument is its own values only without keyword-only
        # parameters (-1: never).
        self._whole = len(positional) if not keyword_only else -1
        self._position = {
            p.name: i for i, p in enumerate(params) if p.kind is not p.POSITIONAL_ONLY
        }
        self._required = [i for i, p in enumerate(params) if p.default is _EMPTY]
        self._kept = [i for i, p in enumerate(params) if p.name not in self._ignore]
        #: The parameter name of each value in what a call returns (ignored ones left out): pass
        #: it to ``stable_digest(values, names=...)`` so a refused argument is named.
        self.value_names = tuple(p.name for p in params if p.name not in self._ignore)
        #: (first positional index with a default, most positional arguments, every
        #: parameter's default, the argument count that is all the values or -1) when calls
        #: with positional arguments only can skip binding: their values are ``args`` when
        #: ``len(args)`` is the fourth, else ``args + defaults[len(args):]``. None otherwise.
        self.positional_fast_path: tuple[int, int, tuple[Any, ...], int] | None = (
            (self._first_default, self._max_positional, self._defaults, self._whole)
            if self._fast
            else None
        )

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if self._fast and not kwargs:
            n = len(args)
            if n == self._whole:
                return args
            if self._first_default <= n <= self._max_positional:
                return args + self._defaults[n:]
        if self._bindable:
            values = self.bind(args, kwargs)
            if values is not None:
                return values
        return self._slow(args, kwargs)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """The values of a call by the table of parameter positions (what calling this object
        returns), or ``None`` when the call does not match the signature (calling this object
        then raises the error ``inspect`` words). Only for functions without ``*args`` and
        ``**kwargs``, which every call of binds this way."""
        n = len(args)
        if n > self._max_positional:
            return None
        values = list(args)
        values.extend(self._defaults[n:])
        position = self._position
        for name, value in kwargs.items():
            i = position.get(name)
            if i is None or i < n:  # unknown, positional-only, or given twice
                return None
            values[i] = value
        for i in self._required:
            if values[i] is _EMPTY:
                return None
        if self._ignore:
            return tuple([values[i] for i in self._kept])
        return tuple(values)

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
