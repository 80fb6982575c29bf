"""``cachekit demo``: the embedded default (in-process L1 + a local FAISS index), no servers.

It wraps a stand-in "model" that takes a few milliseconds per call, then shows exact hits,
semantic hits on paraphrases, a scope that keeps models apart, and the telemetry.
"""

from __future__ import annotations

import time

from cachekit import Cache, Status

QUESTIONS = [
    ("How do I reset my router password?", "How can I reset the password of my router?"),
    ("How do I learn Python quickly?", "What is the quickest way to learn Python?"),
    ("What is the capital of France?", "Which city is the capital of France?"),
]
# Related but different: the answer to the Python question must not be served for it.
NEAR_MISS = "How do I learn Java quickly?"
#: Close enough to a stored question to pass the threshold (0.91); the slot guard refuses it.
SLOT_SWAP = "Why can't I reset my router password?"
UNRELATED = "How do I change a flat tyre on a bicycle?"


def _ms(value: float | None) -> str:
    """A latency for people: three significant digits, µs below a millisecond, s above 1000."""
    if value is None:
        return "-"
    if value >= 1000.0:
        return f"{value / 1e3:.3g} s"
    return f"{value * 1e3:.3g} µs" if value < 1.0 else f"{value:.3g} ms"


def run_demo(semantic: bool = True) -> int:
    cache = Cache(namespace="demo")
    model_calls: list[str] = []

    @cache.cached(ttl=60)
    def predict(features: tuple[float, ...], model: str = "v1") -> float:
        model_calls.append(model)
        time.sleep(0.005)  # stands in for model inference
        return sum(features) / len(features)

    print("== exact tier (in-process L1)")
    x = (0.2, 0.4, 0.6)
    for _ in range(3):
        t0 = time.perf_counter()
        y = predict(x)
        print(f"  predict{x} = {y:.3f}  in {(time.perf_counter() - t0) * 1e3:7.3f} ms")
    print(f"  model ran {len(model_calls)} time(s); lookup says {predict.lookup(x).status.value}")

    if semantic:
        print("== semantic tier (all-MiniLM-L6-v2 + local FAISS); loading the model ...")

        @cache.semantic(ttl=3600)
        def answer(prompt: str, *, model: str) -> str:
            model_calls.append(model)
            return f"[{model}] answer to: {prompt}"

        try:
            for question, _ in QUESTIONS:
                answer(question, model="gpt-4o-mini")
            for _, paraphrase in QUESTIONS:
                # lookup() only asks (counted as a probe); the call after it is served.
                r = answer.lookup(paraphrase, model="gpt-4o-mini")
                ran = len(model_calls)
                answer(paraphrase, model="gpt-4o-mini")
                served = "served from cache" if len(model_calls) == ran else "model ran"
                shown = f"{r.similarity:.3f}" if r.similarity is not None else "-"
                print(
                    f"  {paraphrase!r}\n    -> {r.status.value} (similarity {shown})"
                    f" from {r.matched_text!r}: {served}"
                )
            other_model = answer.lookup(QUESTIONS[0][1], model="gpt-4.1")
            print(f"  same paraphrase, model gpt-4.1 -> {other_model.status.value} (scope)")
            near = answer.lookup(NEAR_MISS, model="gpt-4o-mini")
            print(
                f"  {NEAR_MISS!r} -> {near.status.value} (similarity {near.similarity:.3f}:"
                " a different question)"
            )
            swapped = answer.lookup(SLOT_SWAP, model="gpt-4o-mini")
            print(
                f"  {SLOT_SWAP!r} -> {swapped.status.value} (similarity "
                f"{swapped.similarity or 0.0:.3f}, refused: {swapped.reason})"
            )
            unrelated = answer.lookup(UNRELATED, model="gpt-4o-mini")
            print(f"  {UNRELATED!r} -> {unrelated.status.value}")
            misses = (other_model.status, near.status, swapped.status, unrelated.status)
            ok = all(s is Status.MISS for s in misses)
        finally:
            answer.close()
    else:
        ok = True

    s = cache.stats()
    print("== telemetry (calls only; lookup() probes are counted apart)")
    print(
        f"  calls served from cache={s.hits + s.stale_hits} computed={s.misses} "
        f"hit_rate={s.hit_rate:.2f} time_saved={s.time_saved_s * 1e3:.1f} ms "
        f"probes={s.probes}"
    )
    l1 = s.tiers["l1"]
    print(f"  l1: hits={l1.hits} misses={l1.misses} p50={_ms(l1.latency.p50_ms)}")
    for name, section in s.extra.items():
        if name.startswith("semantic:"):
            print(
                f"  semantic: calls={section['lookups']} exact_hits={section['exact_hits']} "
                f"semantic_hits={section['semantic_hits']} probes={section['probes']} "
                f"policy={section['policy']}"
            )
            print(
                f"    model load={_ms(section['model_load_ms'])} "
                f"embed p50={_ms(section['embed_p50_ms'])} "
                f"search p50={_ms(section['search_p50_ms'])}"
            )
    return 0 if ok else 1
