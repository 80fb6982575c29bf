"""Which slot value of a text comes first in a directional frame (:func:`order_pairs`), for the
slot guard's ``order`` rule (:mod:`cachekit.semantic.policy.slots`).

A *frame* gives two phrases a direction, of one of three kinds:

* ``to`` (source, target): "from X to Y" and "to Y from X", "X to Y", "X into Y", "X -> Y",
  "replace X with Y", "exchange X for Y";
* ``than`` (the first is compared or preferred): "X than Y", "X rather than Y", "X over Y",
  "X instead of Y", "X superior to Y", "prefer X to Y";
* ``act`` (a doer, a done-to): "X beat Y", "Y was beaten by X", "X won against Y", "Y lost to
  X", with a few dozen verbs (beat, defeat, sue, evict, hire, pay, owe, invade, ...); and two
  parties (tenant/landlord, buyer/seller, employer/employee, ...) in one clause, in their order
  ("can a landlord evict a tenant"; "by" makes the later one the doer; "as a tenant" is the
  asker, no party).

A phrase is the run of content words next to the marker (articles and intensifiers skipped, at
most three words; "than" reaches back over function words: "does Lima have more people than"):
each of its words stands for the slot, so "translate English to Spanish" gives
``english -> spanish`` and ``translate -> spanish``. Two texts are compared within a kind, and
differ when a word pair is in one order in one text and in the other order in the other.

Nothing is read where the order does not matter: a clause with "compare", "distance",
"difference", "between", "similar", "vs", ... reads both ways ("compare X to Y", "the distance
from X to Y", "Germany vs Brazil": a fixture, not a result); "X and Y", "X or Y", "X with Y" name
no order, and "to" before a verb ("music to listen to") is no target unless the verb is
capitalised ("port it to Go"). Words are compared lower-cased, without a possessive, a party in
the singular, number words as digits ("seven" is "7"); an acronym that spells a function word
("the US", "IT") stays a name.
"""

from __future__ import annotations

import re

from cachekit.semantic.policy.slot_lexicon import (
    ORDER_AUX as _AUX,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_FOR_VERBS as _FOR_VERBS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_FROM as _FROM,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_INFINITIVES as _INFINITIVES,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_JOINERS as _JOINERS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_LOSE as _LOSE,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_MARKERS as _MARKERS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_SKIP as _SKIP,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_STOP as _STOP,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_SUBORDINATE as _SUBORDINATE,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_SYMMETRIC as _SYMMETRIC,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_THAN as _THAN,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_TO as _TO,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_TO_THAN as _TO_THAN,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_VERBS as _VERBS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_WIN as _WIN,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_WITH_VERBS as _WITH_VERBS,
)
from cachekit.semantic.policy.slot_lexicon import (
    PARTIES as _PARTIES,
)
from cachekit.semantic.policy.slot_lexicon import (
    SMALL as _SMALL,
)
from cachekit.semantic.policy.slot_lexicon import (
    TENS as _TENS,
)

__all__ = ["order_pairs"]

#: ``(kind, first, second)``: kinds ``to`` (source, target), ``than`` (compared or preferred
#: first) and ``act`` (doer, done-to; parties in their order). Texts are compared within a kind:
#: "redirect HTTP to HTTPS" and "HTTPS instead of HTTP" say the same thing in opposite orders.
Frame = tuple[str, str, str]

_TOKEN = re.compile(
    r"-->|->|=>|[\u2192\u27f6]"  # arrows
    r"|[a-z](?:\.[a-z])+\.?"  # u.s., e.g.
    r"|\d+(?:[.,]\d+)*"
    r"|[a-z0-9]+(?:'[a-z]+)?"
    r"|[.?!;:,()\[\]\n&/]",
    re.IGNORECASE,
)
_CLAUSE_BREAKS = frozenset(".?!;:,()[]\n")
_NUMBER_KEYS = {w: str(v) for w, v in (*_SMALL.items(), *_TENS.items())}
_PHRASE = 3  # content words of a phrase, at most
_ENDS = frozenset(_STOP | _AUX | _CLAUSE_BREAKS)
_PARTY_FORMS = _PARTIES | {p + "s" for p in _PARTIES} | {p + "'s" for p in _PARTIES}
_ARROWS = ("->", "=>", "\u2192", "\u27f6")
_WIN_LOSE = _WIN | _LOSE
_LOWER = re.compile(r"[a-z]")
_PARTICIPLE = ("ed", "en", "id", "ld", "ok")  # defeated, beaten, paid, outsold, overtook


