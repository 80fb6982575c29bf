"""How fast what one replica stores or invalidates reaches another, through a redis-server this
script starts on a free port.

    python -m bench.exact.replication [--trials 20] [--runs 3] [--embedder minilm|test]
        [--parts semantic,invalidation,demotion,hits] [--hits 2000]

Two processes share one namespace: a writer (a child process) and a reader (this one).

* semantic: the writer ``put``s an answer for a text; the reader's tier follows the Redis log
  and must answer a paraphrase of it. Measured from the moment the writer's ``put`` returned
  (its entry is in Redis) until the reader's tier holds the entry, polled every 0.2 ms (the
  reader often has it before the writer's put returns: then 0), and from the moment ``put`` was
  called (which includes the writer's own embedding); each trial then checks that the
  paraphrase is a semantic hit on the reader. The first entry of a new scope (the reader creates
  the scope's index for it) is timed and printed on its own, before the trials.
* invalidation: the writer ``invalidate``s a key the reader holds in L1; measured from the
  moment ``invalidate`` was called (it deletes, then publishes) until the reader's L1 no
  longer holds it.
* demotion: the writer serves a paraphrase of an entry both replicas hold and reports it wrong
  (``cache.feedback(result, correct=False)``); measured from the moment ``feedback`` was called
  until the reader's record of the entry holds the refuted similarity (polled every 0.2 ms),
  and from the moment it returned; each trial then checks that the paraphrase is a miss on the
  reader.
* hits: the reader's semantic hit path (``lookup`` of paraphrases it holds, each a semantic hit)
  timed per call, p50/p99 in microseconds; with ``--embedder test`` the embedding is cheap, so
  a Redis round trip added to the hit path would show. Run it against another checkout with
  ``PYTHONPATH=/path/to/other/checkout:. python -P -m bench.exact.replication`` (both processes
  then load that checkout's cachekit).

Both processes are on one machine, so their ``time.time()`` readings are comparable. Prints
p50 and worst per run; the target is a worst case of 25 ms for the semantic path.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common.servers import RedisServer
from cachekit import Cache, Status
from cachekit.semantic.tier import entry_id

POLL_S = 0.0002
DEADLINE_S = 5.0
INVALIDATION_DEADLINE_S = 1.0

WRITER = textwrap.dedent("""
    import sys, time
    sys.path.append(sys.argv[4])  # the checkout, for bench; after the cachekit imported here
    from bench.exact.replication import make_answer, make_exact
    from cachekit import Cache

    url, namespace, embedder = sys.argv[1:4]
    cache = Cache(redis_url=url, namespace=namespace)
    answer = make_answer(cache, embedder)
    exact = make_exact(cache)
    assert answer.tier.wait_ready(30)
    print("ready", flush=True)
    for line in sys.stdin:
        op, arg = line.split(maxsplit=1)
        arg = arg.strip()
        t0 = time.time()
        if op == "put":
            answer.put("answer:" + arg, arg)
        elif op == "inv":
            exact.invalidate(int(arg))
        elif op == "dem":
            r = answer.lookup(arg + " please")
            assert r.status.value == "semantic_hit", r.status
            t0 = time.time()
            assert cache.feedback(r, correct=False)
        elif op == "quit":
            break
        print(repr(t0), repr(time.time()), flush=True)
    answer.close()
    cache.close()
""")


def make_embedder(kind: str) -> Any:
    if kind == "test":
        from cachekit.testing.embedders import DeterministicTestEmbedder

        return DeterministicTestEmbedder()
    from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder().load()


def make_answer(cache: Cache, embedder: str) -> Any:
    emb = make_embedder(embedder)

    @cache.semantic(name="answer", embedder=emb, ttl=600, threshold=0.8)
    def answer(prompt: str) -> str:
        return "computed:" + prompt

    return answer


def make_exact(cache: Cache) -> Any:
    @cache.cached(name="exact", ttl=600)
    def exact(x: int) -> str:
        return f"value:{x}"

    return exact


def start_writer(url: str, namespace: str, embedder: str) -> subprocess.Popen[str]:
    root = str(Path(__file__).resolve().parents[2])  # for bench, imported last
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, namespace, embedder, root],
        # Not the checkout's root: `python -c` puts the working directory first on sys.path,
        # and the writer must import the installed cachekit, as this process does.
        cwd=Path(__file__).parent,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"writer failed to start: {line!r}")
    return proc


def ask(proc: subprocess.Popen[str], line: str) -> tuple[float, float]:
    """Send one command; the writer's ``time.time()`` when it began and when it returned."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    began, done = map(float, proc.stdout.readline().split())
    return began, done


