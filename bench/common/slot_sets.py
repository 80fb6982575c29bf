"""Prompt families for ``bench/quality/slot_guard.py``: requests that differ only in a slot,
generated here.

A *family* is one :class:`Template`: several wordings (``forms``) of one request with slots. A
*fill* gives the slots values; ``meaning`` (the template id plus the fill's key) says which
answer is right, so two prompts with the same meaning ask the same thing in other words, and two
prompts of one family with different meanings must not share an answer. Kinds of families:

* ``slot_swap_numbers``: digits, number words, ordinals, dates, years, decimals, percentages,
  currency, units, versions, chapters and pages, altitudes, temperatures;
* ``slot_swap_negation``: inserted not/no/never/without/n't, and opposite pairs
  (enable/disable, before/after, import/export, ...);
* ``slot_swap_names``: countries, cities, people, companies, products, packages, code
  identifiers, quoted strings, paths, URLs, emails, CLI flags;
* ``long_preamble``: a shared 150-600 word preamble (contract, retrieved context, instructions,
  notes) and a different final question, or the same question after a preamble whose first
  sentence differs.

Paraphrases are the other forms of a fill; one may spell a number in words where another has
digits. The templates, the pools of slot values and the preamble sentences are data, in
``bench/data/slot_sets.json``: a template's ``spec`` names one of the generators below
(``ints``, ``pick``, ``cross``, ...) with its arguments, ``{"pool": NAME}`` standing for a pool.
Everything is seeded: :func:`streams` gives the same stream for the same arguments.
Templates are split into ``tune`` and ``test`` by a hash of their id (:func:`part_of`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NUMBERS = "slot_swap_numbers"
NEGATION = "slot_swap_negation"
NAMES = "slot_swap_names"
LONG = "long_preamble"
PARAPHRASE = "paraphrase"
KINDS = (NUMBERS, NEGATION, NAMES, LONG, PARAPHRASE)
PARTS = ("tune", "test")

#: Slot values drawn per template (fewer where a pool is smaller).
K = 20

Text = dict[str, str]


@dataclass(frozen=True)
class Fill:
    """One choice of slot values. ``parts``: one ``"name=value"`` per slot (``"~name=value"``
    for a polarity or an opposite); they decide the answer. ``text`` renders the forms (it may
    hold several spellings of one value, e.g. ``n`` = "17" and ``n_w`` = "seventeen")."""

    parts: tuple[str, ...]
    text: Text

    @property
    def key(self) -> str:
        return "; ".join(self.parts)


Spec = Callable[[random.Random], list[Fill]]


@dataclass(frozen=True)
class Template:
    id: str
    kind: str
    spec: Spec
    forms: tuple[str, ...]

    def fills(self, seed: int) -> list[Fill]:
        return self.spec(random.Random(f"{seed}:{self.id}"))

    def render(self, fill: Fill, form: int) -> str:
        return self.forms[form].format_map(fill.text)

    def meaning(self, fill: Fill) -> str:
        return f"{self.id}|{fill.key}"


@dataclass(frozen=True)
class Prompt:
    """One request of a stream. ``kind`` is the family's kind for the first request of a
    meaning and ``paraphrase`` for a later one (its meaning was requested before)."""

    text: str
    meaning: str
    kind: str
    family: str
    template: str
    form: int


def T(id: str, kind: str, spec: Spec, *forms: str) -> Template:
    return Template(id, kind, spec, forms)


# ---------------------------------------------------------------------------- slot values

ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
ORDINAL_WORDS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
MONTHS = (
    "January February March April May June July August September October November December"
).split()


def words(n: int) -> str:
    """``25`` -> ``"twenty-five"`` (0 <= n < 1,000,000)."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        rest = f" {words(n % 100)}" if n % 100 else ""
        return f"{ONES[n // 100]} hundred{rest}"
    rest = f" {words(n % 1000)}" if n % 1000 else ""
    return f"{words(n // 1000)} thousand{rest}"


def ordinal_words(n: int) -> str:
    """``3`` -> ``"third"``, ``21`` -> ``"twenty-first"``."""
    text = words(n)
    cut = max(text.rfind(" "), text.rfind("-")) + 1
    head, last = text[:cut], text[cut:]
    if last in ORDINAL_WORDS:
        return head + ORDINAL_WORDS[last]
    return head + (last[:-1] + "ieth" if last.endswith("y") else last + "th")


def ordinal_suffix(n: int) -> str:
    """``3`` -> ``"3rd"``, ``11`` -> ``"11th"``."""
    if 11 <= n % 100 <= 13:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def number_text(name: str, n: int) -> Text:
    return {
        name: str(n),
        f"{name}_w": words(n),
        f"{name}_o": ordinal_words(n),
        f"{name}_th": ordinal_suffix(n),
        f"{name}_c": f"{n:,}",
    }


