"""Hit policies beyond a static threshold: pair features, the verifier, the error-bounded policy,
the arbiter's verdicts and user feedback. The deterministic test embedder only (no model)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.semantic.arbiter import HitArbiter
from cachekit.semantic.policy.error_bounded import EmbeddingComparator, ErrorBoundedPolicy
from cachekit.semantic.policy.hit_policy import (
    AcceptPolicyAdapter,
    Candidate,
    Decision,
    EntryStats,
    ThresholdPolicy,
    resolve_policy,
)
from cachekit.semantic.policy.verifier import (
    VerifiedPolicy,
    VerifierModel,
    load_pairs,
    pair_part,
    train_verifier,
)
from cachekit.semantic.policy.verifier_features import FEATURE_NAMES, pair_features
from cachekit.testing.embedders import DeterministicTestEmbedder

STORED = "how do I reset my password"
CLOSE = "how do I reset my password please"  # 0.913 with STORED under the test embedder


def feature(name: str, cosine: float, a: str, b: str) -> float:
    return pair_features(cosine, a, b)[FEATURE_NAMES.index(name)]


# ---------------------------------------------------------------------- features


def test_features_see_what_embeddings_blur() -> None:
    base = "How do I reset my password?"
    assert feature("negation_mismatch", 0.93, base, "How do I not reset my password?") == 1.0
    assert feature("negation_mismatch", 0.93, base, "How can I reset my password?") == 0.0
    assert feature("numbers_differ", 0.95, "Best phone of 2016?", "Best phone of 2017?") == 1.0
    assert feature("numbers_differ", 0.95, "Best phone of 2016?", "Top phone of 2016?") == 0.0
    assert feature("number_one_side", 0.9, "Best phone of 2016?", "Best phone?") == 1.0
    assert feature("entity_only_one", 0.9, "Is Paris nice in May?", "Is Rome nice in May?") > 0
    assert feature("entity_only_one", 0.9, "Is Paris nice in May?", "Is Paris nice in may?") == 0
    assert feature("qword_mismatch", 0.9, "Why is the sky blue?", "How is the sky blue?") == 1.0
    assert (
        feature("qkind_mismatch", 0.9, "How many cats are there?", "How much do cats cost?") == 1.0
    )
    assert feature("identical_content", 0.9, "What is love?", "what is LOVE") == 1.0
    assert feature("content_jaccard", 0.5, "apples and pears", "cars and trucks") == 0.0


def test_features_are_symmetric_and_bounded() -> None:
    texts = [
        "How do I learn Python in 2024?",
        "What's the fastest way to learn Python?",
        "Why don't Indians follow traffic rules?",
        "",
        "!!!",
    ]
    for a in texts:
        for b in texts:
            fa, fb = pair_features(0.8, a, b), pair_features(0.8, b, a)
            assert fa == pytest.approx(fb)
            assert len(fa) == len(FEATURE_NAMES)
            assert all(abs(x) < 10 for x in fa)


# ---------------------------------------------------------------------- policies


def cands(*sims: float, texts: Sequence[str] | None = None) -> list[Candidate]:
    texts = texts or [f"text {i}" for i in range(len(sims))]
    return [Candidate(i, t, s) for i, (t, s) in enumerate(zip(texts, sims, strict=True))]


def test_threshold_policy_decides_on_candidates() -> None:
    p = ThresholdPolicy(0.9)
    assert p.decide("q", cands(0.95, 0.91)) == Decision(serve=0)
    miss = p.decide("q", cands(0.89, 0.5))
    assert miss == Decision() and miss.reason == "below threshold 0.8900 < 0.9"


def test_accept_only_policies_are_adapted() -> None:
    class Old:
        name = "old"

        def accept(self, similarity: float, query: str, candidate: str) -> bool:
            return candidate == "second"

    p = resolve_policy(None, Old())
    assert isinstance(p, AcceptPolicyAdapter) and p.name == "old"
    assert p.decide("q", cands(0.9, 0.8, texts=["first", "second"])) == Decision(serve=1)
    with pytest.raises(TypeError, match="decide"):
        resolve_policy(None, object())
    with pytest.raises(ValueError, match="not both"):
        resolve_policy(0.9, ThresholdPolicy())


def tiny_model(threshold: float = 0.5) -> VerifierModel:
    """A hand-made verifier: the cosine counts, a negation mismatch vetoes."""
    n = len(FEATURE_NAMES)
    weights = [0.0] * n
    weights[FEATURE_NAMES.index("cosine")] = 40.0
    weights[FEATURE_NAMES.index("negation_mismatch")] = -50.0
    return VerifierModel(tuple(weights), -36.0, (0.0,) * n, (1.0,) * n, threshold)


def test_verified_policy_prefers_the_verified_candidate() -> None:
    policy = VerifiedPolicy(tiny_model(), prefilter=0.7)
    q = "How do I reset my password?"
    offered = cands(
        0.93, 0.92, texts=["How do I not reset my password?", "How can I reset my password?"]
    )
    assert policy.decide(q, offered) == Decision(serve=1)  # the nearer one negates the query
    assert policy.decide(q, offered[:1]) == Decision()
    assert policy.decide(q, cands(0.6, texts=["How can I reset my password?"])) == Decision()


def test_verifier_model_round_trips_and_rejects_foreign_features(tmp_path: Path) -> None:
    m = tiny_model(0.42)
    path = m.save(tmp_path)
    assert path.name == "verifier.json"
    back = VerifierModel.load(tmp_path)
    assert back.weights == m.weights and back.threshold == 0.42
    raw = json.loads(path.read_text())
    raw["features"] = raw["features"][:-1]
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="other features"):
        VerifierModel.load(path)


def test_packaged_model_loads_offline() -> None:
    m = VerifierModel.load()
    assert 0 < m.threshold < 1 and m.info["train_pairs"] > 1000
    p = VerifiedPolicy()
    q = "How do I reset my password?"
    yes = p.model.probability(0.97, q, "How can I reset my password?")
    no = p.model.probability(0.93, q, "How do I not reset my password?")
    assert yes > no


# ---------------------------------------------------------------------- training


def synthetic_pairs(path: Path, n: int = 240) -> Path:
    """Duplicates share their topic words; non-duplicates change a number or negate."""
    rng = random.Random(7)
    words = ["garden", "rocket", "violin", "harbor", "pepper", "glacier", "lantern", "falcon"]
    with open(path, "w") as fh:
        for i in range(n):
            a, b = rng.sample(words, 2)
            q = f"how do I fix the {a} {b} number {i}"
            if i % 2:
                row = {
                    "query": q,
                    "cached": f"how can I fix the {a} {b} number {i}",
                    "duplicate": True,
                }
            else:
                row = {
                    "query": q,
                    "cached": f"how do I not fix the {a} {b} number {i + 1}",
                    "duplicate": False,
                }
            fh.write(json.dumps(row) + "\n")
    return path


def test_train_verifier_learns_from_a_pairs_file(tmp_path: Path) -> None:
    pairs = synthetic_pairs(tmp_path / "pairs.jsonl")
    lines: list[str] = []
    model = train_verifier(
        pairs, tmp_path / "out", embedder=DeterministicTestEmbedder(), log=lines.append
    )
    assert (tmp_path / "out" / "verifier.json").exists()
    assert model.info["train_pairs"] > 100 and model.info["test_pairs_unread"] > 0
    assert any("operating point" in line for line in lines)
    rows = [r for r in load_pairs(pairs) if pair_part(r.query, r.cached) == "test"]
    emb = DeterministicTestEmbedder()
    right = 0
    for r in rows:
        u, v = emb.embed([r.query, r.cached])
        right += (model.probability(float(u @ v), r.query, r.cached) >= 0.5) == r.duplicate
    assert right / len(rows) > 0.9


def test_bad_pairs_file_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "a", "cached": "b", "duplicate": true}\n{"query": "a"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_pairs(bad)


def test_train_verifier_command_reports_errors(tmp_path: Path, capsys: Any) -> None:
    from cachekit.cli.main import main

    assert main(["train-verifier", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path)]) == 2
    assert "train-verifier" in capsys.readouterr().err


def test_train_verifier_command_takes_an_embedder(tmp_path: Path, capsys: Any) -> None:
    from cachekit.cli.main import main

    pairs = synthetic_pairs(tmp_path / "pairs.jsonl")
    out = tmp_path / "out"
    spec = "cachekit.testing.embedders:DeterministicTestEmbedder"
    assert main(["train-verifier", str(pairs), "--out", str(out), "--embedder", spec]) == 0
    info = json.loads((out / "verifier.json").read_text())["info"]
    assert info["embedder"] == DeterministicTestEmbedder().name
    bad = ["train-verifier", str(pairs), "--out", str(out), "--embedder", "no_such_module:x"]
    assert main(bad) == 2
    assert "no_such_module" in capsys.readouterr().err


def test_pair_split_is_fixed() -> None:
    parts = [pair_part(f"q{i}", f"c{i}") for i in range(2000)]
    assert parts == [pair_part(f"q{i}", f"c{i}") for i in range(2000)]
    assert 0.55 < parts.count("train") / 2000 < 0.65
    assert 0.15 < parts.count("test") / 2000 < 0.25


# ---------------------------------------------------------------------- error-bounded


def test_error_bounded_misses_and_checks_until_it_has_evidence() -> None:
    policy = ErrorBoundedPolicy(0.05, rng=random.Random(1), explore_floor=0.0)
    # No evidence yet: the pessimistic error of any candidate is above the budget.
    assert policy.decide("q", cands(0.99)) == Decision(explore=0)
    assert policy.decide("q", cands(0.4)) == Decision()  # below the pre-filter: nothing to check
    for i in range(400):
        c = Candidate(i, "t", 0.95 + (i % 5) / 100)
        policy.observe("q", c, True)
        policy.observe("q", Candidate(i, "t", 0.75 + (i % 5) / 100), False)
    est, upper = policy.error_bounds(policy.score("q", Candidate(0, "t", 0.97)))
    assert upper < 0.05 and est <= upper
    assert policy.error_bounds(policy.score("q", Candidate(0, "t", 0.77)))[0] > 0.5
    decisions = [policy.decide("q", cands(0.97)) for _ in range(200)]
    assert decisions.count(Decision(serve=0)) > 150
    assert policy.decide("q", cands(0.77)) == Decision(explore=0)


def test_error_bounded_spends_no_more_than_its_budget() -> None:
    policy = ErrorBoundedPolicy(0.02, rng=random.Random(3), explore_floor=0.0)
    for i in range(300):
        policy.observe("q", Candidate(i, "t", 0.90), i % 10 != 0)  # 10% wrong at 0.90
    served = sum(policy.decide("q", cands(0.90)).serve is not None for _ in range(500))
    # Each hit at 0.90 costs >= 0.10 of the budget; 500 lookups afford 0.02 * 500 / 0.10 = 100.
    assert 0 < served <= 100
    assert policy.spent <= 0.02 * policy.lookups + 1e-9


def test_error_bounded_saved_budget_does_not_buy_doubtful_hits() -> None:
    """The level a hit must meet stays steady (max_error / share of lookups served): a budget
    saved up while nothing could be served is not spent on likelier-wrong candidates."""
    policy = ErrorBoundedPolicy(0.05, rng=random.Random(2), explore_floor=0.0, explore_scale=0.0)
    for i in range(300):
        policy.observe("q", Candidate(i, "t", 0.97), True)
        policy.observe("q", Candidate(i, "t", 0.90), i % 10 != 0)  # 10% wrong at 0.90
    doubtful = policy.error_bounds(policy.score("q", Candidate(0, "t", 0.90)))[1]
    for _ in range(100):
        policy.decide("q", cands(0.4))  # below the pre-filter: lookups that save budget
    served = sum(policy.decide("q", cands(0.97)).serve is not None for _ in range(200))
    assert served > 150
    budget_left = policy.max_error * policy.lookups - policy.spent
    assert budget_left > doubtful > policy.max_error * policy.lookups / policy.served
    assert policy.decide("q", cands(0.90)) == Decision(explore=0)


def test_error_bounded_exploration_is_seeded() -> None:
    def run(seed: int) -> list[Decision]:
        p = ErrorBoundedPolicy(0.05, rng=random.Random(seed), explore_floor=0.3)
        for i in range(200):
            p.observe("q", Candidate(i, "t", 0.97), True)
        return [p.decide("q", cands(0.97)) for _ in range(50)]

    first = run(5)
    assert first == run(5)
    assert Decision(explore=0) in first and Decision(serve=0) in first


def test_embedding_comparator() -> None:
    same = EmbeddingComparator(DeterministicTestEmbedder(), min_similarity=0.9)
    assert same("x", "x")
    assert same(STORED, CLOSE)
    assert not same(STORED, "what is the capital of france")


# ---------------------------------------------------------------------- arbiter, tier, feedback


class Recording:
    """Serves nothing; explores the nearest candidate; remembers verdicts. Unguarded: these
    tests are about verdicts, and their texts differ in numbers ("q1", "variant 3")."""

    name = "recording"
    guard = None

    def __init__(self) -> None:
        self.seen: list[tuple[str, Candidate, bool]] = []
        self.offered: list[list[Candidate]] = []

    def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision:
        self.offered.append(list(candidates))
        return Decision(explore=0)

    def observe(self, query: str, candidate: Candidate, correct: bool) -> None:
        self.seen.append((query, candidate, correct))


def make(cache: Cache, closing: Callable[[Any], Any], policy: Any, fn: Any = None) -> Any:
    calls: list[str] = []

    def answer(prompt: str) -> str:
        calls.append(prompt)
        return fn(prompt) if fn else "same answer"

    wrapped = closing(
        cache.semantic(answer, policy=policy, embedder=DeterministicTestEmbedder(), ttl=3600)
    )
    wrapped.calls = calls
    return wrapped


def test_exploration_compares_the_fresh_answer(closing: Any) -> None:
    policy = Recording()
    answer = make(Cache(), closing, policy)
    answer(STORED)
    assert answer(CLOSE) == "same answer"  # explored: computed, not served
    assert answer.calls == [STORED, CLOSE]
    query, cand, correct = policy.seen[-1]
    assert (query, cand.text, correct) == (CLOSE, STORED, True)
    assert answer.tier.arbiter.stats_of(cand.entry_id).confirmed == 1
    assert answer.tier.stats()["policy_checks"] == 1


async def test_exploration_in_async_functions(closing: Any) -> None:
    policy = Recording()
    cache = Cache()

    async def answer(prompt: str) -> str:
        await asyncio.sleep(0)
        return prompt.upper()

    fn = closing(cache.semantic(answer, policy=policy, embedder=DeterministicTestEmbedder()))
    await fn(STORED)
    await fn(CLOSE)
    assert policy.seen[-1][2] is False  # different answers


class _E:
    def __init__(self, id_: int, text: str, value: str) -> None:
        self.id, self.scope, self.text, self.value = id_, "s", text, value


def test_refuted_entries_are_demoted() -> None:
    policy = Recording()
    arb = HitArbiter(policy, decode=lambda e: e, evict=lambda s, t: False)
    stored = _E(1, "stored", "its answer")
    assert arb.choose("s", "q1", [(0.90, stored)]) is None  # explored
    assert arb.computed("s", "q1", "another answer") is False
    st = arb.stats_of(1)
    assert (st.refuted, st.max_refuted_similarity) == (1, 0.90)
    assert policy.seen[-1][1].stats.refuted == 1
    offered = len(policy.offered)
    assert arb.choose("s", "q2", [(0.85, stored)]) is None
    assert len(policy.offered) == offered  # at or below its refuted similarity: not offered
    arb.choose("s", "q3", [(0.95, stored)])
    assert [c.similarity for c in policy.offered[-1]] == [0.95]
    assert arb.computed("s", "q3", "its answer") is True
    assert arb.stats_of(1).confirmed == 1


def test_feedback_demotes_then_evicts(closing: Any) -> None:
    cache = Cache()
    answer = make(cache, closing, ThresholdPolicy(0.85))
    answer(STORED)
    hit = answer.lookup(CLOSE)
    assert hit.status is Status.SEMANTIC_HIT
    assert cache.feedback(hit, correct=False) is True
    assert answer.lookup(CLOSE).status is Status.MISS  # demoted at its similarity
    again = answer.lookup("How do I reset my password?")  # same words: above the refuted bar
    assert again.status is Status.SEMANTIC_HIT
    assert cache.feedback(again, correct=False)
    assert len(answer.tier) == 0  # refuted twice by users: evicted
    assert answer.tier.stats()["feedback_evictions"] == 1
    answer(STORED)
    assert cache.feedback(answer.lookup(STORED), correct=False) is False  # exact hits: not ours
    with pytest.raises(TypeError):
        cache.feedback(hit, correct="no")  # type: ignore[arg-type]


def test_feedback_confirms(closing: Any) -> None:
    cache = Cache()
    answer = make(cache, closing, ThresholdPolicy(0.85))
    answer(STORED)
    hit = answer.lookup(CLOSE)
    assert cache.feedback(hit, correct=True)
    st = answer.tier.arbiter.stats_of(answer.tier.entries()[0].id)
    assert st.confirmed == 1 and st.served == 1
    assert answer.lookup(CLOSE).status is Status.SEMANTIC_HIT


def test_failing_comparator_gives_no_verdict() -> None:
    class Boom(Recording):
        def comparator(self, a: Any, b: Any) -> bool:
            raise RuntimeError

    arb = HitArbiter(Boom(), decode=lambda e: e, evict=lambda s, t: False)

    class E:
        id, scope, text, value = 1, "s", "stored", "v"

    assert arb.choose("s", "q", [(0.9, E())]) is None
    assert arb.computed("s", "q", "v") is None
    assert arb.stats_of(1) == EntryStats()


def test_error_bounded_policy_through_the_cache(closing: Any) -> None:
    policy = ErrorBoundedPolicy(
        0.05, rng=random.Random(0), explore_floor=0.0, prefilter=0.3, guard=None
    )
    answer = make(Cache(), closing, policy, fn=lambda p: "A" if "password" in p else "B")
    for i in range(60):
        answer(f"how do I reset my password variant {i}")
        answer(f"what is the capital of france variant {i}")
    assert policy.a > 0 and answer.tier.arbiter.verdicts > 30
    results = [answer.lookup(f"please how do I reset my password variant {i}") for i in range(20)]
    served = [r.value for r in results if r.status is Status.SEMANTIC_HIT]
    assert served and set(served) == {"A"}


def test_verified_policy_through_the_cache(closing: Any) -> None:
    cache = Cache()
    answer = make(cache, closing, VerifiedPolicy(tiny_model(), prefilter=0.5), fn=lambda p: p)
    answer(STORED)
    assert answer.lookup(CLOSE).status is Status.SEMANTIC_HIT
    negated = answer.lookup("how do I not reset my password please")
    assert negated.status is Status.MISS and negated.similarity is not None
    assert answer.tier.stats()["policy"].startswith("verified:")


def test_error_bounded_policy_learns_from_put(closing: Any) -> None:
    """Entry points that call the model themselves (the proxy, replay) store with ``put``: the
    fresh answer settles the policy's pending checks just as a computed one does."""
    policy = ErrorBoundedPolicy(
        0.05, rng=random.Random(0), explore_floor=0.0, prefilter=0.3, guard=None
    )
    answer = make(Cache(), closing, policy, fn=lambda p: "unused")
    for i in range(60):
        for text, value in (
            (f"how do I reset my password variant {i}", "A"),
            (f"what is the capital of france variant {i}", "B"),
        ):
            if not answer.lookup(text).hit:
                answer.put(value, text)
    assert answer.tier.arbiter.verdicts > 30 and policy.a > 0
