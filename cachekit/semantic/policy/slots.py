"""The slot guard: a semantic candidate whose *slots* differ from the query's is never served.

An embedding barely moves when two requests differ in a number ("Convert 61 km to miles" /
"... 63 km ..."), a polarity ("Which foods are gluten-free?" / "... not gluten-free?"), a name
(France / Germany, numpy / pandas) or the last sentence after a long shared preamble, so no
similarity threshold separates them. The guard compares what the embedding blurs, per candidate,
after the similarity search and before the hit policy:

``truncated``
    Either text is longer than the embedder reads (``window_tokens``, 256 for MiniLM, estimated
    on the long side): its vector describes a prefix, so a hit would rest on text nobody
    compared. Long texts are answered by exact entries only.
``preamble``
    The texts share ``preamble_words`` or more words at their start and end together and differ
    in between: the embedding is mostly the shared part, so similarity says little about the part
    that differs (retrieval-augmented prompts look like this).
``numbers``
    The numbers, in order, with the unit attached to each (``5 km``, ``$20``, ``3 pm``): digits,
    number words and ordinals ("seventeen", "twenty-five", "3rd", "third") and dates in any of
    the common formats compare as the same value. An ambiguous word ("one", "second", "first")
    counts only where the other text has that value.
``negation``
    An odd number of negations (not, no, never, without, -n't, unable, ...) in one text and an
    even number in the other.
``opposites``
    Both texts name a side of the same opposition (enable/disable, add/remove, increase/decrease,
    left/right, before/after, benefits/drawbacks, ...) and not the same side.
``names``
    Each text names something (a capitalised name inside a sentence, an acronym, a CamelCase
    word) that the other text does not mention at all, in any case.
``identifiers``
    Likewise for identifiers: quoted strings, code identifiers (snake_case, dotted.names,
    calls()), file names and paths, command-line flags, URLs, emails, and the package named after
    ``install``/``import`` or before ``library``/``package``/``module``. An identifier in one text
    only (the other says nothing in its place) counts for URLs, emails, paths and quoted strings.
``code``
    Fenced blocks (```...```) and inline spans (`...`) must be the same, character for character
    (case and symbols: ``^[a-z]+$`` is not ``^[A-Z]+$``); only line endings, trailing whitespace
    and a block's language name (```python) are set aside. Code in one text only refuses, unless
    the other text writes it out as it stands ("what does os.path.join do").
``order``
    The same slots in other roles: a directional frame of one text puts ``x`` before ``y`` and one
    of the other puts ``y`` before ``x`` ("flights from Lyon to Geneva" / "... from Geneva to
    Lyon", "translate Italian to Dutch" / "Dutch to Italian", "is 12 more than 9" / "is 9 more
    than 12", "did Spain beat Italy" / "did Italy beat Spain", "a letter from a buyer to a
    seller" / "from a seller to a buyer"). Frames: source and target ("from X to Y", "to Y from
    X", "X to Y", "X into Y", "X -> Y", "replace X with Y", "exchange X for Y"), comparison and
    preference ("X than Y", "X rather than / over / instead of Y", "X superior to Y"), doer and
    done-to ("X beat / defeat / sue / evict ... Y", "Y was beaten by X", "X won against Y", "Y
    lost to X", and two parties such as tenant/landlord or employer/employee in one clause, in
    their order). A paraphrase that keeps the roles passes ("from Lyon to Geneva" / "to Geneva
    from Lyon", "did Spain beat Italy" / "was Italy beaten by Spain"), and so do orders that do not
    matter: "between X and Y", "X and Y", "X or Y", "X vs Y" (a comparison or a fixture, not a
    result), and any clause with "compare", "difference", "distance", "similar", ...
    (:mod:`cachekit.semantic.policy.slot_order`). With no frame word, the same words with two runs
    of them exchanged around other words are refused too ("is it hard for Dutch speakers to learn
    Chinese" / "... for Chinese speakers to learn Dutch"), unless a joiner stands between them.

Every check is symmetric, pure Python and memoised per text, so a stored entry is parsed once:
a check of a query against four candidates costs tens of microseconds (``bench/semantic/latency.py``
measures it on a hit). :class:`SlotGuard` is a :class:`SlotCheck`; the hit policies carry one as
``guard`` (``None`` opts out) and :class:`~cachekit.semantic.arbiter.HitArbiter` asks it about
every candidate (``docs/hit-quality.md``, "The slot guard").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from cachekit.semantic.policy.slot_lexicon import (
    AXIS_NAMES as _AXIS_NAMES,
)
from cachekit.semantic.policy.slot_lexicon import (
    FUNCTION_WORDS as _FUNCTION_WORDS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_JOINERS as _ORDER_JOINERS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDER_SYMMETRIC as _ORDER_SYMMETRIC,
)
from cachekit.semantic.policy.slot_parse import (
    CHARS_PER_TOKEN_MAX as _CHARS_PER_TOKEN_MAX,
)
from cachekit.semantic.policy.slot_parse import (
    Number,
    TextSlots,
    estimate_tokens,
    text_slots,
)

__all__ = [
    "DEFAULT_GUARD",
    "REFUSAL_KINDS",
    "SlotCheck",
    "SlotGuard",
    "TextSlots",
    "estimate_tokens",
    "refusal_kind",
    "same_numbers",
    "text_slots",
]

#: What a refusal reason starts with, for telemetry (``refusal_kind``).
REFUSAL_KINDS = (
    "truncated",
    "preamble",
    "numbers",
    "negation",
    "opposites",
    "names",
    "identifiers",
    "code",
    "order",
)


@runtime_checkable
class SlotCheck(Protocol):
    """Asked about each candidate of a lookup: ``None`` lets it through, a string refuses it and
    says why (shown to users: keep it short, start it with the kind of difference)."""

    def check(self, query: str, candidate: str) -> str | None: ...


# ---------------------------------------------------------------------------------- comparing


def _shown(numbers: list[Number]) -> str:
    return ", ".join(n.value + (f" {n.unit}" if n.unit else "") for n in numbers) or "none"


def _numbers_differ(a: TextSlots, b: TextSlots) -> str | None:
    """Every number one text states needs its like in the other (order aside: "the 2015 or the
    2016 model" is "the 2016 or 2015 model"; a number without a unit matches it with one; an
    ambiguous word of the same value will do). Ambiguous words ("one", "first", "second")
    differ only when both texts have some and no value in common ("the first quarter" / "the
    second quarter")."""
    only_a, only_b = _unmatched(a, b), _unmatched(b, a)
    if not only_a and not only_b:
        weak_a = {n.value for n in a.numbers if n.weak}
        weak_b = {n.value for n in b.numbers if n.weak}
        if not (weak_a and weak_b and weak_a.isdisjoint(weak_b)):
            return None
        only_a = [n for n in a.numbers if n.weak]
        only_b = [n for n in b.numbers if n.weak]
    return f"slots: numbers {_shown(only_a)} != {_shown(only_b)}"


def _unmatched(a: TextSlots, b: TextSlots) -> list[Number]:
    """``a``'s stated numbers that ``b`` has no counterpart for (each counterpart used once)."""
    pool = sorted(b.numbers, key=lambda n: n.weak)  # stated numbers first
    left = []
    for x in a.numbers:
        if x.weak:
            continue
        j = next((j for j, y in enumerate(pool) if _same_number(x, y)), None)
        if j is None:
            left.append(x)
        else:
            del pool[j]
    return left


def _same_number(x: Number, y: Number) -> bool:
    return x.value == y.value and (x.unit is None or y.unit is None or x.unit == y.unit)


def same_numbers(query: str, candidate: str) -> bool:
    """Both texts state numbers (not only ambiguous words) and they are the same, units and
    all: evidence, beside the embedding, that the two ask about the same thing."""
    a, b = text_slots(query), text_slots(candidate)
    if not any(not n.weak for n in a.numbers) or not any(not n.weak for n in b.numbers):
        return False
    return _numbers_differ(a, b) is None


def _poles_differ(a: TextSlots, b: TextSlots) -> str | None:
    if a.poles == b.poles:
        return None
    axes = {axis for axis, _ in a.poles} & {axis for axis, _ in b.poles}
    for axis in sorted(axes):
        sa = {s for x, s in a.poles if x == axis}
        sb = {s for x, s in b.poles if x == axis}
        if sa != sb:
            words = _AXIS_NAMES[axis].split("/")
            return (
                f"slots: opposites {'/'.join(words[s] for s in sorted(sa))} != "
                f"{'/'.join(words[s] for s in sorted(sb))}"
            )
    return None


def _absent(items: frozenset[str], other: TextSlots) -> list[str]:
    """Items of one text that the other does not mention: not as a word (nor a form of it:
    plural, possessive, a derived word such as India/Indian, a one-letter typo), and for
    multi-word and punctuated items, not anywhere in its text."""
    out = []
    for item in sorted(items):
        if item in other.tokens:
            continue
        if not item.isalnum() or " " in item:
            if _mentions(other.lowered, item):
                continue
        elif any(_same_word(item, t) for t in other.tokens):
            continue
        out.append(item)
    return out


def _mentions(text: str, item: str) -> bool:
    """``item`` stands in ``text`` on its own: not as the start of a longer identifier
    (``--force`` is not mentioned by ``--force-with-lease``)."""
    start = text.find(item)
    while start != -1:
        end = start + len(item)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before in "_-") and not (after.isalnum() or after in "_-"):
            return True
        start = text.find(item, start + 1)
    return False