def ints(name: str, lo: int, hi: int, step: int = 1, k: int = K) -> Spec:
    """Integers ``lo..hi`` (every ``step``), ``k`` of them."""

    def draw(rng: random.Random) -> list[Fill]:
        values = range(lo, hi + 1, step)
        chosen = sorted(rng.sample(values, min(k, len(values))))
        return [Fill((f"{name}={n}",), number_text(name, n)) for n in chosen]

    return draw


def decimals(name: str, lo: float, hi: float, places: int = 1, k: int = K) -> Spec:
    def draw(rng: random.Random) -> list[Fill]:
        values = sorted({round(rng.uniform(lo, hi), places) for _ in range(k)})
        return [Fill((f"{name}={v:.{places}f}",), {name: f"{v:.{places}f}"}) for v in values]

    return draw


def dates(name: str, first_year: int = 1990, last_year: int = 2026, k: int = K) -> Spec:
    """Dates as "March 3, 2024" (``name``), "2024-03-03" (``name_iso``), "3 March 2024"
    (``name_dm``)."""

    def draw(rng: random.Random) -> list[Fill]:
        picked: set[tuple[int, int, int]] = set()
        while len(picked) < k:
            picked.add((rng.randint(first_year, last_year), rng.randint(1, 12), rng.randint(1, 28)))
        return [
            Fill((f"{name}={y:04d}-{m:02d}-{d:02d}",), date_text(name, y, m, d))
            for y, m, d in sorted(picked)
        ]

    return draw


def date_text(name: str, y: int, m: int, d: int) -> Text:
    month = MONTHS[m - 1]
    return {
        name: f"{month} {d}, {y}",
        f"{name}_iso": f"{y:04d}-{m:02d}-{d:02d}",
        f"{name}_dm": f"{d} {month} {y}",
    }


def pick(name: str, values: str | Sequence[str], k: int = K) -> Spec:
    """``k`` of ``values`` for the slot ``name`` (a string is split at "|", or at spaces when it
    has no "|")."""
    if isinstance(values, str):
        values = values.split("|") if "|" in values else values.split()

    def draw(rng: random.Random) -> list[Fill]:
        chosen = rng.sample(list(values), min(k, len(values)))
        return [Fill((f"{name}={v}",), {name: v}) for v in chosen]

    return draw


def rows(names: str, table: Sequence[tuple[str, ...]], k: int = K) -> Spec:
    """``k`` rows of ``table``, column ``i`` rendering slot ``names.split()[i]``; the whole row
    is the key (use it for a value with several spellings)."""
    columns = names.split()

    def draw(rng: random.Random) -> list[Fill]:
        chosen = rng.sample(list(table), min(k, len(table)))
        return [
            Fill((f"{columns[0]}={row[0]}",), dict(zip(columns, row, strict=True)))
            for row in chosen
        ]

    return draw


def pairs(a: str, b: str, values: Sequence[str], k: int = K) -> Spec:
    """``k`` ordered pairs of two different ``values`` for the slots ``a`` and ``b``."""

    def draw(rng: random.Random) -> list[Fill]:
        combos = list(itertools.permutations(values, 2))
        chosen = rng.sample(combos, min(k, len(combos)))
        return [Fill((f"{a}={x}", f"{b}={y}"), {a: x, b: y}) for x, y in chosen]

    return draw


def flip(**columns: tuple[str, str]) -> Spec:
    """Two fills, a polarity or an opposite pair: column ``c`` renders ``columns[c][i]`` in fill
    ``i``. ``flip(neg=("", "not "), are=("are", "aren't"))``."""
    first = next(iter(columns))

    def draw(rng: random.Random) -> list[Fill]:
        out = []
        for i in range(2):
            text = {c: pair[i] for c, pair in columns.items()}
            out.append(Fill((f"~{first}={columns[first][i].strip() or '-'}",), text))
        return out

    return draw


def cross(*specs: Spec, k: int = K) -> Spec:
    """Combinations of the fills of ``specs``, ``k`` of them (all when there are fewer)."""

    def draw(rng: random.Random) -> list[Fill]:
        combos = list(itertools.product(*(spec(rng) for spec in specs)))
        chosen = rng.sample(combos, min(k, len(combos)))
        return [merge(combo) for combo in chosen]

    return draw


def merge(fills: Sequence[Fill]) -> Fill:
    text: Text = {}
    for fill in fills:
        text.update(fill.text)
    return Fill(tuple(part for f in fills for part in f.parts), text)


# ---------------------------------------------------------------------------- pools


