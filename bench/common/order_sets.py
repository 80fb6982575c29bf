"""Pair sets for the slot guard's ``order`` and ``code`` rules
(``bench/quality/slot_order.py``), generated here from templates (seeded, nothing downloaded).

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

The frames, code sets and pools are data, in ``bench/data/order_sets.json`` (``{"pool": NAME}``
stands for a pool). Templates are split into ``tune`` and ``test`` by a hash of their id, as in
``slot_sets.py``;
:func:`pairs` gives the same pairs for the same arguments.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


# ---------------------------------------------------------------------------------- the data file

DATA = Path(__file__).resolve().parents[1] / "data" / "order_sets.json"


def _tuples(value: Any) -> Any:
    """Lists of the data file as tuples (a fixed ``(a, b)`` pair, a snippet and its variant)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _load() -> dict[str, Any]:
    with open(DATA, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


_DATA = _load()
POOLS: dict[str, tuple[Any, ...]] = {k: _tuples(v) for k, v in _DATA["pools"].items()}


def _values(node: Any) -> Any:
    return POOLS[node["pool"]] if isinstance(node, dict) else _tuples(node)


FRAMES = [
    Frame(
        row["id"],
        _values(row["values"]),
        tuple(row["forms"]),
        symmetric=row.get("symmetric", False),
        unframed=row.get("unframed", False),
    )
    for row in _DATA["frames"]
]
CODE_SETS = [
    CodeSet(row["id"], tuple(row["forms"]), row["bare"], _tuples(row["snippets"]))
    for row in _DATA["code_sets"]
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
