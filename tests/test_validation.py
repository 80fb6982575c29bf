"""Usage errors name the parameter and what it accepts."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from cachekit import Cache, ReceiverLeftOutWarning
from cachekit._core.keys import UnkeyableArgument


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: Cache(default_ttl="300"), TypeError, ["default_ttl", "number of seconds", "str"]),  # type: ignore[arg-type]
        (lambda: Cache(default_ttl=0), ValueError, ["default_ttl", "> 0"]),
        (lambda: Cache().cached(ttl="60")(lambda x: x), TypeError, ["ttl", "number of seconds"]),  # type: ignore[call-overload]
        (lambda: Cache().cached(ttl=True)(lambda x: x), TypeError, ["ttl", "bool"]),
        (lambda: Cache().cached(ttl=-1)(lambda x: x), ValueError, ["ttl", "> 0"]),
        (lambda: Cache().cached(jitter=2)(lambda x: x), ValueError, ["jitter", "[0, 1)"]),
        (lambda: Cache().cached(jitter="0.1")(lambda x: x), TypeError, ["jitter"]),  # type: ignore[call-overload]
        (lambda: Cache().cached(stale_ttl=-1)(lambda x: x), ValueError, ["stale_ttl", ">= 0"]),
        (lambda: Cache().set("k", 1, ttl="5"), TypeError, ["ttl", "number of seconds"]),  # type: ignore[arg-type]
    ],
)
def test_bad_options_name_the_parameter(make: Any, error: type, words: list[str]) -> None:
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value)
    if "jitter" in words:
        assert "stale_ttl" not in str(info.value)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_unkeyable_argument_is_named(mode: str) -> None:
    cache = Cache()
    if mode == "sync":

        @cache.cached
        def f(x: int, config: object) -> int:
            return x

        call: Any = f
    else:

        @cache.cached
        async def af(x: int, config: object) -> int:
            return x

        call = lambda *a, **kw: asyncio.run(af(*a, **kw))  # noqa: E731
    for args, kwargs in (((1, object()), {}), ((1,), {"config": object()})):
        with pytest.raises(UnkeyableArgument, match="f: parameter 'config'") as info:
            call(*args, **kwargs)
        assert isinstance(info.value, TypeError)
        assert "key=" in str(info.value)  # and what to do about it


class Model:
    def __init__(self, scale: int) -> None:
        self.scale = scale
        self.calls = 0


def test_methods_leave_the_receiver_out_of_the_key() -> None:
    cache = Cache()

    class Shared(Model):
        @cache.cached(ignore=("self",))
        def predict(self, x: int) -> int:
            self.calls += 1
            return x * 10

        @classmethod
        @cache.cached(ignore=("cls",))
        def describe(cls, x: int) -> str:
            return f"{cls.__name__}:{x}"

    a, b = Shared(1), Shared(2)
    assert a.predict(3) == 30 and b.predict(3) == 30
    assert (a.calls, b.calls) == (1, 0)  # one entry for the call, whatever the instance
    assert Shared.predict.lookup(b, 3).value == 30
    assert Shared.describe(4) == "Shared:4"  # type: ignore[call-arg, arg-type]
    assert Shared.predict.cache_key(a, 3) == Shared.predict.cache_key(b, 3)


def test_a_receiver_left_out_unsaid_warns_once_at_the_decorator() -> None:
    """Model(10).predict(2.0) would return what Model(1) computed: said when decorating, at the
    user's line, with both ways out; never for key= or an explicit ignore=."""
    cache = Cache()
    with pytest.warns(ReceiverLeftOutWarning) as caught:

        class Scaled(Model):
            @cache.cached
            def predict(self, x: float) -> float:
                return x * self.scale

            @cache.cached()
            def other(self, x: float) -> float:
                return x

    assert len(caught) == 2
    message = str(caught[0].message)
    assert "Scaled.predict" in message and "key=lambda self" in message
    assert "ignore=('self',)" in message
    assert all(w.filename == __file__ for w in caught)  # the decorator's line, not cachekit's
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Said(Model):
            @cache.cached(ignore=("self",))
            def shared(self, x: float) -> float:
                return x

            @cache.cached(key=lambda self, x: (self.scale, x))
            def per_scale(self, x: float) -> float:
                return x * self.scale

        assert Said(10).per_scale(2.0) == 20.0 and Said(1).per_scale(2.0) == 2.0
        assert Scaled(10).other(2.0) == 2.0  # calls never warn


