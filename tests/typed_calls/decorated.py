"""Calls a type checker must reject: each line marked ``# E: <code>`` is an error mypy reports
there (tests/test_typing.py runs mypy on this file). Not collected by pytest; never run."""

from __future__ import annotations

from cachekit import Cache

cache = Cache()


@cache.cached
def square(x: int) -> int:
    return x * x


@cache.cached(ttl=5.0)
async def fetch(x: int, *, fresh: bool = False) -> str:
    return str(x)


@cache.semantic(threshold=0.9)
def answer(question: str, *, model: str = "small") -> str:
    return question


def load_users(ids: list[int]) -> dict[int, str]:
    return {i: str(i) for i in ids}


users = cache.features("user", loader=load_users)

good_square: int = square(2)
good_fetch = fetch(3, fresh=True)
good_answer: str = answer("hi", model="large")
good_user = users.get(1)

bad_square = square("2")  # E: arg-type
bad_square_result: str = square(2)  # E: assignment
bad_fetch = fetch(3, fresh="no")  # E: arg-type
bad_answer = answer(42)  # E: arg-type
bad_answer_keyword = answer("hi", temperature=1.0)  # E: call-arg
bad_lookup = square.lookup("2")  # E: arg-type
bad_invalidate = answer.invalidate(1)  # E: arg-type
bad_user = users.get("one")  # E: arg-type