def wait_for(condition: Any, deadline_s: float = DEADLINE_S) -> float | None:
    """time.time() when ``condition`` first held; None if it did not within ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            return None
        time.sleep(POLL_S)
    return time.time()


def semantic_trials(
    answer: Any, writer: subprocess.Popen[str], trials: int
) -> tuple[list[float], list[float], list[float]]:
    tier = answer.tier
    out: list[float] = []
    from_call: list[float] = []
    hit: list[float] = []
    for i in range(trials):
        text = f"how do I renew passport number {uuid.uuid4().hex[:6]} trial {i}"
        id_ = entry_id(answer.scope_key(text), text)
        # The writer is told to store, and prints when its put returned.
        assert writer.stdin is not None
        writer.stdin.write(f"put {text}\n")
        writer.stdin.flush()
        seen = wait_for(lambda id_=id_: any(e.id == id_ for e in tier.entries()))
        if seen is None:
            raise RuntimeError(f"trial {i}: entry not on the reader within {DEADLINE_S} s")
        called, stored = map(float, writer.stdout.readline().split())  # type: ignore[union-attr]
        out.append(max(0.0, seen - stored))
        from_call.append(seen - called)
        r = answer.lookup(text + " please")
        hit.append(time.time() - stored)
        if r.status is not Status.SEMANTIC_HIT:
            raise RuntimeError(f"trial {i}: paraphrase not a semantic hit ({r.status})")
    return out, from_call, hit


def invalidation_trials(
    exact: Any, cache: Cache, writer: subprocess.Popen[str], trials: int
) -> list[float]:
    out: list[float] = []
    l1 = cache._engine.l1
    assert l1 is not None
    following = getattr(cache._engine, "wait_following", None)  # absent before the channel
    if following is not None:
        assert following(10)
    for i in range(trials):
        exact(i)
        assert exact.lookup(i).tier == "l1"
        size = len(l1)
        assert writer.stdin is not None
        writer.stdin.write(f"inv {i}\n")
        writer.stdin.flush()
        seen = wait_for(lambda size=size: len(l1) < size, INVALIDATION_DEADLINE_S)
        called, _ = map(float, writer.stdout.readline().split())  # type: ignore[union-attr]
        # Never: inf (a cachekit without the invalidation channel keeps serving its L1 copy).
        out.append(float("inf") if seen is None else seen - called)
    return out


def demotion_trials(
    answer: Any, writer: subprocess.Popen[str], trials: int
) -> tuple[list[float], list[float]]:
    tier = answer.tier
    from_call: list[float] = []
    from_return: list[float] = []
    for i in range(trials):
        text = f"how do I cancel order number {uuid.uuid4().hex[:6]} trial {i}"
        id_ = entry_id(answer.scope_key(text), text)
        ask(writer, f"put {text}")
        if wait_for(lambda id_=id_: any(e.id == id_ for e in tier.entries())) is None:
            raise RuntimeError(f"trial {i}: entry not on the reader within {DEADLINE_S} s")
        if answer.lookup(text + " please").status is not Status.SEMANTIC_HIT:
            raise RuntimeError(f"trial {i}: paraphrase not a semantic hit before the demotion")
        assert writer.stdin is not None
        writer.stdin.write(f"dem {text}\n")
        writer.stdin.flush()
        seen = wait_for(
            lambda id_=id_: tier.arbiter.stats_of(id_).max_refuted_similarity is not None
        )
        called, returned = map(float, writer.stdout.readline().split())  # type: ignore[union-attr]
        if seen is None:
            raise RuntimeError(f"trial {i}: demotion not on the reader within {DEADLINE_S} s")
        from_call.append(seen - called)
        from_return.append(max(0.0, seen - returned))
        if answer.lookup(text + " please").status is not Status.MISS:
            raise RuntimeError(f"trial {i}: the reader still serves the demoted entry")
    return from_call, from_return


def hit_path(answer: Any, n: int) -> list[float]:
    """Seconds per semantic-hit lookup on the reader, over ``n`` lookups of paraphrases."""
    texts = [e.text for e in answer.tier.entries()]
    out: list[float] = []
    for i in range(n):
        q = texts[i % len(texts)] + " please"
        t0 = time.perf_counter()
        r = answer.lookup(q)
        out.append(time.perf_counter() - t0)
        if r.status is not Status.SEMANTIC_HIT:
            raise RuntimeError(f"hit path: {q!r} was {r.status}")
    return out


def one_run(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    namespace = f"b{uuid.uuid4().hex[:8]}"
    cache = Cache(redis_url=url, namespace=namespace)
    answer = make_answer(cache, args.embedder)
    exact = make_exact(cache)
    writer = start_writer(url, namespace, args.embedder)
    parts = set(args.parts.split(","))
    out: dict[str, list[float]] = {}
    try:
        assert answer.tier.wait_ready(30)
        # The reader's first entry in a new scope (it creates the scope's index), timed on its
        # own: the trials below measure entries in a scope both replicas hold.
        out["first"], out["first_call"], out["first_hit"] = semantic_trials(answer, writer, 1)
        if "semantic" in parts or "hits" in parts:
            out["sem"], out["sem_call"], out["sem_hit"] = semantic_trials(
                answer, writer, args.trials
            )
        if "invalidation" in parts:
            out["inv"] = invalidation_trials(exact, cache, writer, args.trials)
        if "hits" in parts:
            out["hits"] = hit_path(answer, args.hits)
        if "demotion" in parts:
            out["dem_call"], out["dem_return"] = demotion_trials(answer, writer, args.trials)
        st = answer.tier.stats()
    finally:
        writer.communicate("quit x\n", timeout=60)
        answer.close()
        cache.close()
    lag = (st["redis_sync_lag_p50_ms"], st["redis_sync_lag_p99_ms"])
    print(
        f"  reader's own sync lag (log message time to applied, ms resolution): p50 "
        f"{lag[0]:.1f} ms, p99 {lag[1]:.1f} ms"
    )
    return out


def ms(xs: list[float]) -> str:
    never = sum(x == float("inf") for x in xs)
    tail = f" ({never} of {len(xs)} not within {INVALIDATION_DEADLINE_S} s)" if never else ""
    return f"p50 {statistics.median(xs) * 1e3:.1f} ms, worst {max(xs) * 1e3:.1f} ms{tail}"


LABELS = {
    "first": "first semantic entry of a new scope on the other replica, after put returned",
    "first_call": "... after put was called",
    "first_hit": "... its paraphrase served as a semantic hit by the other replica, after put "
    "returned (the reader's lookup, its embedding included)",
    "sem": "semantic entry on the other replica, after the writer's put returned",
    "sem_call": "... after the writer's put was called (its embedding included)",
    "sem_hit": "... its paraphrase served as a semantic hit by the other replica, after put "
    "returned",
    "inv": "invalidation out of the other replica's L1, after the call",
    "dem_call": "demotion on the other replica, after the writer's feedback was called",
    "dem_return": "... after the writer's feedback returned",
}


def report(out: dict[str, list[float]], verbose: bool) -> None:
    for name, label in LABELS.items():
        if name in out:
            print(f"  {label}: {ms(out[name])}", flush=True)
    hits = out.get("hits")
    if hits:
        q = statistics.quantiles(hits, n=100)
        print(
            f"  semantic hit lookup ({len(hits)}): p50 {q[49] * 1e6:.0f} us, "
            f"p99 {q[98] * 1e6:.0f} us"
        )
    if verbose and "sem" in out:
        print(
            "  per trial (ms, after put returned):", " ".join(f"{x * 1e3:.1f}" for x in out["sem"])
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--embedder", choices=["minilm", "test"], default="minilm")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--parts", default="semantic,invalidation,demotion")
    ap.add_argument("--hits", type=int, default=2000, help="timed semantic hits (part hits)")
    args = ap.parse_args()
    server = RedisServer().start()
    try:
        for run in range(args.runs):
            print(f"run {run + 1} ({args.trials} trials each, embedder {args.embedder}):")
            report(one_run(server.url, args), args.verbose)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
