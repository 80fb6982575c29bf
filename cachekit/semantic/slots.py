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

Every check is symmetric, pure Python and memoised per text, so a stored entry is parsed once:
a check of a query against four candidates costs tens of microseconds (``bench/semantic_latency.py``
measures it on a hit). :class:`SlotGuard` is a :class:`SlotCheck`; the hit policies carry one as
``guard`` (``None`` opts out) and :class:`~cachekit.semantic.arbiter.HitArbiter` asks it about
every candidate (``docs/hit-quality.md``, "The slot guard").
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, runtime_checkable

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
)


@runtime_checkable
class SlotCheck(Protocol):
    """Asked about each candidate of a lookup: ``None`` lets it through, a string refuses it and
    says why (shown to users: keep it short, start it with the kind of difference)."""

    def check(self, query: str, candidate: str) -> str | None: ...


# ---------------------------------------------------------------------------------- lexicon

_UNITS: dict[str, str] = {}
for _canon, _forms in {
    "km": "km kms kilometer kilometers kilometre kilometres",
    "m": "m meter meters metre metres",
    "cm": "cm centimeter centimeters centimetre centimetres",
    "mm": "mm millimeter millimeters millimetre millimetres",
    "mi": "mi mile miles",
    "ft": "ft foot feet",
    "kg": "kg kgs kilogram kilograms kilo kilos",
    "g": "g gram grams",
    "lb": "lb lbs pound pounds",
    "oz": "oz ounce ounces",
    "l": "l liter liters litre litres",
    "ml": "ml milliliter milliliters millilitre millilitres",
    "s": "s sec secs second seconds",
    "ms": "ms millisecond milliseconds",
    "min": "min mins minute minutes",
    "h": "h hr hrs hour hours",
    "day": "day days",
    "week": "week weeks",
    "month": "month months",
    "year": "year years yr yrs",
    "b": "byte bytes",
    "kb": "kb kib kilobyte kilobytes",
    "mb": "mb mib megabyte megabytes",
    "gb": "gb gib gigabyte gigabytes",
    "tb": "tb tib terabyte terabytes",
    "%": "% percent pct",
    "deg": "degree degrees °",
    "c": "c celsius °c",
    "f": "f fahrenheit °f",
    "usd": "$ usd dollar dollars bucks",
    "eur": "€ eur euro euros",
    "gbp": "£ gbp",
    "am": "am a.m.",
    "pm": "pm p.m.",
    "x": "x times",
    "px": "px pixel pixels",
    "mph": "mph",
    "kmh": "kmh kph km/h",
    "hz": "hz hertz",
    "ghz": "ghz",
    "mhz": "mhz",
    "w": "w watt watts",
    "kw": "kw kilowatt kilowatts",
    "v": "v volt volts",
    "cal": "cal calorie calories kcal",
    "core": "core cores",
    "gpu": "gpu gpus",
    "thread": "thread threads",
    "token": "token tokens",
    "char": "character characters char chars",
    "word": "word words",
    "page": "page pages",
}.items():
    for _form in _forms.split():
        _UNITS[_form] = _canon

_SMALL = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
}
_TENS = {
    w: 10 * i
    for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
    if w != "_"
}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_ORDINALS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
    "thirteenth": 13,
    "fourteenth": 14,
    "fifteenth": 15,
    "sixteenth": 16,
    "seventeenth": 17,
    "eighteenth": 18,
    "nineteenth": 19,
    "twentieth": 20,
    "thirtieth": 30,
    "fortieth": 40,
    "fiftieth": 50,
    "sixtieth": 60,
    "seventieth": 70,
    "eightieth": 80,
    "ninetieth": 90,
    "hundredth": 100,
    "thousandth": 1000,
}
_NUMBER_WORDS = set(_SMALL) | set(_TENS) | set(_SCALES) | set(_ORDINALS) | {"dozen"}
#: Number words that are as often not numbers ("which one", "wait a second", "first, ...").
_AMBIGUOUS = frozenset({"one", "first", "second"})
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        "january february march april may june july august september october november "
        "december".split()
    )
}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())} | {"sept": 9})

_NEGATIONS = frozenset(
    "not no never none nothing nobody nowhere neither nor without cannot unable "
    "dont doesnt didnt isnt arent wasnt werent wont wouldnt shouldnt couldnt cant havent "
    "hasnt hadnt mustnt neednt aint shant lack lacks lacking".split()
)

