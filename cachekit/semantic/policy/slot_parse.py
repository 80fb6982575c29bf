"""What the slot guard reads in a text (:func:`text_slots`): its numbers (with units and dates),
names, identifiers, negations, opposite poles, code spans and the order of its slots in
directional frames (:mod:`cachekit.semantic.policy.slot_order`), and an estimate of its tokens.
Pure and memoised; the comparison of two texts' slots is :mod:`cachekit.semantic.policy.slots`."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from cachekit.semantic.policy.slot_lexicon import (
    AMBIGUOUS as _AMBIGUOUS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ARTICLES as _ARTICLES,
)
from cachekit.semantic.policy.slot_lexicon import (
    CUE_AFTER as _CUE_AFTER,
)
from cachekit.semantic.policy.slot_lexicon import (
    CUE_BEFORE as _CUE_BEFORE,
)
from cachekit.semantic.policy.slot_lexicon import (
    CUES as _CUES,
)
from cachekit.semantic.policy.slot_lexicon import (
    MONTHS as _MONTHS,
)
from cachekit.semantic.policy.slot_lexicon import (
    NEGATIONS as _NEGATIONS,
)
from cachekit.semantic.policy.slot_lexicon import (
    NOT_NAMES as _NOT_NAMES,
)
from cachekit.semantic.policy.slot_lexicon import (
    NUMBER_WORDS as _NUMBER_WORDS,
)
from cachekit.semantic.policy.slot_lexicon import (
    ORDINALS as _ORDINALS,
)
from cachekit.semantic.policy.slot_lexicon import (
    PARTICLES as _PARTICLES,
)
from cachekit.semantic.policy.slot_lexicon import (
    POLE_WORDS as _POLE_WORDS,
)
from cachekit.semantic.policy.slot_lexicon import (
    POLES as _POLES,
)
from cachekit.semantic.policy.slot_lexicon import (
    SCALES as _SCALES,
)
from cachekit.semantic.policy.slot_lexicon import (
    SMALL as _SMALL,
)
from cachekit.semantic.policy.slot_lexicon import (
    TENS as _TENS,
)
from cachekit.semantic.policy.slot_lexicon import (
    UNITS as _UNITS,
)
from cachekit.semantic.policy.slot_order import order_pairs

__all__ = ["CHARS_PER_TOKEN_MAX", "Number", "TextSlots", "estimate_tokens", "text_slots"]


_URL = re.compile(r"(?:https?://|www\.)[^\s<>\"'`]+")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_QUOTED = re.compile(
    r"`[^`\n]{1,200}`|(?<![\w'])\"[^\"\n]{1,200}\"|(?<![\w])'[^'\n]{1,200}'(?![\w])"
)
_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?|[A-Za-z]:\\[^\s]+")
_FLAG = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
_FILE = re.compile(
    r"\b[\w-]+\.(?:py|js|ts|tsx|jsx|json|ya?ml|toml|ini|cfg|conf|txt|md|csv|html|css|sh|rs|go"
    r"|java|c|h|cpp|rb|php|sql|lock|env|xml|log)\b"
)
_CALL = re.compile(r"\b[A-Za-z_][\w.]*\(\)")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")
_SNAKE = re.compile(r"\b[A-Za-z]\w*_\w+\b")
_CAMEL = re.compile(r"\b[a-z]+[A-Z]\w*\b")
_NOT_DOTTED = frozenset({"e.g", "i.e", "etc", "vs", "a.m", "p.m", "u.s", "u.k"})
_DOT_GATE = re.compile(r"\w\.\w|\(\)")
_CAMEL_GATE = re.compile(r"[a-z][A-Z]")


def _gated(text: str) -> Iterator[tuple[re.Pattern[str], bool]]:
    """``(pattern, counts one-sided)`` for each identifier pattern whose characters the text
    has at all: most texts have none, and one pass per pattern is cheaper than one alternation."""
    if "://" in text or "www." in text:
        yield _URL, True
    if "@" in text:
        yield _EMAIL, True
    if "`" in text or '"' in text or " '" in text or text.startswith("'"):
        yield _QUOTED, True
    if "/" in text or "\\" in text:
        yield _PATH, True
    if " -" in text or text.startswith("-"):
        yield _FLAG, False
    if _DOT_GATE.search(text):
        yield _FILE, False
        yield _CALL, False
        yield _DOTTED, False
    if "_" in text:
        yield _SNAKE, False
    if _CAMEL_GATE.search(text):
        yield _CAMEL, False


_DATE_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_DATE_SLASH = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{2,4})\b")
_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DATE_MDY = re.compile(
    rf"\b({_MONTH_NAMES})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?\b", re.IGNORECASE
)
_DATE_DMY = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_NAMES})\.?(?:,?\s+(\d{{4}}))?\b",
    re.IGNORECASE,
)
_NUM = re.compile(
    r"(?P<cur>[$€£])?\s?(?P<sign>(?<![\w.-])[-\u2212])?(?P<num>\d+(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)*)"
    r"(?P<suffix>st|nd|rd|th|k|m|bn|b)?\b(?P<pct>\s?%)?"
)
_DIGIT = re.compile(r"\d")
#: Past this many characters per token of the window a text counts as too long without being
#: counted (an estimate that errs long, like the count itself).
CHARS_PER_TOKEN_MAX = 32
_PIECE = re.compile(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]")
_LIST_MARKER = re.compile(r"\d{1,2}[.)]\s")
_WORDISH = re.compile(r"[a-z]+(?:'[a-z]+)?|[$€£%°]")
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")  # curly apostrophes are folded first
_HAS_CAPITAL = re.compile(r"[^\s]*[A-Z][^\s]*")
_SENTENCE_BREAK = re.compile(r"[.?!:;\n]\s")
_EDGE_PUNCT = ".,;:!?\"'()[]{}<>`*#~"
_OPENERS = frozenset("\"'([`*#>-")
_CLOSERS = frozenset(".?!:;")


@dataclass(frozen=True, slots=True)
class Number:
    value: str
    unit: str | None
    weak: bool  # an ambiguous word ("one", "second"): counts only if the other text has it


@dataclass(frozen=True, slots=True)
class TextSlots:
    """The slots of one text (see the module docstring), computed once per text."""

    words: tuple[str, ...]
    tokens: frozenset[str]
    lowered: str
    numbers: tuple[Number, ...]
    negations: int
    poles: frozenset[tuple[int, int]]
    names: frozenset[str]
    identifiers: frozenset[str]
    anchored: frozenset[str]  # identifiers that count one-sided (URLs, emails, paths, quotes)
    code: tuple[str, ...]  # code blocks and spans, as written (line ends normalised), sorted
    order: frozenset[tuple[str, str, str]]  # (kind, first, second) of each directional frame
    text: str  # the text itself, for finding another text's code in it


_FENCE = re.compile(r"```(.*?)(?:```|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_INFO = re.compile(r"\A[\w+#.-]*[ \t]*\n")  # a fenced block's language: ```python


def _code(text: str) -> tuple[str, ...]:
    """Fenced blocks (less the language name on the fence's line) and inline spans, as written:
    only line endings and trailing whitespace (of each line, and blank lines around a block) are
    normalised. Sorted: two texts with the same code in another order have the same code."""
    if "`" not in text:
        return ()
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    spans = [_INFO.sub("", m[1], count=1) for m in _FENCE.finditer(text)]
    spans += _INLINE_CODE.findall(_FENCE.sub(" ", text))
    out = ("\n".join(line.rstrip() for line in s.split("\n")).strip("\n") for s in spans)
    return tuple(sorted(c for c in out if c.strip()))


def _canon_number(raw: str, suffix: str | None) -> str:
    digits = raw.replace(",", "")
    if digits.count(".") > 1:
        return digits  # a version: 3.11.2
    if "." in digits:
        whole, frac = digits.split(".")
        digits = f"{int(whole)}.{frac}" if frac.strip("0") else str(int(whole))
    else:
        digits = str(int(digits))
    scale = {"k": 1_000, "m": 1_000_000, "b": 1_000_000_000, "bn": 1_000_000_000}.get(
        (suffix or "").lower()
    )
    if scale and "." not in digits:
        return str(int(digits) * scale)
    if scale:
        return str(float(digits) * scale).removesuffix(".0")
    return digits


def _dates(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """Dates replaced by one canonical token each (so "March 3, 2024" and "2024-03-03" agree);
    returns the text with dates blanked and ``(start, end, value)`` of each."""
    found: list[tuple[int, int, str]] = []

    def iso(m: re.Match[str]) -> str:
        return f"{int(m[1])}-{int(m[2]):02d}-{int(m[3]):02d}"

    def slash(m: re.Match[str]) -> str:
        year = int(m[3]) + (2000 if len(m[3]) == 2 else 0)
        return f"{year}-{int(m[1]):02d}-{int(m[2]):02d}"

    def mdy(m: re.Match[str]) -> str:
        month = _MONTHS[m[1].lower()]
        return f"{m[3] or '?'}-{month:02d}-{int(m[2]):02d}"

    def dmy(m: re.Match[str]) -> str:
        month = _MONTHS[m[2].lower()]
        return f"{m[3] or '?'}-{month:02d}-{int(m[1]):02d}"

    for pattern, fmt in (
        (_DATE_ISO, iso),
        (_DATE_SLASH, slash),
        (_DATE_MDY, mdy),
        (_DATE_DMY, dmy),
    ):
        for m in pattern.finditer(text):
            if m[0][:3].lower() == "may" and m[0][:1] == "m" and pattern is _DATE_MDY:
                continue  # "may 5 people ..." is a verb; a lower-case month is rare otherwise
            try:
                found.append((m.start(), m.end(), "date:" + fmt(m)))
            except (ValueError, KeyError):
                continue
            text = text[: m.start()] + " " * (m.end() - m.start()) + text[m.end() :]
    return text, found


def _unit_after(text: str, end: int) -> str | None:
    m = _WORDISH.match(text, end) or _WORDISH.match(
        text, end + 1 if text[end : end + 1] == " " else end
    )
    if m is None or m.start() - end > 1:
        return None
    word = m.group(0)
    if word in ("a", "p") and text[m.end() : m.end() + 2] in (".m", "m."):
        return "am" if word == "a" else "pm"
    return _UNITS.get(word)


def _digit_numbers(text: str) -> list[tuple[int, Number]]:
    out = []
    for m in _NUM.finditer(text.lower()):
        line_start = text[: m.start()].rsplit("\n", 1)[-1]
        if _LIST_MARKER.match(text, m.start()) and not line_start.strip(" \t>*-#"):
            continue  # "5. Is it true ..." numbers the question, it is not part of it
        suffix = m["suffix"]
        ordinal = suffix in ("st", "nd", "rd", "th")
        value = _canon_number(m["num"], None if ordinal else suffix)
        if m["sign"] and value.strip("0.") != "":
            value = "-" + value  # -9 °C is not 9 °C
        unit: str | None
        if m["pct"]:
            unit = "%"
        elif m["cur"]:
            unit = _UNITS[m["cur"]]
        else:
            unit = _unit_after(text.lower(), m.end())
        out.append((m.start(), Number(value, unit, False)))
    return out


def _word_kind(word: str) -> tuple[str, int] | None:
    """``(kind, value)`` of a number word: ``unit`` 1-9, ``teen`` 0 and 10-19, ``tens``, or
    ``scale`` (hundred, thousand, ...; a dozen is 12 units of one)."""
    value = _SMALL.get(word, _TENS.get(word, _SCALES.get(word, _ORDINALS.get(word))))
    if word == "dozen":
        return "scale", 12
    if value is None:
        return None
    if word in _SCALES or (value in (100, 1000) and word in _ORDINALS):
        return "scale", value
    if 1 <= value <= 9:
        return "unit", value
    return ("tens", value) if value >= 20 else ("teen", value)


#: Which kind of number word may follow which within one number ("twenty" "five", "hundred"
#: "and" "five"); anything else starts a new number ("twenty-three and nine" is two).
_FOLLOWS = {
    None: {"unit", "teen", "tens", "scale"},
    "unit": {"scale"},
    "teen": {"scale"},
    "tens": {"unit", "scale"},
    "scale": {"unit", "teen", "tens", "scale"},
}


def _word_numbers(text: str) -> list[tuple[int, Number]]:
    """Number words, compounds included ("twenty-five", "two hundred and five")."""
    lowered = text.lower()
    words = [(m.start(), m.end(), m.group(0)) for m in re.finditer(r"[a-z]+", lowered)]
    out: list[tuple[int, Number]] = []
    i = 0
    while i < len(words):
        j, value, ordinal = _read_number(words, i)
        if j == i:
            i += 1
            continue
        span = words[i:j]
        weak = len(span) == 1 and span[0][2] in _AMBIGUOUS
        unit = None if ordinal else _unit_after(lowered, span[-1][1])
        out.append((span[0][0], Number(str(value), unit, weak)))
        i = j
    return out


def _read_number(words: list[tuple[int, int, str]], i: int) -> tuple[int, int, bool]:
    """One number read from ``words[i:]``: the index after it, its value, whether ordinal."""
    total = current = 0
    last: str | None = None
    last_scale = 0
    j = i
    while j < len(words):
        w = words[j][2]
        if w == "and" and last == "scale" and j + 1 < len(words):
            nxt = _word_kind(words[j + 1][2])
            if nxt is not None and nxt[0] != "scale":
                j += 1
                continue
        kind = _word_kind(w)
        if kind is None or kind[0] not in _FOLLOWS[last]:
            break
        if kind[0] == "scale":
            if last == "scale" and kind[1] <= last_scale:
                break
            current = max(current, 1) * kind[1]
            if kind[1] >= 1000:
                total, current = total + current, 0
            last_scale = kind[1]
        else:
            current += kind[1]
        last = kind[0]
        j += 1
        if w in _ORDINALS:
            return j, total + current, True
    return j, total + current, False


def _numbers(text: str, tokens: frozenset[str]) -> tuple[Number, ...]:
    found: list[tuple[int, Number]] = []
    blanked = text
    if _DIGIT.search(text):
        blanked, dates = _dates(text)
        found += [(start, Number(value, None, False)) for start, _, value in dates]
        found += _digit_numbers(blanked)
    if tokens & _NUMBER_WORDS:
        found += _word_numbers(blanked)
    return tuple(n for _, n in sorted(found, key=lambda x: x[0]))


def _names(text: str) -> frozenset[str]:
    """Capitalised words inside a sentence, acronyms and CamelCase words, lower-cased. A text in
    Title Case (most words inside its sentences capitalised) gives acronyms and CamelCase only.
    Only words with a capital are visited (most words have none)."""
    found = [
        (word, _sentence_start(text, m.start(), m.group(0)))
        for m in _HAS_CAPITAL.finditer(text)
        if (word := m.group(0).strip(_EDGE_PUNCT)) and word[0].isalpha()
    ]
    if not found:
        return frozenset()
    starts = 1 + len(_SENTENCE_BREAK.findall(text))
    inner = len(text.split()) - starts
    inner_caps = sum(1 for w, first in found if not first and w[0].isupper())
    title_case = inner >= 3 and inner_caps >= 0.7 * inner
    out = set()
    for word, first in found:
        if any(c.isupper() for c in word[1:]) or not (first or title_case or word[0].islower()):
            name = word.lower().removesuffix("'s")
            if len(name) > 1 and name not in _NOT_NAMES:
                out.add(name)
    return frozenset(out)


def _sentence_start(text: str, start: int, raw: str) -> bool:
    """Whether the whitespace-delimited word at ``start`` begins a sentence or a line."""
    if raw[0] in _OPENERS:
        return True
    j = start - 1
    while j >= 0 and text[j] in " \t":
        j -= 1
    return j < 0 or text[j] in _CLOSERS or text[j] == "\n"


def _identifiers(text: str, tokens: list[str]) -> tuple[frozenset[str], frozenset[str]]:
    idents: set[str] = set()
    anchored: set[str] = set()
    for pattern, one_sided in _gated(text):
        for m in pattern.finditer(text):
            value = m.group(0).strip("`\"'").lower().rstrip(".,;:!?)")
            if value and value not in _NOT_DOTTED:
                idents.add(value)
                if one_sided:
                    anchored.add(value)
    if _CUES & set(tokens):
        for a, b in itertools.pairwise(tokens):
            if a in _CUE_BEFORE and b not in _POLES and b not in _ARTICLES:
                idents.add(b)
            if b in _CUE_AFTER and a not in _ARTICLES:
                idents.add(a)
    return frozenset(idents), frozenset(anchored)


def estimate_tokens(text: str, stop_above: int | None = None) -> int:
    """WordPiece tokens, estimated on the long side: a word of up to 6 letters is one token,
    longer ones one more per 4 letters; digits one per 2; every other symbol one. With
    ``stop_above``, counting stops once the count passes it (the work is bounded by the window,
    not by the text: a megabyte prompt costs no more than a long one)."""
    n = 2  # [CLS] and [SEP]
    for m in _PIECE.finditer(text):
        s = m.group(0)
        if s.isalpha():
            n += 1 + max(0, (len(s) - 3) // 4)
        elif s.isdigit():
            n += (len(s) + 1) // 2
        else:
            n += 1
        if stop_above is not None and n > stop_above:
            break
    return n


def _pole_words(tokens: list[str], token_set: frozenset[str]) -> set[str]:
    """The words (and "turn on"-like phrases) of ``tokens`` that name a side of an opposition."""
    found = set(token_set & _POLE_WORDS)
    if not _PARTICLES.isdisjoint(token_set):
        pairs = {f"{x}_{y}" for x, y in itertools.pairwise(tokens) if y in _PARTICLES}
        found |= pairs & _POLE_WORDS
    return found


def _negations(tokens: list[str]) -> int:
    """Negations, less those that only offer an alternative ("... or not", "why or why not",
    "yes or no")."""
    if _NEGATIONS.isdisjoint(tokens):
        return 0
    n = 0
    for i, t in enumerate(tokens):
        if t in _NEGATIONS and not (t in ("not", "no") and "or" in tokens[max(0, i - 2) : i]):
            n += 1
    return n


@lru_cache(maxsize=16_384)
def text_slots(text: str) -> TextSlots:
    """The slots of ``text`` (memoised: a stored entry is compared many times; 16,384 texts,
    a few KB each, since :meth:`SlotGuard.check` parses only texts within the window)."""
    normal = text.replace("\u2019", "'")
    lowered = normal.lower()
    tokens = [t.replace("'", "") for t in _TOKEN.findall(lowered)]
    token_set = frozenset(tokens)
    idents, anchored = _identifiers(normal, tokens)
    code = _code(text)
    poles = frozenset(p for t in _pole_words(tokens, token_set) for p in _POLES[t])
    return TextSlots(
        words=tuple(tokens),
        tokens=token_set,
        lowered=lowered,
        numbers=_numbers(normal, token_set),
        negations=_negations(tokens),
        poles=poles,
        names=_names(normal),
        identifiers=idents,
        anchored=anchored,
        code=code,
        order=order_pairs(_FENCE.sub("\n", normal) if code else normal, token_set),
        text=text,
    )
