from __future__ import annotations

import pickle

import numpy as np
import pytest

from cachekit import Cache, SerializationError
from cachekit.serialization import (
    Envelope,
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    decode_envelope,
    encode_envelope,
    get_serializer,
)

VALUES = [
    None, True, 1, -(2**40), 1.5, "text", b"\x00bytes", [1, "a"], (1, (2, 3)), {"a": {"b": [1]}},
    {1, 2}, frozenset({"x"}), {1: "int keys"},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_msgpack_roundtrip_keeps_types(value: object) -> None:
    s = MsgpackSerializer()
    env = Envelope(value, 10.0, 5.0, 1.0, "v2")
    back = decode_envelope(s, encode_envelope(s, env))
    assert back == env
    assert type(back.value) is type(value)


def test_numpy_roundtrip() -> None:
    s = MsgpackSerializer()
    arr = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    back = decode_envelope(s, encode_envelope(s, Envelope(arr, 0.0, None))).value
    assert back.dtype == np.float32 and back.shape == (3, 4)
    np.testing.assert_array_equal(back, arr)
    scalar = decode_envelope(s, encode_envelope(s, Envelope(np.float64(2.5), 0.0, None))).value
    assert scalar == 2.5 and isinstance(scalar, np.float64)


def test_msgpack_refuses_pickle_payload() -> None:
    evil = PickleSerializer.tag + pickle.dumps([1, 0.0, None, 0.0, None, "x"])
    with pytest.raises(SerializationError, match="refusing"):
        decode_envelope(MsgpackSerializer(), evil)


def test_unserializable_value_raises_clear_error() -> None:
    with pytest.raises(SerializationError, match="object"):
        encode_envelope(MsgpackSerializer(), Envelope(object(), 0.0, None))


def test_json_and_pickle_serializers() -> None:
    j = JsonSerializer()
    back = decode_envelope(j, encode_envelope(j, Envelope({"a": [1]}, 1.0, 2.0)))
    assert back.value == {"a": [1]}
    p = PickleSerializer()
    assert decode_envelope(p, encode_envelope(p, Envelope(complex(1, 2), 1.0, 2.0))).value == 1 + 2j
    with pytest.raises(ValueError, match="unknown serializer"):
        get_serializer("yaml")


def test_cache_returns_unserializable_results_without_caching_them() -> None:
    cache = Cache()
    calls = []

    @cache.cached
    def make() -> object:
        calls.append(1)
        return object()

    make()
    make()
    assert len(calls) == 2
    assert cache.stats().extra["serialization_errors"] == 2
