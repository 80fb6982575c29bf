from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack
import pytest

from cachekit import Cache, SerializationError
from cachekit._core.serialization import (
    DEFAULT_MAX_CONTAINERS,
    MAX_EXT_DEPTH,
    Envelope,
    JsonSerializer,
    MsgpackSerializer,
    Packed,
    PickleSerializer,
    SignedSerializer,
    decode_envelope,
    encode_envelope,
    encode_for_tiers,
    for_sharing,
    get_serializer,
    is_immutable,
    load_packed,
    parse_version,
)

VALUES = [
    None,
    True,
    1,
    -(2**40),
    1.5,
    "text",
    b"\x00bytes",
    [1, "a"],
    (1, (2, 3)),
    {"a": {"b": [1]}},
    {1, 2},
    frozenset({"x"}),
    {1: "int keys"},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_msgpack_roundtrip_keeps_types(value: object) -> None:
    s = MsgpackSerializer()
    env = Envelope(value, 10.0, 5.0, 1.0, "v2")
    back = decode_envelope(s, encode_envelope(s, env))
    assert back == env
    assert type(back.value) is type(value)


def test_numpy_roundtrip() -> None:
    np = pytest.importorskip("numpy")  # not in a base install
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


# ---------------------------------------------------------------- hostile and corrupt entries

ROOT = Path(__file__).resolve().parents[1]


def envelope_bytes(fields: Sequence[object], tag: bytes = b"m") -> bytes:
    if tag == b"j":
        return tag + json.dumps(fields).encode()
    return tag + msgpack.packb(fields, use_bin_type=True)


BAD_FIELDS = {
    "created_at str": [1, "now", 5.0, 0.0, None, 1],
    "created_at None": [1, None, 5.0, 0.0, None, 1],
    "created_at bool": [1, True, 5.0, 0.0, None, 1],
    "created_at nan": [1, math.nan, 5.0, 0.0, None, 1],
    "created_at inf": [1, math.inf, 5.0, 0.0, None, 1],
    "ttl str": [1, 1.0, "5", 0.0, None, 1],
    "ttl list": [1, 1.0, [5], 0.0, None, 1],
    "ttl zero": [1, 1.0, 0, 0.0, None, 1],
    "ttl negative": [1, 1.0, -5.0, 0.0, None, 1],
    "ttl inf": [1, 1.0, math.inf, 0.0, None, 1],
    "expiry overflows": [1, 1e308, 1e308, 0.0, None, 1],
    "stale_ttl None": [1, 1.0, 5.0, None, None, 1],
    "stale_ttl negative": [1, 1.0, 5.0, -1.0, None, 1],
    "version list": [1, 1.0, 5.0, 0.0, [1], 1],
    "version float": [1, 1.0, 5.0, 0.0, 1.5, 1],
    "version bool": [1, 1.0, 5.0, 0.0, True, 1],
    "format bool": [True, 1.0, 5.0, 0.0, None, 1],
    "format 2": [2, 1.0, 5.0, 0.0, None, 1],
    "too short": [1, 1.0, 5.0, 0.0, None],
    "too long": [1, 1.0, 5.0, 0.0, None, 1, 2],
}


@pytest.mark.parametrize("tag", [b"m", b"j"])
@pytest.mark.parametrize("fields", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
def test_wrongly_typed_envelope_fields_are_refused_inside_the_decoder(
    fields: list[object], tag: bytes
) -> None:
    # JSON writes NaN and Infinity too (allow_nan), and must refuse them the same way.
    s = MsgpackSerializer() if tag == b"m" else JsonSerializer()
    with pytest.raises(SerializationError):
        decode_envelope(s, envelope_bytes(fields, tag))


def test_json_numbers_beyond_float_range_are_refused() -> None:
    # msgpack cannot carry such ints; JSON can, and float() of them overflows.
    for fields in ([1, 10**400, 5.0, 0.0, None, 1], [1, 1.0, 10**400, 0.0, None, 1]):
        with pytest.raises(SerializationError, match="finite"):
            decode_envelope(JsonSerializer(), envelope_bytes(fields, b"j"))
    with pytest.raises(SerializationError):  # more digits than int() converts: ValueError
        decode_envelope(JsonSerializer(), b"j[1," + b"9" * 5000 + b",null,0,null,1]")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"m",
        b"\x00",
        b"m\xc1",
        b"m\x91",
        b"m\xa5hello",
        b"j{",
        b"m" + msgpack.packb({"a": 1}),
        "mstr",
        None,
        5,
    ],
)
def test_any_input_is_an_envelope_or_a_serialization_error(data: object) -> None:
    for s in (MsgpackSerializer(), JsonSerializer()):
        with pytest.raises(SerializationError):
            decode_envelope(s, data)  # type: ignore[arg-type]


