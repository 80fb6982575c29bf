"""Fuzzing every decoder of stored bytes: random and structured-hostile input must give either a
valid envelope (every field usable by the cache without raising) or a SerializationError, and
never crash the process. Deep nesting runs in a child process, so a crash fails the test
instead of killing the test run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachekit._core.keys import UnkeyableArgument, local_key, stable_digest
from cachekit._core.protocols import Serializer
from cachekit._core.serialization import (
    Envelope,
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    SerializationError,
    SignedSerializer,
    decode_envelope,
    parse_version,
)
from cachekit.backends.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[1]
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SIGNED = SignedSerializer("msgpack", b"f" * 32)
SERIALIZERS: dict[str, Serializer] = {
    "msgpack": MsgpackSerializer(),
    "json": JsonSerializer(),
    "signed": SIGNED,
}


def check_usable(env: Envelope) -> None:
    """What the cache does with a decoded envelope outside the decoder must not raise."""
    for now in (0.0, env.created_at, 1e12):
        env.fresh(now)
        env.servable_stale(now)
    if env.ttl is not None:
        # Float rounding can make it 0 (created_at 2**53, ttl 1): the engine then skips the L1
        # fill, as for any entry with nothing left to live.
        remaining = env.created_at + env.ttl + env.stale_ttl - env.created_at
        assert math.isfinite(remaining) and remaining >= 0
        if remaining > 0:
            store: MemoryStore[Envelope] = MemoryStore()
            store.set("k", env, remaining, 10)
    assert env.version is None or type(env.version) in (int, str)


def decode_total(serializer: Any, data: bytes) -> None:
    try:
        env = decode_envelope(serializer, data)
    except SerializationError:
        return
    check_usable(env)


# ---------------------------------------------------------------- random bytes


@FUZZ
@given(tag=st.sampled_from([b"m", b"j", b"p", b"M", b"", b"\xff"]), body=st.binary(max_size=512))
@pytest.mark.parametrize("name", SERIALIZERS)
def test_random_bytes_decode_or_refuse(name: str, tag: bytes, body: bytes) -> None:
    decode_total(SERIALIZERS[name], tag + body)


@FUZZ
@given(body=st.binary(max_size=512))
def test_pickle_bytes_are_refused_by_the_safe_serializers(body: bytes) -> None:
    data = PickleSerializer.tag + body
    for s in (MsgpackSerializer(), JsonSerializer()):
        with pytest.raises(SerializationError, match="refusing"):
            decode_envelope(s, data)


# ---------------------------------------------------------------- structured, hostile msgpack

ints64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what msgpack can carry
numbers = st.one_of(
    ints64,
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
scalars = st.one_of(st.none(), numbers, st.text(max_size=20), st.binary(max_size=20))


def ext_of(children: st.SearchStrategy[Any]) -> st.SearchStrategy[msgpack.ExtType]:
    packed = children.map(lambda v: msgpack.packb(v, use_bin_type=True))
    return st.builds(
        msgpack.ExtType,
        st.integers(min_value=0, max_value=127),
        st.one_of(packed, st.binary(max_size=40)),
    )


msgpack_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=5), ints64), children, max_size=5),
        ext_of(children),
        # well-formed numpy extension payloads with hostile dtype, shape and data
        st.builds(
            lambda dtype, shape, raw: msgpack.ExtType(4, msgpack.packb([dtype, shape, raw])),
            st.sampled_from(["<f4", "|O8", "<i8", "V8", "<U3", "x", "<M8[s]"]),
            st.lists(st.integers(min_value=-2, max_value=4), max_size=3),
            st.binary(max_size=32),
        ),
    ),
    max_leaves=25,
)


@FUZZ
@given(fields=st.lists(msgpack_values, min_size=0, max_size=7))
def test_structured_msgpack_fields_decode_or_refuse(fields: list[Any]) -> None:
    decode_total(MsgpackSerializer(), b"m" + msgpack.packb(fields, use_bin_type=True))
    # The same hostile payload correctly signed (a writer that has the secret) is checked alike.
    decode_total(SIGNED, SIGNED.tag + SIGNED.dumps(fields))


envelope_fields = st.tuples(
    st.one_of(st.just(1), msgpack_values),
    st.one_of(numbers, msgpack_values),
    st.one_of(st.none(), numbers, msgpack_values),
    st.one_of(numbers, msgpack_values),
    st.one_of(st.none(), ints64, st.text(max_size=5), msgpack_values),
    msgpack_values,
)


@FUZZ
@given(fields=envelope_fields)
def test_envelope_shaped_msgpack_decodes_or_refuses(fields: tuple[Any, ...]) -> None:
    decode_total(MsgpackSerializer(), b"m" + msgpack.packb(list(fields), use_bin_type=True))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=25,
)


@FUZZ
@given(fields=st.one_of(st.lists(json_values, max_size=7), json_values))
def test_structured_json_decodes_or_refuses(fields: Any) -> None:
    decode_total(JsonSerializer(), b"j" + json.dumps(fields).encode())


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=30), st.text(max_size=30), st.integers(), st.none(), st.floats()
    )
)
def test_parse_version_never_raises(data: Any) -> None:
    v = parse_version(data)
    assert v is None or (type(v) is int and 0 <= v < 2**63)


# ---------------------------------------------------------------- keys

key_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=10),
        st.binary(max_size=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=4), children, max_size=4),
        st.frozensets(st.integers(), max_size=4),
    ),
    max_leaves=20,
)


@FUZZ
@given(a=key_values, b=key_values)
def test_keys_are_total_and_local_keys_agree_with_stable_keys(a: Any, b: Any) -> None:
    for v in (a, b):
        try:
            stable_digest((v,))
        except UnkeyableArgument:
            pass
    ka, kb = local_key((a,)), local_key((b,))
    if ka is not None and ka == kb:
        assert stable_digest((a,)) == stable_digest((b,))


# ---------------------------------------------------------------- deep nesting, in a child

DEEP = textwrap.dedent("""
    import json, msgpack
    from cachekit._core.serialization import (JsonSerializer, MsgpackSerializer, SerializationError,
                                        decode_envelope)
    from cachekit._core.keys import UnkeyableArgument, stable_digest

    def ext_nest(depth, code):
        inner = msgpack.packb(None)
        for _ in range(depth):
            inner = msgpack.packb(msgpack.ExtType(code, inner))
        return inner

    head = msgpack.packb([1, 0.0, None, 0.0, None])[:-5]  # fixarray(6) + the first five fields
    cases = {
        "ext tuple x5000": b"m" + msgpack.packb([1, 0.0, None, 0.0, None,
                                                msgpack.ExtType(1, ext_nest(5000, 1))]),
        "ext set x300": b"m" + msgpack.packb([1, 0.0, None, 0.0, None,
                                             msgpack.ExtType(2, ext_nest(300, 3))]),
        "array x200000": b"m\\x96\\x01\\x00\\xc0\\x00\\xc0" + b"\\x91" * 200000 + b"\\xc0",
        "map x200000": b"m\\x96\\x01\\x00\\xc0\\x00\\xc0" + b"\\x81\\x00" * 200000 + b"\\xc0",
        "json x1000000": b'j[1,0,null,0,null,' + b"[" * 1000000 + b"]" * 1000000 + b"]",
        "json obj x1000000": (b'j[1,0,null,0,null,' + b'{"a":' * 1000000 + b"1"
                              + b"}" * 1000000 + b"]"),
    }
    for name, data in cases.items():
        s = JsonSerializer() if data[:1] == b"j" else MsgpackSerializer()
        try:
            decode_envelope(s, data)
        except SerializationError:
            pass
        print("survived", name, flush=True)
    deep = []
    for _ in range(100000):
        deep = [deep]
    try:
        stable_digest(deep)
    except UnkeyableArgument:
        print("survived key nesting", flush=True)
""")


def test_deep_nesting_never_crashes_the_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DEEP], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-2000:])
    assert out.stdout.count("survived") == 7, out.stdout
