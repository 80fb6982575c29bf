"""Serializers and the envelope every cached value is stored in.

Values leave the process as ``tag byte + payload``. The tag names the serializer that wrote
them, so a reader configured for msgpack refuses a pickle payload instead of running it:
unpickling bytes that someone else could write into Redis executes their code.

Whatever is in a shared store is input, not truth: another program, an operator or an attacker
with write access may have put it there. Decoding is therefore *total*: any bytes become either
a valid :class:`Envelope` (every field of the type the cache relies on, every number finite) or
a :class:`SerializationError`, which the cache counts and treats as a miss. Nesting and sizes are
bounded, so no entry can crash the process or make it allocate without limit. What decoding
cannot tell is whether a well-formed entry is *honest*: :class:`SignedSerializer` adds that, and
``docs/security.md`` says when it is needed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import pickle
from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack

from cachekit._core.protocols import Serializer

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_CONTAINERS",
    "MAX_EXT_DEPTH",
    "Envelope",
    "JsonSerializer",
    "MsgpackSerializer",
    "Packed",
    "PickleSerializer",
    "SerializationError",
    "SignedSerializer",
    "decode_envelope",
    "encode_envelope",
    "encode_for_tiers",
    "for_sharing",
    "get_serializer",
    "is_immutable",
    "load_packed",
    "parse_version",
]

ENVELOPE_FORMAT = 1

#: Largest payload the msgpack and JSON serializers write or read (64 MiB, the default L1 size:
#: a larger value could not be held in L1 anyway). Decoding amplifies bytes into objects by at
#: most a small factor (an empty container is one byte on the wire, ~60 bytes in Python), so
#: this also bounds what one hostile entry can make a reader allocate.
DEFAULT_MAX_BYTES = 64 * 2**20

#: Most arrays, maps and extension values one stored value may decode into (msgpack and JSON).
#: A container is one byte on the wire and ~70 bytes in Python, so a 16 MiB entry of empty maps
#: would cost a reader ~1 GB and seconds; with this bound it is refused after ~72 MiB and ~0.2 s
#: (bench/exact/decode_bounds.py).
#: A payload shorter than the bound cannot reach it and is decoded with no counting at all.
DEFAULT_MAX_CONTAINERS = 2**20

#: Deepest nesting of msgpack extension values (tuples, sets, numpy) inside one another. Each
#: level is a nested C unpack call plus a Python hook, outside the unpacker's own stack bound
#: (arrays and maps: 1024 levels, enforced by msgpack); unbounded, a ~1 KB entry nested a few
#: hundred levels overflows the C stack and kills the process.
MAX_EXT_DEPTH = 32

#: Largest namespace version :func:`parse_version` accepts: Redis INCR counts in signed 64 bits.
_MAX_VERSION = 2**63 - 1


class SerializationError(ValueError):
    """A value cannot be stored with the configured serializer, or stored bytes cannot be read."""


class Envelope(NamedTuple):
    """A cached value and what the cache needs to judge it. Times are clock seconds. A named
    tuple: the batch paths build one per entry (a third of a frozen dataclass's cost)."""

    value: Any
    created_at: float
    ttl: float | None
    stale_ttl: float = 0.0
    version: str | int | None = None

    def fresh(self, now: float) -> bool:
        return self.ttl is None or now < self.created_at + self.ttl

    def servable_stale(self, now: float) -> bool:
        return self.ttl is not None and now < self.created_at + self.ttl + self.stale_ttl

    @property
    def storage_ttl(self) -> float | None:
        """How long a store must keep the bytes: freshness plus the stale window."""
        return None if self.ttl is None else self.ttl + self.stale_ttl


# msgpack extension codes; stable on the wire, never reuse a number.
_EXT_TUPLE = 1
_EXT_SET = 2
_EXT_FROZENSET = 3
_EXT_NDARRAY = 4
_EXT_NPSCALAR = 5

# numpy dtype kinds a stored array may have: never "O" (object arrays hold pointers).
_NUMPY_KINDS = frozenset("biufcmMSUV")
_MAX_DTYPE_STR = 16


def _msgpack_default(obj: Any) -> Any:
    # strict_types=True sends tuples and subclasses here, so they round-trip as themselves.
    if isinstance(obj, tuple):
        if hasattr(obj, "_fields"):
            raise TypeError("namedtuples do not round-trip through msgpack; use a dict")
        return msgpack.ExtType(_EXT_TUPLE, _packb(list(obj)))
    if isinstance(obj, frozenset):
        return msgpack.ExtType(_EXT_FROZENSET, _packb(list(obj)))
    if isinstance(obj, set):
        return msgpack.ExtType(_EXT_SET, _packb(list(obj)))
    module = type(obj).__module__
    if module == "numpy":
        import numpy as np

        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise TypeError("numpy arrays of dtype object cannot be serialized")
            arr = np.ascontiguousarray(obj)
            return msgpack.ExtType(
                _EXT_NDARRAY, _packb([arr.dtype.str, list(arr.shape), arr.tobytes()])
            )
        if isinstance(obj, np.generic):
            return msgpack.ExtType(_EXT_NPSCALAR, _packb([obj.dtype.str, obj.tobytes()]))
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    raise TypeError(f"cannot serialize object of type {type(obj).__qualname__}")


def _numpy_dtype(spec: Any) -> Any:
    import numpy as np

    if type(spec) is not str or len(spec) > _MAX_DTYPE_STR:
        raise ValueError("bad numpy dtype in stored value")
    dtype = np.dtype(spec)
    if dtype.hasobject or dtype.kind not in _NUMPY_KINDS:
        raise ValueError(f"refusing numpy dtype {spec!r} in stored value")
    return dtype


def _decode_ndarray(fields: Any) -> Any:
    import numpy as np

    dtype_spec, shape, raw = fields
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("bad numpy shape in stored value")
    # frombuffer checks the byte count against the dtype; reshape checks it against the shape.
    return np.frombuffer(raw, dtype=_numpy_dtype(dtype_spec)).reshape(shape).copy()


def _decode_npscalar(fields: Any) -> Any:
    import numpy as np

    dtype_spec, raw = fields
    dtype = _numpy_dtype(dtype_spec)
    if type(raw) is not bytes or len(raw) != dtype.itemsize:
        raise ValueError("bad numpy scalar in stored value")
    return np.frombuffer(raw, dtype=dtype)[0]


def _ext_value(code: int, inner: Any) -> Any:
    """The value of a msgpack extension whose payload unpacked to ``inner``."""
    if code == _EXT_TUPLE:
        return tuple(inner)
    if code == _EXT_SET:
        return set(inner)
    if code == _EXT_FROZENSET:
        return frozenset(inner)
    if code == _EXT_NDARRAY:
        return _decode_ndarray(inner)
    if code == _EXT_NPSCALAR:
        return _decode_npscalar(inner)
    raise ValueError(f"unknown msgpack extension type {code}")


def _check_depth(depth: int) -> None:
    if depth >= MAX_EXT_DEPTH:
        raise ValueError(f"stored value nests extension types deeper than {MAX_EXT_DEPTH}")


def _make_ext_hook(depth: int) -> Callable[[int, bytes], Any]:
    """The ext hook for extension values nested ``depth`` levels deep: it unpacks their payload
    with the next level's hook, so nesting is bounded without any per-call state."""

    def hook(code: int, data: bytes) -> Any:
        _check_depth(depth)
        return _ext_value(code, _unpackb(data, depth + 1))

    return hook


_EXT_HOOKS = [_make_ext_hook(d) for d in range(MAX_EXT_DEPTH + 1)]


def _packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_msgpack_default, strict_types=True, use_bin_type=True)


