"""Pair features that sentence embeddings blur, for the verifier (pure Python, no numpy).

Two questions can sit at cosine 0.93 and still ask different things: one negates the other
("How do I *not* reset..."), they name different numbers or years, different people or places,
a different question word ("why" / "how"), or one adds a qualifier the other lacks. Each feature
here measures one of those differences; the learned combiner in
:mod:`cachekit.semantic.policy.verifier` weighs them against the cosine.

Every feature is symmetric in the two texts (a lookup and a stored entry are interchangeable:
either could have come first), bounded, and cheap: a pair costs tens of microseconds.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["FEATURE_NAMES", "TextInfo", "pair_features", "text_info"]

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_RAW_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'&.-]*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "none",
        "nothing",
        "nobody",
        "neither",
        "nor",
        "without",
        "cannot",
        "can't",
        "don't",
        "doesn't",
        "didn't",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "won't",
        "wouldn't",
        "shouldn't",
        "couldn't",
        "haven't",
        "hasn't",
        "hadn't",
        "mustn't",
        "stop",
        "avoid",
        "prevent",
    }
)
# Function words carry little of a question's topic: overlap is measured on the rest.
_STOP = frozenset(
    "a an the of to in on at for from by with about as into over after before between and or "
    "but if then so than that this these those it its i me my we our you your he she they them "
    "his her their is are was were be been being am do does did doing have has had having will "
    "would shall should can could may might must what which who whom whose when where why how "
    "there here some any all most more much many very just also too only own same other such "
    "up down out off again further once ever get got s t".split()
)
_QUESTION_WORDS = ("what", "why", "how", "when", "where", "who", "which", "whom", "whose")
# Phrases that change the kind of answer even with the same question word.
_QUESTION_KINDS = (
    ("how many", "count"),
    ("how much", "amount"),
    ("how long", "duration"),
    ("how old", "age"),
    ("how often", "frequency"),
    ("how far", "distance"),
    ("what is the difference", "difference"),
    ("difference between", "difference"),
    ("best", "best"),
    ("worst", "worst"),
    ("should i", "advice"),
    ("can i", "ability"),
    ("is it possible", "ability"),
    ("how to", "method"),
    ("how do", "method"),
    ("how can", "method"),
    ("why", "reason"),
    ("when", "time"),
    ("where", "place"),
    ("who", "person"),
)

FEATURE_NAMES: tuple[str, ...] = (
    "cosine",
    "cosine_sq",
    "word_jaccard",
    "content_jaccard",
    "content_only_one",  # content words in one text only, per content word of the union
    "content_diff_count",  # how many (capped) content words differ, log-scaled
    "bigram_jaccard",
    "char3_jaccard",
    "negation_mismatch",
    "numbers_differ",
    "number_one_side",
    "entity_jaccard",
    "entity_only_one",  # capitalised names in one text only (capped)
    "qword_mismatch",
    "qkind_mismatch",
    "len_log_ratio",
    "min_len_log",
    "cosine_x_content_jaccard",
    "identical_content",
)


@dataclass(frozen=True, slots=True)
class TextInfo:
    """What the features need of one text, computed once per text."""

    words: frozenset[str]
    content: frozenset[str]
    bigrams: frozenset[str]
    char3: frozenset[str]
    negations: int
    numbers: frozenset[str]
    entities: frozenset[str]
    qword: str
    qkinds: frozenset[str]
    length: int


@lru_cache(maxsize=65_536)
def text_info(text: str) -> TextInfo:
    """Tokenised view of ``text`` (memoised: a stored entry is compared many times)."""
    lowered = text.lower().replace("\u2019", "'")
    tokens = _WORD.findall(lowered)
    content = [_stem(t) for t in tokens if t not in _STOP]
    joined = " ".join(tokens)
    return TextInfo(
        words=frozenset(tokens),
        content=frozenset(content),
        bigrams=frozenset(f"{a} {b}" for a, b in itertools.pairwise(content)),
        char3=frozenset(joined[i : i + 3] for i in range(max(0, len(joined) - 2))),
        negations=sum(t in _NEGATIONS or t.endswith("n't") for t in tokens),
        numbers=frozenset(n.replace(",", "") for n in _NUMBER.findall(lowered)),
        entities=_entities(text),
        qword=next((t for t in tokens if t in _QUESTION_WORDS), ""),
        qkinds=frozenset(kind for phrase, kind in _QUESTION_KINDS if phrase in joined),
        length=len(tokens),
    )


def _stem(token: str) -> str:
    """A crude plural/tense folding: enough that "cars"/"car" or "rates"/"rate" count as one."""
    for suffix in ("ing", "ies", "es", "s", "ed"):
        if len(token) > len(suffix) + 3 and token.endswith(suffix):
            return token[: -len(suffix)]
    return token


def _entities(text: str) -> frozenset[str]:
    """Capitalised words that are not the first of a sentence: names, places, products."""
    out = []
    first = True
    for m in _RAW_WORD.finditer(text):
        word = m.group(0)
        if not first and (word[0].isupper() or sum(c.isupper() for c in word) > 1):
            out.append(word.lower().strip(".'"))
        first = text[m.end() : m.end() + 2].strip()[:1] in {".", "?", "!"}
    return frozenset(w for w in out if w and w not in _STOP)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def pair_features(cosine: float, a: str, b: str) -> list[float]:
    """The feature vector (in :data:`FEATURE_NAMES` order) of texts ``a`` and ``b`` whose
    embeddings have cosine similarity ``cosine``."""
    x, y = text_info(a), text_info(b)
    union = x.content | y.content
    only = len(x.content ^ y.content)
    nums_x, nums_y = x.numbers, y.numbers
    ent_only = len(x.entities ^ y.entities)
    content_j = _jaccard(x.content, y.content)
    lx, ly = max(1, x.length), max(1, y.length)
    return [
        cosine,
        cosine * cosine,
        _jaccard(x.words, y.words),
        content_j,
        only / len(union) if union else 0.0,
        math.log1p(min(only, 8)),
        _jaccard(x.bigrams, y.bigrams),
        _jaccard(x.char3, y.char3),
        float((x.negations % 2) != (y.negations % 2)),
        float(bool(nums_x) and bool(nums_y) and nums_x != nums_y),
        float(bool(nums_x) != bool(nums_y)),
        _jaccard(x.entities, y.entities),
        math.log1p(min(ent_only, 4)),
        float(x.qword != y.qword),
        float(x.qkinds != y.qkinds),
        abs(math.log(lx / ly)),
        math.log(min(lx, ly)),
        cosine * content_j,
        float(x.content == y.content),
    ]