def _same_word(a: str, b: str) -> bool:
    """Two spellings of one name: a shared stem of at least 4 letters that is most of the
    shorter word (Turk/Turks, India/Indian, Google/Googling), or one edit apart (from 5
    letters; two from 8)."""
    if a[:3] != b[:3] and a[-3:] != b[-3:]:
        return False
    short = min(len(a), len(b))
    common = 0
    while common < short and a[common] == b[common]:
        common += 1
    if common >= 4 and common >= 0.8 * short:
        return True
    return short >= 5 and _within_edits(a, b, 2 if short >= 8 else 1)


def _within_edits(a: str, b: str, limit: int) -> bool:
    """Levenshtein distance of ``a`` and ``b`` is at most ``limit`` (banded: short words)."""
    if abs(len(a) - len(b)) > limit:
        return False
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        if min(cur) > limit:
            return False
        prev = cur
    return prev[-1] <= limit


def _swapped(
    kind: str, a: frozenset[str], b: frozenset[str], sa: TextSlots, sb: TextSlots
) -> str | None:
    only_a, only_b = _absent(a, sb), _absent(b, sa)
    if only_a and only_b:
        return f"slots: {kind} {', '.join(only_a[:3])} != {', '.join(only_b[:3])}"
    return None


def _anchored_missing(a: TextSlots, b: TextSlots) -> str | None:
    only_a, only_b = _absent(a.anchored, b), _absent(b.anchored, a)
    if only_a or only_b:
        shown_a, shown_b = ", ".join(only_a[:2]) or "none", ", ".join(only_b[:2]) or "none"
        return f"slots: identifiers {shown_a} != {shown_b}"
    return None


