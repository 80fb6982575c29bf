"""One core for the sync and the asyncio form of a rule (the sans-IO pattern of h11).

A core is a generator that yields the operations it needs as ``(name, args)`` and is sent
each result (or thrown its exception). :func:`drive` runs it with plain callables,
:func:`adrive` with callables that may return awaitables, so the rule itself is written once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Mapping
from typing import Any, TypeVar

__all__ = ["Core", "Op", "adrive", "drive"]

T = TypeVar("T")

#: An operation a core needs: (name in the driver's table, positional arguments).
Op = tuple[str, tuple[Any, ...]]
Core = Generator[Op, Any, T]


def drive(core: Core[T], ops: Mapping[str, Callable[..., Any]]) -> T:
    """Run ``core`` to completion, answering each operation with ``ops[name](*args)``."""
    try:
        op = next(core)
        while True:
            name, args = op
            try:
                result = ops[name](*args)
            except BaseException as exc:
                op = core.throw(exc)
                continue
            op = core.send(result)
    except StopIteration as done:
        return done.value


async def adrive(core: Core[T], ops: Mapping[str, Callable[..., Any]]) -> T:
    """The asyncio form of :func:`drive`: an operation's awaitable result is awaited."""
    try:
        op = next(core)
        while True:
            name, args = op
            try:
                result = ops[name](*args)
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                op = core.throw(exc)
                continue
            op = core.send(result)
    except StopIteration as done:
        return done.value