def _unpackb(data: bytes, depth: int = 0) -> Any:
    # msgpack bounds every length read (str, bin, array, map, ext) by len(data) by default, so a
    # short entry cannot claim a huge container; len(data) itself is bounded by the serializer.
    return msgpack.unpackb(data, ext_hook=_EXT_HOOKS[depth], raw=False, strict_map_key=False)


class _ContainerBudget:
    """Decodes one payload while counting the containers it creates (every array, map and
    extension value, at any depth), and stops at ``limit``: the unpacker calls :meth:`take` for
    each one, which costs a Python call per container, so only payloads long enough to exceed
    the limit are decoded this way."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def take(self, obj: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise ValueError(f"stored value decodes into more than {self.limit} containers")
        return obj

    def unpackb(self, data: bytes, depth: int = 0) -> Any:
        def ext(code: int, payload: bytes) -> Any:
            _check_depth(depth)
            return self.take(_ext_value(code, self.unpackb(payload, depth + 1)))

        return msgpack.unpackb(
            data,
            ext_hook=ext,
            list_hook=self.take,
            object_hook=self.take,
            raw=False,
            strict_map_key=False,
        )


def _check_limits(max_bytes: int, max_containers: int) -> None:
    for name, n in (("max_bytes", max_bytes), ("max_containers", max_containers)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be a positive int, got {n!r}")


def _check_size(data: bytes, max_bytes: int, what: str) -> None:
    if len(data) > max_bytes:
        raise ValueError(
            f"{what} of {len(data)} bytes is over the serializer's limit of {max_bytes}"
        )


class _Bounded:
    """The bounds of a serializer that reads from the network: ``max_bytes`` a payload (both
    ways), ``max_containers`` the containers one read may build."""

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, max_containers: int = DEFAULT_MAX_CONTAINERS
    ) -> None:
        _check_limits(max_bytes, max_containers)
        self.max_bytes = max_bytes
        self.max_containers = max_containers


class MsgpackSerializer(_Bounded):
    """The default: compact, fast, safe to read from the network. Keeps tuples, sets, bytes and
    numpy arrays/scalars as themselves. ``max_bytes`` bounds a payload both ways;
    ``max_containers`` bounds the arrays, maps and extension values one read may build."""

    tag = b"m"

    def dumps(self, value: Any) -> bytes:
        data: bytes = _packb(value)
        _check_size(data, self.max_bytes, "value")
        return data

    def loads(self, data: bytes) -> Any:
        if len(data) > self.max_bytes:
            _check_size(data, self.max_bytes, "stored value")
        if len(data) > self.max_containers:  # each container is at least one byte
            return _ContainerBudget(self.max_containers).unpackb(data)
        return _unpackb(data)


class JsonSerializer(_Bounded):
    """Plain JSON, for stores that other languages read. Tuples come back as lists.
    ``max_bytes`` bounds a payload both ways; nesting is bounded by the interpreter's recursion
    limit, which the C decoder checks. ``max_containers`` bounds the arrays and objects a read
    may build, counted from the payload's ``[`` and ``{`` bytes (those inside strings too, so a
    value with more brackets in its strings than the bound is refused as well)."""

    tag = b"j"

    def dumps(self, value: Any) -> bytes:
        data = json.dumps(value, separators=(",", ":"), allow_nan=True).encode()
        _check_size(data, self.max_bytes, "value")
        return data

    def loads(self, data: bytes) -> Any:
        _check_size(data, self.max_bytes, "stored value")
        if len(data) > self.max_containers:
            opened = data.count(b"[") + data.count(b"{")
            if opened > self.max_containers:
                raise ValueError(
                    f"stored value opens {opened} arrays and objects, over the serializer's "
                    f"limit of {self.max_containers}"
                )
        return json.loads(data)


class PickleSerializer:
    """Any picklable object. Opt-in only: unpickling runs code chosen by whoever wrote the bytes,
    so use it only when every writer of the store is trusted (or wrap it in
    :class:`SignedSerializer`, which checks the writer knew the key before unpickling)."""

    tag = b"p"

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


class SignedSerializer:
    """Wraps another serializer and authenticates every payload with a keyed BLAKE2b MAC (a
    standard keyed-hash MAC, as strong as HMAC-SHA256 and cheaper), so entries written by anyone
    without ``secret`` are refused as corrupt instead of served. Give every process that shares
    the store the same secret; rotate by listing the new secret first and the old one in
    ``previous`` until old entries have expired.

    With a ``context`` (``encode_envelope``/``decode_envelope`` pass the entry's key when given
    one), the MAC also covers where the entry is stored, so a signed entry copied over another
    key is refused too. Without one it proves *who wrote* an entry, not *where*; see
    ``docs/security.md``.
    """

    MAC_BYTES = 32

    def __init__(
        self, inner: Serializer | str, secret: bytes, previous: tuple[bytes, ...] = ()
    ) -> None:
        for s in (secret, *previous):
            if not isinstance(s, bytes) or not 16 <= len(s) <= 64:
                raise ValueError("a SignedSerializer secret is 16 to 64 bytes")
        self.inner = get_serializer(inner)
        # Its own tag: signed and unsigned entries never read as each other.
        self.tag = self.inner.tag.upper()
        if self.tag == self.inner.tag:
            raise ValueError("the inner serializer's tag must be a lowercase letter")
        self._secret = secret
        self._secrets = (secret, *previous)

    def _mac(self, secret: bytes, payload: bytes, context: bytes) -> bytes:
        h = hashlib.blake2b(key=secret, digest_size=self.MAC_BYTES)
        if context:  # length-prefixed, so (context, payload) splits one way only
            h.update(len(context).to_bytes(8, "big") + context)
        h.update(payload)
        return h.digest()

    def dumps(self, value: Any, context: bytes = b"") -> bytes:
        payload = self.inner.dumps(value)
        return self._mac(self._secret, payload, context) + payload

    def loads(self, data: bytes, context: bytes = b"") -> Any:
        mac, payload = data[: self.MAC_BYTES], data[self.MAC_BYTES :]
        if not any(hmac.compare_digest(mac, self._mac(s, payload, context)) for s in self._secrets):
            raise ValueError(
                "entry signature does not match: not written with this secret "
                "(or under another key)"
            )
        return self.inner.loads(payload)


def get_serializer(spec: str | Serializer) -> Serializer:
    if not isinstance(spec, str):
        if not isinstance(spec, Serializer):
            raise TypeError("serializer must be 'msgpack', 'json', 'pickle' or a Serializer")
        return spec
    if spec == "msgpack":
        return MsgpackSerializer()
    if spec == "json":
        return JsonSerializer()
    if spec == "pickle":
        return PickleSerializer()
    raise ValueError(f"unknown serializer {spec!r}: expected 'msgpack', 'json' or 'pickle'")


def encode_envelope(serializer: Serializer, env: Envelope, key: str | None = None) -> bytes:
    """``env`` as bytes for a shared store. ``key``: where it will be stored; a
    :class:`SignedSerializer` binds the entry to it (pass the same to :func:`decode_envelope`)."""
    fields = [ENVELOPE_FORMAT, env.created_at, env.ttl, env.stale_ttl, env.version, env.value]
    try:
        if key is not None and isinstance(serializer, SignedSerializer):
            payload = serializer.dumps(fields, key.encode("utf-8", "surrogatepass"))
        else:
            payload = serializer.dumps(fields)
    except (TypeError, ValueError, OverflowError, pickle.PicklingError) as exc:
        raise SerializationError(
            f"cannot store a {type(env.value).__qualname__} with {type(serializer).__name__}: {exc}"
        ) from exc
    return serializer.tag + payload


def encode_for_tiers(
    serializer: Serializer,
    l1_serializer: Serializer,
    env: Envelope,
    key: str | None = None,
    *,
    share: bool = False,
) -> tuple[bytes, Any]:
    """``env`` as bytes for a shared store (:func:`encode_envelope`) and what an in-process tier
    should hold for its value (:func:`for_sharing`, or the value itself when ``share``), with
    the value serialized once where the two encodings allow it: with msgpack on both sides, the
    envelope is a msgpack array whose last element is the value, so the value's own bytes are
    both the L1 copy and the tail of the envelope. Raises :class:`SerializationError`."""
    value = env.value
    if share or is_immutable(value):
        return encode_envelope(serializer, env, key), value
    if type(serializer) is not MsgpackSerializer or type(l1_serializer) is not MsgpackSerializer:
        data = encode_envelope(serializer, env, key)
        return data, for_sharing(l1_serializer, value)
    try:
        vb = l1_serializer.dumps(value)
        head = _packb([ENVELOPE_FORMAT, env.created_at, env.ttl, env.stale_ttl, env.version])
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(
            f"cannot store a {type(value).__qualname__} with MsgpackSerializer: {exc}"
        ) from exc
    # head is a fixarray of 5 (0x95): the same array with one more element is 0x96.
    payload = b"\x96" + head[1:] + vb
    if len(payload) > serializer.max_bytes:
        raise SerializationError(
            f"value of {len(payload)} bytes is over the serializer's limit of "
            f"{serializer.max_bytes}"
        )
    return serializer.tag + payload, Packed(vb, l1_serializer.loads)


def _number(x: Any, field: str) -> float:
    """``x`` as a finite float, or an error naming ``field``. bool is an int subclass: refused."""
    if type(x) is not float and type(x) is not int:
        raise SerializationError(f"envelope field {field} is a {type(x).__name__}, not a number")
    try:
        f = float(x)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise SerializationError(f"envelope field {field} is not finite")
    return f


_isfinite = math.isfinite


def _envelope(fields: Any) -> Envelope:
    """Checks every field the cache uses outside the decoder (freshness, L1 fill, version
    comparison), so those can never raise on a stored entry."""
    if type(fields) is not list or len(fields) != 6:
        raise SerializationError("stored value is not an envelope")
    fmt, created_at, ttl, stale_ttl, version, value = fields
    # Fast path, on every L2 hit: the shape cachekit writes. One isfinite on the sum covers all
    # three numbers (an inf or a NaN in any makes the sum non-finite).
    if (
        type(created_at) is float
        and type(stale_ttl) is float
        and (ttl is None or type(ttl) is float)
        and type(fmt) is int
        and fmt == 1
        and (version is None or type(version) is str or type(version) is int)
        and stale_ttl >= 0.0
        and (ttl is None or ttl > 0.0)
        and _isfinite(created_at + stale_ttl + (0.0 if ttl is None else ttl))
    ):
        return Envelope(value, created_at, ttl, stale_ttl, version)
    return _checked_envelope(fmt, created_at, ttl, stale_ttl, version, value)


def _checked_envelope(
    fmt: Any, created_at: Any, ttl: Any, stale_ttl: Any, version: Any, value: Any
) -> Envelope:
    """The envelope from fields of any types (ints for times, say), or the error naming the
    first field that is wrong."""
    if type(fmt) is not int or fmt != ENVELOPE_FORMAT:
        raise SerializationError(f"unknown envelope format {fmt!r:.40}")
    created = _number(created_at, "created_at")
    ttl_f = None if ttl is None else _number(ttl, "ttl")
    stale = _number(stale_ttl, "stale_ttl")
    if (ttl_f is not None and ttl_f <= 0) or stale < 0:
        raise SerializationError("envelope ttl must be positive and stale_ttl non-negative")
    if ttl_f is not None and not math.isfinite(created + ttl_f + stale):
        raise SerializationError("envelope expiry is not finite")
    if version is not None and type(version) is not str and type(version) is not int:
        raise SerializationError(f"envelope version is a {type(version).__name__}")
    return Envelope(value, created, ttl_f, stale, version)


def decode_envelope(serializer: Serializer, data: bytes, key: str | None = None) -> Envelope:
    """The envelope in ``data``, or :class:`SerializationError` for any bytes that are not one
    written by ``serializer`` (foreign tag, corrupt, hostile, fields of the wrong type; for a
    :class:`SignedSerializer`, not signed with its secret for ``key``)."""
    if type(data) is not bytes:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise SerializationError(f"stored value is a {type(data).__name__}, not bytes")
        data = bytes(data)
    if data[:1] != serializer.tag:
        raise SerializationError(
            f"stored value was written by serializer tag {data[:1]!r}, this cache reads "
            f"{serializer.tag!r}; refusing to decode it"
        )
    try:
        if key is not None and isinstance(serializer, SignedSerializer):
            fields = serializer.loads(data[1:], key.encode("utf-8", "surrogatepass"))
        else:
            fields = serializer.loads(data[1:])
    except Exception as exc:  # any failure of a decoder on foreign bytes is a corrupt entry
        raise SerializationError(f"corrupt cache entry: {exc}") from exc
    return _envelope(fields)


def parse_version(data: Any) -> int | None:
    """A namespace version as stored in the shared tier (``b"12"``, ``"12"`` or ``12``), or
    ``None`` when ``data`` is absent or not a version: anything but the decimal digits of an
    integer in ``[0, 2**63)``. The caller decides what ``None`` means (absent: version 0;
    garbage: keep the version it has); it never raises."""
    if type(data) is int:
        return data if 0 <= data <= _MAX_VERSION else None
    if isinstance(data, bytes | bytearray | memoryview):
        data = bytes(data)
        if not 0 < len(data) <= 19 or not data.isdigit():
            return None
    elif isinstance(data, str):
        if not 0 < len(data) <= 19 or not (data.isascii() and data.isdigit()):
            return None
    else:
        return None
    value = int(data)
    return value if value <= _MAX_VERSION else None


_IMMUTABLE_SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes})
_MAX_IMMUTABLE_CHECK = 10_000


def is_immutable(value: Any) -> bool:
    """Whether ``value`` can be handed to several callers without copying: built from immutable
    scalars, tuples and frozensets only. Meant to be asked once when a value is stored (it walks
    the value, up to a bound beyond which it answers False), not on every read."""
    budget = _MAX_IMMUTABLE_CHECK
    stack = [value]
    while stack:
        budget -= 1
        if budget < 0:
            return False
        v = stack.pop()
        t = type(v)
        if t in _IMMUTABLE_SCALARS:
            continue
        if t is tuple or t is frozenset:
            stack.extend(v)
            continue
        return False
    return True


class Packed:
    """A mutable value held in memory as its serialized bytes, so that every reader gets its own
    copy (:meth:`load`) and a caller mutating what it got cannot change what later callers get;
    the same thing a shared-tier reader gets. Immutable values need none of this: see
    :func:`for_sharing`."""

    __slots__ = ("data", "loads")

    def __init__(self, data: bytes, loads: Callable[[bytes], Any]) -> None:
        self.data = data
        self.loads = loads

    def load(self) -> Any:
        return self.loads(self.data)


#: Fewest packed values :func:`load_packed` decodes in one pass (below it, one call each).
_LOAD_MANY_MIN = 8


def load_packed(values: list[Any]) -> list[Any]:
    """``values`` with each :class:`Packed` among them loaded (a fresh copy each) and the others
    as they are: a batch read of L1. Packed values of one msgpack serializer are decoded in one
    pass of one ``msgpack.Unpacker`` over their joined bytes (each is one whole msgpack object,
    written by that serializer), which saves the per-call cost of ``unpackb`` that dominates small
    values; others are loaded one by one. Returns ``values`` itself when it holds no Packed."""
    idx = [i for i, v in enumerate(values) if type(v) is Packed]
    if not idx:
        return values
    packed: list[Packed] = [values[i] for i in idx]
    loads = {p.loads for p in packed}
    one = next(iter(loads))
    if (
        len(idx) >= _LOAD_MANY_MIN
        and len(loads) == 1
        and getattr(one, "__func__", None) is MsgpackSerializer.loads
    ):
        data = b"".join([p.data for p in packed])
        unpacker = msgpack.Unpacker(
            ext_hook=_EXT_HOOKS[0],
            raw=False,
            strict_map_key=False,
            max_buffer_size=max(len(data), 1),  # bounds every length read, as unpackb does
        )
        unpacker.feed(data)
        loaded = list(unpacker)
    else:
        loaded = [p.load() for p in packed]
    out = list(values)
    for i, v in zip(idx, loaded, strict=True):
        out[i] = v
    return out


def for_sharing(serializer: Serializer, value: Any) -> Any:
    """What an in-process tier should hold for ``value``: the value itself when it is immutable
    (:func:`is_immutable`; handed out as is, at no cost per read), else a :class:`Packed` copy
    whose :meth:`Packed.load` decodes a fresh value on each read. Raises
    :class:`SerializationError` when ``serializer`` cannot write ``value``."""
    if is_immutable(value):
        return value
    try:
        return Packed(serializer.dumps(value), serializer.loads)
    except (TypeError, ValueError, OverflowError, pickle.PicklingError) as exc:
        raise SerializationError(f"cannot copy a {type(value).__qualname__}: {exc}") from exc
