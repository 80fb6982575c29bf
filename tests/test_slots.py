"""The slot guard (cachekit.semantic.policy.slots): each rule on its own, property tests that random
number, name, negation and role swaps never hit, paraphrases that keep their slots (and their
roles) still hit, code that differs by a character never hits, and the
rules through the tier in both call forms, the policies, telemetry and the LLM cache config.

Through the tier the tests use :class:`SameVectorTestEmbedder`, which gives every text the same
vector: every stored entry is then a perfect neighbour (similarity 1.0), so nothing but the guard
stands between a slot-swapped prompt and a hit, and a test cannot pass by the embedder's grace.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachekit import Cache, Status
from cachekit.llm import LLMCacheConfig, build_cache
from cachekit.replay.runner import ReplayOptions, run_replay
from cachekit.semantic.policy.error_bounded import ErrorBoundedPolicy
from cachekit.semantic.policy.hit_policy import Candidate, Decision, ThresholdPolicy, guard_of
from cachekit.semantic.policy.registry import build_policy
from cachekit.semantic.policy.slots import (
    DEFAULT_GUARD,
    REFUSAL_KINDS,
    SlotGuard,
    refusal_kind,
    text_slots,
)
from cachekit.semantic.policy.verifier import VerifiedPolicy


class SameVectorTestEmbedder:
    """Every text gets one and the same unit vector (a test double, not a model)."""

    name = "same-vector-test"
    dim = 8

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = 1.0
        return out


def kind_of(query: str, candidate: str, guard: SlotGuard = DEFAULT_GUARD) -> str | None:
    reason = guard.check(query, candidate)
    return None if reason is None else refusal_kind(reason)


# ---------------------------------------------------------------------- one rule at a time

REFUSED = [
    ("Convert 63 kilometers to miles.", "Convert 61 kilometers to miles.", "numbers"),
    ("Boil an egg at 1000 meters", "Boil an egg at 3000 meters", "numbers"),
    ("Summarize chapter 114 of Moby Dick", "Summarize chapter 36 of Moby Dick", "numbers"),
    ("What is seventeen plus 25?", "What is eighteen plus 25?", "numbers"),
    ("Who won on the third day?", "Who won on the 4th day?", "numbers"),
    ("Revenue in the first quarter", "Revenue in the second quarter", "numbers"),
    ("What happened on March 3, 2024?", "What happened on March 4, 2024?", "numbers"),
    ("Convert 5 km to miles", "Convert 5 miles to km", "numbers"),
    ("Set the alarm for 7 am", "Set the alarm for 7 pm", "numbers"),
    ("Is $20 enough for lunch?", "Is 20% enough for a tip?", "numbers"),
    ("What is new in Python 3.11?", "What is new in Python 3.12?", "numbers"),
    ("Best laptop under 30K rupees", "Best laptop under 40,000 rupees", "numbers"),
    ("Which foods are not gluten-free?", "Which foods are gluten-free?", "negation"),
    ("Should I not drink coffee before bed?", "Should I drink coffee before bed?", "negation"),
    ("Why doesn't my build cache work?", "Why does my build cache work?", "negation"),
    ("Who drives on the right side?", "Who drives on the left side?", "opposites"),
    ("How do I increase the font size?", "How do I decrease the font size?", "opposites"),
    ("How do I enable two-factor login?", "How do I disable two-factor login?", "opposites"),
    ("What are the benefits of remote work?", "What are the drawbacks of remote work?",
     "opposites"),
    ("Should I stretch before running?", "Should I stretch after running?", "opposites"),
    ("What is the capital of France?", "What is the capital of Germany?", "names"),
    ("Is Toronto colder than Montreal?", "Is Toronto colder than Vancouver?", "names"),
    ("How do I install numpy?", "How do I install pandas?", "identifiers"),
    ("What does `os.path.join` do?", "What does `os.path.split` do?", "identifiers"),
    ("Why is max_retries ignored?", "Why is max_backoff ignored?", "identifiers"),
    ("What does git push --force do?", "What does git push --force-with-lease do?", "identifiers"),
    ("Summarize https://example.com/a", "Summarize https://example.com/b", "identifiers"),
    ("Email alice@example.com the invoice", "Email bob@example.com the invoice", "identifiers"),
    ('What does "carpe diem" mean?', 'What does "memento mori" mean?', "identifiers"),
    ("Explain the pattern ```^[a-z]+$```", "Explain the pattern ```^[A-Z]+$```", "code"),
    ("Bus times from Lyon to Geneva", "Bus times from Geneva to Lyon", "order"),
]  # fmt: skip

KEPT = [
    ("What is 17 plus 25?", "Could you tell me what 17 plus 25 is?"),
    ("What is seventeen plus twenty-five?", "What is 17 plus 25?"),
    ("Convert 5 km to miles", "How many miles is 5 kilometres?"),
    ("What happened on March 3, 2024?", "What happened on 2024-03-03?"),
    ("How much is $20 in euros?", "How much is 20 dollars in euros?"),
    ("Best laptop under 30K rupees", "Which laptop is best under 30,000 rupees?"),
    ("Should I buy the 2015 or the 2016 model?", "Should I buy the 2016 or 2015 model?"),
    ("Which one is better, Python or Java?", "Which is better: Python or Java?"),
    ("The first question one should ask here?", "The first question to ask here?"),
    ("Revenue of the first quarter, please", "Revenue of the first quarter"),
    ("Why can't I log in?", "Why am I unable to log in?"),
    ("Is Einstein an atheist? Why or why not?", "Is Einstein an atheist?"),
    ("How do I reset my router password?", "How can I reset the password of my router?"),
    ("What did Trump say about Canada?", "What has Trump's team said about Canada?"),
    ("Where is good coffee in Bangalore?", "Where can I find good coffee in Bangalore?"),
    ("What Is The Best Way To Learn Python?", "what is the best way to learn python"),
    ("Paris is the capital of France.", "The capital of France is Paris."),
    ("What does `os.path.join` do?", "what does os.path.join do"),
    ("How do I install numpy?", "How can numpy be installed?"),
]


@pytest.mark.parametrize(("query", "candidate", "kind"), REFUSED)
def test_each_rule_refuses_its_swap(query: str, candidate: str, kind: str) -> None:
    assert kind_of(query, candidate) == kind
    assert kind_of(candidate, query) == kind  # symmetric: either could have been stored first


@pytest.mark.parametrize(("query", "candidate"), KEPT)
def test_same_slot_paraphrases_pass(query: str, candidate: str) -> None:
    assert DEFAULT_GUARD.check(query, candidate) is None
    assert DEFAULT_GUARD.check(candidate, query) is None


def test_reasons_name_the_values() -> None:
    assert DEFAULT_GUARD.check("Convert 61 km to miles", "Convert 63 km to miles") == (
        "slots: numbers 61 km != 63 km"
    )
    assert DEFAULT_GUARD.check("the capital of France", "the capital of Spain") == (
        "slots: names france != spain"
    )


def test_long_texts_are_never_compared_past_the_window() -> None:
    preamble = "The tenant shall keep the premises in good repair at all times. " * 30
    a, b = preamble + "What is the notice period?", preamble + "Who pays for repairs?"
    assert kind_of(a, b) == "truncated"
    assert kind_of(a, a + " Please answer briefly.") == "truncated"
    short = SlotGuard(window_tokens=10_000)  # the same texts, as if the window were wide
    assert kind_of(a, b, short) == "preamble"


def test_huge_texts_cost_no_more_than_the_window_and_are_not_kept() -> None:
    text_slots.cache_clear()
    huge = "word " * 200_000 + "What is the fee?"
    assert DEFAULT_GUARD.check(huge, "What is the fee?") == (
        "truncated: over the embedder's 256 tokens"
    )
    assert DEFAULT_GUARD.check("x" * 1_000_000, "y") is not None
    assert text_slots.cache_info().currsize == 0  # neither was parsed, so neither is memoised


def test_a_shared_preamble_with_another_question_is_refused() -> None:
    preamble = (
        "You are a careful assistant for a bank. Answer from the policy below and say when it "
        "does not cover the question. Policy: accounts may be closed online at any time. "
    )
    assert kind_of(preamble + "How do I close my account?", preamble + "How do I open one?") == (
        "preamble"
    )
    # Function words alone ("What's" / "What is") are not another question.
    assert DEFAULT_GUARD.check(preamble + "What's the fee?", preamble + "What is the fee?") is None


def test_rules_can_be_turned_off_and_settings_are_checked() -> None:
    swap = ("Convert 61 km to miles", "Convert 63 km to miles")
    assert SlotGuard(numbers=False).check(*swap) is None
    assert "off=['numbers']" in repr(SlotGuard(numbers=False))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="window_tokens"):
            SlotGuard(window_tokens=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- order and code

ORDER_SWAPS = [
    ("Train times from Lyon to Geneva", "Train times from Geneva to Lyon"),
    ("Train times from Lyon to Geneva", "Train times to Lyon from Geneva"),
    ("Rome -> Naples bus schedule", "Naples -> Rome bus schedule"),
    ("Translate this from Italian into Dutch", "Translate this from Dutch into Italian"),
    ("Convert GBP to JPY", "Convert JPY to GBP"),
    ("convert fahrenheit to celsius", "convert celsius to fahrenheit"),
    ("How do I cast a float to an int in C?", "How do I cast an int to a float in C?"),
    ("Merge develop into main", "Merge main into develop"),
    ("Is Norway richer than Sweden?", "Is Sweden richer than Norway?"),
    ("Does Lima have more people than Quito?", "Does Quito have more people than Lima?"),
    ("Is 12 more than 9?", "Is 9 more than 12?"),
    ("Is seven more than 5?", "Is 5 more than 7?"),
    ("Why choose Vue over Svelte?", "Why choose Svelte over Vue?"),
    ("Why use Rust rather than Go?", "Why use Go rather than Rust?"),
    ("Why is Quora superior to Reddit?", "Why is Reddit superior to Quora?"),
    ("Did Spain beat Italy in 2012?", "Did Italy beat Spain in 2012?"),
    ("Did Spain beat Italy in 2012?", "Was Spain beaten by Italy in 2012?"),
    ("Has Ajax ever won against Porto?", "Has Porto ever won against Ajax?"),
    ("Why did the US attack Japan?", "Why did Japan attack the US?"),
    ("A letter from a buyer to a seller", "A letter from a seller to a buyer"),
    ("Can an employee sue an employer?", "Can an employer sue an employee?"),
    ("Can a landlord evict a tenant?", "Can a tenant evict a landlord?"),
    ("Replace tabs with spaces in vim", "Replace spaces with tabs in vim"),
]  # fmt: skip

ORDER_KEPT = [
    # the same roles in another order of words
    ("How do I get from Lyon to Geneva?", "What's the quickest way to Geneva from Lyon?"),
    ("Translate Italian to Dutch", "Please translate into Dutch from Italian"),
    ("Did Spain beat Italy in 2012?", "Was Italy beaten by Spain in 2012?"),
    ("Did Spain beat Italy in 2012?", "Did Italy lose to Spain in 2012?"),
    ("Can a landlord evict a tenant?", "Can a tenant be evicted by a landlord?"),
    ("Is Norway richer than Sweden?", "Is Norway wealthier than Sweden?"),
    ("Should I move to Canada from India?", "Should I move from India to Canada?"),
    ("How do I redirect HTTP to HTTPS?", "How do I use HTTPS instead of HTTP?"),
    # orders that do not matter
    ("Train times between Lyon and Geneva", "Train times between Geneva and Lyon"),
    ("Lyon or Geneva for a weekend?", "Geneva or Lyon for a weekend?"),
    ("Compare Vue with Svelte", "Compare Svelte with Vue"),
    ("Compare Vue to Svelte", "Compare Svelte to Vue"),
    ("Vue vs Svelte: which is better?", "Svelte vs Vue: which is better?"),
    ("How far is it from Lyon to Geneva?", "How far is it from Geneva to Lyon?"),
    ("What is the difference between a lender and a borrower?",
     "What is the difference between a borrower and a lender?"),
    ("Is Italian similar to Spanish?", "Is Spanish similar to Italian?"),
    # infinitives and frames with nothing to swap
    ("What music is good to listen to?", "Where can I listen to good music?"),
    ("If a landlord won't fix the heating, what can the tenant do?",
     "What can a tenant do if the landlord won't fix the heating?"),
]  # fmt: skip


@pytest.mark.parametrize(("query", "candidate"), ORDER_SWAPS)
def test_swapped_roles_are_refused(query: str, candidate: str) -> None:
    assert kind_of(query, candidate) == "order"
    assert kind_of(candidate, query) == "order"


@pytest.mark.parametrize(("query", "candidate"), ORDER_KEPT)
def test_kept_roles_and_symmetric_orders_pass(query: str, candidate: str) -> None:
    assert DEFAULT_GUARD.check(query, candidate) is None
    assert DEFAULT_GUARD.check(candidate, query) is None


MIRRORED = [
    # roles that no frame word marks, held by the words around them
    ("Is it hard for Dutch speakers to learn Chinese?",
     "Is it hard for Chinese speakers to learn Dutch?"),
    ("Why do cats chase dogs?", "Why do dogs chase cats?"),
    ("What time is it in Oslo when it is noon in Lima?",
     "What time is it in Lima when it is noon in Oslo?"),
    ("Do citizens of Chile need a visa for Peru?", "Do citizens of Peru need a visa for Chile?"),
    ("Why do New Yorkers dislike Bostonians?", "Why do Bostonians dislike New Yorkers?"),
]  # fmt: skip

MIRRORED_SAME = [
    ("Who won, Argentina or France?", "Who won, France or Argentina?"),
    ("Result of Ajax against Porto?", "Result of Porto against Ajax?"),
    ("Best pizza in New York or Chicago", "Best pizza in Chicago or New York"),
    ("Is Italian close to Spanish?", "Is Spanish close to Italian?"),
    ("a big red ball", "a red big ball"),  # next to each other: word order, not roles
    ("is it true", "it is true"),  # function words only
]


@pytest.mark.parametrize(("query", "candidate"), MIRRORED)
def test_exchanged_words_are_refused_without_a_frame(query: str, candidate: str) -> None:
    assert kind_of(query, candidate) == "order"
    assert kind_of(candidate, query) == "order"


@pytest.mark.parametrize(("query", "candidate"), MIRRORED_SAME)
def test_exchanges_that_do_not_change_roles_pass(query: str, candidate: str) -> None:
    assert DEFAULT_GUARD.check(query, candidate) is None
    assert DEFAULT_GUARD.check(candidate, query) is None


def test_an_order_reason_names_the_values() -> None:
    assert DEFAULT_GUARD.check("Flights from Lyon to Geneva", "Flights from Geneva to Lyon") == (
        "slots: order lyon -> geneva != geneva -> lyon"
    )
    # Both orders in one text: nothing to tell apart.
    both = "Trains from Lyon to Geneva and from Geneva to Lyon"
    assert DEFAULT_GUARD.check(both, "Trains from Geneva to Lyon and from Lyon to Geneva") is None


CODE_REFUSED = [
    ("Explain the regex ```^[a-z]+$```", "Explain the regex ```^[A-Z]+$```"),
    ("What does `ls -l` print?", "What does `ls -L` print?"),
    ("Why is ```x = y``` wrong?", "Why is ```x == y``` wrong?"),
    ("Is `SELECT * FROM Users` right?", "Is `SELECT * FROM users` right?"),
    ("Fix this:\n```python\nprint(Name)\n```", "Fix this:\n```python\nprint(name)\n```"),
    ("What does `a === b` return?", "What does `a == b` return?"),
    # code in one text only
    ("Explain the regex ```^[a-z]+$```", "Explain the regex"),
    ("Explain the regex ```^[a-z]+$```", "Explain the regex ^[A-Z]+$"),
]  # fmt: skip
CODE_KEPT = [
    ("Explain the regex ```^[a-z]+$```", "What does the regex `^[a-z]+$` match?"),
    ("Fix:\n```python\nx = 1\ny = 2\n```", "Fix:\r\n```python\r\nx = 1  \r\ny = 2\r\n```"),
    ("Fix this:\n```python\nx = 1\n```", "Fix this: ```x = 1```"),  # the language is no code
    ("What does `os.path.join` do?", "what does os.path.join do"),  # written out as it is
    ("Why do `a` and `b` differ?", "Why do `b` and `a` differ?"),
]  # fmt: skip


@pytest.mark.parametrize(("query", "candidate"), CODE_REFUSED)
def test_code_must_match_exactly(query: str, candidate: str) -> None:
    reason = DEFAULT_GUARD.check(query, candidate)
    assert reason is not None and DEFAULT_GUARD.check(candidate, query) is not None
    # Whichever rule sees it first, the code rule alone refuses it too.
    only_code = SlotGuard(numbers=False, negation=False, opposites=False, names=False,
                          identifiers=False, order=False)  # fmt: skip
    assert kind_of(query, candidate, only_code) == "code"
    assert kind_of(candidate, query, only_code) == "code"


@pytest.mark.parametrize(("query", "candidate"), CODE_KEPT)
def test_the_same_code_passes(query: str, candidate: str) -> None:
    assert DEFAULT_GUARD.check(query, candidate) is None
    assert DEFAULT_GUARD.check(candidate, query) is None


def test_a_code_reason_shows_the_code() -> None:
    assert DEFAULT_GUARD.check("Explain ```^[a-z]+$```", "Explain ```^[A-Z]+$```") == (
        "slots: code ^[a-z]+$ != ^[A-Z]+$"
    )
    assert DEFAULT_GUARD.check("Explain:\n```\n^[a-z]+$\n```", "Explain it") == (
        "slots: code ^[a-z]+$ != none"
    )


def test_order_and_code_can_be_turned_off_and_are_counted() -> None:
    swap = ("Bus times from Lyon to Geneva", "Bus times from Geneva to Lyon")
    code = ("Explain ```^[a-z]+$```", "Explain ```^[A-Z]+$```")
    assert SlotGuard(order=False).check(*swap) is None
    assert SlotGuard(code=False).check(*code) is None
    assert SlotGuard(code=False).check(*swap) is not None
    assert SlotGuard(order=False).check(*code) is not None
    assert "off=['code', 'order']" in repr(SlotGuard(order=False, code=False))
    assert {"order", "code"} <= set(REFUSAL_KINDS)
    assert refusal_kind("slots: order lyon -> geneva != geneva -> lyon") == "order"
    assert refusal_kind("slots: code ^[a-z]+$ != ^[A-Z]+$") == "code"


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("twenty-three and nine", ["23", "9"]),  # two numbers, not 32
        ("two hundred and five", ["205"]),
        ("one hundred twenty-five", ["125"]),
        ("five hundred thousand", ["500000"]),
        ("the twenty-first of them", ["21"]),
        ("seventeen plus twenty five", ["17", "25"]),
        ("March 3, 2024 at 7 pm", ["date:2024-03-03", "7"]),
        ("costs 30K or $1,500.50", ["30000", "1500.50"]),
        ("Python 3.11.2 at -9 degrees", ["3.11.2", "-9"]),
    ],
)
def test_numbers_are_read_as_people_write_them(text: str, values: list[str]) -> None:
    assert [n.value for n in text_slots(text).numbers] == values


def test_slots_are_parsed_once_per_text() -> None:
    text = "How far is 42 km in miles, in the 3rd edition?"
    assert text_slots(text) is text_slots(text)
    assert [n.value for n in text_slots(text).numbers] == ["42", "3"]


# ---------------------------------------------------------------------- properties

NAMES = [
    "France", "Germany", "Spain", "Italy", "Japan", "Brazil", "Kenya", "Canada", "Norway",
    "Toronto", "Lisbon", "Oslo", "Nairobi", "Alice", "Bob", "Kubernetes", "PostgreSQL",
]  # fmt: skip
NUMBER_TEMPLATES = [
    "Convert {} kilometers to miles.",
    "How long does an egg boil at an altitude of {} meters?",
    "Summarize chapter {} of the book.",
    "What is {} plus 25?",
    "Give me {} ideas for a birthday party.",
    "Is a {} GB plan enough for a month?",
]
NAME_TEMPLATES = [
    "What is the capital of {}?",
    "What is the weather like in {} in spring?",
    "How do I get a work visa for {}?",
    "Tell me about the history of {} in one paragraph.",
]
NEGATION_PAIRS = [
    ("Which foods are gluten-free?", "Which foods are not gluten-free?"),
    ("Should I drink coffee at night?", "Should I never drink coffee at night?"),
    ("Can I travel with a dog?", "Can I travel without a dog?"),
    ("Does the app store my data?", "Doesn't the app store my data?"),
]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(NUMBER_TEMPLATES),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
def test_random_number_swaps_never_pass(template: str, a: int, b: int) -> None:
    if a != b:
        assert kind_of(template.format(a), template.format(b)) == "numbers"


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(NAME_TEMPLATES), st.sampled_from(NAMES), st.sampled_from(NAMES))
def test_random_name_swaps_never_pass(template: str, a: str, b: str) -> None:
    if a != b:
        assert kind_of(template.format(a), template.format(b)) == "names"


DIRECTED = [
    "How long is the flight from {} to {}?",
    "Cheapest way to send a parcel to {1} from {0}?",
    "Is {} bigger than {}?",
    "Did {} beat {} last year?",
    "{} -> {} converter",
]
UNDIRECTED = [
    "What is the distance between {} and {}?",
    "{} or {}: which should I visit?",
    "Compare {} with {}.",
    "{} vs {}: who won?",
]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(DIRECTED), st.sampled_from(NAMES), st.sampled_from(NAMES))
def test_random_role_swaps_never_pass(template: str, a: str, b: str) -> None:
    if a != b:
        assert kind_of(template.format(a, b), template.format(b, a)) == "order"


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(UNDIRECTED), st.sampled_from(NAMES), st.sampled_from(NAMES))
def test_orders_that_do_not_matter_pass(template: str, a: str, b: str) -> None:
    assert DEFAULT_GUARD.check(template.format(a, b), template.format(b, a)) is None


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(NEGATION_PAIRS), st.sampled_from(["", "Please tell me: ", "Quick one. "]))
def test_negations_never_pass(pair: tuple[str, str], prefix: str) -> None:
    assert kind_of(prefix + pair[0], prefix + pair[1]) == "negation"


WORDISH = st.sampled_from(
    "not no never without one first second 3 3rd third 2024-03-03 March May 5 km $20 -9 % "
    'Paris paris PARIS numpy install `x` "q" https://a.b/c a@b.co os.path.join --force '
    "increase decrease turn on off left right Title Case I'm don't can't , . ? ! \n".split(" ")
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=120), st.lists(WORDISH, max_size=25).map(" ".join)),
    st.one_of(st.text(max_size=120), st.lists(WORDISH, max_size=25).map(" ".join)),
)
def test_any_text_gets_an_answer_and_the_same_one_both_ways(a: str, b: str) -> None:
    """Whatever a client sends (it may also be a stored entry's text), the guard answers without
    raising, and refuses a pair whichever of the two was stored first."""
    ab, ba = DEFAULT_GUARD.check(a, b), DEFAULT_GUARD.check(b, a)
    assert (ab is None) == (ba is None)
    assert ab is None or refusal_kind(ab) == refusal_kind(ba or "")


# ---------------------------------------------------------------------- through the tier


def semantic_fn(cache: Cache, closing: Callable[[Any], Any], is_async: bool, **kw: Any) -> Any:
    if is_async:

        @cache.semantic(embedder=SameVectorTestEmbedder(), **kw)
        async def answer(prompt: str) -> str:
            return "answer to " + prompt

    else:

        @cache.semantic(embedder=SameVectorTestEmbedder(), **kw)
        def answer(prompt: str) -> str:
            return "answer to " + prompt

    return closing(answer)


async def run(fn: Any, is_async: bool, method: str, *args: Any) -> Any:
    out = getattr(fn, method)(*args)
    return await out if is_async else out


LONG = "The tenant shall keep the premises in good repair at all times. " * 30
PREAMBLE = (
    "You are a careful assistant for a bank. Answer from the policy below and say when it does "
    "not cover the question. Policy: accounts may be closed online at any time. "
)
#: One example of every rule: the first of each kind above, a long prompt and a preamble.
ONE_PER_RULE = [
    *{kind: (q, c, kind) for q, c, kind in reversed(REFUSED)}.values(),
    (LONG + "What is the notice period?", LONG + "Who pays for repairs?", "truncated"),
    (PREAMBLE + "How do I close my account?", PREAMBLE + "How do I open one?", "preamble"),
]


def test_one_per_rule_covers_every_kind() -> None:
    assert sorted(kind for _, _, kind in ONE_PER_RULE) == sorted(REFUSAL_KINDS)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("query", "stored", "kind"), ONE_PER_RULE)
async def test_tier_never_serves_a_slot_swap(
    closing: Any, is_async: bool, query: str, stored: str, kind: str
) -> None:
    answer = semantic_fn(Cache(), closing, is_async)
    await run(answer, is_async, "__call__", stored)
    miss = await run(answer, is_async, "lookup", query)
    assert miss.status is Status.MISS and miss.similarity == pytest.approx(1.0)
    assert miss.reason is not None and refusal_kind(miss.reason) == kind
    assert miss.matched_text == stored
    assert await run(answer, is_async, "__call__", query) == "answer to " + query


@pytest.mark.parametrize(("query", "stored", "kind"), ONE_PER_RULE)
def test_replay_refuses_and_lists_each_rule(
    tmp_path: Path, query: str, stored: str, kind: str
) -> None:
    """Replay runs the production cache: the second request misses, and the listing says why."""
    log = tmp_path / "log.jsonl"
    truth = tmp_path / "truth.jsonl"
    lines, facts = [], []
    for cid, text, answer in (("r1", stored, "A"), ("r2", query, "B")):
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
        response = {
            "id": f"chatcmpl-{cid}",
            "object": "chat.completion",
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }  # fmt: skip
        lines.append({"custom_id": cid, "request": body, "response": response})
        facts.append({"custom_id": cid, "kind": "new", "answer": answer, "equivalent_to": None})
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    truth.write_text("".join(json.dumps(x) + "\n" for x in facts))
    report = run_replay(
        log, truth_path=truth, options=ReplayOptions(embedder=SameVectorTestEmbedder())
    )
    assert report.semantic_hits == 0 and report.wrong_hits == 0
    assert report.refusals == {kind: 1}
    (near,) = report.near_sample
    assert (near.custom_id, near.nearest_custom_id) == ("r2", "r1")
    assert refusal_kind(near.reason) == kind and near.verdict is False


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("query", "stored"), KEPT[::4])
async def test_tier_still_serves_a_paraphrase(
    closing: Any, is_async: bool, query: str, stored: str
) -> None:
    answer = semantic_fn(Cache(), closing, is_async)
    await run(answer, is_async, "__call__", stored)
    hit = await run(answer, is_async, "lookup", query)
    assert hit.status is Status.SEMANTIC_HIT and hit.value == "answer to " + stored
    assert hit.reason is None


def test_a_refused_nearest_does_not_hide_a_matching_neighbour(closing: Any) -> None:
    answer = semantic_fn(Cache(), closing, False)
    answer("Convert 61 km to miles")
    answer("Convert 63 km to miles")
    assert answer.lookup("How many miles are 63 km?").value == "answer to Convert 63 km to miles"


def test_refusals_are_counted_by_reason_and_exported(closing: Any) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest

    from cachekit import register_prometheus

    cache = Cache(namespace="slots-metrics")
    answer = semantic_fn(cache, closing, False)
    answer("What is the capital of France?")
    answer("What is the capital of Spain?")  # names
    answer("Convert 5 km to miles")  # numbers (the nearest, a capital, has none)
    answer("Convert 6 km to miles")  # numbers
    answer("Convert 7 km to miles")  # numbers
    section = cache.stats().extra[f"semantic:{answer.tier.name}"]
    assert section["refusals"] == {"names": 1, "numbers": 3}
    registry = CollectorRegistry()
    register_prometheus(cache, registry=registry)
    text = generate_latest(registry).decode()
    assert "cachekit_semantic_refusals_total{" in text
    line = next(x for x in text.splitlines() if 'reason="numbers"' in x)
    assert line.endswith(" 3.0")


def test_threshold_miss_says_so(closing: Any) -> None:
    emb = SameVectorTestEmbedder()

    class Half(SameVectorTestEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            out = emb.embed(texts)
            for i, t in enumerate(texts):
                if "second" in t:
                    out[i] = np.array([0.8, 0.6, 0, 0, 0, 0, 0, 0], dtype=np.float32)
            return out

    cache = Cache()

    @cache.semantic(embedder=Half())
    def answer(prompt: str) -> str:
        return prompt

    closing(answer)
    answer("a first prompt")
    miss = answer.lookup("a second prompt")
    assert miss.status is Status.MISS and miss.reason == "below threshold 0.8000 < 0.9"


# ---------------------------------------------------------------------- policies and config


def test_matching_numbers_lower_the_bar_a_little() -> None:
    policy = ThresholdPolicy(0.9)
    assert policy.floor == pytest.approx(0.86)
    same = "What is 17 plus 25?", "17 + 25 = ?"
    assert policy.bar(*same) == pytest.approx(0.86)
    assert policy.decide(same[0], [Candidate(1, same[1], 0.87)]) == Decision(serve=0)
    assert policy.bar("What is the capital of France?", "Capital of France?") == 0.9  # no numbers
    miss = policy.decide("Tell me a joke", [Candidate(1, "A joke, please", 0.87)])
    assert miss == Decision() and miss.reason == "below threshold 0.8700 < 0.9"
    strict = ThresholdPolicy(0.9, number_bonus=0.0)
    assert (
        strict.floor == 0.9 and strict.decide(same[0], [Candidate(1, same[1], 0.87)]) == Decision()
    )
    for bad in (0.9, -0.1):
        with pytest.raises(ValueError, match="number_bonus"):
            ThresholdPolicy(0.9, number_bonus=bad)


def test_policies_carry_the_guard_and_can_opt_out(closing: Any) -> None:
    assert ThresholdPolicy().guard is DEFAULT_GUARD
    assert VerifiedPolicy().guard is DEFAULT_GUARD
    assert ErrorBoundedPolicy().guard is DEFAULT_GUARD
    assert ThresholdPolicy(guard=None).guard is None

    class Legacy:  # a policy written before guards existed is guarded too
        name = "legacy"

        def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision:
            return Decision(serve=0)

        def observe(self, query: str, candidate: Candidate, correct: bool) -> None:
            pass

    assert guard_of(Legacy()) is DEFAULT_GUARD
    unguarded = semantic_fn(Cache(), closing, False, policy=ThresholdPolicy(guard=None))
    unguarded("Convert 61 km to miles")
    assert unguarded.lookup("Convert 63 km to miles").status is Status.SEMANTIC_HIT
    with pytest.raises(TypeError, match="SlotCheck"):
        ThresholdPolicy(guard="numbers")  # type: ignore[arg-type]


def test_a_policy_can_plug_its_own_guard(closing: Any) -> None:
    class NoTuesdays:
        def check(self, query: str, candidate: str) -> str | None:
            return "tuesday" if "tuesday" in query.lower() else None

    answer = semantic_fn(Cache(), closing, False, policy=ThresholdPolicy(guard=NoTuesdays()))
    answer("Plan my week")
    assert answer.lookup("Plan my week, from Monday").status is Status.SEMANTIC_HIT
    miss = answer.lookup("Plan my Tuesday")
    assert miss.status is Status.MISS and miss.reason == "tuesday"


@pytest.mark.parametrize("name", ["threshold", "verified", "error-bounded"])
def test_every_named_policy_is_guarded_unless_told(closing: Any, name: str) -> None:
    assert build_policy(name).guard is DEFAULT_GUARD  # type: ignore[attr-defined]
    assert build_policy(name, guard=False).guard is None  # type: ignore[attr-defined]
    policy = build_policy(name, None if name != "error-bounded" else 0.5)
    answer = semantic_fn(Cache(), closing, False, policy=policy)
    answer("Convert 61 km to miles")
    miss = answer.lookup("Convert 63 km to miles")
    assert miss.status is Status.MISS and refusal_kind(miss.reason or "") == "numbers"


def test_llm_cache_config_turns_the_guard_off() -> None:
    with pytest.raises(ValueError, match="slot_guard"):
        LLMCacheConfig.from_mapping({"slot_guard": "no"})
    emb = SameVectorTestEmbedder()
    guarded = build_cache(LLMCacheConfig(), embedder=emb)
    loose = build_cache(LLMCacheConfig(slot_guard=False, threshold=0.95), embedder=emb)
    try:
        assert guard_of(guarded.semantic_function().policy) is DEFAULT_GUARD
        policy = loose.semantic_function().policy
        assert guard_of(policy) is None and policy.threshold == 0.95
    finally:
        guarded.close()
        loose.close()


def test_guard_cost_is_small_per_candidate() -> None:
    """Not a timing test: the parse is memoised, so a candidate's text is parsed once however
    often it is compared."""
    rng = random.Random(1)
    stored = [f"Convert {rng.randint(1, 999)} km to miles" for _ in range(50)]
    text_slots.cache_clear()
    for _ in range(3):
        for s in stored:
            DEFAULT_GUARD.check("Convert 5 km to miles", s)
    info = text_slots.cache_info()
    assert info.misses <= len(set(stored)) + 1 and info.hits >= 2 * len(stored)


def test_asyncio_is_not_needed_for_the_guard() -> None:
    # The guard is plain Python: usable from a running loop without blocking on anything.
    async def check() -> str | None:
        return DEFAULT_GUARD.check("Is 7 > 5?", "Is 8 > 5?")

    assert asyncio.run(check()) is not None


def test_serve_and_replay_take_no_slot_guard() -> None:
    import argparse

    from cachekit.proxy.server import add_arguments, config_from_args
    from cachekit.replay.cli import add_parser

    serve = argparse.ArgumentParser()
    add_arguments(serve)
    on = config_from_args(serve.parse_args(["--upstream", "http://127.0.0.1:9"]))
    off = config_from_args(
        serve.parse_args(["--upstream", "http://127.0.0.1:9", "--no-slot-guard"])
    )
    assert on.cache.slot_guard is True and off.cache.slot_guard is False
    replay = add_parser(argparse.ArgumentParser().add_subparsers())
    assert replay.parse_args(["log.jsonl", "--no-slot-guard"]).no_slot_guard is True
    assert replay.parse_args(["log.jsonl"]).no_slot_guard is False