def _tuples(value: Any) -> Any:
    """Lists of the data file as tuples (rows of a table)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


# ---------------------------------------------------------------------------- the data file

DATA = Path(__file__).resolve().parents[1] / "data" / "slot_sets.json"

#: The generators a template's ``spec`` may name.
SPECS: dict[str, Callable[..., Spec]] = {
    "ints": ints,
    "decimals": decimals,
    "dates": dates,
    "pick": pick,
    "rows": rows,
    "pairs": pairs,
    "flip": flip,
    "cross": cross,
}


def _load() -> dict[str, Any]:
    with open(DATA, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


_DATA = _load()
#: Pools of slot values by name (``{"pool": NAME}`` in the data file).
POOLS: dict[str, tuple[Any, ...]] = {"MONTHS": tuple(MONTHS)}
POOLS.update({name: tuple(_tuples(v) for v in values) for name, values in _DATA["pools"].items()})


def _value(node: Any) -> Any:
    """A value of the data file: a pool reference, a generator, a list (as a tuple), or as is."""
    if isinstance(node, dict) and "pool" in node:
        return POOLS[node["pool"]]
    if isinstance(node, dict) and "spec" in node:
        args = [_value(a) for a in node["args"]]
        kw = {k: _value(v) for k, v in node.get("kw", {}).items()}
        return SPECS[node["spec"]](*args, **kw)
    if isinstance(node, list):
        return tuple(_value(v) for v in node)
    return node


def _template(row: dict[str, Any]) -> Template:
    return Template(row["id"], row["kind"], _value(row["spec"]), tuple(row["forms"]))


NUMBER_TEMPLATES = [_template(row) for row in _DATA["templates"]["numbers"]]
NEGATION_TEMPLATES = [_template(row) for row in _DATA["templates"]["negation"]]
NAME_TEMPLATES = [_template(row) for row in _DATA["templates"]["names"]]


# ---------------------------------------------------------------------------- long preambles


@dataclass(frozen=True)
class Genre:
    """A kind of long preamble: its first sentence (``{x}`` the slot, ``xs`` its values), body
    sentences (placeholders filled from :data:`FILLERS`), and final questions, each in three
    wordings."""

    name: str
    intro: str
    xs: tuple[str, ...]
    body: tuple[str, ...]
    questions: tuple[tuple[str, str, str], ...]
    #: How the final question is introduced, per form.
    leads: tuple[str, str, str] = ("Question: ", "", "Based on the text above: ")


FILLERS: dict[str, tuple[str, ...]] = {k: _value(v) for k, v in _DATA["fillers"].items()}
GENERIC_BODY: tuple[str, ...] = _value(_DATA["generic_body"])
GENRES = tuple(Genre(**{k: _value(v) for k, v in row.items()}) for row in _DATA["genres"])


@dataclass(frozen=True)
class First:
    """A first sentence whose slot ``{x}`` (values ``xs``) the final question depends on."""

    sentence: str
    xs: tuple[str, ...]
    question: tuple[str, str, str]


#: Per genre: preambles that differ in their first sentence only, and a question about it.
FIRST_SENTENCES = {
    name: First(row["sentence"], _value(row["xs"]), _value(row["question"]))
    for name, row in _DATA["first_sentences"].items()
}


def fill_sentence(sentence: str, rng: random.Random) -> str:
    return sentence.format_map({k: rng.choice(v) for k, v in FILLERS.items()})


def preamble_body(genre: Genre, rng: random.Random) -> str:
    """150-600 words: the genre's sentences and generic ones, shuffled, until the target."""
    target = rng.randint(150, 600)
    pool = list(genre.body) + rng.sample(GENERIC_BODY, len(GENERIC_BODY) // 2)
    rng.shuffle(pool)
    out: list[str] = []
    count = 0
    for sentence in pool:
        if count >= target:
            break
        text = fill_sentence(sentence, rng)
        out.append(text)
        count += len(text.split())
    return " ".join(out)


def question_spec(genre: Genre) -> Spec:
    """One shared preamble; the fills are the final questions."""

    def draw(rng: random.Random) -> list[Fill]:
        pre = f"{genre.intro.format(x=rng.choice(genre.xs))} {preamble_body(genre, rng)}"
        picked = rng.sample(range(len(genre.questions)), min(9, len(genre.questions)))
        return [
            Fill(
                (f"q={i}",), {"pre": pre, **{f"q{j}": q for j, q in enumerate(genre.questions[i])}}
            )
            for i in sorted(picked)
        ]

    return draw


def first_sentence_spec(genre: Genre) -> Spec:
    """One body and one question; the fills are the value of the first sentence's slot, which
    the question asks about."""
    first = FIRST_SENTENCES[genre.name]

    def draw(rng: random.Random) -> list[Fill]:
        body = preamble_body(genre, rng)
        qs = {f"q{j}": q for j, q in enumerate(first.question)}
        return [
            Fill((f"x={x}",), {"pre": f"{first.sentence.format(x=x)} {body}", **qs})
            for x in first.xs
        ]

    return draw


def long_forms(genre: Genre) -> tuple[str, ...]:
    return tuple(f"{{pre}}\n\n{lead}{{q{i}}}" for i, lead in enumerate(genre.leads))


def long_templates() -> list[Template]:
    out = []
    for genre in GENRES:
        for i in range(3):
            out.append(
                Template(f"long.{genre.name}.q{i}", LONG, question_spec(genre), long_forms(genre))
            )
        out.append(
            Template(
                f"long.{genre.name}.first", LONG, first_sentence_spec(genre), long_forms(genre)
            )
        )
    return out


# ---------------------------------------------------------------------------- split and streams


TEMPLATES: list[Template] = (
    NUMBER_TEMPLATES + NEGATION_TEMPLATES + NAME_TEMPLATES + long_templates()
)


def id_hash(template_id: str) -> int:
    return int.from_bytes(hashlib.sha256(template_id.encode()).digest()[:8], "big")


def split() -> dict[str, str]:
    """Template id -> ``tune`` or ``test``: within each kind, the half of the templates with the
    lower hash of their id is ``tune``. Stable across runs and Python versions; a template added
    later moves at most one other across the line."""
    out = {}
    for kind in (NUMBERS, NEGATION, NAMES, LONG):
        ids = sorted((t.id for t in TEMPLATES if t.kind == kind), key=id_hash)
        half = (len(ids) + 1) // 2
        out.update({tid: PARTS[0] if i < half else PARTS[1] for i, tid in enumerate(ids)})
    return out


SPLIT = split()


def part_of(template_id: str) -> str:
    return SPLIT[template_id]


def templates(part: str) -> list[Template]:
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    return [t for t in TEMPLATES if part_of(t.id) == part]


def streams(part: str, seed: int = 0, size: int = 1500, paraphrases: float = 0.35) -> list[Prompt]:
    """``size`` requests of the part's templates, shuffled. About ``1 - paraphrases`` of them
    are distinct meanings (slot swaps of one another within a family); the rest repeat one of
    those meanings in another wording (a paraphrase). More when the part has too few meanings;
    fewer requests when every wording of every meaning is used."""
    rng = random.Random(f"stream:{part}:{seed}")
    meanings = [(t, f) for t in templates(part) for f in t.fills(seed)]
    rng.shuffle(meanings)
    firsts = meanings[: max(0, size - round(size * paraphrases))]
    plan = [(t, f, rng.randrange(len(t.forms))) for t, f in firsts]
    plan += paraphrase_plan(firsts, plan, size - len(plan), rng)
    rng.shuffle(plan)
    return label(plan)


def paraphrase_plan(
    meanings: Sequence[tuple[Template, Fill]],
    plan: Sequence[tuple[Template, Fill, int]],
    count: int,
    rng: random.Random,
) -> list[tuple[Template, Fill, int]]:
    """``count`` requests of ``meanings`` in wordings not yet in ``plan``."""
    unused = {t.meaning(f): [i for i in range(len(t.forms)) if i != form] for t, f, form in plan}
    open_ = [(t, f) for t, f in meanings if unused[t.meaning(f)]]
    out: list[tuple[Template, Fill, int]] = []
    while len(out) < count and open_:
        j = rng.randrange(len(open_))
        t, f = open_[j]
        forms = unused[t.meaning(f)]
        out.append((t, f, forms.pop(rng.randrange(len(forms)))))
        if not forms:
            open_[j] = open_[-1]
            open_.pop()
    return out


def label(plan: Sequence[tuple[Template, Fill, int]]) -> list[Prompt]:
    """Prompts in order: the first request of a meaning has its family's kind, later ones are
    paraphrases."""
    seen: set[str] = set()
    out = []
    for t, f, form in plan:
        meaning = t.meaning(f)
        kind = PARAPHRASE if meaning in seen else t.kind
        seen.add(meaning)
        out.append(Prompt(t.render(f, form), meaning, kind, t.kind, t.id, form))
    return out


def check(seed: int = 0) -> None:
    """Raise if two meanings share a text, a meaning repeats a wording, or a form leaves a
    placeholder unfilled."""
    owner: dict[str, str] = {}
    for t in TEMPLATES:
        for f in t.fills(seed):
            texts = [t.render(f, i) for i in range(len(t.forms))]
            if len(set(texts)) != len(texts):
                raise AssertionError(f"{t.meaning(f)}: two forms render the same text")
            for text in texts:
                if owner.setdefault(text, t.meaning(f)) != t.meaning(f):
                    raise AssertionError(f"{text!r}: {owner[text]} and {t.meaning(f)}")


if __name__ == "__main__":
    check()
    for part in PARTS:
        stream = streams(part)
        kinds = {k: sum(p.kind == k for p in stream) for k in KINDS}
        print(part, len(templates(part)), "templates", len(stream), "requests", kinds)