def _code_differs(a: TextSlots, b: TextSlots) -> str | None:
    """Code must be the same, character for character: a block or span of one text that the
    other has neither as code nor written out as it stands (``os.path.join`` for
    `` `os.path.join` ``) refuses."""
    only_a, only_b = _code_left(a, b), _code_left(b, a)
    if not only_a and not only_b:
        return None
    return f"slots: code {_shown_code(only_a)} != {_shown_code(only_b)}"


def _code_left(a: TextSlots, b: TextSlots) -> list[str]:
    pool = list(b.code)
    left = []
    for c in a.code:
        if c in pool:
            pool.remove(c)
        elif not _mentions_as_is(b.text, c):
            left.append(c)
    return left


def _mentions_as_is(text: str, code: str) -> bool:
    """``code`` stands in ``text`` as it is (case and all), not inside a longer word."""
    start = text.find(code)
    while start != -1:
        end = start + len(code)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(code, start + 1)
    return False


def _shown_code(code: list[str]) -> str:
    if not code:
        return "none"
    one = " ".join(code[0].split())
    return (one[:40] + "...") if len(one) > 40 else one


def _order_differs(a: TextSlots, b: TextSlots) -> str | None:
    """A frame of one text puts ``x`` before ``y`` and one of the other puts ``y`` before ``x``
    (and neither text has both orders: "from Paris to Oslo and back from Oslo to Paris")."""
    for kind, x, y in sorted(a.order):
        swapped = (kind, y, x)
        if swapped in b.order and (kind, x, y) not in b.order and swapped not in a.order:
            return f"slots: order {x} -> {y} != {y} -> {x}"
    return None


