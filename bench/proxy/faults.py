"""``cachekit serve`` on a real Redis that fails under load: client errors and wrong answers.

    python -m bench.proxy.faults [--rounds 3] [--clients 8] [--phase-s 10]

A redis-server this script starts on a free port, the fake upstream (``cachekit.testing.upstream``:
its answer names the prompt it answers, ``Answer #n to: <prompt>``) and ``cachekit serve
--redis-url`` (semantic, the bundled model) in a process of its own. ``--clients`` threads send
chat requests drawn (seeded) from 50 questions and a paraphrase of each, for the phases below,
each ``--phase-s`` seconds long:

1. steady: Redis up (the control);
2. killed: ``kill -9`` of Redis at the start;
3. restarted: Redis back, empty;
4. paused: SIGSTOP (a hung server: it accepts connections and never answers);
5. resumed: SIGCONT.

Per phase: requests, client errors (any status but 200, or no answer within 30 s), and wrong
answers: an answer to a question other than the one asked or its paraphrase. Loopback only;
every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx

from bench.common import procs
from bench.common.procs import free_port
from bench.common.servers import RedisServer
from cachekit.testing.upstream import FakeUpstream, serving

CHAT = "/v1/chat/completions"
ASKS = ["what is", "how do I clean", "why do people like", "where can I buy", "who invented"]
THINGS = ["a bicycle", "a violin", "a telescope", "a kayak", "a sewing machine"]
THINGS += ["a chess clock", "a pressure cooker", "a metronome", "a compass", "a typewriter"]
QUESTIONS = [f"{ask} {thing}?" for ask in ASKS for thing in THINGS]


def paraphrase(q: str) -> str:
    return "please tell me " + q


@dataclass
class Tally:
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    wrong: int = 0
    served: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        errs = sum(self.errors.values())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.served.items()))
        detail = f" {dict(self.errors)}" if errs else ""
        return (
            f"{self.requests} requests, {errs} client errors{detail}, {self.wrong} wrong ({kinds})"
        )


@contextmanager
def proxy(upstream: str, redis_url: str) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "cachekit", "serve", "--port", str(port)]
    cmd += ["--upstream", upstream, "--redis-url", redis_url]
    with procs.serving(cmd, url + "/healthz"):
        yield url


def ask_once(client: httpx.Client, url: str, rng: random.Random, tally: Tally) -> None:
    i = rng.randrange(len(QUESTIONS))
    text = QUESTIONS[i] if rng.random() < 0.5 else paraphrase(QUESTIONS[i])
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    try:
        r = client.post(url + CHAT, json=body)
    except httpx.HTTPError as exc:
        tally.errors[type(exc).__name__] += 1
        return
    if r.status_code != 200:
        tally.errors[str(r.status_code)] += 1
        return
    answered = r.json()["choices"][0]["message"]["content"].partition(" to: ")[2]
    if answered not in (QUESTIONS[i], paraphrase(QUESTIONS[i])):
        tally.wrong += 1
    tally.served[r.headers.get("x-cachekit-cache", "?")] += 1


def load(url: str, clients: int, seconds: float, seed: int) -> Tally:
    tally = Tally()
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def worker(w: int) -> None:
        rng = random.Random(seed * 1000 + w)
        mine = Tally()
        with httpx.Client(timeout=30.0) as client:
            while time.monotonic() < end:
                mine.requests += 1
                ask_once(client, url, rng, mine)
        with lock:
            tally.requests += mine.requests
            tally.errors.update(mine.errors)
            tally.wrong += mine.wrong
            tally.served.update(mine.served)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60.0)
    return tally


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--phase-s", type=float, default=10.0)
    args = ap.parse_args()
    for r in range(args.rounds):
        with RedisServer() as redis, serving(FakeUpstream()) as up, proxy(up.url, redis.url) as url:
            phases: list[tuple[str, Callable[[], object]]] = [
                ("steady", lambda: None),
                ("killed", redis.kill),
                ("restarted", redis.restart),
                ("paused", redis.pause),
                ("resumed", redis.resume),
            ]
            total = Tally()
            for p, (name, fault) in enumerate(phases):
                fault()
                t = load(url, args.clients, args.phase_s, seed=r * 10 + p)
                print(f"round {r + 1} {name}: {t.line()}", flush=True)
                total.requests += t.requests
                total.errors.update(t.errors)
                total.wrong += t.wrong
                total.served.update(t.served)
            print(f"round {r + 1} all: {total.line()}", flush=True)


if __name__ == "__main__":
    main()
