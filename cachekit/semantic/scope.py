"""How a call of a ``@cache.semantic`` function splits into the text it compares and its
*scope*: a digest of everything else that must match for two calls to share an answer (a
method's receiver and ``ignore=`` parameters left out, ``text=`` and ``scope=`` when given)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from typing import Any

from cachekit._core.keys import ArgNormalizer, local_key, stable_digest
from cachekit._core.methods import METHOD_RECEIVERS, receiver_of

__all__ = ["CallSplit", "receiver_count", "text_parameter"]

_VAR_KINDS = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def receiver_count(fn: Callable[..., Any]) -> int:
    """1 when ``fn`` is a method (first parameter ``self`` or ``cls``), else 0: the receiver is
    neither the compared text nor scope, as in ``@cache.cached`` (docs/exact.md, Methods)."""
    return 1 if receiver_of(fn) is not None else 0


def text_parameter(fn: Callable[..., Any]) -> tuple[int, str]:
    """The compared argument: the first positional parameter annotated ``str``, else the first
    positional one (a method's receiver aside); keyword-only parameters only when there is no
    positional one."""
    params = [p for p in inspect.signature(fn).parameters.values()]
    candidates = [
        (i, p) for i, p in enumerate(params) if p.kind not in _VAR_KINDS and i >= receiver_count(fn)
    ]
    if not candidates:
        raise TypeError(
            f"{fn!r} has no named parameter to compare; pass text=lambda *a, **kw: ... instead"
        )
    # Keyword-only parameters (``*, model: str``) are settings, hence scope: they are the
    # compared text only when nothing can be passed positionally.
    positional = [c for c in candidates if c[1].kind is not inspect.Parameter.KEYWORD_ONLY]
    for i, p in positional or candidates:
        if p.annotation is str or p.annotation == "str":
            return i, p.name
    i, p = (positional or candidates)[0]
    return i, p.name


#: Scope digests remembered per semantic function (the memo is cleared when full).
_SCOPE_MEMO = 1024


class CallSplit:
    """Turns a call into ``(scope_key, text)``: the compared text, and a digest of everything
    else that must match for two calls to share an answer."""

    def __init__(
        self,
        fn: Callable[..., Any],
        fname: str,
        text: Callable[..., str] | None,
        scope: Callable[..., Any] | None,
        ignore: tuple[str, ...] = (),
    ) -> None:
        self.fname = fname
        self.text = text
        self.scope = scope
        self.normalize = ArgNormalizer(fn)
        self.skip = receiver_count(fn)
        self.text_pos, self.text_name = (-1, "") if text is not None else text_parameter(fn)
        self.text_pos -= self.skip
        params = list(inspect.signature(fn).parameters)[self.skip :]
        unknown = [n for n in ignore if n not in params and n not in METHOD_RECEIVERS]
        if unknown:
            raise ValueError(f"{fname}: ignore= names no parameter: {unknown}")
        #: Positions (after the receiver) left out of the scope.
        self.ignored = frozenset(i for i, n in enumerate(params) if n in ignore)
        self._scopes: dict[Hashable, str] = {}

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str]:
        values = self.normalize(args, kwargs)
        if self.skip:
            values = values[self.skip :]
        if self.text is not None:
            t = self.text(*args, **kwargs)
            if not isinstance(t, str):
                raise TypeError(f"{self.fname}: text= returned {type(t).__name__}, expected str")
            # The argument the text was taken from is not scope; anything derived from it
            # (a stripped prompt, the last message) stays in scope unless scope= says otherwise:
            # a missed hit is cheaper than a wrong one.
            pos = next((i for i, v in enumerate(values) if v is t), -1)
        else:
            t, pos = values[self.text_pos], self.text_pos
            if not isinstance(t, str):
                raise TypeError(
                    f"{self.fname}: the compared text argument {self.text_name!r} must be str, "
                    f"got {type(t).__name__}"
                )
        if self.ignored:
            rest = tuple(v for i, v in enumerate(values) if i != pos and i not in self.ignored)
        else:
            rest = values if pos < 0 else values[:pos] + values[pos + 1 :]
        what = ("scope", self.scope(*args, **kwargs)) if self.scope is not None else ("args", rest)
        return self._scope_key(what), t

    def _scope_key(self, what: tuple[str, Any]) -> str:
        """The digest of ``what``, remembered for plain values (most calls of a function share
        a few scopes: a model name, a temperature)."""
        plain = local_key(what[1] if what[0] == "args" else (what[1],))
        if plain is None:
            return stable_digest(what)
        memo_key = (what[0], plain)
        digest = self._scopes.get(memo_key)
        if digest is None:
            if len(self._scopes) >= _SCOPE_MEMO:
                self._scopes.clear()
            digest = self._scopes[memo_key] = stable_digest(what)
        return digest
