"""Pair sets for the slot guard's ``order`` and ``code`` rules (``bench/slot_order.py``), generated
here from templates (seeded, nothing downloaded).

Order: a :class:`Frame` is one request about two slot values ``{a}`` and ``{b}`` in several
wordings that keep their roles ("flights from {a} to {b}", "flights to {b} from {a}"). Its
pairs, for ``K`` ordered draws of two values:

* ``swap``: a wording with ``(a, b)`` against a wording (the same one, or the next) with
  ``(b, a)``: another request, to be refused;
* ``keep``: two wordings with ``(a, b)``: a paraphrase that keeps the roles, to pass;
* ``symmetric``: for a frame whose order does not matter ("between {a} and {b}", "{a} or {b}"),
  a wording with ``(a, b)`` against one with ``(b, a)``: the same request, to pass;
* ``unframed``: swaps in templates whose roles no frame word marks ("is it hard for {a}
  speakers to learn {b}"): what the rule does not read, reported apart.

Code: a :class:`CodeSet` is a wording with ``{code}`` around code snippets, each with a variant
that differs in case or one symbol. Pairs:

* ``code_variant``: the snippet against its variant, in the same wording or another: refused;
* ``code_one_sided``: a wording with the code against the wording with none: refused;
* ``code_same``: the same snippet in two wordings, or in a block with other trailing whitespace
  and line endings: to pass.

Templates are split into ``tune`` and ``test`` by a hash of their id, as in ``_slot_sets.py``;
:func:`pairs` gives the same pairs for the same arguments.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

SWAP = "swap"
KEEP = "keep"
SYMMETRIC = "symmetric"
UNFRAMED = "unframed"
CODE_VARIANT = "code_variant"
CODE_ONE_SIDED = "code_one_sided"
CODE_SAME = "code_same"
#: Kinds whose pairs the guard should refuse; the others it should let through.
REFUSE = frozenset({SWAP, UNFRAMED, CODE_VARIANT, CODE_ONE_SIDED})
KINDS = (SWAP, UNFRAMED, KEEP, SYMMETRIC, CODE_VARIANT, CODE_ONE_SIDED, CODE_SAME)
PARTS = ("tune", "test")
K = 12


@dataclass(frozen=True)
class Pair:
    query: str
    cached: str
    kind: str
    template: str


@dataclass(frozen=True)
class Frame:
    id: str
    values: tuple[str, ...] | tuple[tuple[str, str], ...]  # a pool, or fixed (a, b) pairs
    forms: tuple[str, ...]
    symmetric: bool = False
    unframed: bool = False

    def draws(self, rng: random.Random) -> list[tuple[str, str]]:
        if isinstance(self.values[0], tuple):
            fixed = [v for v in self.values if isinstance(v, tuple)]
            return rng.sample(fixed, min(K, len(fixed)))
        combos = list(itertools.permutations([v for v in self.values if isinstance(v, str)], 2))
        return rng.sample(combos, min(K, len(combos)))

    def pairs(self, seed: int) -> Iterator[Pair]:
        rng = random.Random(f"{seed}:{self.id}")
        n = len(self.forms)
        for a, b in self.draws(rng):
            for i in range(n):
                ab = self.forms[i].format(a=a, b=b)
                for j in (i, (i + 1) % n) if n > 1 else (i,):
                    ba = self.forms[j].format(a=b, b=a)
                    kind = SYMMETRIC if self.symmetric else UNFRAMED if self.unframed else SWAP
                    yield Pair(ab, ba, kind, self.id)
                for j in range(i + 1, n):
                    yield Pair(ab, self.forms[j].format(a=a, b=b), KEEP, self.id)


@dataclass(frozen=True)
class CodeSet:
    id: str
    forms: tuple[str, ...]  # wordings with {code}; a block gets the whitespace variants
    bare: str  # the wording with no code
    snippets: tuple[tuple[str, str], ...]  # (code, variant in case or one symbol)

    def pairs(self, seed: int) -> Iterator[Pair]:
        n = len(self.forms)
        for code, variant in self.snippets:
            for i, form in enumerate(self.forms):
                text = form.format(code=code)
                for j in (i, (i + 1) % n):
                    yield Pair(text, self.forms[j].format(code=variant), CODE_VARIANT, self.id)
                yield Pair(text, self.bare, CODE_ONE_SIDED, self.id)
                for j in range(i + 1, n):
                    yield Pair(text, self.forms[j].format(code=code), CODE_SAME, self.id)
                if "```\n" in form:  # a block: other line endings, trailing blanks
                    spaced = form.format(code=code.replace("\n", "  \n") + "   ")
                    yield Pair(text, spaced.replace("\n", "\r\n"), CODE_SAME, self.id)


# ---------------------------------------------------------------------------------- pools

CITIES = (
    "Paris Oslo Berlin Madrid Lisbon Vienna Prague Dublin Rome Athens Warsaw Helsinki "
    "Toronto Chicago Boston Denver Seattle Tokyo Seoul Sydney Cairo Nairobi Lima Mumbai"
).split()
COUNTRIES = (
    "Canada Russia Brazil Germany France Spain Italy Japan India China Mexico Norway Sweden "
    "Poland Egypt Kenya Chile Peru Argentina Australia Vietnam Turkey Greece Portugal"
).split()
LANGUAGES = (
    "English Spanish French German Italian Portuguese Dutch Japanese Korean Chinese Arabic "
    "Hindi Russian Turkish Polish Swedish"
).split()
CURRENCIES = "USD EUR GBP JPY INR CAD AUD CHF CNY MXN BRL SEK".split()
UNITS = (
    ("Celsius", "Fahrenheit"),
    ("Fahrenheit", "Celsius"),
    ("miles", "kilometers"),
    ("kilometers", "miles"),
    ("pounds", "kilograms"),
    ("kilograms", "pounds"),
    ("inches", "centimeters"),
    ("centimeters", "inches"),
    ("cups", "grams"),
    ("grams", "cups"),
    ("gallons", "liters"),
    ("liters", "gallons"),
    ("feet", "meters"),
    ("meters", "feet"),
)
FORMATS = "PDF Word JPG PNG CSV JSON YAML XML MP4 GIF HTML Markdown".split()
PROG = "Python Java JavaScript TypeScript Go Rust Ruby PHP Kotlin Swift C# Scala".split()
TYPES = "string int float list tuple dict set bytes".split()
TECHS = "React Vue Angular Svelte Django Flask Rails Laravel Spring Express".split()
COMPANIES = "Apple Samsung Google Microsoft Amazon Netflix Tesla Toyota Intel AMD".split()
CLUBS = "Arsenal Chelsea Liverpool Barcelona Juventus Ajax Celtic Benfica Porto Napoli".split()
PLATFORMS = "iPhone Android Windows Mac Linux ChromeOS".split()
BRANCHES = "main develop staging release hotfix feature-login".split()
SCHEMES = ("HTTP", "HTTPS"), ("HTTPS", "HTTP"), ("www", "non-www"), ("non-www", "www")
NUMBERS = "3 7 12 15 42 99 250 1000".split()
#: Two parties each; the order is drawn.
PARTIES = (
    ("tenant", "landlord"),
    ("landlord", "tenant"),
    ("employee", "employer"),
    ("employer", "employee"),
    ("buyer", "seller"),
    ("seller", "buyer"),
    ("student", "teacher"),
    ("teacher", "student"),
    ("patient", "doctor"),
    ("doctor", "patient"),
    ("client", "lawyer"),
    ("lawyer", "client"),
    ("borrower", "lender"),
    ("lender", "borrower"),
    ("customer", "supplier"),
    ("supplier", "customer"),
)


def F(id: str, values: Sequence[object], *forms: str, **kw: bool) -> Frame:
    return Frame(id, tuple(values), forms, **kw)  # type: ignore[arg-type]


FRAMES = [
    # ------------------------------------------------------------------ source and target
    F(
        "dir.flights",
        CITIES,
        "Find me cheap flights from {a} to {b}.",
        "Are there cheap flights to {b} from {a}?",
        "{a} to {b} flights: what are the cheapest options?",
    ),
    F(
        "dir.train",
        CITIES,
        "How long is the train ride from {a} to {b}?",
        "Train from {a} to {b}: how long does it take?",
        "How many hours does the train to {b} from {a} take?",
    ),
    F(
        "dir.move",
        COUNTRIES,
        "What paperwork do I need to move from {a} to {b}?",
        "Moving to {b} from {a}: which documents do I need?",
        "Which documents are required to relocate from {a} to {b}?",
    ),
    F(
        "dir.translate",
        LANGUAGES,
        "Translate this sentence from {a} to {b}.",
        "Please translate the text into {b} from {a}.",
        "Can you translate {a} to {b} for me?",
    ),
    F(
        "dir.exchange_rate",
        CURRENCIES,
        "What is the exchange rate from {a} to {b} today?",
        "{a} to {b} exchange rate today?",
        "Today's {a} -> {b} rate, please.",
    ),
    F(
        "dir.units",
        UNITS,
        "How do I convert {a} to {b}?",
        "What's the formula to turn {a} into {b}?",
        "Formula for converting from {a} to {b}?",
    ),
    F(
        "dir.file_format",
        FORMATS,
        "How do I convert a {a} file to {b}?",
        "What's the best tool to turn {a} into {b}?",
        "Recommend a {a} to {b} converter.",
    ),
    F(
        "dir.port_code",
        PROG,
        "How do I port my code from {a} to {b}?",
        "Migrating a codebase to {b} from {a}: where do I start?",
        "Tips for translating a project from {a} into {b}?",
    ),
    F(
        "dir.type_cast",
        TYPES,
        "How do I convert a {a} to a {b} in Python?",
        "Python: turn a {a} into a {b}?",
        "What's the idiomatic {a} -> {b} conversion in Python?",
    ),
    F(
        "dir.send_money",
        COUNTRIES,
        "What's the cheapest way to send money from {a} to {b}?",
        "Cheapest way to transfer money to {b} from {a}?",
        "Sending money {a} to {b}: which service has the lowest fees?",
    ),
    F(
        "dir.redirect",
        SCHEMES,
        "How do I redirect {a} to {b} in nginx?",
        "nginx: redirect all {a} traffic to {b}?",
        "What nginx config sends {a} requests to {b}?",
    ),
    F(
        "dir.git_merge",
        BRANCHES,
        "How do I merge {a} into {b}?",
        "Git: merge the {a} branch into {b}?",
        "What's the command to merge {a} into {b}?",
    ),
    F(
        "dir.switch_platform",
        PLATFORMS,
        "Should I switch from {a} to {b}?",
        "Is it worth moving to {b} from {a}?",
        "Switching from {a} to {b}: is it worth it?",
    ),
    F(
        "dir.transfer_photos",
        PLATFORMS,
        "How do I transfer photos from {a} to {b}?",
        "Moving my photos to {b} from {a}: how?",
        "Best way to copy pictures from {a} to {b}?",
    ),
    F(
        "dir.party_letter",
        PARTIES,
        "Write a letter from a {a} to a {b} about late repairs.",
        "Draft a letter to a {b} from a {a} about late repairs.",
        "I need a letter sent by a {a} to a {b} about late repairs.",
    ),
    # ------------------------------------------------------------------ comparison, preference
    F(
        "cmp.area",
        COUNTRIES,
        "Is {a} bigger than {b}?",
        "Is {a} larger in area than {b}?",
        "Does {a} cover more land than {b}?",
    ),
    F(
        "cmp.population",
        CITIES,
        "Does {a} have more people than {b}?",
        "Is {a} more populous than {b}?",
        "Is the population of {a} larger than that of {b}?",
    ),
    F(
        "cmp.numbers",
        NUMBERS,
        "Is {a} greater than {b}?",
        "Is {a} larger than {b}?",
        "Is {a} more than {b}?",
    ),
    F(
        "cmp.better",
        COMPANIES,
        "Why is {a} better than {b}?",
        "What makes {a} better than {b}?",
        "In what ways is {a} superior to {b}?",
    ),
    F(
        "cmp.prefer",
        TECHS,
        "Why would I choose {a} over {b}?",
        "Reasons to pick {a} rather than {b}?",
        "Why go with {a} instead of {b}?",
    ),
    # ------------------------------------------------------------------ doer and done-to
    F(
        "act.final",
        COUNTRIES,
        "Did {a} beat {b} in the final?",
        "Was {b} beaten by {a} in the final?",
        "Did {a} defeat {b} in the final?",
    ),
    F(
        "act.clubs",
        CLUBS,
        "Has {a} ever won against {b} away?",
        "Did {b} ever lose to {a} away?",
        "Has {a} ever defeated {b} away?",
    ),
    F(
        "act.sue",
        PARTIES,
        "Can a {a} sue a {b}?",
        "Is it possible for a {b} to be sued by a {a}?",
        "Can a {a} take a {b} to court?",
    ),
    F(
        "act.evict",
        PARTIES,
        "What notice must a {a} give a {b} before ending the contract?",
        "How much notice does a {a} owe a {b} before ending the contract?",
        "Before ending the contract, what notice must a {a} give a {b}?",
    ),
    # ------------------------------------------------------------------ order does not matter
    F(
        "sym.distance",
        CITIES,
        "What is the distance between {a} and {b}?",
        "How far is {a} from {b}?",
        "{a} and {b}: how far apart are they?",
        symmetric=True,
    ),
    F(
        "sym.compare",
        TECHS,
        "Compare {a} with {b}.",
        "How does {a} compare to {b}?",
        "{a} vs {b}: how do they compare?",
        symmetric=True,
    ),
    F(
        "sym.difference",
        LANGUAGES,
        "What are the main differences between {a} and {b}?",
        "How is {a} different from {b}?",
        "{a} or {b}: what's the difference?",
        symmetric=True,
    ),
    F(
        "sym.fixture",
        CLUBS,
        "Who won the {a} vs {b} match?",
        "What was the score of {a} versus {b}?",
        "Result of {a} against {b}?",
        symmetric=True,
    ),
    F(
        "sym.choice",
        PROG,
        "Should I learn {a} or {b} first?",
        "Which should I learn first, {a} or {b}?",
        "{a} or {b}: which to learn first?",
        symmetric=True,
    ),
    F(
        "sym.time_difference",
        CITIES,
        "What is the time difference between {a} and {b}?",
        "How many hours apart are {a} and {b}?",
        "Time difference {a} / {b}?",
        symmetric=True,
    ),
    F(
        "sym.allies",
        COUNTRIES,
        "Are {a} and {b} allies?",
        "Is {a} allied with {b}?",
        "Do {a} and {b} have an alliance?",
        symmetric=True,
    ),
    F(
        "sym.direct_flight",
        CITIES,
        "Is there a direct flight between {a} and {b}?",
        "Do any airlines fly nonstop between {a} and {b}?",
        "{a} and {b}: any direct flights?",
        symmetric=True,
    ),
    # ------------------------------------------------------------------ roles without a frame
    F(
        "unframed.learn",
        LANGUAGES,
        "Is it hard for {a} speakers to learn {b}?",
        "How difficult is {b} for native {a} speakers?",
        unframed=True,
    ),
    F(
        "unframed.time",
        CITIES,
        "What time is it in {b} when it is noon in {a}?",
        "When it's noon in {a}, what time is it in {b}?",
        unframed=True,
    ),
    F(
        "unframed.visa",
        COUNTRIES,
        "Do citizens of {a} need a visa for {b}?",
        "Is a visa required for {a} citizens visiting {b}?",
        unframed=True,
    ),
]


def C(id: str, forms: Sequence[str], bare: str, *snippets: tuple[str, str]) -> CodeSet:
    return CodeSet(id, tuple(forms), bare, snippets)


CODE_SETS = [
    C(
        "code.regex",
        (
            "Explain the regex ```{code}```",
            "What does the regular expression `{code}` match?",
            "Can you break down this pattern:\n```\n{code}\n```",
        ),
        "Explain this regular expression.",
        ("^[a-z]+$", "^[A-Z]+$"),
        (r"\d{3}-\d{4}", r"\D{3}-\D{4}"),
        (r"\s+", r"\S+"),
        (r"\bcat\b", r"\Bcat\B"),
        ("a.*?b", "a.*b"),
        ("[^0-9]+", "[0-9]+"),
        (r"\w+@\w+\.com", r"\W+@\W+\.com"),
    ),
    C(
        "code.shell",
        (
            "What does `{code}` do?",
            "Explain this command:\n```\n{code}\n```",
            "I ran `{code}`; what exactly happened?",
        ),
        "What does this command do?",
        ("ls -l", "ls -L"),
        ("grep -i error log.txt", "grep -I error log.txt"),
        ("tar -xzf a.tar.gz", "tar -czf a.tar.gz"),
        ("cp -r src dst", "cp -R src dst"),
        ("sort -n data", "sort -N data"),
        ("echo $HOME", "echo HOME"),
    ),
    C(
        "code.python",
        (
            "Why does ```{code}``` fail?",
            "What is wrong with this line:\n```python\n{code}\n```",
            "My code `{code}` raises an error, why?",
        ),
        "Why does this line fail?",
        ("x = y", "x == y"),
        ("s[1:]", "s[:1]"),
        ('d.Get("k")', 'd.get("k")'),
        ("print(Name)", "print(name)"),
        ("from Foo import Bar", "from foo import bar"),
        ("x += 1", "x =+ 1"),
    ),
    C(
        "code.sql",
        (
            "Is this query right? ```{code}```",
            "Check my SQL:\n```sql\n{code}\n```",
            "Does `{code}` do what I think?",
        ),
        "Is this query right?",
        ("SELECT * FROM Users", "SELECT * FROM users"),
        ("WHERE name = 'Bob'", "WHERE name = 'bob'"),
        ("SELECT COUNT(*) FROM t", "SELECT COUNT(id) FROM t"),
        ("a LIKE 'x%'", "a LIKE '%x'"),
        ('SELECT "Col" FROM t', "SELECT col FROM t"),
    ),
    C(
        "code.js",
        (
            "What does ```{code}``` evaluate to?",
            "In JavaScript, what is the result of `{code}`?",
            "Evaluate this:\n```js\n{code}\n```",
        ),
        "What does this evaluate to?",
        ("a === b", "a == b"),
        ("obj?.key", "obj.key"),
        ("[1,2].map(f)", "[1,2].forEach(f)"),
        ("x ?? y", "x || y"),
        ("typeof NaN", "typeof nan"),
    ),
    C(
        "code.css",
        (
            "Why doesn't the selector `{code}` match anything?",
            "This selector doesn't match anything: ```{code}```, why?",
            "Debug this selector, it doesn't match anything:\n```css\n{code}\n```",
        ),
        "Why doesn't this selector match anything?",
        (".Header", ".header"),
        ("#main > p", "#main p"),
        ("a:hover", "a:focus"),
        ("ul li:first-child", "ul li:First-child"),
    ),
]


# ---------------------------------------------------------------------------------- split


def id_hash(template_id: str) -> int:
    return int.from_bytes(hashlib.sha256(template_id.encode()).digest()[:8], "big")


def split() -> dict[str, str]:
    """Template id -> ``tune`` or ``test``: within each group (frames by the prefix of their id,
    code sets), the half with the lower hash of their id is ``tune``."""
    groups: dict[str, list[str]] = {}
    templates: list[Frame | CodeSet] = [*FRAMES, *CODE_SETS]
    for t in templates:
        groups.setdefault(t.id.split(".")[0], []).append(t.id)
    out = {}
    for ids in groups.values():
        ids.sort(key=id_hash)
        half = (len(ids) + 1) // 2
        out.update({tid: PARTS[0] if i < half else PARTS[1] for i, tid in enumerate(ids)})
    return out


SPLIT = split()


def pairs(part: str, seed: int = 0) -> list[Pair]:
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    out: list[Pair] = []
    templates: list[Frame | CodeSet] = [*FRAMES, *CODE_SETS]
    for t in templates:
        if SPLIT[t.id] == part:
            out.extend(t.pairs(seed))
    return out


if __name__ == "__main__":
    for part in PARTS:
        found = pairs(part)
        counts = {k: sum(p.kind == k for p in found) for k in KINDS}
        ids = sorted(tid for tid, p in SPLIT.items() if p == part)
        print(part, len(found), "pairs", counts)
        print("   ", " ".join(ids))