def test_int_times_are_accepted_as_floats() -> None:
    env = decode_envelope(MsgpackSerializer(), envelope_bytes([1, 10, 5, 0, 3, "v"]))
    assert env == Envelope("v", 10.0, 5.0, 0.0, 3)
    assert type(env.created_at) is float and env.fresh(14.0) and not env.fresh(15.0)


def test_deep_extension_nesting_is_an_error_not_a_crash() -> None:
    # Before the bound, depth 200 killed the process with SIGSEGV: run it in a child.
    code = textwrap.dedent("""
        import msgpack
        from cachekit._core.serialization import (
            MsgpackSerializer, SerializationError, decode_envelope)
        inner = msgpack.packb(None)
        for _ in range(5000):
            inner = msgpack.packb(msgpack.ExtType(1, inner))
        data = b"m" + msgpack.packb([1, 0.0, None, 0.0, None, msgpack.ExtType(1, inner)])
        try:
            decode_envelope(MsgpackSerializer(), data)
        except SerializationError as exc:
            print("refused:", exc)
        """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "deeper than" in out.stdout
    # Legitimate nesting within the bound still round-trips.
    s = MsgpackSerializer()
    value: object = ()
    for _ in range(MAX_EXT_DEPTH - 1):
        value = (value,)
    assert decode_envelope(s, encode_envelope(s, Envelope(value, 0.0, None))).value == value


def _many_empty_maps(n: int) -> bytes:
    """An envelope whose value is an array of ``n`` empty maps: one byte each on the wire."""
    head = msgpack.packb([1, 0.0, None, 0.0, None])
    return b"m\x96" + head[1:] + b"\xdd" + n.to_bytes(4, "big") + b"\x80" * n


@pytest.mark.parametrize("shape", ["maps", "arrays", "tuples"])
def test_decode_work_is_bounded_by_containers(shape: str) -> None:
    limit = 1000
    s = MsgpackSerializer(max_containers=limit)
    if shape == "maps":
        data = _many_empty_maps(5000)
    else:
        one = msgpack.ExtType(1, b"\x90") if shape == "tuples" else []
        data = b"m" + msgpack.packb([1, 0.0, None, 0.0, None, [[one] * 50] * 100])
    with pytest.raises(SerializationError, match="more than 1000 containers"):
        decode_envelope(s, data)
    # The same bytes are read by a serializer whose bound they fit.
    assert len(decode_envelope(MsgpackSerializer(max_containers=20_000), data).value) > 0


def test_decode_work_bound_keeps_every_legitimate_value() -> None:
    np = pytest.importorskip("numpy")  # not in a base install
    s = MsgpackSerializer(max_containers=100)
    value = {"rows": [{"id": i, "v": (i, float(i))} for i in range(30)], "m": np.arange(4)}
    env = decode_envelope(s, encode_envelope(s, Envelope(value, 0.0, None)))
    assert env.value["rows"] == value["rows"]
    assert env.value["m"].tolist() == [0, 1, 2, 3]
    # Counted through extension payloads too: 30 tuples + 30 dicts + list + dict + envelope.
    with pytest.raises(SerializationError, match="containers"):
        decode_envelope(
            MsgpackSerializer(max_containers=60), encode_envelope(s, Envelope(value, 0.0, None))
        )


def test_default_container_bound_refuses_a_16_mib_entry_of_empty_maps() -> None:
    data = _many_empty_maps(16 * 2**20)
    with pytest.raises(SerializationError, match=f"more than {DEFAULT_MAX_CONTAINERS}"):
        decode_envelope(MsgpackSerializer(), data)


def test_json_decode_work_is_bounded_by_containers() -> None:
    s = JsonSerializer(max_containers=100)
    many = encode_envelope(JsonSerializer(), Envelope([[]] * 200, 0.0, None))
    with pytest.raises(SerializationError, match="limit of 100"):
        decode_envelope(s, many)
    few = encode_envelope(JsonSerializer(), Envelope([[1, 2]] * 20 + ["x" * 500], 0.0, None))
    assert len(decode_envelope(s, few).value) == 21


@pytest.mark.parametrize(
    "kwargs", [{"max_bytes": 0}, {"max_containers": -1}, {"max_containers": True}]
)
def test_serializer_limits_must_be_positive(kwargs: dict[str, Any]) -> None:
    for cls in (MsgpackSerializer, JsonSerializer):
        with pytest.raises(ValueError, match="positive int"):
            cls(**kwargs)


@pytest.mark.parametrize(
    "ext",
    [
        msgpack.ExtType(99, b"\xc0"),  # unknown code
        msgpack.ExtType(4, msgpack.packb(["|O8", [1], b"\x00" * 8])),  # object array
        msgpack.ExtType(4, msgpack.packb(["<f4", [3], b"\x00" * 4])),  # wrong size
        msgpack.ExtType(4, msgpack.packb(["<f4", [-1], b""])),  # negative shape
        msgpack.ExtType(4, msgpack.packb(["i4," * 50, [1], b"\x00" * 4])),  # dtype spec too long
        msgpack.ExtType(5, msgpack.packb(["<f8", b"\x00"])),  # short scalar
        msgpack.ExtType(1, b"\xc1"),  # corrupt payload
    ],
    ids=["unknown", "object", "size", "shape", "dtype", "scalar", "corrupt"],
)
def test_hostile_extension_values_are_refused(ext: msgpack.ExtType) -> None:
    data = b"m" + msgpack.packb([1, 0.0, None, 0.0, None, ext])
    with pytest.raises(SerializationError):
        decode_envelope(MsgpackSerializer(), data)


def test_sizes_are_bounded_both_ways() -> None:
    s = MsgpackSerializer(max_bytes=1000)
    with pytest.raises(SerializationError, match="limit"):
        encode_envelope(s, Envelope(b"x" * 2000, 0.0, None))
    big = encode_envelope(MsgpackSerializer(), Envelope(b"x" * 2000, 0.0, None))
    with pytest.raises(SerializationError, match="limit"):
        decode_envelope(s, big)
    j = JsonSerializer(max_bytes=1000)
    with pytest.raises(SerializationError, match="limit"):
        decode_envelope(j, encode_envelope(JsonSerializer(), Envelope("x" * 2000, 0.0, None)))
    # A short entry cannot claim a huge container (msgpack bounds lengths by the input size).
    with pytest.raises(SerializationError):
        decode_envelope(MsgpackSerializer(), b"m\x96\x01\x00\xc0\x00\xc0\xdd\xff\xff\xff\xff")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"0", 0),
        (b"12", 12),
        ("7", 7),
        (42, 42),
        (b"9223372036854775807", 2**63 - 1),
        (None, None),
        (b"", None),
        (b"-1", None),
        (b"1.5", None),
        (b"abc", None),
        (b" 1", None),
        (b"9223372036854775808", None),
        (b"1" * 5000, None),
        (-3, None),
        (True, None),
        (1.0, None),
        ("\u0661", None),
        (bytearray(b"3"), 3),
        ([1], None),
    ],
)
def test_parse_version_is_total(data: object, expected: int | None) -> None:
    assert parse_version(data) == expected


