from __future__ import annotations

import dataclasses
import decimal
import enum
import inspect
import math
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from redis_servers import RedisServer

from cachekit import Cache
from cachekit._core.keys import (
    SCALAR_SIGNATURES,
    ArgNormalizer,
    UnkeyableArgument,
    all_scalar,
    float_positions,
    local_key,
    stable_digest,
    strings_digest,
)


def test_typed_scalars_are_distinct_keys() -> None:
    digests = {stable_digest(v) for v in (1, 1.0, "1", True, b"1", None, (1,), [1])}
    assert len(digests) == 8
    assert local_key((1,)) != local_key((1.0,)) != local_key((True,))
    assert local_key((1,)) != local_key(("1",))


def test_nested_containers_are_typed() -> None:
    assert stable_digest(((1, 2),)) != stable_digest(((1.0, 2),))
    assert stable_digest({"a": 1}) != stable_digest({"a": True})
    assert stable_digest({"a": 1, "b": 2}) == stable_digest({"b": 2, "a": 1})
    assert stable_digest({1, 2, 3}) == stable_digest({3, 2, 1})
    assert stable_digest({1, 2}) != stable_digest(frozenset({1, 2}))
    assert local_key(((1, 2),)) != local_key(((1.0, 2),))


def test_keyword_order_and_defaults_do_not_matter() -> None:
    def f(a: int, b: int = 2, *, c: str = "x") -> None: ...

    norm = ArgNormalizer(f)
    same = [norm((1,), {}), norm((1, 2), {}), norm((), {"b": 2, "a": 1}), norm((1,), {"c": "x"})]
    assert all(v == same[0] for v in same)
    assert norm((1, 3), {}) != same[0]


