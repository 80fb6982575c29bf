"""Label sources for ``cachekit tune``: a replay truth file, the arbiter's verdicts (in process
and in the capped Redis list), and ``cachekit export-labels``. The deterministic test embedder
only (no model); Redis tests start their own redis-server."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.cli.export_labels import add_parser, run
from cachekit.replay.truth_pairs import truth_pairs
from cachekit.semantic.arbiter import LABELS_MAX, HitArbiter, Label
from cachekit.semantic.policy.error_bounded import ErrorBoundedPolicy
from cachekit.semantic.policy.hit_policy import Candidate, Decision, ThresholdPolicy
from cachekit.semantic.policy.pairs import latest_labels, read_pairs
from cachekit.semantic.tier import semantic_base
from cachekit.testing.embedders import DeterministicTestEmbedder

STORED = "how do I reset my password"
CLOSE = "how do I reset my password please"  # 0.913 with STORED under the test embedder
EMBEDDER = "cachekit.testing.embedders:DeterministicTestEmbedder"

# ---------------------------------------------------------------------- replay truth

# (custom_id, tenant, model, text, kind, answer, equivalent_to)
LOG = [
    ("r0", "acme", "m1", STORED, "new", "a0", None),
    ("r1", "acme", "m1", "what is the capital of france", "new", "a1", None),
    ("r2", "acme", "m1", STORED, "repeat", "a0", "r0"),
    ("r3", "acme", "m1", CLOSE, "paraphrase", "a0", "r0"),
    ("r4", "globex", "m1", "how do I reset my password on linux today", "new", "a4", None),
    ("r5", "acme", "m2", "how do I reset my password on linux now", "new", "a5", None),
    ("r6", "acme", "m1", "how do I reset my password on linux", "near_miss", "a6", None),
    ("r7", "acme", "m1", STORED, "paraphrase", "a0", "r0"),  # identical text: no pair
    ("r8", "acme", "m1", "capital of france?", "paraphrase", "a1", "gone"),  # not in the log
    ("r9", "globex", "m2", "a lone question", "near_miss", "a9", None),  # nothing earlier
]


def write_log(tmp_path: Path, rows: Sequence[tuple[Any, ...]] = LOG) -> str:
    prefix = str(tmp_path / "log")
    with (
        open(f"{prefix}.input.jsonl", "w") as inp,
        open(f"{prefix}.output.jsonl", "w") as out,
        open(f"{prefix}.truth.jsonl", "w") as truth,
    ):
        for cid, tenant, model, text, kind, answer, eq in rows:
            body = {"model": model, "messages": [{"role": "user", "content": text}]}
            line = {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions"}
            inp.write(json.dumps({**line, "body": body, "metadata": {"tenant": tenant}}) + "\n")
            completion = {
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}],
            }
            response = {"status_code": 200, "body": completion}
            out.write(json.dumps({"custom_id": cid, "response": response}) + "\n")
            verdict = {"custom_id": cid, "kind": kind, "answer": answer, "equivalent_to": eq}
            truth.write(json.dumps(verdict) + "\n")
    return prefix


def test_truth_pairs_from_a_small_log(tmp_path: Path) -> None:
    prefix = write_log(tmp_path)
    found = truth_pairs(
        f"{prefix}.input.jsonl",
        f"{prefix}.output.jsonl",
        f"{prefix}.truth.jsonl",
        embedder=DeterministicTestEmbedder(),
    )
    near = "how do I reset my password on linux"
    # The paraphrase with its equivalent's text; the near miss with the nearest earlier request
    # of its own tenant and model (not the closer ones of another tenant or model).
    assert found.pairs == [(CLOSE, STORED, True), (near, STORED, False)]
    assert found.kinds == {"paraphrase": 1, "near_miss": 1}
    assert found.skipped == {
        "paraphrase_identical_text": 1,
        "paraphrase_without_equivalent": 1,
        "near_miss_without_earlier_request": 1,
    }
    assert found.embedder == "deterministic-test-64"


def test_truth_pairs_without_near_misses_load_no_embedder(tmp_path: Path) -> None:
    prefix = write_log(tmp_path, [r for r in LOG if r[4] != "near_miss"])
    found = truth_pairs(f"{prefix}.input.jsonl", f"{prefix}.output.jsonl", f"{prefix}.truth.jsonl")
    assert found.pairs == [(CLOSE, STORED, True)] and found.embedder is None


# ---------------------------------------------------------------------- the arbiter's labels


def make(
    cache: Cache, closing: Callable[[Any], Any], policy: Any, kind: str, name: str = "answer"
) -> Any:
    if kind == "sync":

        def answer(prompt: str) -> str:
            return "same answer"

        fn: Any = answer
    else:

        async def aanswer(prompt: str) -> str:
            await asyncio.sleep(0)
            return "same answer"

        fn = aanswer
    return closing(
        cache.semantic(fn, policy=policy, embedder=DeterministicTestEmbedder(), ttl=3600, name=name)
    )


async def call(result: Any) -> Any:
    return await result if asyncio.iscoroutine(result) else result


def explorer() -> ErrorBoundedPolicy:
    """Checks the nearest candidate until it has evidence: the first lookup explores."""
    return ErrorBoundedPolicy(
        0.05, rng=random.Random(0), explore_floor=0.0, prefilter=0.3, guard=None
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_exploration_gives_a_check_label(closing: Any, kind: str) -> None:
    cache = Cache()
    answer = make(cache, closing, explorer(), kind)
    await call(answer(STORED))
    assert await call(answer(CLOSE)) == "same answer"  # explored: computed, then compared
    (label,) = cache.labels()
    assert (label.query, label.candidate, label.correct, label.source) == (
        CLOSE,
        STORED,
        True,
        "check",
    )
    assert label.similarity == pytest.approx(0.913, abs=0.01)
    assert answer.tier.arbiter.labels() == [label]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_feedback_gives_a_feedback_label(closing: Any, kind: str) -> None:
    cache = Cache()
    answer = make(cache, closing, ThresholdPolicy(0.85), kind)
    other = make(cache, closing, ThresholdPolicy(0.85), kind, name="other")
    await call(answer(STORED))
    hit = await call(answer.lookup(CLOSE))
    assert hit.status is Status.SEMANTIC_HIT
    assert cache.feedback(hit, correct=False)
    await call(other(STORED))
    assert cache.feedback(await call(other.lookup(CLOSE)), correct=True)
    labels = cache.labels()  # both functions', oldest first
    assert [(x.source, x.correct) for x in labels] == [("feedback", False), ("feedback", True)]
    assert labels[0].at_s <= labels[1].at_s
    assert Label.from_dict(json.loads(json.dumps(labels[0].to_dict()))) == labels[0]


class _E:
    id, scope, text, value = 1, "s", "stored", "v"


class _Explore:
    name, guard = "explore", None

    def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision:
        return Decision(explore=0)

    def observe(self, query: str, candidate: Candidate, correct: bool) -> None:
        pass


def test_the_label_log_is_bounded() -> None:
    assert HitArbiter(_Explore(), decode=lambda e: e, evict=lambda s, t: False).labels() == []
    arb = HitArbiter(_Explore(), decode=lambda e: e, evict=lambda s, t: False, labels_max=50)
    for i in range(55):
        arb.choose("s", f"q{i}", [(0.9, _E())])
        arb.computed("s", f"q{i}", "v")
    labels = arb.labels()
    assert len(labels) == 50 and labels[0].query == "q5" and labels[-1].query == "q54"
    assert LABELS_MAX == 10_000


def test_a_failing_label_hook_costs_only_a_log_line() -> None:
    arb = HitArbiter(_Explore(), decode=lambda e: e, evict=lambda s, t: False)

    def boom(label: Label) -> None:
        raise RuntimeError("down")

    arb.on_label = boom
    arb.choose("s", "q", [(0.9, _E())])
    assert arb.computed("s", "q", "v") is True
    assert len(arb.labels()) == 1


@pytest.mark.parametrize(
    "bad",
    [[], {"query": 1}, {"query": "q", "candidate": "c", "correct": "yes", "source": "check"}],
)
def test_malformed_labels_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        Label.from_dict(bad)


# ---------------------------------------------------------------------- the shared Redis list


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def shared(url: str, namespace: str, closing: Callable[[Any], Any], policy: Any, kind: str) -> Any:
    cache = Cache(namespace=namespace, redis_url=url, redis_timeout=0.2, breaker_reset_s=0.2)
    fn = make(cache, closing, policy, kind)
    assert fn.tier.wait_ready(10)
    return fn


def labels_key(namespace: str) -> str:
    return semantic_base("ck", namespace, "answer") + ":labels"


def stored_labels(fn: Any, namespace: str) -> list[Label]:
    raw = fn.cache.l2.client.lrange(labels_key(namespace), 0, -1)
    return [Label.from_dict(json.loads(r)) for r in raw]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_verdicts_reach_the_capped_redis_list(
    redis_server: Any, namespace: str, closing: Any, kind: str
) -> None:
    answer = shared(redis_server.url, namespace, closing, explorer(), kind)
    await call(answer(STORED))
    await call(answer(CLOSE))
    assert stored_labels(answer, namespace) == answer.cache.labels()
    store = answer.tier.store
    store.push_labels([json.dumps(answer.cache.labels()[0].to_dict())] * 5, 3)
    assert answer.cache.l2.client.llen(labels_key(namespace)) == 3  # trimmed to the cap


def test_feedback_reaches_the_redis_list(redis_server: Any, namespace: str, closing: Any) -> None:
    answer = shared(redis_server.url, namespace, closing, ThresholdPolicy(0.85), "sync")
    answer(STORED)
    hit = answer.lookup(CLOSE)
    assert answer.cache.feedback(hit, correct=False)
    (label,) = stored_labels(answer, namespace)
    assert (label.source, label.correct, label.query) == ("feedback", False, CLOSE)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_redis_outage_during_a_verdict_does_not_raise(
    redis_server: Any, namespace: str, closing: Any, kind: str
) -> None:
    answer = shared(redis_server.url, namespace, closing, explorer(), kind)
    await call(answer(STORED))
    redis_server.kill()
    assert await call(answer(CLOSE)) == "same answer"  # checked, the push failed: no exception
    hit = answer.cache.labels()
    assert [(x.query, x.source) for x in hit] == [(CLOSE, "check")]


# ---------------------------------------------------------------------- the command


def export(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="cachekit")
    add_parser(parser.add_subparsers(dest="command"))
    return run(parser.parse_args(["export-labels", *argv]))


def test_export_from_a_replay_truth_file(tmp_path: Path, capsys: Any) -> None:
    prefix = write_log(tmp_path)
    out = tmp_path / "pairs.jsonl"
    assert export("--replay", prefix, "--embedder", EMBEDDER, "--out", str(out)) == 0
    pairs = [(p.query, p.cached, p.duplicate) for p in read_pairs(out)]
    assert pairs == [(CLOSE, STORED, True), ("how do I reset my password on linux", STORED, False)]
    said = capsys.readouterr().out
    assert "wrote 2 pairs" in said and "1 duplicates, 1 not" in said
    assert "near misses paired by deterministic-test-64" in said


def test_export_from_redis_keeps_the_latest_label(
    redis_server: Any, namespace: str, closing: Any, tmp_path: Path, capsys: Any
) -> None:
    answer = shared(redis_server.url, namespace, closing, ThresholdPolicy(0.85), "sync")
    answer(STORED)
    assert answer.cache.feedback(answer.lookup(CLOSE), correct=True)
    first = answer.cache.labels()[0]
    later = Label(CLOSE, STORED, False, "feedback", first.similarity, first.at_s + 1)
    client = answer.cache.l2.client
    client.lpush(labels_key(namespace), json.dumps(later.to_dict()), b"not json")
    client.lpush(
        semantic_base("ck", "elsewhere", "answer") + ":labels", json.dumps(first.to_dict())
    )
    out = tmp_path / "pairs.jsonl"
    code = export("--redis", redis_server.url, "--namespace", namespace, "--out", str(out))
    assert code == 0
    assert [(p.query, p.cached, p.duplicate) for p in read_pairs(out)] == [(CLOSE, STORED, False)]
    said = capsys.readouterr().out
    assert "wrote 1 pairs" in said and "1 pairs had contradictory labels" in said
    assert "1 unreadable records" in said


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_export_errors_exit_2(tmp_path: Path, capsys: Any) -> None:
    out = str(tmp_path / "pairs.jsonl")
    assert export("--out", out) == 2
    assert export("--redis", "redis://127.0.0.1:1/0", "--out", out) == 2  # no --namespace
    assert export("--replay", str(tmp_path / "missing"), "--out", out) == 2
    dead = f"redis://127.0.0.1:{free_port()}/0"
    assert export("--redis", dead, "--namespace", "ns", "--out", out) == 2
    prefix = write_log(tmp_path, [r for r in LOG if r[4] in ("new", "repeat")])
    assert export("--replay", prefix, "--out", out) == 2  # nothing to write
    err = capsys.readouterr().err
    assert "give --replay" in err and "not found" in err and "cannot read the labels" in err
    assert "no labelled pairs" in err and not Path(out).exists()


def test_latest_labels() -> None:
    pairs = [("a", "b", True), ("c", "d", False), ("a", "b", False), ("a", "b", False)]
    assert latest_labels(pairs) == ([("c", "d", False), ("a", "b", False)], 1)
