"""Prompt families for bench/slot_guard.py: requests that differ only in a slot, generated here.

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
digits. Everything is seeded: :func:`streams` gives the same stream for the same arguments.
Templates are split into ``tune`` and ``test`` by a hash of their id (:func:`part_of`).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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

COUNTRIES = (
    "France Germany Japan Brazil Canada Kenya Norway Vietnam Argentina Egypt Poland Chile "
    "Portugal Thailand Morocco Peru Finland Indonesia Ireland Mexico Sweden Turkey Ghana Greece "
    "Colombia Austria Malaysia Denmark Nigeria Hungary Iceland Uruguay"
).split()
NATIONALITIES = "US British Indian German Brazilian Australian Canadian Nigerian Japanese".split()
CITIES = (
    "Paris",
    "Berlin",
    "Tokyo",
    "Toronto",
    "Nairobi",
    "Oslo",
    "Hanoi",
    "Lisbon",
    "Bangkok",
    "Lima",
    "Dublin",
    "Madrid",
    "Seoul",
    "Chicago",
    "Denver",
    "Sydney",
    "Cairo",
    "Vienna",
    "Prague",
    "Mumbai",
    "Boston",
    "Austin",
    "Munich",
    "Osaka",
    "Rome",
    "Milan",
    "Zurich",
    "Helsinki",
    "Seattle",
    "Atlanta",
    "Warsaw",
    "Athens",
)
PEOPLE = (
    "Ada Lovelace",
    "Nikola Tesla",
    "Marie Curie",
    "Alan Turing",
    "Frida Kahlo",
    "Nelson Mandela",
    "Rosalind Franklin",
    "Leonardo da Vinci",
    "Wangari Maathai",
    "Grace Hopper",
    "Simón Bolívar",
    "Florence Nightingale",
    "Mahatma Gandhi",
    "Katherine Johnson",
    "Johannes Gutenberg",
    "Hedy Lamarr",
    "Srinivasa Ramanujan",
    "Amelia Earhart",
    "Charles Darwin",
    "Toni Morrison",
)
COMPANIES = (
    "Apple",
    "Microsoft",
    "Netflix",
    "Spotify",
    "Airbnb",
    "Stripe",
    "Shopify",
    "Siemens",
    "Nestlé",
    "Toyota",
    "Samsung",
    "Nvidia",
    "Adobe",
    "Salesforce",
    "IKEA",
    "Unilever",
    "Zoom",
    "Atlassian",
    "Uber",
    "Pfizer",
)
PRODUCTS = (
    "Kindle Paperwhite",
    "AirPods Pro",
    "PlayStation 5",
    "Nintendo Switch",
    "Roomba",
    "Fitbit Charge",
    "GoPro Hero",
    "Apple Watch",
    "Sonos One",
    "Nest thermostat",
    "Ring doorbell",
    "Surface Pro",
    "Galaxy Buds",
    "Echo Dot",
    "Steam Deck",
    "Chromecast",
)
PY_PACKAGES = (
    "numpy pandas scipy requests httpx flask django fastapi torch matplotlib seaborn pytest "
    "black ruff sqlalchemy pydantic polars rich click boto3"
).split()
JS_FRAMEWORKS = "react vue svelte angular next.js nuxt astro solid remix ember".split()
LANGUAGES = (
    "French Spanish German Italian Japanese Korean Portuguese Dutch Swedish Turkish Polish "
    "Greek Hindi Swahili Vietnamese Arabic"
).split()
TOPICS = (
    "remote work",
    "intermittent fasting",
    "electric cars",
    "nuclear power",
    "homeschooling",
    "solar panels",
    "a four-day work week",
    "renting instead of buying a home",
    "open-plan offices",
    "standing desks",
    "learning two languages at once",
    "index fund investing",
)
TECHS = (
    "TypeScript",
    "Kubernetes",
    "GraphQL",
    "NoSQL databases",
    "serverless functions",
    "Rust",
    "monorepos",
    "Tailwind CSS",
    "microservices",
    "server-side rendering",
    "event sourcing",
    "WebAssembly",
)


# ---------------------------------------------------------------------------- numbers

NUMBER_TEMPLATES = [
    T(
        "num.km_to_miles",
        NUMBERS,
        ints("n", 2, 99),
        "Convert {n} kilometers to miles.",
        "How many miles is {n} km?",
        "What is {n_w} kilometers in miles?",
    ),
    T(
        "num.kg_to_lb",
        NUMBERS,
        ints("n", 2, 150),
        "How many pounds is {n} kg?",
        "Convert {n} kilograms to pounds.",
        "What's {n_w} kilograms in lbs?",
    ),
    T(
        "num.add",
        NUMBERS,
        cross(ints("a", 2, 60, k=6), ints("b", 2, 60, k=6)),
        "What is {a} plus {b}?",
        "Could you tell me what {a} plus {b} is?",
        "Add {a_w} and {b_w} for me.",
    ),
    T(
        "num.multiply",
        NUMBERS,
        cross(ints("a", 3, 40, k=6), ints("b", 3, 40, k=6)),
        "What's {a} times {b}?",
        "Multiply {a} by {b}.",
        "Compute the product of {a} and {b}.",
    ),
    T(
        "num.celsius",
        NUMBERS,
        ints("n", -20, 45),
        "Convert {n}°C to Fahrenheit.",
        "What is {n} degrees Celsius in Fahrenheit?",
        "How much is {n} °C when expressed in °F?",
    ),
    T(
        "num.oven",
        NUMBERS,
        ints("n", 300, 480, step=5),
        "My recipe says to bake at {n}°F. What is that in Celsius?",
        "What's {n} degrees Fahrenheit in Celsius? It's the oven temperature in a recipe.",
        "Convert an oven setting of {n} °F to °C.",
    ),
    T(
        "num.percent_of",
        NUMBERS,
        cross(ints("p", 5, 95, step=5, k=5), ints("n", 40, 900, step=10, k=6)),
        "What is {p}% of {n}?",
        "Calculate {p} percent of {n}.",
        "How much is {p}% of {n_w}?",
    ),
    T(
        "num.tip",
        NUMBERS,
        cross(ints("n", 20, 240, k=8), ints("p", 10, 25, step=5, k=4)),
        "How much should I tip on a ${n} bill at {p}%?",
        "Calculate a {p}% tip for a bill of ${n}.",
        "My restaurant bill is ${n}; what is a {p} percent tip?",
    ),
    T(
        "num.discount",
        NUMBERS,
        cross(ints("n", 15, 400, k=8), ints("p", 10, 70, step=5, k=4)),
        "What does a ${n} item cost after a {p}% discount?",
        "If an item is ${n} and it's {p} percent off, what's the sale price?",
        "Calculate the price of a ${n} product with {p}% off.",
    ),
    T(
        "num.usd_to_eur",
        NUMBERS,
        ints("n", 5, 5000, step=5),
        "Convert ${n} to euros.",
        "How many euros is {n} US dollars?",
        "What's ${n_c} in EUR?",
    ),
    T(
        "num.price_drop",
        NUMBERS,
        cross(ints("a", 80, 200, step=5, k=5), ints("b", 20, 75, step=5, k=5)),
        "The price dropped from ${a} to ${b}. What percentage decrease is that?",
        "By what percent did the price fall if it went from ${a} to ${b}?",
        "Compute the percentage decrease from ${a} to ${b}.",
    ),
    T(
        "num.loan",
        NUMBERS,
        cross(ints("n", 5, 60, step=5, k=4), ints("r", 3, 12, k=3), ints("y", 2, 10, k=3)),
        "What is the monthly payment on a ${n},000 loan at {r}% interest over {y} years?",
        "Calculate the monthly repayment for borrowing ${n},000 over {y} years at {r}% interest.",
        "If I borrow ${n},000 for {y_w} years at {r}% APR, what will I pay each month?",
    ),
    T(
        "num.compound",
        NUMBERS,
        cross(ints("n", 1, 50, k=4), ints("r", 2, 9, k=3), ints("y", 5, 30, step=5, k=3)),
        "If I invest ${n},000 at {r}% a year, how much will I have after {y} years?",
        "How much does ${n},000 grow to in {y} years at {r}% annual interest?",
        "Calculate the value of a ${n},000 investment after {y_w} years with a {r}% yearly return.",
    ),
    T(
        "num.weekday",
        NUMBERS,
        dates("d"),
        "What day of the week was {d}?",
        "Which weekday did {d_iso} fall on?",
        "Tell me the day of the week for {d_dm}.",
    ),
    T(
        "num.date_add",
        NUMBERS,
        cross(dates("d", 2015, 2026, k=4), ints("n", 3, 120, k=4)),
        "What date is {n} days after {d}?",
        "If I start on {d_iso}, what is the date {n} days later?",
        "Add {n_w} days to {d_dm}. Which date do I get?",
    ),
    T(
        "num.days_between",
        NUMBERS,
        cross(dates("d", 2023, 2024, k=4), dates("e", 2025, 2026, k=4)),
        "How many days are there between {d} and {e}?",
        "Count the days from {d_iso} to {e_iso}.",
        "What's the number of days between {d_dm} and {e_dm}?",
    ),
    T(
        "num.year_events",
        NUMBERS,
        ints("y", 1950, 2020),
        "Summarize the major world events of {y}.",
        "What were the most important things that happened in the world in {y}?",
        "Give me an overview of the key global events of the year {y}.",
    ),
    T(
        "num.leap_year",
        NUMBERS,
        ints("y", 1880, 2100),
        "Is {y} a leap year?",
        "Tell me whether the year {y} is a leap year.",
        "Does {y} have a February 29th?",
    ),
    T(
        "num.python_version",
        NUMBERS,
        pick("v", ("2.7 3.5 3.6 3.7 3.8 3.9 3.10 3.11 3.12 3.13 3.14").split()),
        "What's new in Python {v}?",
        "List the main new features introduced in Python {v}.",
        "Which features were added in the Python {v} release?",
    ),
    T(
        "num.node_version",
        NUMBERS,
        ints("v", 10, 24),
        "Is Node.js {v} still supported?",
        "Does Node {v} still receive security updates?",
        "Tell me whether Node.js version {v} is still maintained.",
    ),
    T(
        "num.django_upgrade",
        NUMBERS,
        pick("v", ("2.2 3.0 3.1 3.2 4.0 4.1 4.2 5.0 5.1 5.2").split()),
        "What breaking changes should I expect when upgrading to Django {v}?",
        "Which backwards-incompatible changes does Django {v} introduce?",
        "List the breaking changes of the Django {v} release that affect an upgrade.",
    ),
    T(
        "num.chapter_pride",
        NUMBERS,
        ints("n", 1, 61),
        "Summarize chapter {n} of Pride and Prejudice.",
        "Give me a summary of the {n_o} chapter of Pride and Prejudice.",
        "What happens in chapter {n_w} of Pride and Prejudice?",
    ),
    T(
        "num.chapter_textbook",
        NUMBERS,
        ints("n", 1, 24),
        "Make me a study guide for chapter {n} of my organic chemistry textbook.",
        "Create study notes for chapter {n_w} of the organic chemistry textbook.",
        "I need a study guide covering the {n_o} chapter of my organic chemistry book.",
    ),
    T(
        "num.handbook_page",
        NUMBERS,
        ints("n", 2, 180),
        "What does page {n} of the employee handbook say about overtime?",
        "On page {n} of the employee handbook, what is said about overtime?",
        "Tell me what the employee handbook's page {n} states regarding overtime.",
    ),
    T(
        "num.altitude_hike",
        NUMBERS,
        ints("n", 2000, 6000, step=250),
        "Is it safe to hike at {n} meters above sea level without acclimatizing?",
        "Can I hike at an altitude of {n} m without acclimatization first?",
        "Do I need to acclimatize before hiking at {n_c} meters of altitude?",
    ),
    T(
        "num.boiling_altitude",
        NUMBERS,
        ints("n", 1000, 15000, step=500),
        "At what temperature does water boil at an altitude of {n} feet?",
        "What is the boiling point of water at {n_c} ft elevation?",
        "Water boils at what temperature when you're {n} feet above sea level?",
    ),
    T(
        "num.timer",
        NUMBERS,
        ints("n", 1, 90),
        "Set a timer for {n} minutes.",
        "Start a {n}-minute timer.",
        "Please set a countdown of {n_w} minutes.",
    ),
    T(
        "num.alarm",
        NUMBERS,
        cross(ints("h", 4, 11, k=8), pick("mm", ("00", "15", "30", "45"), k=4), k=K),
        "Set an alarm for {h}:{mm} am.",
        "Wake me up at {h}:{mm} in the morning.",
        "Please create an alarm at {h}:{mm} AM.",
    ),
    T(
        "num.ram",
        NUMBERS,
        pick("n", ("2 4 6 8 12 16 24 32 48 64 96 128").split()),
        "Is {n} GB of RAM enough for running Docker and VS Code?",
        "Can I comfortably run Docker and VS Code with {n} GB of RAM?",
        "Will {n} gigabytes of memory be enough to use Docker alongside VS Code?",
    ),
    T(
        "num.download_time",
        NUMBERS,
        cross(ints("n", 1, 100, k=6), pick("m", ("10 25 50 100 200 500 1000").split(), k=4)),
        "How long does it take to download a {n} GB file on a {m} Mbps connection?",
        "If my internet speed is {m} Mbps, how long will a {n} GB download take?",
        "Estimate the download time for {n} GB at {m} megabits per second.",
    ),
    T(
        "num.ordinal_prime",
        NUMBERS,
        ints("n", 2, 60),
        "What is the {n_o} prime number?",
        "Tell me the {n_th} prime.",
        "Which number is the {n_th} prime in the sequence of primes?",
    ),
    T(
        "num.president",
        NUMBERS,
        ints("n", 1, 46),
        "Who was the {n_th} president of the United States?",
        "Name the {n_o} US president.",
        "Which person served as the {n_th} President of the USA?",
    ),
    T(
        "num.pace",
        NUMBERS,
        cross(ints("n", 3, 21, k=5), ints("m", 15, 120, step=5, k=5)),
        "If I run {n} km in {m} minutes, what's my pace per kilometer?",
        "What is my per-km pace for running {n} kilometers in {m} minutes?",
        "Calculate my average pace: {n} km in {m} min.",
    ),
    T(
        "num.recipe_scale",
        NUMBERS,
        cross(ints("a", 2, 8, k=4), ints("b", 3, 20, k=5)),
        "Scale this recipe from {a} servings to {b} servings: 2 cups flour, 1 cup sugar, 3 eggs.",
        "I need to turn a recipe for {a} people into one for {b} people. "
        "Ingredients: 2 cups flour, 1 cup sugar, 3 eggs.",
        "Adjust the quantities (2 cups flour, 1 cup sugar, 3 eggs) from {a_w} servings "
        "to {b_w} servings.",
    ),
    T(
        "num.round",
        NUMBERS,
        decimals("x", 0.5, 99.5, places=2),
        "Round {x} to the nearest whole number.",
        "What is {x} rounded to the nearest integer?",
        "Give me {x} rounded to a whole number.",
    ),
    T(
        "num.sqrt",
        NUMBERS,
        ints("n", 2, 500),
        "What is the square root of {n}?",
        "Calculate the square root of {n}.",
        "Find the square root of {n_w}.",
    ),
    T(
        "num.binary",
        NUMBERS,
        ints("n", 3, 1000),
        "Convert {n} to binary.",
        "What is the binary representation of {n}?",
        "Write the decimal number {n} in base 2.",
    ),
    T(
        "num.http_status",
        NUMBERS,
        pick(
            "n",
            ("200 201 204 301 302 304 400 401 403 404 405 409 410 418 422 429 500 502 503 504"),
        ),
        "What does HTTP status code {n} mean?",
        "Explain the HTTP {n} response code.",
        "When does a server return an HTTP {n} status, and what does it signify?",
    ),
    T(
        "num.port",
        NUMBERS,
        pick("n", ("21 22 23 25 53 80 110 143 443 465 587 993 3306 5432 6379 8080 9200 27017")),
        "Which service usually runs on port {n}?",
        "What is TCP port {n} commonly used for?",
        "Tell me what typically listens on port {n}.",
    ),
    T(
        "num.return_days",
        NUMBERS,
        ints("n", 3, 120),
        "I bought a jacket {n} days ago. Can I still return it?",
        "Is it too late to return a jacket I purchased {n} days ago?",
        "Can I return a jacket {n_w} days after buying it?",
    ),
    T(
        "num.birthday",
        NUMBERS,
        ints("n", 30, 95),
        "Write a short birthday message for my dad's {n_th} birthday.",
        "Draft a birthday card message for my father, who is turning {n}.",
        "Help me write a short note for my dad's {n_o} birthday.",
    ),
    T(
        "num.tv_distance",
        NUMBERS,
        pick("n", "24 32 40 43 50 55 58 60 65 70 75 77 85 98"),
        "What's the ideal viewing distance for a {n}-inch TV?",
        "How far should I sit from a {n} inch television?",
        "Recommend a viewing distance for a TV with a {n}-inch screen.",
    ),
    T(
        "num.sleep",
        NUMBERS,
        decimals("n", 4, 11, places=1),
        "Is {n} hours of sleep enough for a teenager?",
        "Does a teenager get enough rest with {n} hours of sleep a night?",
        "Can a teen function well on {n} hours of sleep per night?",
    ),
    T(
        "num.apple_quarter",
        NUMBERS,
        cross(
            rows("q q_o", (("1", "first"), ("2", "second"), ("3", "third"), ("4", "fourth"))),
            ints("y", 2012, 2024, k=5),
        ),
        "What were Apple's revenue figures in Q{q} {y}?",
        "How much revenue did Apple report for the {q_o} quarter of {y}?",
        "Give me Apple's Q{q} {y} revenue.",
    ),
    T(
        "num.dose_weight",
        NUMBERS,
        ints("n", 4, 40),
        "What is the right paracetamol dose for a child weighing {n} kg?",
        "How much paracetamol can I give my {n} kg child?",
        "My child weighs {n_w} kilograms. What paracetamol dose is appropriate?",
    ),
    T(
        "num.storage_photos",
        NUMBERS,
        pick("n", "16 32 64 128 256 512"),
        "How many photos can I store on a {n} GB phone?",
        "Roughly how many pictures fit on a phone with {n} GB of storage?",
        "With {n} GB of phone storage, how many photos can I keep?",
    ),
]


# ---------------------------------------------------------------------------- negation

NEGATION_TEMPLATES = [
    T(
        "neg.gluten",
        NEGATION,
        cross(
            pick(
                "c",
                ("breakfast cereals|beers|pastas|snacks|flours|sauces|breads|desserts"),
                k=8,
            ),
            flip(neg=("", "not "), are=("are", "aren't")),
        ),
        "Which {c} are {neg}gluten-free?",
        "List the {c} that are {neg}gluten-free.",
        "Can you name {c} that {are} gluten-free?",
    ),
    T(
        "neg.dogs",
        NEGATION,
        cross(
            pick(
                "c",
                ("fruits|vegetables|nuts|human snacks|herbs|berries|dairy products|cooked meats"),
                k=8,
            ),
            flip(neg=("", "not "), are=("are", "aren't"), can=("can", "can't")),
        ),
        "Which {c} are {neg}safe for dogs to eat?",
        "List {c} that {are} safe to give a dog.",
        "Name {c} a dog {can} eat safely.",
    ),
    T(
        "neg.vegan",
        NEGATION,
        cross(
            pick(
                "c",
                ("wines|candies|breads|protein bars|beers|cereals|chocolates|pasta sauces"),
                k=8,
            ),
            flip(neg=("", "not "), are=("are", "aren't")),
        ),
        "Which {c} are {neg}vegan?",
        "Name {c} that {are} vegan.",
        "Can you list {c} that are {neg}suitable for vegans?",
    ),
    T(
        "neg.carry_on",
        NEGATION,
        cross(
            pick(
                "w",
                (
                    "on US domestic flights",
                    "on flights within the EU",
                    "on Ryanair",
                    "on international flights",
                    "on flights to Japan",
                    "on Emirates",
                    "when flying with a baby",
                    "on flights from London",
                ),
                k=8,
            ),
            flip(neg=("", "not "), can=("can", "can't"), isnt=("is", "isn't")),
        ),
        "Which items am I {neg}allowed to bring in my carry-on {w}?",
        "What {can} I pack in my hand luggage {w}?",
        "List what {isnt} permitted in carry-on bags {w}.",
    ),
    T(
        "neg.eggless",
        NEGATION,
        cross(
            pick(
                "d",
                (
                    "pancakes|brownies|banana bread|meatballs|carbonara|"
                    "chocolate chip cookies|waffles|a sponge cake"
                ),
                k=8,
            ),
            flip(wo=("", " without eggs")),
        ),
        "How do I make {d}{wo}?",
        "What's a good recipe for {d}{wo}?",
        "Give me step-by-step instructions for making {d}{wo}.",
    ),
    T(
        "neg.sugar_free",
        NEGATION,
        cross(
            pick(
                "d",
                ("lemonade|granola|ketchup|iced tea|apple pie|barbecue sauce|muffins|ice cream"),
                k=8,
            ),
            flip(wo=("", " without sugar")),
        ),
        "Give me a recipe for homemade {d}{wo}.",
        "How can I make {d}{wo} at home?",
        "I want to make {d}{wo} myself. What's the recipe?",
    ),
    T(
        "neg.always_never",
        NEGATION,
        cross(
            pick(
                "x",
                (
                    "a job interview|a first date|a performance review|"
                    "a salary negotiation|a wedding toast|a eulogy|a sales call|"
                    "a team retrospective"
                ),
                k=8,
            ),
            flip(a=("always", "never")),
        ),
        "What should I {a} say in {x}?",
        "List things you should {a} say during {x}.",
        "In {x}, what are the things to {a} say?",
    ),
    T(
        "neg.customers_ordered",
        NEGATION,
        cross(
            pick(
                "when",
                (
                    "in the last 30 days|this year|since January|in the last week|"
                    "during the holiday sale|in their first month|"
                    "after their trial ended|in 2023"
                ),
                k=8,
            ),
            flip(have=("have", "haven't")),
        ),
        "Write a SQL query that returns customers who {have} placed an order {when}.",
        "SQL for: customers who {have} ordered anything {when}.",
        "Give me a query listing the customers that {have} made a purchase {when}.",
    ),
    T(
        "neg.browser_support",
        NEGATION,
        cross(
            pick(
                "f",
                (
                    "WebGPU|AVIF images|the :has() selector|WebTransport|Web Bluetooth|"
                    "service workers|container queries|the View Transitions API"
                ),
                k=8,
            ),
            flip(sup=("support", "don't support"), sup2=("have support for", "lack support for")),
        ),
        "Which browsers {sup} {f}?",
        "List the browsers that {sup2} {f}.",
        "What browsers {sup} {f} today?",
    ),
    T(
        "neg.freeze",
        NEGATION,
        cross(
            pick(
                "c",
                (
                    "vegetables|cheeses|sauces|baked goods|fruits|soups|dairy products|"
                    "cooked rice dishes"
                ),
                k=8,
            ),
            flip(can=("can", "cannot"), cant=("can", "can't")),
        ),
        "Which {c} {can} be frozen?",
        "List {c} that you {cant} freeze.",
        "Name some {c} that {can} go in the freezer.",
    ),
    T(
        "neg.deductible",
        NEGATION,
        cross(
            pick(
                "who",
                (
                    "freelancers|small businesses|remote employees|landlords|students|"
                    "retirees|Uber drivers|teachers"
                ),
                k=8,
            ),
            flip(neg=("", "not "), can=("can", "can't")),
        ),
        "Which expenses are {neg}tax-deductible for {who}?",
        "What expenses {can} {who} deduct on their taxes?",
        "List the costs that are {neg}deductible for {who}.",
    ),
    T(
        "neg.warranty",
        NEGATION,
        cross(
            pick(
                "p",
                ("laptop|phone|washing machine|e-bike|headphones|TV|coffee machine|smartwatch"),
                k=8,
            ),
            flip(isnt=("is", "is not"), covers=("covers", "doesn't cover"), are=("are", "are not")),
        ),
        "What {isnt} covered by the warranty on my {p}?",
        "Tell me what the warranty for my {p} {covers}.",
        "Which repairs {are} covered under my {p} warranty?",
    ),
    T(
        "neg.deadline",
        NEGATION,
        cross(
            rows(
                "act act_ing",
                (
                    ("verify my email address", "verifying my email address"),
                    ("renew my domain", "renewing my domain"),
                    ("pay the invoice", "paying the invoice"),
                    ("update my billing details", "updating my billing details"),
                    ("confirm my phone number", "confirming my phone number"),
                    ("accept the new terms", "accepting the new terms"),
                    ("submit my timesheet", "submitting my timesheet"),
                    ("renew my SSL certificate", "renewing my SSL certificate"),
                ),
                k=8,
            ),
            flip(dont=("", "don't "), notx=("", "not ")),
        ),
        "What happens if I {dont}{act} before the deadline?",
        "If I {dont}{act} before the deadline, what will happen?",
        "What are the consequences of {notx}{act_ing} before the deadline?",
    ),
    T(
        "neg.receipt",
        NEGATION,
        cross(
            pick(
                "item",
                (
                    "shoes|a laptop|opened cosmetics|a mattress|a gift card|"
                    "sale clothing|a phone case|kitchen knives"
                ),
                k=8,
            ),
            flip(w=("with", "without")),
        ),
        "Can I return {item} {w} a receipt?",
        "Is it possible to return {item} {w} a receipt?",
        "Do you accept returns of {item} {w} a receipt?",
    ),
    T(
        "neg.never_won",
        NEGATION,
        cross(
            pick(
                "c",
                (
                    "FIFA World Cup|Eurovision Song Contest|Rugby World Cup|"
                    "Copa América|Cricket World Cup|Africa Cup of Nations|Davis Cup|"
                    "Ryder Cup"
                ),
                k=8,
            ),
            flip(ever=("", "never "), have=("have", "have never")),
        ),
        "Which countries have {ever}won the {c}?",
        "List the countries that {have} won the {c}.",
        "Name the nations that have {ever}won the {c}.",
    ),
    T(
        "neg.stretch",
        NEGATION,
        cross(
            pick(
                "act",
                (
                    "running|lifting weights|yoga|swimming|cycling|a football match|"
                    "climbing|a long flight"
                ),
                k=8,
            ),
            flip(ba=("before", "after")),
        ),
        "Should I stretch {ba} {act}?",
        "Is it a good idea to stretch {ba} {act}?",
        "Do you recommend stretching {ba} {act}?",
    ),
    T(
        "neg.eat_workout",
        NEGATION,
        cross(
            pick(
                "w",
                (
                    "a morning run|a HIIT session|weightlifting|a swim|a long hike|"
                    "a spin class|a yoga class|a football game"
                ),
                k=8,
            ),
            flip(ba=("before", "after")),
        ),
        "What should I eat {ba} {w}?",
        "Suggest foods to eat {ba} {w}.",
        "What's a good meal to have {ba} {w}?",
    ),
    T(
        "opp.two_factor",
        NEGATION,
        cross(
            pick("s", "Google|GitHub|Microsoft|Dropbox|Slack|Amazon|Instagram|PayPal", k=8),
            flip(
                v=("enable", "disable"), ving=("enabling", "disabling"), on=("turn on", "turn off")
            ),
        ),
        "How do I {v} two-factor authentication on my {s} account?",
        "Walk me through {ving} 2FA for {s}.",
        "I want to {on} two-factor auth on {s}. How do I do it?",
    ),
    T(
        "opp.linux_group",
        NEGATION,
        cross(
            pick("g", "sudo docker wheel www-data audio adm video plugdev", k=8),
            flip(v=("add", "remove"), to=("to", "from")),
        ),
        "How do I {v} a user {to} the {g} group on Linux?",
        "What's the command to {v} a user {to} the {g} group?",
        "Show me how to {v} someone {to} the {g} group on a Linux machine.",
    ),
    T(
        "opp.font_size",
        NEGATION,
        cross(
            pick(
                "app",
                (
                    "VS Code|Chrome|Microsoft Word|the macOS Terminal|Outlook|Slack|"
                    "the Kindle app|Excel"
                ),
                k=8,
            ),
            flip(v=("increase", "decrease"), big=("bigger", "smaller")),
        ),
        "How do I {v} the font size in {app}?",
        "How can I make the text {big} in {app}?",
        "Steps to {v} font size in {app}, please.",
    ),
    T(
        "opp.upload_download",
        NEGATION,
        cross(
            pick(
                "svc",
                (
                    "Google Drive|Dropbox|an S3 bucket|OneDrive|an FTP server|"
                    "a remote server over SSH|Azure Blob Storage|Backblaze B2"
                ),
                k=8,
            ),
            flip(v=("upload", "download"), to=("to", "from"), vs=("uploads", "downloads")),
        ),
        "How do I {v} a file {to} {svc} from the terminal?",
        "What command {vs} files {to} {svc}?",
        "Show me how to {v} files {to} {svc} using the command line.",
    ),
    T(
        "opp.import_export",
        NEGATION,
        cross(
            pick(
                "app",
                "Outlook Gmail iCloud HubSpot Salesforce Thunderbird Mailchimp Zoho",
                k=8,
            ),
            flip(v=("import", "export"), to=("from", "to"), ving=("importing", "exporting")),
        ),
        "How do I {v} contacts {to} a CSV file in {app}?",
        "What are the steps for {ving} contacts {to} CSV in {app}?",
        "In {app}, how can I {v} my contacts {to} a CSV?",
    ),
    T(
        "opp.encrypt",
        NEGATION,
        cross(
            pick(
                "tool",
                (
                    "GPG|OpenSSL|age|7-Zip|VeraCrypt|Python's cryptography library|"
                    "Java's javax.crypto|the .NET Aes class"
                ),
                k=8,
            ),
            flip(v=("encrypt", "decrypt")),
        ),
        "How do I {v} a file with {tool}?",
        "Show me how to use {tool} to {v} a file.",
        "What's the way to {v} a file using {tool}?",
    ),
    T(
        "opp.buy_sell",
        NEGATION,
        cross(
            pick(
                "a",
                (
                    "gold|Bitcoin|Tesla stock|index funds|a house|government bonds|"
                    "Nvidia shares|silver"
                ),
                k=8,
            ),
            flip(v=("buy", "sell")),
        ),
        "Is now a good time to {v} {a}?",
        "Should I {v} {a} right now?",
        "Would it be smart to {v} {a} at the moment?",
    ),
    T(
        "opp.install",
        NEGATION,
        cross(
            pick(
                "pkg",
                "Docker|Node.js|PostgreSQL|Java 21|Python 3.12|nginx|Redis|MongoDB",
                k=8,
            ),
            flip(v=("install", "uninstall")),
        ),
        "How do I {v} {pkg} on Ubuntu?",
        "What are the steps to {v} {pkg} on Ubuntu?",
        "Give me the commands to {v} {pkg} on an Ubuntu machine.",
    ),
    T(
        "opp.max_min",
        NEGATION,
        cross(
            pick(
                "c",
                (
                    "Python list|NumPy array|pandas column|JavaScript array|SQL column|"
                    "Java ArrayList|Go slice|Excel range"
                ),
                k=8,
            ),
            flip(m=("maximum", "minimum"), big=("largest", "smallest")),
        ),
        "How do I find the {m} value in a {c}?",
        "What's the way to get the {big} element of a {c}?",
        "Get the {m} of a {c}: how?",
    ),
    T(
        "opp.benefits",
        NEGATION,
        cross(
            pick("t", TOPICS, k=8),
            flip(b=("benefits", "drawbacks"), pros=("pros", "cons")),
        ),
        "What are the {b} of {t}?",
        "List the main {b} of {t}.",
        "What are the {pros} of {t}?",
    ),
    T(
        "opp.advantages",
        NEGATION,
        cross(
            pick("t", TECHS, k=8),
            flip(a=("advantages", "disadvantages"), A=("Advantages", "Disadvantages")),
        ),
        "What are the {a} of using {t}?",
        "Explain the {a} of {t}.",
        "{A} of {t}: give me a list.",
    ),
    T(
        "opp.align",
        NEGATION,
        cross(
            pick(
                "app",
                (
                    "CSS|Microsoft Word|Google Docs|LaTeX|a Markdown table|Excel|Figma|"
                    "a Flutter widget"
                ),
                k=8,
            ),
            flip(side=("left", "right")),
        ),
        "How do I align text to the {side} in {app}?",
        "What's the way to {side}-align text in {app}?",
        "In {app}, how can I make text {side}-aligned?",
    ),
    T(
        "opp.drive_side",
        NEGATION,
        cross(
            pick(
                "r",
                (
                    "in Europe|in Asia|in Africa|in South America|in Oceania|"
                    "in the Caribbean|in the Middle East|in Southeast Asia"
                ),
                k=8,
            ),
            flip(side=("right", "left")),
        ),
        "Which countries {r} drive on the {side} side of the road?",
        "List the countries {r} where traffic keeps to the {side}.",
        "In which countries {r} do people drive on the {side}-hand side?",
    ),
    T(
        "opp.service",
        NEGATION,
        cross(
            pick("svc", "nginx Docker PostgreSQL SSH Apache cron MySQL Redis", k=8),
            flip(v=("start", "stop"), ving=("starting", "stopping")),
        ),
        "How do I {v} the {svc} service on Linux?",
        "What's the command for {ving} the {svc} service with systemd?",
        "Show me how to {v} {svc} as a service on a Linux server.",
    ),
    T(
        "opp.zip",
        NEGATION,
        cross(
            pick(
                "os",
                (
                    "Windows 11|macOS|Ubuntu|a Chromebook|an iPhone|Android|"
                    "the Linux command line|Windows PowerShell"
                ),
                k=8,
            ),
            flip(v=("zip", "unzip")),
        ),
        "How do I {v} a folder on {os}?",
        "What's the way to {v} a folder using {os}?",
        "Steps to {v} a folder on {os}?",
    ),
    T(
        "opp.hot_cold",
        NEGATION,
        cross(
            pick(
                "i",
                (
                    "sprained ankle|pulled muscle|stiff neck|bruise|tension headache|"
                    "back spasm|swollen knee|sore shoulder"
                ),
                k=8,
            ),
            flip(h=("hot", "cold")),
        ),
        "Should I use a {h} compress for a {i}?",
        "Is a {h} compress good for a {i}?",
        "Would applying a {h} compress help a {i}?",
    ),
    T(
        "opp.subscribe",
        NEGATION,
        cross(
            pick(
                "l",
                (
                    "weekly deals|product updates|engineering blog|monthly digest|"
                    "event announcements|partner offers|release notes|community"
                ),
                k=8,
            ),
            flip(v=("subscribe", "unsubscribe"), to=("to", "from")),
        ),
        "How do I {v} {to} the {l} newsletter?",
        "I want to {v} {to} your {l} newsletter. How?",
        "What are the steps to {v} {to} the {l} emails?",
    ),
    T(
        "opp.popups",
        NEGATION,
        cross(
            pick("b", "Chrome Firefox Safari Edge Opera Brave Vivaldi DuckDuckGo", k=8),
            flip(v=("allow", "block"), ving=("allowing", "blocking")),
        ),
        "How do I {v} pop-ups in {b}?",
        "What are the settings for {ving} pop-ups in {b}?",
        "Show me how to {v} pop-up windows in the {b} browser.",
    ),
    T(
        "opp.plan",
        NEGATION,
        cross(
            pick("p", "Basic Pro Team Business Starter Family Premium Plus", k=8),
            flip(v=("upgrade", "downgrade")),
        ),
        "How do I {v} to the {p} plan?",
        "I'd like to {v} my subscription to {p}. How do I do that?",
        "Steps to {v} my account to the {p} plan, please.",
    ),
    T(
        "opp.sort",
        NEGATION,
        cross(
            pick(
                "c",
                (
                    "Python list|pandas DataFrame by one column|SQL result set|"
                    "JavaScript array|Excel column|bash file listing|Java list|"
                    "dictionary by value"
                ),
                k=8,
            ),
            flip(o=("ascending", "descending")),
        ),
        "How do I sort a {c} in {o} order?",
        "Sort a {c} in {o} order: how?",
        "What's the way to order a {c} {o}?",
    ),
    T(
        "opp.weight",
        NEGATION,
        cross(
            pick(
                "ctx",
                (
                    "as a vegetarian|as a runner|after pregnancy|in my 50s|"
                    "with type 2 diabetes|on a tight budget|as a college student|"
                    "with a desk job"
                ),
                k=8,
            ),
            flip(v=("gain", "lose")),
        ),
        "What should I eat to {v} weight {ctx}?",
        "Suggest a diet to {v} weight {ctx}.",
        "Which foods help me {v} weight {ctx}?",
    ),
]


# ---------------------------------------------------------------------------- names

ORDER_IDS = tuple(
    f"#{a}{b}{c}-{n}"
    for a, b, c, n in zip(
        "AKMRTWZQHP", "7K3X9PLD2M", "KQ2ZR8XNA5", range(2281, 2391, 11), strict=True
    )
)

NAME_TEMPLATES = [
    T(
        "name.capital",
        NAMES,
        pick("c", COUNTRIES),
        "What is the capital of {c}?",
        "Tell me the capital city of {c}.",
        "Which city is the capital of {c}?",
    ),
    T(
        "name.population",
        NAMES,
        pick("c", CITIES),
        "What's the population of {c}?",
        "How many people live in {c}?",
        "Give me the current population of {c}.",
    ),
    T(
        "name.weather_month",
        NAMES,
        cross(pick("c", CITIES, k=6), pick("m", MONTHS, k=4)),
        "What's the weather usually like in {c} in {m}?",
        "How is the typical weather in {c} during {m}?",
        "I'm visiting {c} in {m}. What weather should I expect?",
    ),
    T(
        "name.flights",
        NAMES,
        pairs("a", "b", CITIES),
        "Find me flights from {a} to {b} next Friday.",
        "Search for flights {a} to {b} for next Friday.",
        "Are there any flights from {a} to {b} next Friday?",
    ),
    T(
        "name.biography",
        NAMES,
        pick("p", PEOPLE),
        "Who was {p}?",
        "Give me a short biography of {p}.",
        "Tell me about the life of {p}.",
    ),
    T(
        "name.birthplace",
        NAMES,
        pick("p", PEOPLE),
        "Where was {p} born?",
        "What is the birthplace of {p}?",
        "In which town or city was {p} born?",
    ),
    T(
        "name.ceo",
        NAMES,
        pick("co", COMPANIES),
        "Who is the CEO of {co}?",
        "Who currently runs {co} as chief executive?",
        "Name the chief executive officer of {co}.",
    ),
    T(
        "name.hq",
        NAMES,
        pick("co", COMPANIES),
        "Where is {co} headquartered?",
        "In which city is the headquarters of {co}?",
        "Where's {co}'s head office located?",
    ),
    T(
        "name.ticker",
        NAMES,
        pick("co", COMPANIES),
        "What's the stock ticker symbol for {co}?",
        "Under which ticker does {co} trade?",
        "Tell me {co}'s stock ticker.",
    ),
    T(
        "name.wont_turn_on",
        NAMES,
        pick("p", PRODUCTS),
        "My {p} won't turn on. What should I do?",
        "What should I do if my {p} doesn't power on?",
        "Troubleshooting help: my {p} does not turn on anymore.",
    ),
    T(
        "name.factory_reset",
        NAMES,
        pick("p", PRODUCTS),
        "How do I factory reset my {p}?",
        "What are the steps to restore my {p} to factory settings?",
        "Walk me through a factory reset of a {p}.",
    ),
    T(
        "name.pip_install",
        NAMES,
        pick("pkg", PY_PACKAGES),
        "How do I install {pkg} with pip?",
        "What's the pip command to install {pkg}?",
        "Install {pkg} using pip: what do I type?",
    ),
    T(
        "name.pkg_example",
        NAMES,
        pick("pkg", PY_PACKAGES),
        "Show me a basic example of using {pkg}.",
        "Give me a minimal {pkg} example.",
        "Can you write a short sample program that uses {pkg}?",
    ),
    T(
        "name.js_new_project",
        NAMES,
        pick("fw", JS_FRAMEWORKS),
        "How do I create a new {fw} project?",
        "What's the command to scaffold a {fw} app?",
        "Set up a fresh {fw} project for me: which commands do I run?",
    ),
    T(
        "name.py_function",
        NAMES,
        pick(
            "fn",
            (
                "os.path.join itertools.chain functools.lru_cache collections.Counter "
                "str.partition json.dumps re.sub shutil.rmtree subprocess.run time.monotonic "
                "random.shuffle math.isclose functools.partial itertools.groupby "
                "contextlib.suppress pathlib.Path.glob"
            ).split(),
        ),
        "What does the Python function `{fn}` do?",
        "Explain what `{fn}` does in Python.",
        "Describe the behaviour of Python's `{fn}`.",
    ),
    T(
        "name.rename_variable",
        NAMES,
        rows(
            "a b",
            (
                ("user_id", "account_id"),
                ("total_count", "item_count"),
                ("max_retries", "retry_limit"),
                ("userName", "displayName"),
                ("isActive", "isEnabled"),
                ("request_body", "payload"),
                ("tmp_dir", "scratch_dir"),
                ("orderTotal", "cartTotal"),
                ("start_time", "started_at"),
                ("fooBar", "fooBaz"),
                ("db_conn", "db_session"),
                ("retryCount", "attemptCount"),
                ("api_key", "api_token"),
                ("firstName", "givenName"),
            ),
        ),
        "Rename the variable `{a}` to `{b}` throughout this module.",
        "In this module, change every occurrence of the variable `{a}` to `{b}`.",
        "Please refactor: the variable `{a}` should be called `{b}` everywhere in this module.",
    ),
    T(
        "name.name_error",
        NAMES,
        pick(
            "id",
            "np pd plt df user_id total_count request_body max_retries self os json "
            "logger app session",
        ),
        "I get NameError: name '{id}' is not defined. How do I fix it?",
        "How do I fix \"NameError: name '{id}' is not defined\" in Python?",
        "Python says name '{id}' is not defined. What does that mean and how do I fix it?",
    ),
    T(
        "name.js_expression",
        NAMES,
        pick(
            "e",
            (
                "arr.indexOf(x)",
                "Array.from(s)",
                "Object.keys(obj)",
                'str.split(",")',
                'parseInt("08")',
                "[1, 2, 3].map(String)",
                "typeof null",
                "Math.max()",
                "new Date(0)",
                'JSON.parse("[]")',
                "[] + {}",
                "0.1 + 0.2",
                "Number('')",
                "[10, 1, 2].sort()",
            ),
        ),
        "What does `{e}` return in JavaScript?",
        "In JavaScript, what is the result of `{e}`?",
        "Explain what JavaScript gives back for `{e}`.",
    ),
    T(
        "name.getter",
        NAMES,
        pick(
            "m",
            "getFirstName getEmailAddress getCreatedAt isActive getLastLogin getAvatarUrl "
            "hasAdminRole getFullName getPhoneNumber isVerified getTimeZone getLocale",
        ),
        "Write a getter called `{m}` for the User class.",
        "Add a `{m}` getter method to the User class.",
        "Implement `{m}()` on the User class as a getter.",
    ),
    T(
        "name.translate_string",
        NAMES,
        pick(
            "s",
            (
                "Where is the train station?",
                "I lost my wallet.",
                "Good luck with the exam!",
                "The meeting is cancelled.",
                "Can I pay by card?",
                "My flight was delayed.",
                "See you tomorrow morning.",
                "Please close the window.",
                "How much does this cost?",
                "I'm allergic to peanuts.",
                "Is breakfast included?",
                "Call me when you arrive.",
                "The printer is out of paper.",
                "Happy anniversary!",
            ),
        ),
        'Translate "{s}" into French.',
        'How do you say "{s}" in French?',
        'What\'s the French for "{s}"?',
    ),
    T(
        "name.translate_language",
        NAMES,
        pick("lang", LANGUAGES),
        "Translate 'thank you very much for your help' into {lang}.",
        "How do you say 'thank you very much for your help' in {lang}?",
        "What's 'thank you very much for your help' in {lang}?",
    ),
    T(
        "name.permission_denied",
        NAMES,
        pick(
            "path",
            (
                "/etc/shadow",
                "/var/log/syslog",
                "~/.ssh/id_rsa",
                "/etc/nginx/nginx.conf",
                "C:\\Windows\\System32\\config\\SAM",
                "/root/.bashrc",
                "/var/lib/docker/volumes",
                "/dev/ttyUSB0",
                "/etc/sudoers",
                "/var/run/docker.sock",
                "/usr/local/lib/python3.11/site-packages",
                "/proc/kcore",
            ),
        ),
        "Why do I get 'Permission denied' when reading {path}?",
        "Reading {path} fails with Permission denied. Why?",
        "I'm getting a Permission denied error when I try to read {path}. What's the cause?",
    ),
    T(
        "name.config_file",
        NAMES,
        pick(
            "path",
            (
                "/etc/hosts",
                "/etc/fstab",
                "~/.gitconfig",
                "/etc/resolv.conf",
                "~/.bash_profile",
                "/etc/crontab",
                "pyproject.toml",
                "package-lock.json",
                ".dockerignore",
                "/etc/passwd",
                "tsconfig.json",
                ".editorconfig",
                "~/.ssh/config",
                "/etc/environment",
            ),
        ),
        "What is the file {path} used for?",
        "Explain what {path} is for.",
        "What does the {path} file do?",
    ),
    T(
        "name.url_legit",
        NAMES,
        pick(
            "url",
            (
                "https://paypal-secure-login.com",
                "https://www.paypal.com",
                "https://amaz0n-deals.shop",
                "https://www.amazon.com",
                "https://apple-id-verify.net",
                "https://appleid.apple.com",
                "https://netflix-billing-update.info",
                "https://www.netflix.com",
                "https://dhl-parcel-tracking.top",
                "https://www.dhl.com",
                "https://microsoft-support-alert.xyz",
                "https://support.microsoft.com",
            ),
        ),
        "Is {url} a legitimate website?",
        "Can I trust the site {url}?",
        "Is {url} safe, or is it a scam?",
    ),
    T(
        "name.summarize_url",
        NAMES,
        pick(
            "url",
            (
                "https://example.com/blog/scaling-postgres",
                "https://example.com/blog/scaling-redis",
                "https://example.org/news/2024/rate-cuts",
                "https://example.org/news/2024/housing-market",
                "https://docs.example.dev/guides/authentication",
                "https://docs.example.dev/guides/authorization",
                "https://example.com/research/llm-caching",
                "https://example.com/research/llm-evaluation",
                "https://blog.example.io/posts/kubernetes-costs",
                "https://blog.example.io/posts/kubernetes-security",
                "https://example.net/reviews/pixel-9",
                "https://example.net/reviews/iphone-16",
            ),
        ),
        "Summarize the article at {url}.",
        "Give me a summary of {url}.",
        "What does the page {url} say? Summarize it for me.",
    ),
    T(
        "name.invite_email",
        NAMES,
        pick(
            "email",
            (
                "alice.smith@example.com",
                "bob@acme.io",
                "j.doe@contoso.com",
                "maria.garcia@example.org",
                "li.wei@fabrikam.net",
                "sam.taylor@example.com",
                "alice.smyth@example.com",
                "bob@acme.co",
                "priya.n@northwind.dev",
                "tom.baker@initech.com",
                "k.ito@example.jp",
                "ops-team@acme.io",
            ),
        ),
        "Send a meeting invite to {email} for tomorrow at 10am.",
        "Invite {email} to a meeting tomorrow at 10 am.",
        "Schedule a meeting with {email} tomorrow at 10:00 and send them the invite.",
    ),
    T(
        "name.reset_email",
        NAMES,
        pick(
            "email",
            (
                "jane.doe@gmail.com",
                "john.doe@gmail.com",
                "m.rossi@libero.it",
                "sarah.k@outlook.com",
                "dev@startup.io",
                "admin@startup.io",
                "chris.p@yahoo.com",
                "chris.b@yahoo.com",
                "nora@proton.me",
                "lena.m@web.de",
                "tariq@company.ae",
                "ana.silva@uol.com.br",
            ),
        ),
        "Please send the password reset link to {email}.",
        "Can you email a password reset link to {email}?",
        "Send a reset-password email to {email}, please.",
    ),
    T(
        "name.cli_flag",
        NAMES,
        rows(
            "tool flag",
            (
                ("git commit", "--amend"),
                ("ls", "-la"),
                ("grep", "-r"),
                ("rm", "-rf"),
                ("docker run", "-d"),
                ("tar", "-xzf"),
                ("curl", "-L"),
                ("pip install", "-e"),
                ("npm install", "--save-dev"),
                ("ssh", "-L"),
                ("git push", "--force"),
                ("git log", "--oneline"),
                ("kubectl get pods", "-w"),
                ("python", "-m"),
            ),
        ),
        "What does the {flag} flag do in `{tool}`?",
        "Explain the {flag} option of `{tool}`.",
        "In `{tool}`, what is the {flag} flag for?",
    ),
    T(
        "name.git_merge",
        NAMES,
        pick(
            "b",
            "feature/login feature/logout hotfix/payment-bug dev staging release/2.3 "
            "feature/dark-mode bugfix/null-pointer experiment/new-cache feature/search",
        ),
        "How do I merge the `{b}` branch into main?",
        "What are the git commands to merge `{b}` into the main branch?",
        "Merge branch `{b}` into main: what should I run?",
    ),
    T(
        "name.sql_count",
        NAMES,
        pick(
            "t",
            "users orders order_items invoices sessions audit_log product_reviews "
            "customer_addresses payments shipments",
        ),
        "Write a SQL query that counts the rows in the `{t}` table.",
        "How many rows are in `{t}`? Give me the SQL.",
        "SQL to count all rows of table `{t}`, please.",
    ),
    T(
        "name.env_var",
        NAMES,
        pick(
            "v",
            "PATH PYTHONPATH LD_LIBRARY_PATH HOME JAVA_HOME NODE_ENV GOPATH "
            "CUDA_VISIBLE_DEVICES HTTP_PROXY LANG EDITOR TMPDIR",
        ),
        "What is the {v} environment variable used for?",
        "Explain what the {v} env var does.",
        "What's the purpose of the {v} environment variable?",
    ),
    T(
        "name.cuisine",
        NAMES,
        pick(
            "c",
            (
                "Italian Mexican Thai Indian Japanese Greek Ethiopian Korean "
                "Lebanese Peruvian French Vietnamese"
            ),
        ),
        "Give me a classic {c} dinner recipe.",
        "What's a traditional {c} dish I can cook for dinner? Include the recipe.",
        "Suggest a classic {c} recipe for dinner.",
    ),
    T(
        "name.visa",
        NAMES,
        cross(pick("c", COUNTRIES, k=6), pick("nat", NATIONALITIES, k=4)),
        "Do I need a visa to visit {c} with a {nat} passport?",
        "As a {nat} passport holder, do I need a visa for {c}?",
        "Is a visa required for {nat} citizens traveling to {c}?",
    ),
    T(
        "name.time_zone",
        NAMES,
        pairs("a", "b", CITIES),
        "What time is it in {a} when it's noon in {b}?",
        "If it's 12 pm in {b}, what time is it in {a}?",
        "When it's midday in {b}, what's the time in {a}?",
    ),
    T(
        "name.book_plot",
        NAMES,
        pick(
            "book",
            (
                "Moby-Dick",
                "Jane Eyre",
                "The Great Gatsby",
                "Things Fall Apart",
                "One Hundred Years of Solitude",
                "Brave New World",
                "The Handmaid's Tale",
                "Great Expectations",
                "Beloved",
                "The Trial",
                "Middlemarch",
                "Dune",
                "Frankenstein",
                "Wuthering Heights",
            ),
        ),
        "Summarize the plot of {book}.",
        "What happens in {book}? Give me the plot.",
        "Give me a plot summary of {book}.",
    ),
    T(
        "name.similar_authors",
        NAMES,
        pick(
            "a",
            (
                "Haruki Murakami",
                "Agatha Christie",
                "Ursula K. Le Guin",
                "Terry Pratchett",
                "Jane Austen",
                "Stephen King",
                "Chimamanda Ngozi Adichie",
                "Kazuo Ishiguro",
                "Neil Gaiman",
                "Sally Rooney",
                "Cormac McCarthy",
                "Octavia E. Butler",
            ),
        ),
        "Recommend books similar to those by {a}.",
        "If I like {a}, what other books should I read?",
        "Suggest some books for a fan of {a}.",
    ),
    T(
        "name.order_status",
        NAMES,
        pick("oid", ORDER_IDS),
        "Where is my order {oid}?",
        "Can you track order {oid} for me?",
        "What's the status of my order {oid}?",
    ),
    T(
        "name.windows_error",
        NAMES,
        pick(
            "code",
            "0x80070005 0x80070057 0x800f081f 0x80004005 0xc000021a 0x80070643 0x8024402c "
            "0xc1900101 0x80073712 0x800f0922",
        ),
        "What does Windows Update error {code} mean?",
        "How do I fix Windows Update error {code}?",
        "Windows Update fails with error {code}. What's wrong and how do I fix it?",
    ),
]


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


FILLERS: dict[str, tuple[str, ...]] = {
    "days": ("10", "14", "21", "30", "45", "60", "90"),
    "pct": ("1.5", "2", "5", "10", "15", "20", "25"),
    "amount": ("5,000", "25,000", "100,000", "250,000", "1,000,000", "2,500,000"),
    "years": ("two", "three", "five", "seven", "ten"),
    "city": CITIES,
    "person": ("Dana", "Miguel", "Priya", "Tom", "Aisha", "Lukas", "Mei", "Jonas", "Sofia"),
    "state": ("New York", "Delaware", "California", "England and Wales", "Ontario", "Texas"),
    "product": ("Atlas", "Beacon", "Cobalt", "Drift", "Ember", "Fathom", "Glide", "Harbor"),
}


def fill_sentence(sentence: str, rng: random.Random) -> str:
    return sentence.format_map({k: rng.choice(v) for k, v in FILLERS.items()})


GENERIC_BODY = (
    "This document is provided for internal use and may be updated without prior notice.",
    "Headings are for convenience only and do not affect the interpretation of any provision.",
    "Where this text conflicts with an earlier version, the more recent version prevails.",
    "Questions about this material should be directed to the responsible team lead, {person}.",
    "A summary of changes since the previous revision is kept in the appendix.",
    "All figures are stated in US dollars unless otherwise indicated.",
    "References to days mean calendar days, and references to including mean including "
    "without limitation.",
    "Copies of this document may be shared with advisers who are bound by confidentiality.",
    "The office in {city} keeps the signed original, and scanned copies have the same effect.",
    "Any terms not defined here have the meaning given to them in the glossary.",
    "Feedback on the clarity of this document can be sent to the documentation team at any time.",
    "Nothing in this section limits the rights described elsewhere in this document.",
)

CONTRACT = Genre(
    "contract",
    'This Master Services Agreement (the "Agreement") is entered into by {x} ("Provider") and '
    'Northwind Traders Ltd. ("Customer").',
    (
        "Initech LLC",
        "Globex Corporation",
        "Acme Analytics Inc.",
        "Umbrella Systems Ltd.",
        "Stark Consulting GmbH",
        "Wayne Data Services",
        "Hooli Cloud Inc.",
        "Vandelay Industries",
    ),
    (
        "Provider shall deliver the Services described in each Statement of Work with the skill "
        "and care expected of a competent professional firm.",
        "Customer shall pay all undisputed invoices within {days} days of receipt, and late "
        "amounts bear interest at {pct}% per month.",
        "Either party may terminate this Agreement for convenience upon {days} days' prior "
        "written notice to the other party.",
        "Each party shall keep the other's Confidential Information secret and use it solely "
        "to perform its obligations under this Agreement.",
        "The obligations of confidentiality survive termination for a period of {years} years.",
        "Provider's aggregate liability under this Agreement shall not exceed the fees paid by "
        "Customer in the twelve months preceding the claim.",
        "Neither party is liable for indirect, incidental or consequential damages, including "
        "lost profits, even if advised of their possibility.",
        "All intellectual property created by Provider in performing the Services vests in "
        "Customer upon full payment of the applicable fees.",
        "Provider may engage subcontractors, provided that Provider remains fully responsible "
        "for their performance.",
        "This Agreement is governed by the laws of {state}, and the courts located in {city} "
        "have exclusive jurisdiction.",
        "Any amendment must be in writing and signed by authorized representatives of both "
        "parties.",
        "Customer may audit Provider's records relating to the Services once per calendar year "
        "upon {days} days' notice.",
        "Provider shall maintain commercial general liability insurance of at least ${amount} "
        "per occurrence.",
        "If a force majeure event lasts more than {days} days, either party may terminate the "
        "affected Statement of Work.",
        "Neither party may assign this Agreement without the other's prior written consent, "
        "except to a successor in a merger.",
        "If monthly availability falls below 99.9%, Customer receives a service credit as "
        "set out in Schedule B.",
    ),
    (
        (
            "What is the notice period for terminating for convenience?",
            "How much notice does a party have to give to terminate the agreement for convenience?",
            "Under this agreement, how many days' notice is required to terminate for convenience?",
        ),
        (
            "Who owns the intellectual property created under this agreement?",
            "Which party owns the IP produced while performing the services?",
            "According to the contract, who holds the rights in the work product?",
        ),
        (
            "What is the cap on the provider's liability?",
            "How much can the provider be liable for at most under this agreement?",
            "What limit applies to the provider's total liability?",
        ),
        (
            "Which law governs this agreement?",
            "What is the governing law of the contract?",
            "Under which jurisdiction's law is this agreement governed?",
        ),
        (
            "When are invoices due?",
            "How many days does the customer have to pay an invoice?",
            "What are the payment terms for invoices?",
        ),
        (
            "Can the provider use subcontractors?",
            "Is the provider allowed to subcontract the services?",
            "Does the agreement permit subcontracting by the provider?",
        ),
        (
            "How long do the confidentiality obligations last after termination?",
            "For how many years does confidentiality survive the end of the agreement?",
            "What is the duration of the confidentiality obligations once the contract ends?",
        ),
        (
            "What happens if availability drops below the service level?",
            "What does the customer get if the availability commitment is missed?",
            "Explain the remedy when monthly availability falls below the agreed level.",
        ),
        (
            "Can either party assign the agreement?",
            "Is assignment of this contract allowed?",
            "Under what conditions may the agreement be assigned?",
        ),
        (
            "How much insurance must the provider carry?",
            "What insurance coverage is the provider required to maintain?",
            "State the provider's minimum insurance requirement.",
        ),
        (
            "Does the customer have audit rights?",
            "Can the customer audit the provider's records?",
            "Explain the customer's right to audit under the agreement.",
        ),
    ),
)

LEASE = Genre(
    "lease",
    "This residential lease concerns the apartment at {x} and runs for twelve months.",
    (
        "14 Elm Street, Unit 3B",
        "221 Baker Road, Flat 2",
        "7 Harbour View, Apt 12",
        "88 Maple Avenue, Unit 5",
        "3 Station Lane, Flat 9",
        "150 River Drive, Apt 4C",
        "42 Hill Crescent, Unit 1",
        "9 Mill Court, Flat 6",
    ),
    (
        "Rent is payable monthly in advance on the first day of each month by bank transfer.",
        "A late fee of {pct}% of the monthly rent applies if payment is more than {days} days "
        "late.",
        "The tenant has paid a security deposit equal to two months' rent, which is held in a "
        "protected deposit scheme.",
        "The deposit is returned within {days} days after the tenant moves out, less any "
        "deductions for damage beyond normal wear and tear.",
        "Pets are permitted only with the landlord's prior written consent, which may be "
        "subject to an additional deposit.",
        "The tenant may not sublet the premises or any part of them without the landlord's "
        "written consent.",
        "The landlord is responsible for structural repairs and for maintaining heating, water "
        "and electrical systems.",
        "The tenant must report any defect promptly and allow access for repairs with "
        "twenty-four hours' notice.",
        "Either party may end the lease after the first six months by giving {days} days' "
        "written notice.",
        "The tenant pays electricity, internet and gas, while water and building insurance are "
        "included in the rent.",
        "Guests may stay for up to fourteen consecutive nights without the landlord's consent.",
        "Smoking is not permitted anywhere inside the apartment or on its balcony.",
        "The tenant must keep the premises clean and return them in the condition recorded in "
        "the inventory.",
        "Minor alterations such as hanging pictures are allowed, but painting requires consent.",
        "Rent may be reviewed once a year, with any increase limited to {pct}% and notified two "
        "months in advance.",
    ),
    (
        (
            "Can I keep a cat in the apartment?",
            "Am I allowed to have a cat under this lease?",
            "Does the lease let me keep a pet cat?",
        ),
        (
            "How much notice do I need to give to end the lease early?",
            "What notice period applies if I want to move out early?",
            "If I want to terminate the lease early, how much notice is required?",
        ),
        (
            "When will I get my deposit back?",
            "How long does the landlord have to return my deposit?",
            "After I move out, when is the security deposit refunded?",
        ),
        (
            "Who pays for the electricity?",
            "Is electricity included in the rent or do I pay it?",
            "Which party is responsible for the electricity bill?",
        ),
        (
            "Can I sublet my room while I travel?",
            "Am I allowed to sublet the apartment while I'm away?",
            "Does the lease permit subletting while I travel?",
        ),
        (
            "What happens if I pay the rent late?",
            "Is there a penalty for late rent payments?",
            "What late fee applies if my rent is overdue?",
        ),
        (
            "Who is responsible for fixing the heating?",
            "If the heating breaks, who has to repair it?",
            "Which party must repair the heating system?",
        ),
        (
            "Can I paint the walls?",
            "Am I allowed to repaint the apartment?",
            "Does the lease let me paint the walls?",
        ),
        (
            "How much can the rent go up each year?",
            "What is the limit on annual rent increases?",
            "By how much may the landlord raise the rent per year?",
        ),
        (
            "How long can a friend stay with me?",
            "For how many nights may a guest stay without permission?",
            "What's the limit on guests staying over?",
        ),
    ),
)

DOCS = Genre(
    "docs",
    "Use the following excerpts from the {x} documentation to answer the question.",
    (
        "Atlas Storage 4.2",
        "Atlas Storage 4.3",
        "Beacon Queue 2.0",
        "Beacon Queue 2.1",
        "Cobalt DB 7.1",
        "Cobalt DB 8.0",
        "Drift Sync 1.9",
        "Drift Sync 2.0",
    ),
    (
        "The service stores objects in buckets, and each bucket belongs to exactly one region "
        "chosen at creation time.",
        "The Free plan includes 5 GB of storage, while the Pro plan costs $12 per user per "
        "month and includes 1 TB.",
        "The REST API allows {days}0 requests per minute per API key; requests beyond the "
        "limit receive HTTP 429.",
        "Deleted objects are kept in the trash for {days} days before they are purged permanently.",
        "Single sign-on through SAML 2.0 and OpenID Connect is available on the Business and "
        "Enterprise plans.",
        "All data is encrypted at rest with AES-256 and in transit with TLS 1.2 or later.",
        "Object versioning is disabled by default and can be enabled per bucket in the settings "
        "page.",
        "The maximum size of a single upload is 5 GB; larger files must use multipart uploads.",
        "Support is available by email around the clock and by phone on weekdays from 9:00 to "
        "17:00 in {city}.",
        "Data can be exported at any time as a compressed archive from the account page.",
        "Audit logs record every administrative action and are retained for {years} years.",
        "Webhooks notify your endpoint within seconds when an object is created or deleted.",
        "Regions currently offered are North America, Europe and Asia Pacific, with more planned.",
        "Service accounts authenticate with scoped tokens that expire after {days} days.",
        "Bandwidth is not billed separately, but egress above {pct} TB per month is throttled.",
    ),
    (
        (
            "What is the API rate limit?",
            "How many API requests can I make per minute?",
            "What's the limit on API calls per minute per key?",
        ),
        (
            "How long are deleted files kept?",
            "For how many days do deleted objects stay in the trash?",
            "When are deleted files purged permanently?",
        ),
        (
            "Does it support single sign-on?",
            "Is SSO available?",
            "Can I use single sign-on with this service?",
        ),
        (
            "What are the support hours?",
            "When can I reach support?",
            "At what times is customer support available?",
        ),
        (
            "How much does the Pro plan cost?",
            "What's the price of the Pro plan?",
            "What does a Pro subscription cost per user?",
        ),
        (
            "What is the maximum upload size?",
            "How large can a single uploaded file be?",
            "What's the size limit for one upload?",
        ),
        (
            "How do I turn on versioning?",
            "How can I enable object versioning?",
            "Where do I enable versioning for a bucket?",
        ),
        (
            "Is my data encrypted at rest?",
            "Does the service encrypt stored data?",
            "How is data protected when it is stored?",
        ),
        (
            "Can I export all my data?",
            "Is there a way to export my data?",
            "How do I download an export of all my data?",
        ),
        (
            "Which regions are available?",
            "In what regions can I create a bucket?",
            "List the regions the service offers.",
        ),
        (
            "How long are audit logs kept?",
            "What is the retention period for audit logs?",
            "For how long are audit log entries retained?",
        ),
    ),
)

SUPPORT = Genre(
    "support",
    "You are the customer support assistant for {x}, an online store.",
    (
        "Lumen Home",
        "Pixel & Thread",
        "Trailhead Outfitters",
        "Copper Kettle Kitchenware",
        "Northstar Books",
        "Verde Garden Supply",
        "Bright Byte Electronics",
        "Oak & Ivy Furniture",
    ),
    (
        "Always greet the customer politely and answer in the language they write in.",
        "Never promise a refund yourself; instead explain the refund policy and offer to open a "
        "ticket.",
        "Orders ship within two business days from our warehouse in {city}.",
        "Standard delivery takes three to five business days, and express delivery takes one to "
        "two.",
        "Customers can return unused items within {days} days of delivery for a full refund.",
        "Damaged items must be reported within 48 hours with a photo of the damage and the "
        "packaging.",
        "Discount codes are entered at checkout and cannot be combined with other offers.",
        "We accept Visa, Mastercard, American Express, PayPal and Apple Pay.",
        "Delivery addresses can be changed until the order has been handed to the courier.",
        "Subscriptions can be cancelled at any time from the account settings page.",
        "If a customer asks about an order, ask for the order number before anything else.",
        "Escalate to a human agent when the customer is upset or asks for one twice.",
        "International shipping is available to {pct} countries, with duties paid by the customer.",
        "Do not share internal notes, stock levels or supplier names with customers.",
        "Accounts can be deleted on request; deletion removes order history after {days} days.",
        "Keep answers under 120 words unless the customer asks for detail.",
    ),
    (
        (
            "Customer: Where is my order?",
            "Customer: Can you tell me where my order is?",
            "Customer: I'd like to know the status of my order.",
        ),
        (
            "Customer: How do I return an item?",
            "Customer: What's the process for returning something I bought?",
            "Customer: I want to send an item back. How does that work?",
        ),
        (
            "Customer: Can I change my delivery address?",
            "Customer: Is it possible to update the shipping address on my order?",
            "Customer: I need to change where my order is delivered. Can I?",
        ),
        (
            "Customer: How do I cancel my subscription?",
            "Customer: I want to cancel my subscription. How?",
            "Customer: What are the steps to cancel my subscription?",
        ),
        (
            "Customer: Do you ship internationally?",
            "Customer: Can you deliver to other countries?",
            "Customer: Is international shipping available?",
        ),
        (
            "Customer: My package arrived damaged. What now?",
            "Customer: The item I received is broken. What should I do?",
            "Customer: My order came damaged. How do I get this sorted?",
        ),
        (
            "Customer: Why isn't my discount code working?",
            "Customer: My promo code doesn't work. Why?",
            "Customer: The discount code I entered was rejected. What's wrong?",
        ),
        (
            "Customer: Can I pay with PayPal?",
            "Customer: Do you accept PayPal?",
            "Customer: Is PayPal an accepted payment method?",
        ),
        (
            "Customer: How do I delete my account?",
            "Customer: I want my account deleted. How?",
            "Customer: What do I need to do to close my account?",
        ),
        (
            "Customer: How long does delivery take?",
            "Customer: When will my order arrive after I place it?",
            "Customer: What are your delivery times?",
        ),
    ),
    leads=("", "", ""),
)

NOTES = Genre(
    "notes",
    "These are the notes from the {x} weekly sync.",
    (
        "platform team",
        "payments team",
        "mobile team",
        "data team",
        "growth team",
        "security team",
        "search team",
        "infrastructure team",
    ),
    (
        "{person} reported that the database migration is 70% complete and on track for the "
        "end of the month.",
        "The team agreed to freeze new features for {days} days to focus on reliability.",
        "{person} raised a risk that the vendor contract expires before the replacement is ready.",
        "Budget for the next quarter was discussed; a request for ${amount} will go to finance.",
        "The on-call rotation will move to a follow-the-sun model with the office in {city}.",
        "Error rates on the checkout API rose by {pct}% after last Tuesday's deploy.",
        "{person} will own the postmortem for the outage and share a draft by Friday.",
        "The next release is planned for the second week of next month, pending QA sign-off.",
        "Open question: should the legacy reporting service be retired or rewritten?",
        "Action item: {person} to update the runbook for the cache failover procedure.",
        "Action item: schedule a review of access permissions with the security team.",
        "Hiring: two backend roles are open, and interviews continue next week.",
        "The team discussed blockers: the staging environment is unstable and slows testing.",
        "Decision: dashboards will move to the new observability platform by the end of Q3.",
        "A customer escalation from the {city} account was resolved with a configuration fix.",
    ),
    (
        (
            "List the action items.",
            "What are the action items from this meeting?",
            "Give me all the action items in a list.",
        ),
        (
            "What decisions were made?",
            "Which decisions did the team take in this meeting?",
            "Summarize the decisions that were made.",
        ),
        (
            "What risks were raised?",
            "Which risks came up in the meeting?",
            "List the risks mentioned in these notes.",
        ),
        (
            "When is the next release?",
            "What date is the next release planned for?",
            "When will the next release ship?",
        ),
        (
            "Draft a follow-up email to the team.",
            "Write a follow-up email to the team about this meeting.",
            "Compose an email to the team following up on this sync.",
        ),
        (
            "What was said about the budget?",
            "Summarize the budget discussion.",
            "What did the team discuss about the budget?",
        ),
        (
            "Which blockers were mentioned?",
            "What blockers came up?",
            "List the blockers the team talked about.",
        ),
        (
            "Write a one-paragraph summary for leadership.",
            "Summarize this meeting in one paragraph for the leadership team.",
            "Give leadership a single-paragraph summary of this sync.",
        ),
        (
            "What open questions remain?",
            "Which questions are still open?",
            "List the unresolved questions from the meeting.",
        ),
        (
            "Who owns the postmortem?",
            "Which person is responsible for the postmortem?",
            "Who will write the postmortem?",
        ),
    ),
)

INCIDENT = Genre(
    "incident",
    "Incident report for the outage of the {x} service.",
    (
        "login",
        "checkout",
        "search",
        "payments",
        "notifications",
        "file upload",
        "billing",
        "recommendations",
    ),
    (
        "At 09:14 UTC, monitoring detected elevated error rates on the public API.",
        "The on-call engineer, {person}, acknowledged the page within four minutes.",
        "The root cause was a configuration change that reduced the database connection pool "
        "from 200 to 20.",
        "The change had passed review because the diff was generated by an automated tool.",
        "Around {pct}% of requests failed during the incident window.",
        "Customers in the {city} region were affected the most because of their traffic peak.",
        "The team rolled back the configuration after 47 minutes, and error rates returned to "
        "normal.",
        "Roughly {amount} requests failed, and support received 312 tickets.",
        "Alerting was slowed because the dashboard for connection pool usage had been removed.",
        "Follow-up actions include adding a pool-size lint rule and restoring the dashboard.",
        "A status page update was published 25 minutes after detection, which customers found "
        "too late.",
        "No data was lost, and no security boundary was crossed.",
        "The incident was classified as severity two under the incident policy.",
        "{person} will present the findings at the next engineering all-hands.",
        "Service credits will be issued to enterprise customers under their contracts.",
    ),
    (
        (
            "What was the root cause?",
            "What caused this outage?",
            "Explain the root cause of the incident.",
        ),
        (
            "How long did the outage last?",
            "What was the duration of the incident?",
            "For how many minutes was the service down?",
        ),
        (
            "Which customers were affected?",
            "Who was impacted by the outage?",
            "Which customers did the incident affect most?",
        ),
        (
            "What are the follow-up actions?",
            "List the follow-up items from this incident.",
            "Which actions will be taken after this incident?",
        ),
        (
            "Write a customer-facing status update.",
            "Draft a status page update for customers about this incident.",
            "Compose a short incident update we can publish to customers.",
        ),
        (
            "What monitoring gaps were identified?",
            "Which gaps in our monitoring did this incident reveal?",
            "What was missing from our alerting and monitoring?",
        ),
        (
            "Was any data lost?",
            "Did the incident cause data loss?",
            "Was customer data lost in this outage?",
        ),
        (
            "What severity was the incident?",
            "How was the incident classified in severity?",
            "Which severity level was assigned to this incident?",
        ),
        (
            "How many requests failed?",
            "What number of requests failed during the incident?",
            "Roughly how many requests errored?",
        ),
        (
            "Will customers receive credits?",
            "Are service credits being issued?",
            "Do customers get any compensation for the outage?",
        ),
    ),
)

GENRES = (CONTRACT, LEASE, DOCS, SUPPORT, NOTES, INCIDENT)


@dataclass(frozen=True)
class First:
    """A first sentence whose slot ``{x}`` (values ``xs``) the final question depends on."""

    sentence: str
    xs: tuple[str, ...]
    question: tuple[str, str, str]


#: Per genre: preambles that differ in their first sentence only, and a question about it.
FIRST_SENTENCES = {
    "contract": First(
        CONTRACT.intro,
        CONTRACT.xs,
        (
            "Who is the provider under this agreement?",
            "Which company is the provider in this contract?",
            "Name the party that acts as the provider in this agreement.",
        ),
    ),
    "lease": First(
        LEASE.intro,
        LEASE.xs,
        (
            "What is the address of the rented apartment?",
            "Which apartment does this lease cover?",
            "What is the address of the property being leased?",
        ),
    ),
    "docs": First(
        "Context for this customer: their workspace is on the {x} plan.",
        ("Free", "Starter", "Pro", "Business", "Enterprise", "Education", "Nonprofit", "Team"),
        (
            "Does my plan include single sign-on?",
            "Can I use SSO on my current plan?",
            "Is single sign-on available on the plan I'm on?",
        ),
    ),
    "support": First(
        "The customer you are talking to received their order {x} days ago.",
        ("2", "5", "9", "13", "20", "27", "35", "48", "75", "100"),
        (
            "Customer: Can I still return the item I ordered?",
            "Customer: Is it too late for me to return my order?",
            "Customer: Am I still able to send back what I bought?",
        ),
    ),
    "notes": First(
        "Meeting date: {x}.",
        tuple(f"{m} {d}, 2024" for m, d in zip(MONTHS[::2], (4, 9, 14, 19, 23, 27), strict=True)),
        (
            "What is the date of the next weekly sync?",
            "When does the next weekly sync take place?",
            "On which date is the following weekly sync?",
        ),
    ),
    "incident": First(
        INCIDENT.intro,
        INCIDENT.xs,
        (
            "Which service had the outage?",
            "What service went down?",
            "Which service does this incident report cover?",
        ),
    ),
}


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
