from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys

import numpy as np
import pytest

from cachekit import Cache
from cachekit.keys import ArgNormalizer, KeyError_, local_key, stable_digest


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


def test_bad_arguments_raise_a_clear_type_error() -> None:
    def f(a: int) -> None: ...

    with pytest.raises(TypeError, match="signature"):
        ArgNormalizer(f)((1, 2), {})


def test_numpy_dataclass_enum_keys() -> None:
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
    with pytest.raises(KeyError_, match="key="):
        stable_digest(object())


def test_keys_are_stable_across_processes() -> None:
    code = (
        "from cachekit.keys import stable_digest;"
        "print(stable_digest(('hello', 1, 2.5, {'k': [1, 'x']}, None)))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
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
    assert predict.cache_key(3) != predict.cache_key(3.0)


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