# ---------------------------------------------------------------- signed entries


class Boom:
    ran: list[str] = []

    def __reduce__(self) -> tuple[object, ...]:
        return (Boom.ran.append, ("unpickled",))


def test_signed_serializer_refuses_forged_and_tampered_entries() -> None:
    secret = b"k" * 32
    s = SignedSerializer("msgpack", secret)
    env = Envelope({"a": [1, 2]}, 10.0, 5.0, 0.0, "v")
    data = encode_envelope(s, env)
    assert decode_envelope(s, data) == env
    tampered = bytearray(data)
    tampered[-1] ^= 1
    with pytest.raises(SerializationError, match="signature"):
        decode_envelope(s, bytes(tampered))
    with pytest.raises(SerializationError, match="signature"):
        decode_envelope(SignedSerializer("msgpack", b"o" * 32), data)
    with pytest.raises(SerializationError, match="refusing"):  # an unsigned entry
        decode_envelope(s, encode_envelope(MsgpackSerializer(), env))
    rotated = SignedSerializer("msgpack", b"n" * 32, previous=(secret,))
    assert decode_envelope(rotated, data) == env
    with pytest.raises(ValueError, match="16 to 64"):
        SignedSerializer("msgpack", b"short")


def test_signed_pickle_never_unpickles_a_forged_payload() -> None:
    s = SignedSerializer(PickleSerializer(), b"s" * 32)
    forged = b"P" + b"\x00" * 32 + pickle.dumps([1, 0.0, None, 0.0, None, Boom()])
    with pytest.raises(SerializationError, match="signature"):
        decode_envelope(s, forged)
    assert Boom.ran == []