def _key(token: str) -> str:
    """The form two texts are compared in: lower case, no possessive, digits for number words,
    a party in the singular."""
    token = token.lower().removesuffix("'s").replace("'", "").replace(".", "")
    if token in _NUMBER_KEYS:
        return _NUMBER_KEYS[token]
    if token[-1:] == "s" and token[:-1] in _PARTIES:
        return token[:-1]
    return token


def _before(c: list[str], k: int, aux: bool = False, reach: bool = False) -> list[str]:
    """The phrase ending just before ``c[k]`` (nearest word first); ``aux``: auxiliaries right
    before the marker are skipped ("was beaten", "to be sued"); ``reach``: function words are
    skipped too, up to the clause's start ("does Prague have more people than")."""
    out: list[str] = []
    i = k - 1
    if aux:
        while i >= 0 and (c[i] in _AUX or c[i] in _SKIP or c[i] == "to"):
            i -= 1
    while i >= 0 and len(out) < _PHRASE:
        w = c[i]
        if w in _SKIP or (reach and w in _ENDS and w not in _MARKERS):
            i -= 1
            continue
        if w in _ENDS:
            break
        out.append(_key(w))
        i -= 1
    return out


def _after(c: list[str], k: int, lead: int = 0) -> list[str]:
    """The phrase starting just after ``c[k]``; ``lead`` function words may come first ("than in
    Russia", "than that of Russia", "instead of X")."""
    out: list[str] = []
    i = k + 1
    while i < len(c) and lead and (c[i] in _SKIP or c[i] in _ENDS):
        if c[i] not in _SKIP:
            lead -= 1
        i += 1
    while i < len(c) and len(out) < _PHRASE:
        w = c[i]
        if w in _SKIP:
            i += 1
            continue
        if w in _ENDS:
            break
        out.append(_key(w))
        i += 1
    return out


def _add(out: set[Frame], kind: str, first: list[str], second: list[str]) -> None:
    out.update((kind, x, y) for x in first for y in second if x != y)


def _next_word(c: list[str], k: int) -> str:
    i = k + 1
    while i < len(c) and c[i] in _SKIP:
        i += 1
    return c[i] if i < len(c) else ""


def _prev_word(c: list[str], k: int) -> str:
    i = k - 1
    while i >= 0 and c[i] in _SKIP:
        i -= 1
    return c[i] if i >= 0 else ""


def _last(c: list[str], k: int, words: frozenset[str]) -> int:
    """The index of the last word of ``words`` before ``k`` (there is one)."""
    j = k - 1
    while c[j] not in words:
        j -= 1
    return j


def _clause_frames(c: list[str], named: set[int], out: set[Frame]) -> None:
    symmetric = not _SYMMETRIC.isdisjoint(c)
    for k, w in enumerate(c):
        if w in _VERBS:
            if _next_word(c, k) == "by" and w.endswith(_PARTICIPLE):  # "Y was beaten by X"
                _add(out, "act", _after(c, c.index("by", k)), _before(c, k, aux=True))
            else:
                _add(out, "act", _before(c, k, aux=True), _after(c, k))
        elif w == "against" and _prev_word(c, k) in _WIN_LOSE:
            j = _last(c, k, _WIN_LOSE)
            doer, done = _before(c, j, aux=True), _after(c, k)
            _add(out, "act", *((done, doer) if c[j] in _LOSE else (doer, done)))
        elif symmetric:
            continue
        elif w in _THAN:
            _add(out, "than", _before(c, k, reach=True), _after(c, k, lead=3))
        elif (w == "with" and not _WITH_VERBS.isdisjoint(c[:k])) or (
            w == "for" and not _FOR_VERBS.isdisjoint(c[:k])
        ):
            _add(out, "to", _before(c, k), _after(c, k))
    if symmetric:
        return
    targets = [
        k
        for k, w in enumerate(c)
        if w in _TO
        and not (w == "to" and k + 1 < len(c) and c[k + 1] in _INFINITIVES and k + 1 not in named)
    ]
    if not targets:
        return
    claimed: dict[int, int] = {}  # target -> its "from": the next target, else the one before
    for f, w in enumerate(c):
        if w in _FROM:
            after = [k for k in targets if k > f and k not in claimed]
            before = [k for k in targets if k < f and k not in claimed]
            if after or before:
                claimed[after[0] if after else before[-1]] = f
    for k in targets:
        target = _after(c, k)
        if not target:
            continue
        if k in claimed:
            _add(out, "to", _after(c, claimed[k]), target)
        elif _prev_word(c, k) in _LOSE:  # "X lost to Y": Y beat X
            _add(out, "act", target, _before(c, _last(c, k, _LOSE), aux=True))
        elif not _TO_THAN.isdisjoint(c[:k]):  # "X superior to Y", "prefer X to Y"
            _add(out, "than", _before(c, k, reach=True), target)
        else:
            _add(out, "to", _before(c, k), target)


