"""Serializers and the envelope every cached value is stored in.

Values leave the process as ``tag byte + payload``. The tag names the serializer that wrote
them, so a reader configured for msgpack refuses a pickle payload instead of running it:
unpickling bytes that someone else could write into Redis executes their code.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from typing import Any

import msgpack

from cachekit.protocols import Serializer

__all__ = [
    "Envelope",
    "JsonSerializer",
    "MsgpackSerializer",
    "PickleSerializer",
    "SerializationError",
    "decode_envelope",
    "encode_envelope",
    "get_serializer",
]

ENVELOPE_FORMAT = 1


class SerializationError(ValueError):
    """A value cannot be stored with the configured serializer, or stored bytes cannot be read."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """A cached value and what the cache needs to judge it. Times are clock seconds."""

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


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_TUPLE:
        return tuple(_unpackb(data))
    if code == _EXT_SET:
        return set(_unpackb(data))
    if code == _EXT_FROZENSET:
        return frozenset(_unpackb(data))
    if code in (_EXT_NDARRAY, _EXT_NPSCALAR):
        import numpy as np

        if code == _EXT_NDARRAY:
            dtype, shape, raw = _unpackb(data)
            return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape).copy()
        dtype, raw = _unpackb(data)
        return np.frombuffer(raw, dtype=np.dtype(dtype))[0]
    return msgpack.ExtType(code, data)


def _packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_msgpack_default, strict_types=True, use_bin_type=True)


def _unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


class MsgpackSerializer:
    """The default: compact, fast, safe to read from the network. Keeps tuples, sets, bytes and
    numpy arrays/scalars as themselves."""

    tag = b"m"

    def dumps(self, value: Any) -> bytes:
        return _packb(value)

    def loads(self, data: bytes) -> Any:
        return _unpackb(data)


class JsonSerializer:
    """Plain JSON, for stores that other languages read. Tuples come back as lists."""

    tag = b"j"

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), allow_nan=True).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


class PickleSerializer:
    """Any picklable object. Opt-in only: unpickling runs code chosen by whoever wrote the bytes,
    so use it only when every writer of the store is trusted."""

    tag = b"p"

    def dumps(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)


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


def encode_envelope(serializer: Serializer, env: Envelope) -> bytes:
    try:
        payload = serializer.dumps(
            [ENVELOPE_FORMAT, env.created_at, env.ttl, env.stale_ttl, env.version, env.value]
        )
    except (TypeError, ValueError, OverflowError, pickle.PicklingError) as exc:
        raise SerializationError(
            f"cannot store a {type(env.value).__qualname__} with {type(serializer).__name__}: {exc}"
        ) from exc
    return serializer.tag + payload


def decode_envelope(serializer: Serializer, data: bytes) -> Envelope:
    if data[:1] != serializer.tag:
        raise SerializationError(
            f"stored value was written by serializer tag {data[:1]!r}, this cache reads "
            f"{serializer.tag!r}; refusing to decode it"
        )
    try:
        fmt, created_at, ttl, stale_ttl, version, value = serializer.loads(data[1:])
    except Exception as exc:
        raise SerializationError(f"corrupt cache entry: {exc}") from exc
    if fmt != ENVELOPE_FORMAT:
        raise SerializationError(f"unknown envelope format {fmt!r}")
    return Envelope(value, created_at, ttl, stale_ttl, version)