def _bound(fn: Callable[..., object], args: tuple, kwargs: dict, ignore: tuple = ()) -> tuple:
    """What ``inspect`` makes of a call: the values ArgNormalizer must agree with."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(v for k, v in bound.arguments.items() if k not in ignore)


def _pos_only(a: int, /, b: int = 2, *, c: int, d: str = "x") -> None: ...


def _plain(a: int, b: int = 2, c: float = 0.5) -> None: ...


def _kw_defaults(a: int, *, scale: float = 1.0, mode: str = "m") -> None: ...


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "ignore"),
    [
        (_plain, (1,), {}, ()),
        (_plain, (1, 3), {}, ()),
        (_plain, (1,), {"c": 2.0}, ()),
        (_plain, (), {"c": 2.0, "a": 5}, ()),
        (_plain, (1, 2, 3.0), {}, ()),
        (_plain, (1,), {"b": 9}, ("b",)),
        (_kw_defaults, (1,), {}, ()),
        (_kw_defaults, (1,), {"mode": "z"}, ()),
        (_kw_defaults, (), {"a": 1, "scale": 2.0}, ()),
        (_pos_only, (1,), {"c": 3}, ()),
        (_pos_only, (1, 5), {"d": "y", "c": 3}, ("d",)),
    ],
)
def test_bound_values_match_inspect_for_every_call_shape(
    fn: Callable[..., object], args: tuple, kwargs: dict, ignore: tuple
) -> None:
    assert ArgNormalizer(fn, ignore)(args, kwargs) == _bound(fn, args, kwargs, ignore)


@pytest.mark.parametrize(
    ("fn", "args", "kwargs"),
    [
        (_plain, (1,), {"nope": 1}),  # unknown keyword
        (_plain, (1,), {"a": 1}),  # given twice
        (_plain, (), {"b": 1}),  # required missing
        (_plain, (1, 2, 3, 4), {}),  # too many
        (_pos_only, (), {"a": 1, "c": 3}),  # positional-only by keyword
        (_pos_only, (1,), {}),  # keyword-only without a default missing
        (_kw_defaults, (1, 2.0), {}),  # keyword-only given positionally
    ],
)
def test_calls_that_do_not_match_the_signature_raise_a_clear_type_error(
    fn: Callable[..., object], args: tuple, kwargs: dict
) -> None:
    with pytest.raises(TypeError, match="signature"):
        ArgNormalizer(fn)(args, kwargs)


def test_keyword_only_defaults_take_the_positional_fast_path() -> None:
    norm = ArgNormalizer(_kw_defaults)
    assert norm.positional_fast_path == (1, 1, (inspect.Parameter.empty, 1.0, "m"), -1)
    assert ArgNormalizer(_plain).positional_fast_path == (
        1,
        3,
        (inspect.Parameter.empty, 2, 0.5),
        3,
    )
    assert ArgNormalizer(_pos_only).positional_fast_path is None  # c has no default


def test_a_keyword_only_default_is_one_entry_however_it_is_passed() -> None:
    cache = Cache()
    calls: list[int] = []

    @cache.cached(ttl=60)
    def f(a: int, *, scale: float = 1.0) -> float:
        calls.append(a)
        return a * scale

    assert f(2) == f(2, scale=1.0) == f(a=2) == 2.0
    assert f(2, scale=3.0) == 6.0
    assert calls == [2, 2]
    assert cache.stats().hits == 2


def test_bad_arguments_raise_a_clear_type_error() -> None:
    def f(a: int) -> None: ...

    with pytest.raises(TypeError, match="signature"):
        ArgNormalizer(f)((1, 2), {})


def test_numpy_dataclass_enum_keys() -> None:
    np = pytest.importorskip("numpy")  # not in a base install

    @dataclasses.dataclass(frozen=True)
    class P:
        x: int
        y: float

    class Color(enum.Enum):
        RED = 1

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert stable_digest(a) == stable_digest(a.copy())
    assert stable_digest(a) != stable_digest(a.astype(np.float64))
    assert stable_digest(a) != stable_digest(a.reshape(3, 2))
    assert stable_digest(P(1, 2.0)) == stable_digest(P(1, 2.0))
    assert stable_digest(P(1, 2.0)) != stable_digest(P(1, 2.5))
    assert stable_digest(Color.RED) != stable_digest(1)


def test_unkeyable_argument_names_the_fix() -> None:
    with pytest.raises(UnkeyableArgument, match="key="):
        stable_digest(object())


def test_keys_are_stable_across_processes() -> None:
    code = (
        "from cachekit._core.keys import stable_digest;"
        "print(stable_digest(('hello', 1, 2.5, {'k': [1, 'x']}, None)))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    assert outs == {stable_digest(("hello", 1, 2.5, {"k": [1, "x"]}, None))}


def test_cache_key_contains_namespace_and_version() -> None:
    cache = Cache(namespace="myapp")

    @cache.cached(name="predict")
    def predict(x: int) -> int:
        return x

    key = predict.cache_key(3)
    assert key.startswith("ck:myapp:v0:f:predict:")
    cache.invalidate_namespace()
    assert predict.cache_key(3).startswith("ck:myapp:v1:f:predict:")
    assert predict.cache_key(3) != predict.cache_key(3.0)  # type: ignore[arg-type]


def test_custom_key_function() -> None:
    cache = Cache()
    calls = []

    @cache.cached(key=lambda user, request_id: user)
    def profile(user: str, request_id: int) -> str:
        calls.append(request_id)
        return user.upper()

    assert profile("ann", 1) == "ANN"
    assert profile("ann", 2) == "ANN"
    assert calls == [1]


# ---------------------------------------------------------------- awkward arguments


def test_signed_zeros_are_distinct_and_nans_equal() -> None:
    nan1, nan2 = float("nan"), -float("nan")
    assert stable_digest(0.0) != stable_digest(-0.0)
    assert stable_digest(nan1) == stable_digest(nan2) == stable_digest(math.nan)
    assert stable_digest((0.0, 1.0)) != stable_digest((-0.0, 1.0))
    assert stable_digest((nan1, 1.0)) == stable_digest((nan2, 1.0))
    assert stable_digest([nan1, "x"]) == stable_digest([nan2, "x"])
    # The local key (L1) must not merge what the stable key separates, nor split what it merges:
    # floats whose == disagrees with their bits are routed to the stable key.
    for awkward in (
        (0.0,),
        (-0.0,),
        (nan1,),
        ((0.0, 1.5),),
        ((1.5, nan1),),
        ((nan1, "s"),),
        ((1, -0.0),),
    ):
        assert local_key(awkward) is None
    assert local_key((1.5,)) == local_key((1.5,))
    assert local_key(((1.5, 2.5),)) is not None
    assert local_key(((0.5, "s"),)) is not None
    long = (0.5,) * 40
    assert local_key((long,)) is not None
    assert local_key(((*long, -0.0),)) is None and local_key(((*long, nan1),)) is None
    # A product that underflows only sends the tuple to the stable key, which is still right.
    assert local_key(((1e-200, 1e-200),)) is None
    assert stable_digest(((1e-200, 1e-200),)) != stable_digest(((1e-200, -1e-200),))


def test_every_float_signature_keeps_the_fast_path_scalar_only() -> None:
    # Float signatures never enter SCALAR_SIGNATURES (the hit path's inline test), or -0.0
    # would share 0.0's L1 entry again.
    assert not all_scalar((float,))
    assert not all_scalar((int, float))
    assert not all_scalar((int, float))  # remembered as not scalar: the same answer
    assert all(float not in sig for sig in SCALAR_SIGNATURES)
    # What a hit path may inline instead: the float positions of a signature, to check.
    assert float_positions((int, float, str, float)) == (1, 3)
    assert float_positions((int, str)) == ()
    assert float_positions((tuple, float)) is None


def test_cached_function_keeps_signed_zeros_apart_and_hits_nan() -> None:
    cache = Cache()
    calls: list[float] = []

    @cache.cached
    def f(x: float) -> str:
        calls.append(x)
        return repr(x)

    assert [f(0.0), f(-0.0), f(0.0), f(-0.0)] == ["0.0", "-0.0", "0.0", "-0.0"]
    assert len(calls) == 2
    assert f(float("nan")) == "nan"
    entries = len(cache.l1 or ())
    for _ in range(5):
        assert f(float("nan")) == "nan"  # a fresh NaN object each time
    assert len(calls) == 3 and len(cache.l1 or ()) == entries
    assert f.cache_key(0.0) != f.cache_key(-0.0)
    assert f.cache_key(float("nan")) == f.cache_key(-float("nan"))


def test_signed_zeros_stay_apart_in_redis(redis_server: RedisServer) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    writer = Cache(redis_url=redis_server.url, namespace=name)
    reader = Cache(redis_url=redis_server.url, namespace=name, l1=False)
    tags: list[str] = []

    def make(cache: Cache, tag: str) -> Callable[[float], str]:
        @cache.cached(name="f", ttl=60)
        def f(x: float) -> str:
            tags.append(tag)
            return f"{tag}:{x!r}"

        return f

    fw, fr = make(writer, "w"), make(reader, "r")
    assert fw(0.0) == "w:0.0"
    assert fr(-0.0) == "r:-0.0"  # not the writer's 0.0 entry
    assert fr(0.0) == "w:0.0"
    assert fw(float("nan")) == "w:nan"
    assert fr(float("nan")) == "w:nan"  # every NaN is one key
    assert tags == ["w", "r", "w"]
    writer.close()
    reader.close()


def test_absurd_arguments_give_a_type_error_naming_the_parameter() -> None:
    def f(a: int, b: object = None) -> None: ...

    norm = ArgNormalizer(f)
    loop: list[object] = []
    loop.append(loop)
    selfish: dict[str, object] = {}
    selfish["me"] = selfish
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    for bad, why in (
        (10**5000, "too large"),
        (loop, "contains itself"),
        (selfish, "contains itself"),
        (deep, "deeper"),
        (object(), "key="),
    ):
        values = norm((1, bad), {})
        with pytest.raises(UnkeyableArgument, match=f"parameter 'b'.*{why}"):
            stable_digest(values, names=norm.value_names)
        with pytest.raises(TypeError, match=why):  # and never ValueError or RecursionError
            stable_digest(values)
    assert stable_digest(10**4000) != stable_digest(10**4000 + 1)


def test_value_names_leave_ignored_parameters_out() -> None:
    def f(a: int, request_id: int, *rest: int, **kw: int) -> None: ...

    norm = ArgNormalizer(f, ignore=("request_id",))
    assert norm.value_names == ("a", "rest", "kw")
    values = norm((1, 2, 3), {"z": object()})
    with pytest.raises(UnkeyableArgument, match="parameter 'kw'"):
        stable_digest(values, names=norm.value_names)


def test_cached_function_refuses_absurd_arguments_with_a_type_error() -> None:
    cache = Cache()

    @cache.cached
    def f(x: object) -> int:
        return 1

    loop: list[object] = []
    loop.append(loop)
    for bad in (10**5000, loop):
        with pytest.raises(TypeError, match=r"cache key|contains itself"):
            f(bad)


def test_equal_local_keys_mean_equal_stable_keys() -> None:
    samples = [
        0,
        1,
        -1,
        0.0,
        -0.0,
        1.0,
        1.5,
        float("nan"),
        float("inf"),
        True,
        False,
        "",
        "0",
        b"",
        None,
        (0.0,),
        (-0.0,),
        (1, 2),
        (1.0, 2.0),
        (True, 2),
        ("a", 0.5),
    ]
    for a in samples:
        for b in samples:
            ka, kb = local_key((a,)), local_key((b,))
            if ka is not None and ka == kb:
                assert stable_digest((a,)) == stable_digest((b,)), (a, b)


@pytest.mark.parametrize(
    ("value", "digest"),
    [
        ((1, 2.0, "x", None, True), "d4ea91d46c89d265576a70d05d56c719"),
        ({"a": [1, {"b": (2,)}]}, "3440b1d9e5fc812cf3a423cb4fb7d889"),
        ((0.1, 0.2), "ccb73dcb2ea5321224893b6767f36b99"),
        (frozenset({"a", "b"}), "75341336df2415278ad6fc6d8271c4aa"),
        (
            (decimal.Decimal("1.5"), uuid.UUID(int=5), -0.0, math.nan),
            "52b11a4eab5e3e5405d7128c64b3acf1",
        ),
    ],
    ids=repr,
)
def test_key_format_is_unchanged(value: object, digest: str) -> None:
    # Entries already in Redis stay reachable: any change here must be a deliberate migration.
    assert stable_digest(value) == digest


class _Text(str):
    """A str subclass: keyed through the general walk."""


@pytest.mark.parametrize(
    "parts",
    [(), ("",), ("scope", "text"), ("a" * 300, "é ☃ \U0001f600", "\ud800"), ("x", _Text("y"))],
    ids=repr,
)
def test_strings_digest_is_stable_digest_of_the_tuple(parts: tuple[str, ...]) -> None:
    assert strings_digest(*parts) == stable_digest(parts)
