"""Decorated methods: a receiver (``self``, ``cls``) is left out of a call's key, and saying
nothing about it gets a :class:`ReceiverLeftOutWarning`, once, at the decorator's line.

Shared by ``@cache.cached`` (``key=`` / ``ignore=``) and ``@cache.semantic`` (``scope=`` /
``ignore=``): see docs/exact.md, Methods.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

__all__ = [
    "METHOD_RECEIVERS",
    "BoundMethod",
    "ReceiverLeftOutWarning",
    "receiver_of",
    "warn_receiver_left_out",
]

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)


class BoundMethod(Protocol[P, R_co]):
    """A decorated method read from an instance, for type checkers: the call without its
    receiver. (Its helpers are read from the class: ``Model.predict.lookup(model, x)``.)"""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


#: First parameters that make a function a method: left out of its key by default.
METHOD_RECEIVERS = ("self", "cls")

#: The package root (cachekit/): frames under it are the package's own.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ReceiverLeftOutWarning(UserWarning):
    """A method was decorated with neither a key of its own (``key=`` for ``@cache.cached``,
    ``scope=`` for ``@cache.semantic``) nor its receiver in ``ignore=``: its receiver is left out
    of the key, so every instance shares the method's entries. Said once, when the method is
    decorated (docs/exact.md, Methods)."""


def receiver_of(fn: Callable[..., Any]) -> str | None:
    """The name of ``fn``'s receiver (``self`` or ``cls``) when its first parameter is one."""
    params = list(inspect.signature(fn).parameters)
    return params[0] if params and params[0] in METHOD_RECEIVERS else None


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning raised by this module's caller's caller at the
    first frame outside the package: the user's decorator line, whichever path led here."""
    level, frame = 2, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def warn_receiver_left_out(
    fn: Callable[..., Any], decorator: str, own_key: str, ignore: tuple[str, ...]
) -> str | None:
    """``fn``'s receiver, after a :class:`ReceiverLeftOutWarning` unless ``ignore`` names it.

    ``decorator`` is ``"cached"`` or ``"semantic"``; ``own_key`` the option that keys on the
    instance instead (``"key"`` or ``"scope"``). The caller checks that option is unset."""
    receiver = receiver_of(fn)
    if receiver is not None and receiver not in ignore:
        warnings.warn(
            f"{fn.__qualname__}: its receiver ({receiver}) is left out of the cache key, so "
            f"every instance shares its entries. If the result depends on the instance, key on "
            f"it: @cache.{decorator}({own_key}=lambda {receiver}, *args: ({receiver}.<what "
            f"matters>, *args)); if it does not, say so: @cache.{decorator}(ignore="
            f"({receiver!r},)).",
            ReceiverLeftOutWarning,
            stacklevel=user_stacklevel(),
        )
    return receiver