def test_signed_serializer_plugs_into_cache() -> None:
    cache = Cache(serializer=SignedSerializer("msgpack", b"z" * 32))
    assert cache.set("k", [1, 2]) and cache.get("k") == [1, 2]


# ---------------------------------------------------------------- sharing values in memory


def test_immutable_values_are_shared_and_mutable_ones_copied() -> None:
    s = MsgpackSerializer()
    shared: list[object] = [None, 1, 2.5, "s", b"b", (1, ("x", b"y")), frozenset({1, (2,)})]
    for value in shared:
        assert is_immutable(value) and for_sharing(s, value) is value
    copied: list[object] = [[1], {"a": 1}, (1, [2]), {1}]
    for value in copied:
        assert not is_immutable(value)
    held = for_sharing(s, {"a": [1, 2]})
    assert isinstance(held, Packed)
    got = held.load()
    got["a"].append(3)
    assert held.load() == {"a": [1, 2]}
    assert not is_immutable(tuple(range(20_000)))  # past the walk's bound: copied, not walked
    with pytest.raises(SerializationError):
        for_sharing(s, [object()])


def test_a_numpy_array_is_copied_not_shared() -> None:
    np = pytest.importorskip("numpy")  # not in a base install
    assert not is_immutable(np.zeros(2))


@pytest.mark.parametrize("serializer", ["msgpack", "pickle"])
@pytest.mark.parametrize("n", [3, 40])  # below and above the one-pass batch size
def test_load_packed_loads_each_packed_value_once_and_leaves_the_rest(
    serializer: str, n: int
) -> None:
    s = get_serializer(serializer)
    originals: list[Any] = [
        {"id": i, "emb": [0.5 * i, 1.0], "tags": {"t", i}, "t": (i, [i])} for i in range(n)
    ]
    values: list[Any] = [for_sharing(s, v) for v in originals]
    values[1] = "as is"  # an immutable value held by itself
    values.append(None)
    got = load_packed(values)
    assert got[1] == "as is" and got[-1] is None
    assert [g for k, g in enumerate(got[:n]) if k != 1] == [
        v for k, v in enumerate(originals) if k != 1
    ]
    got[0]["emb"].append(9.0)  # each call gets its own copy
    assert load_packed(values)[0]["emb"] == [0.0, 1.0]
    assert all(type(v) is Packed for k, v in enumerate(values[:n]) if k != 1)  # untouched
    plain: list[Any] = [1, "a", None]
    assert load_packed(plain) is plain