#: Oppositions: each line is one axis, its two sides separated by ``|``. Inflections (-s, -es,
#: -ed, -d, -ing, -er, -est) are added.
_OPPOSITIONS = """
enable activate turn_on switch_on power_on | disable deactivate turn_off switch_off power_off
log_in sign_in login signin | log_out sign_out logout signout
add insert append | remove
create | delete destroy
increase raise boost | decrease reduce lower
left | right
before prior | after
benefit advantage pro upside merit | drawback disadvantage con downside
upload | download
import | export
encrypt | decrypt
encode | decode
compress zip | decompress unzip
serialize | deserialize
lock | unlock
mount | unmount
install | uninstall
connect | disconnect
show | hide
include | exclude
allow permit | deny block forbid
accept | reject
buy purchase | sell
push | pull
read | write
input | output
client | server
start | stop
open | close
win | lose
gain | lose
maximum max | minimum min
high higher highest | low lower lowest
more | less fewer
most | least
best | worst
better | worse
fast faster fastest | slow slower slowest
hot | cold
big bigger large larger | small smaller
long longer | short shorter
young | old
first | last
above | below
over | under
inside | outside
north | south
east | west
male men man | female women woman
true | false
positive | negative
legal | illegal
possible | impossible
safe | unsafe dangerous
healthy | unhealthy
cheap cheaper | expensive
rich | poor
strong | weak
light | dark
day | night
summer | winter
rise | fall
love | hate
agree | disagree
visible | hidden invisible
public | private
sync synchronous | async asynchronous
horizontal | vertical
ascending asc | descending desc
uppercase | lowercase
internal | external
local | remote
inbound | outbound
upstream | downstream
earlier | later
past | future
yesterday | tomorrow
morning | evening
include | omit
success succeed | failure fail
valid | invalid
online | offline
"""


def _inflections(word: str) -> set[str]:
    forms = {word, word + "s", word + "es", word + "ed", word + "ing", word + "er", word + "est"}
    if word.endswith("e"):
        forms |= {word + "d", word[:-1] + "ing", word + "r", word + "st"}
    if word.endswith("y"):
        forms |= {word[:-1] + "ies", word[:-1] + "ied"}
    return forms


def _build_poles() -> dict[str, tuple[tuple[int, int], ...]]:
    poles: dict[str, set[tuple[int, int]]] = {}
    for axis, line in enumerate(x for x in _OPPOSITIONS.strip().splitlines() if x.strip()):
        for side, words in enumerate(line.split("|")):
            for word in words.split():
                for form in _inflections(word):
                    poles.setdefault(form, set()).add((axis, side))
    return {w: tuple(sorted(p)) for w, p in poles.items()}


_POLES = _build_poles()
_POLE_WORDS = frozenset(_POLES)
_AXIS_NAMES = [
    line.split("|")[0].split()[0] + "/" + line.split("|")[1].split()[0]
    for line in _OPPOSITIONS.strip().splitlines()
    if line.strip()
]

# Words that read as a name when capitalised inside a sentence but are not one.
#: Second words of the phrasal verbs in ``_OPPOSITIONS`` ("turn on", "log out").
_PARTICLES = frozenset({"on", "off", "in", "out"})
_NOT_NAMES = frozenset("i i'm i've i'd i'll ok okay mr mrs ms dr prof sir st".split())
_CUE_BEFORE = frozenset(
    "install uninstall import require upgrade add".split()
)  # "pip install NAME", "import NAME"
_CUE_AFTER = frozenset(
    "library libraries package packages module modules crate crates gem gems plugin plugins "
    "extension extensions framework frameworks".split()
)
_CUES = _CUE_BEFORE | _CUE_AFTER
#: Words that do not change what is asked, when they are all that differs after a preamble.
_FUNCTION_WORDS = frozenset(
    "a an the of to in on at for from by with about as into and or but if so than that this "
    "these those it its is are was were be been am do does did have has had will would shall "
    "should can could may might must what whats which who when where why how s please i me my "
    "you your we our us there here some any just also very really kindly thanks thank".split()
)
_ARTICLES = frozenset("the a an my your our their this that it its python".split())

# ---------------------------------------------------------------------------------- parsing

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
_CHARS_PER_TOKEN_MAX = 32
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
    )


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
    ``identifiers``: each rule can be turned off.
    """

    __slots__ = (
        "identifiers",
        "names",
        "negation",
        "numbers",
        "opposites",
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

    def __repr__(self) -> str:
        off = [
            n
            for n in ("numbers", "negation", "opposites", "names", "identifiers")
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