def _party_frames(c: list[str], out: set[Frame]) -> None:
    """Two parties in one clause, in their order ("by" before the later one makes it the doer;
    "as a tenant" describes the asker, who is no party here). A subordinate clause ("if ...",
    "who ...") is a clause of its own."""
    if not _SYMMETRIC.isdisjoint(c):
        return
    seen: dict[str, int] = {}
    for i, w in enumerate(c):
        if w in _SUBORDINATE:  # "if the landlord ..., what can the tenant do": two clauses
            _party_frames(c[i + 1 :], out)
            break
        if w in _PARTY_FORMS and (key := _key(w)) not in seen and _prev_word(c, i) != "as":
            seen[key] = i
    if len(seen) < 2:
        return
    found = sorted(seen.items(), key=lambda kv: kv[1])
    for n, (p, i) in enumerate(found):
        for q, j in found[n + 1 :]:
            if _JOINERS.isdisjoint(c[i + 1 : j]):
                out.add(("act", q, p) if _prev_word(c, j) == "by" else ("act", p, q))


def _named(clause: list[str], raw: list[str], mixed: bool) -> set[int]:
    """Fixes the clause's acronyms that spell a function word ("the US", "IT": kept upper-case,
    so no marker or stop word) and returns where its capitalised verbs stand ("port it to Go"
    is no infinitive)."""
    named = set()
    for i, r in enumerate(raw):
        if r[0].isupper():
            t = clause[i]
            if t in _ENDS and mixed and 2 <= len(r) <= 4 and r.isupper():
                clause[i] = r
            elif t in _INFINITIVES:
                named.add(i)
    return named


_NONE: frozenset[Frame] = frozenset()


def order_pairs(text: str, words: frozenset[str]) -> frozenset[Frame]:
    """``(kind, first, second)`` for each pair of words that a frame of ``text`` (code blocks
    blanked; ``words``: its lower-case words, to skip most texts unread) puts in that order."""
    if (
        _MARKERS.isdisjoint(words)
        and _PARTY_FORMS.isdisjoint(words)
        and not any(a in text for a in _ARROWS)
    ):
        return _NONE
    raw = _TOKEN.findall(text)
    tokens = [t.lower() for t in raw]
    mixed = _LOWER.search(text) is not None  # an acronym stands out: "the US"
    frames: set[Frame] = set()
    parties: set[Frame] = set()
    start = 0
    for end in (*(i for i, t in enumerate(tokens) if t in _CLAUSE_BREAKS), len(tokens)):
        if end - start >= 3:
            c = tokens[start:end]
            framed, two = not _MARKERS.isdisjoint(c), not _PARTY_FORMS.isdisjoint(c)
            if framed or two:
                named = _named(c, raw[start:end], mixed) if c != raw[start:end] else set()
                if framed:
                    _clause_frames(c, named, frames)
                if two:
                    _party_frames(c, parties)
        start = end + 1
    if not parties:
        return frozenset(frames)
    covered = {(x, y) for _, x, y in frames}
    parties = {f for f in parties if (f[1], f[2]) not in covered and (f[2], f[1]) not in covered}
    return frozenset(frames | parties)