#: Between two exchanged runs these make a list or a pairing, not roles ("Lyon or Geneva",
#: "Ajax against Chelsea": a fixture, the same match; a result is a frame: "Ajax beat Chelsea").
_MIRROR_JOINERS = _ORDER_JOINERS | {"against"}


def _mirrored(a: TextSlots, b: TextSlots) -> str | None:
    """The same words, but two runs of them (up to three words each, a content word in each)
    exchanged around at least one word: "is it hard for Dutch speakers to learn Chinese" /
    "... for Chinese speakers to learn Dutch", "why do cats chase dogs" / "why do dogs chase
    cats". Where no frame word marks the roles, the words around them still do. Not read where
    the order does not matter: a joiner between the runs ("Lyon or Geneva", "Ajax against
    Chelsea") or a symmetric word anywhere ("similar", "distance", "compare", ...)."""
    wa, wb = a.words, b.words
    if len(wa) != len(wb) or wa == wb:
        return None
    p, s = _common_ends(wa, wb)
    mid_a, mid_b = wa[p : len(wa) - s], wb[p : len(wb) - s]
    if not _ORDER_SYMMETRIC.isdisjoint(a.tokens) or not _ORDER_SYMMETRIC.isdisjoint(b.tokens):
        return None
    for lx in range(1, 4):
        for ly in range(1, 4):
            if lx + ly >= len(mid_a):
                break
            x, y, between = mid_a[:lx], mid_a[len(mid_a) - ly :], mid_a[lx : len(mid_a) - ly]
            if (
                mid_b == y + between + x
                and x != y
                and not _MIRROR_JOINERS.intersection(between)
                and all(not _FUNCTION_WORDS.issuperset(run) for run in (x, y))
            ):
                shown_x, shown_y = " ".join(x), " ".join(y)
                return f"slots: order {shown_x} -> {shown_y} != {shown_y} -> {shown_x}"
    return None