def test_load_packed_of_two_serializers_loads_each_with_its_own() -> None:
    a, b = MsgpackSerializer(), MsgpackSerializer()
    values = [for_sharing(a if i % 2 else b, [i]) for i in range(20)]
    assert load_packed(values) == [[i] for i in range(20)]


def test_signed_entries_bound_to_their_key_refuse_being_moved() -> None:
    s = SignedSerializer("msgpack", b"b" * 32)
    env = Envelope("answer for A", 10.0, 5.0)
    data = encode_envelope(s, env, key="ck:ns:v0:f:fn:A")
    assert decode_envelope(s, data, key="ck:ns:v0:f:fn:A") == env
    with pytest.raises(SerializationError, match="another key"):
        decode_envelope(s, data, key="ck:ns:v0:f:fn:B")
    with pytest.raises(SerializationError):  # nor read without its key
        decode_envelope(s, data)
    # Unsigned serializers ignore the key: nothing to bind it with.
    m = MsgpackSerializer()
    assert decode_envelope(m, encode_envelope(m, env, key="x"), key="y") == env


# ---------------------------------------------------------------------- one encode per entry

_ENV_FIELDS = [(1234.5, 60.0, 5.0, None), (1.0, None, 0.0, "ck:absent"), (2.0, 0.25, 0.0, 7)]


@pytest.mark.parametrize("fields", _ENV_FIELDS)
@pytest.mark.parametrize(
    "value", [{"a": [1.5, 2.0], "b": "x"}, [1, {"n": None}], {"t": (1, 2), "s": {3}}]
)
def test_encode_for_tiers_writes_the_same_bytes_as_encode_envelope(
    value: object, fields: tuple
) -> None:
    s = MsgpackSerializer()
    env = Envelope(value, *fields)
    data, held = encode_for_tiers(s, s, env, "k")
    assert data == encode_envelope(s, env, "k")
    assert decode_envelope(s, data, "k") == env
    assert type(held) is Packed and held.load() == value and held.load() is not held.load()


def test_encode_for_tiers_shares_immutable_values_and_on_request() -> None:
    s = MsgpackSerializer()
    frozen, mutable = (1, "a", (2.0,)), {"a": [1]}
    assert encode_for_tiers(s, s, Envelope(frozen, 1.0, 1.0))[1] is frozen
    assert encode_for_tiers(s, s, Envelope(mutable, 1.0, 1.0), share=True)[1] is mutable


@pytest.mark.parametrize(
    "serializer",
    [JsonSerializer(), PickleSerializer(), SignedSerializer(MsgpackSerializer(), b"k" * 32)],
)
def test_encode_for_tiers_other_serializers_match_encode_envelope(serializer: object) -> None:
    inner = getattr(serializer, "inner", serializer)
    env = Envelope({"a": [1, 2]}, 3.0, 9.0)
    data, held = encode_for_tiers(serializer, inner, env, "key:1")  # type: ignore[arg-type]
    assert decode_envelope(serializer, data, "key:1") == env  # type: ignore[arg-type]
    assert type(held) is Packed and held.load() == {"a": [1, 2]}


def test_encode_for_tiers_refuses_what_cannot_be_stored() -> None:
    small = MsgpackSerializer(max_bytes=64)
    with pytest.raises(SerializationError, match="over the serializer's limit"):
        encode_for_tiers(small, small, Envelope({"a": "x" * 100}, 1.0, 1.0))
    s = MsgpackSerializer()
    with pytest.raises(SerializationError):
        encode_for_tiers(s, s, Envelope({"a": object()}, 1.0, 1.0))