def test_a_semantic_method_says_its_receiver_too() -> None:
    """The same rule for ``@cache.semantic``: ``scope=`` keys on the instance, ``ignore=``
    says it does not matter; saying neither warns once, at the user's line."""
    pytest.importorskip("numpy")
    pytest.importorskip("faiss")
    from cachekit.testing import DeterministicTestEmbedder

    cache, embedder = Cache(), DeterministicTestEmbedder()
    with pytest.warns(ReceiverLeftOutWarning) as caught:

        class Bot:
            model = "small"

            @cache.semantic(embedder=embedder)
            def ask(self, question: str) -> str:
                return question

    assert len(caught) == 1 and caught[0].filename == __file__
    assert "Bot.ask" in str(caught[0].message)
    assert "@cache.semantic(scope=lambda self" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Said(Bot):
            @cache.semantic(embedder=embedder, ignore=("self",))
            def shared(self, question: str) -> str:
                return question

            @cache.semantic(embedder=embedder, scope=lambda self, question: self.model)
            def per_model(self, question: str) -> str:
                return f"{self.model}: {question}"

        assert Said().per_model("hi") == "small: hi"
    cache.close()


def test_semantic_ignore_leaves_a_parameter_out_of_the_scope() -> None:
    pytest.importorskip("numpy")
    pytest.importorskip("faiss")
    from cachekit import Status
    from cachekit.testing import DeterministicTestEmbedder

    cache = Cache()
    calls: list[str] = []

    @cache.semantic(embedder=DeterministicTestEmbedder(), ignore=("request_id",))
    def answer(question: str, request_id: str, model: str = "m") -> str:
        calls.append(request_id)
        return question.upper()

    assert answer("what is a cache", "r1") == "WHAT IS A CACHE"
    assert answer.lookup("what is a cache", "r2").status is Status.HIT  # request_id left out
    assert answer.lookup("what is a cache", "r2", model="other").status is Status.MISS
    assert calls == ["r1"]
    with pytest.raises(ValueError, match="ignore= names no parameter"):
        cache.semantic(embedder=DeterministicTestEmbedder(), ignore=("nope",))(answer.__wrapped__)
    cache.close()


def test_instance_dependent_methods_key_with_key_function() -> None:
    cache = Cache()

    class PerInstance(Model):
        @cache.cached(key=lambda self, x: (self.scale, x))
        def predict(self, x: int) -> int:
            self.calls += 1
            return x * self.scale

    a, b = PerInstance(2), PerInstance(3)
    assert (a.predict(5), b.predict(5), a.predict(5)) == (10, 15, 10)
    assert (a.calls, b.calls) == (1, 1)


def test_semantic_methods_leave_the_receiver_out(closing: Any) -> None:
    pytest.importorskip("numpy")  # the semantic extra: not in a base install
    pytest.importorskip("faiss")
    from cachekit.testing.embedders import DeterministicTestEmbedder

    cache = Cache()
    emb = DeterministicTestEmbedder()

    class Bot:
        def __init__(self) -> None:
            self.calls = 0

        @cache.semantic(embedder=emb, threshold=0.9, ttl=60, batching=False, ignore=("self",))
        def answer(self, prompt: str, *, model: str = "m") -> str:
            self.calls += 1
            return f"{model}:{prompt}"

    closing(Bot.answer)
    a, b = Bot(), Bot()
    assert a.answer("how do I reset my password") == "m:how do I reset my password"
    assert b.answer("how do I reset my password please") == "m:how do I reset my password"
    assert b.answer("how do I reset my password", model="n") == "n:how do I reset my password"
    assert (a.calls, b.calls) == (1, 1)  # the text was compared, not the instance