def _common_ends(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[int, int]:
    """Words shared at the start, and at the end (never overlapping)."""
    limit = min(len(a), len(b))
    p = 0
    while p < limit and a[p] == b[p]:
        p += 1
    s = 0
    while s < limit - p and a[-1 - s] == b[-1 - s]:
        s += 1
    return p, s


def _preamble(a: TextSlots, b: TextSlots, least: int) -> str | None:
    """Refuses two texts that share ``least`` or more words at their ends and differ in between
    by a content word (a difference of function words only, "What's" / "What is", passes)."""
    p, s = _common_ends(a.words, b.words)
    if p + s < least or a.words == b.words:
        return None
    mid_a = a.words[p : len(a.words) - s]
    mid_b = b.words[p : len(b.words) - s]
    new = [w for w in (*mid_a, *mid_b) if w not in _FUNCTION_WORDS]
    if not new:
        return None
    return f"preamble: {p + s} words shared, the rest differs ({' '.join(new[:4])})"


class SlotGuard:
    """The default :class:`SlotCheck` (see the module docstring for each rule).

    ``window_tokens``: what the embedder reads (MiniLM: 256); a longer text is never a semantic
    hit. ``preamble_words``: shared words (start plus end) from which two texts count as one
    preamble with different endings. ``numbers``, ``negation``, ``opposites``, ``names``,
    ``identifiers``, ``code``, ``order``: each rule can be turned off.
    """

    __slots__ = (
        "code",
        "identifiers",
        "names",
        "negation",
        "numbers",
        "opposites",
        "order",
        "preamble_words",
        "window_tokens",
    )

    def __init__(
        self,
        *,
        window_tokens: int = 256,
        preamble_words: int = 20,
        numbers: bool = True,
        negation: bool = True,
        opposites: bool = True,
        names: bool = True,
        identifiers: bool = True,
        code: bool = True,
        order: bool = True,
    ) -> None:
        for label, v in (("window_tokens", window_tokens), ("preamble_words", preamble_words)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{label} must be a positive int, got {v!r}")
        self.window_tokens = window_tokens
        self.preamble_words = preamble_words
        self.numbers = numbers
        self.negation = negation
        self.opposites = opposites
        self.names = names
        self.identifiers = identifiers
        self.code = code
        self.order = order

    def check(self, query: str, candidate: str) -> str | None:
        """``None`` when ``candidate``'s answer may serve ``query`` as far as slots go, else the
        reason (``"slots: numbers 61 km != 63 km"``, ``"truncated: ..."``, ``"preamble: ..."``)."""
        truncated = self._truncated(query) or self._truncated(candidate)
        if truncated:
            return truncated
        a, b = text_slots(query), text_slots(candidate)
        return next((r for r in self._reasons(a, b) if r is not None), None)

    def _truncated(self, text: str) -> str | None:
        # A token is at least a character: only a text this long can be over the window.
        if len(text) + 2 <= self.window_tokens:
            return None
        if len(text) <= _CHARS_PER_TOKEN_MAX * self.window_tokens and (
            estimate_tokens(text, stop_above=self.window_tokens) <= self.window_tokens
        ):
            return None
        return f"truncated: over the embedder's {self.window_tokens} tokens"

    def _reasons(self, a: TextSlots, b: TextSlots) -> Iterator[str | None]:
        yield _preamble(a, b, self.preamble_words)
        if self.numbers and a.numbers != b.numbers:
            yield _numbers_differ(a, b)
        if self.negation and a.negations % 2 != b.negations % 2:
            yield f"slots: negation {a.negations} != {b.negations}"
        if self.opposites:
            yield _poles_differ(a, b)
        if self.names and a.names != b.names:
            yield _swapped("names", a.names, b.names, a, b)
        if self.identifiers and a.identifiers != b.identifiers:
            yield _swapped("identifiers", a.identifiers, b.identifiers, a, b)
            yield _anchored_missing(a, b)
        if self.code and (a.code or b.code):
            yield _code_differs(a, b)
        if self.order and a.order and b.order and a.order != b.order:
            yield _order_differs(a, b)
        if self.order:
            yield _mirrored(a, b)

    def __repr__(self) -> str:
        off = [
            n
            for n in ("numbers", "negation", "opposites", "names", "identifiers", "code", "order")
            if not getattr(self, n)
        ]
        extra = f", off={off}" if off else ""
        return (
            f"SlotGuard(window_tokens={self.window_tokens}, "
            f"preamble_words={self.preamble_words}{extra})"
        )


#: The guard every hit policy carries unless given another (or ``guard=None``).
DEFAULT_GUARD = SlotGuard()


def refusal_kind(reason: str) -> str:
    """The kind of a refusal reason, for counting: ``"slots: numbers 1 != 2"`` -> ``"numbers"``,
    ``"below threshold ..."`` -> ``"threshold"``; anything else -> ``"policy"``."""
    head = reason.removeprefix("slots: ").split(":", 1)[0].split(" ", 1)[0]
    if head in REFUSAL_KINDS:
        return head
    if reason.startswith("below threshold"):
        return "threshold"
    if reason.startswith("demoted"):
        return "demoted"
    return "policy"
