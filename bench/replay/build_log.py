"""Build a synthetic request log to replay, with its ground truth, from labelled QQP pairs.

A stream of chat requests in the OpenAI Batch API file format, from two tenants to two models,
whose user messages are the questions of a pair file (``python -m bench.quality.build_qqp``
writes one). Each request is one of:

* ``new``: a question not asked before in its tenant and model;
* ``repeat``: an earlier request of the same tenant and model, again;
* ``paraphrase``: the other question of a pair labelled duplicate whose first question was
  asked before in the same tenant and model (a hit is correct);
* ``near_miss``: the other question of a pair labelled not duplicate whose first question was
  asked before there (related, with another answer: a hit is wrong).

Three files, ``PREFIX.input.jsonl`` (``{"custom_id", "method", "url", "body", "metadata"}``,
``metadata.tenant`` the tenant), ``PREFIX.output.jsonl`` (``{"custom_id", "response":
{"status_code", "body"}, "latency_ms"}``, a ``chat.completion`` with ``usage``) and
``PREFIX.truth.jsonl`` (``{"custom_id", "kind", "answer", "equivalent_to"}``: ``answer`` names
the answer, ``equivalent_to`` the earliest request of the same tenant and model with that
answer, or null). ``cachekit replay PREFIX.input.jsonl --outputs PREFIX.output.jsonl --truth
PREFIX.truth.jsonl`` replays it. Seeded: the same pairs and arguments give the same files.

    python -m bench.replay.build_log
    python -m bench.replay.build_log bench/data/qqp/qqp_pairs_dev.jsonl --requests 5000 --seed 0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import data

TENANTS = (("acme", 0.5), ("globex", 0.5))
MODELS = (("gpt-4o-mini", 0.75), ("gpt-4.1", 0.25))
#: The share of each kind of request (a kind with nothing left to draw gives way to the others).
MIX = {"new": 0.376, "repeat": 0.349, "paraphrase": 0.190, "near_miss": 0.085}
SYSTEM = "You are a helpful assistant."
CREATED = 1763800000


@dataclass
class Scope:
    """What one tenant asked one model so far."""

    asked: list[tuple[str, str]] = field(default_factory=list)  # (custom_id, text)
    texts: set[str] = field(default_factory=set)
    first: dict[str, str] = field(default_factory=dict)  # answer -> earliest custom_id
    # (text, answer of the question it follows) waiting to be asked
    paraphrases: list[tuple[str, str]] = field(default_factory=list)
    near_misses: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    custom_id: str
    tenant: str
    model: str
    text: str
    kind: str
    answer: str
    equivalent_to: str | None


def read_pairs(path: Path) -> list[tuple[str, str, bool]]:
    out = []
    with open(data.need(path), encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out.append((row["cached"], row["query"], bool(row["duplicate"])))
    return out


def build(pairs: Sequence[tuple[str, str, bool]], requests: int, seed: int) -> list[Request]:
    rng = random.Random(seed)
    # questions to ask anew: of pairs labelled duplicate (whose other question can follow as a
    # paraphrase) and not (a near miss), drawn in the ratio of the two kinds
    fresh = {True: [p for p in pairs if p[2]], False: [p for p in pairs if not p[2]]}
    rng.shuffle(fresh[True])
    rng.shuffle(fresh[False])
    dup_share = MIX["paraphrase"] / (MIX["paraphrase"] + MIX["near_miss"])
    answer_of: dict[str, str] = {}  # text -> answer id, across scopes
    scopes: dict[tuple[str, str], Scope] = {}
    quota = {kind: round(share * requests) for kind, share in MIX.items()}
    out: list[Request] = []

    def draw(choices: Sequence[tuple[str, float]]) -> str:
        return rng.choices([c for c, _ in choices], [w for _, w in choices])[0]

    while len(out) < requests:
        tenant, model = draw(TENANTS), draw(MODELS)
        scope = scopes.setdefault((tenant, model), Scope())
        cid = f"req-{len(out):06d}"
        # drop waiting questions that this scope has asked, or whose answer it already has
        scope.paraphrases = [
            (t, a)
            for t, a in scope.paraphrases
            if t not in scope.texts and answer_of.get(t, a) == a
        ]
        scope.near_misses = [
            (t, a)
            for t, a in scope.near_misses
            if t not in scope.texts and answer_of.get(t) not in scope.first
        ]
        can = {
            "new": bool(fresh[True] or fresh[False]),
            "repeat": bool(scope.asked),
            "paraphrase": bool(scope.paraphrases),
            "near_miss": bool(scope.near_misses),
        }
        kinds = [(k, max(quota[k], 0) + 1e-3) for k in MIX if can[k]]
        if not kinds:
            break
        kind = draw(kinds)
        quota[kind] -= 1
        if kind == "repeat":
            _, text = rng.choice(scope.asked)
            answer = answer_of[text]
        elif kind == "paraphrase":
            text, answer = scope.paraphrases.pop(rng.randrange(len(scope.paraphrases)))
            answer_of.setdefault(text, answer)
            answer = answer_of[text]
        elif kind == "near_miss":
            text, _ = scope.near_misses.pop(rng.randrange(len(scope.near_misses)))
            answer = answer_of.setdefault(text, f"ans-{len(out):06d}")
        else:
            side = rng.random() < dup_share if fresh[True] and fresh[False] else bool(fresh[True])
            cached, query, duplicate = fresh[side].pop()
            if cached in scope.texts or answer_of.get(cached) in scope.first:
                quota[kind] += 1
                continue
            text = cached
            answer = answer_of.setdefault(text, f"ans-{len(out):06d}")
            follow = scope.paraphrases if duplicate else scope.near_misses
            follow.append((query, answer))
        equivalent = scope.first.get(answer) if kind in ("repeat", "paraphrase") else None
        if kind in ("repeat", "paraphrase") and equivalent is None:
            kind = "new"  # nothing earlier here serves it
        scope.first.setdefault(answer, cid)
        scope.asked.append((cid, text))
        scope.texts.add(text)
        out.append(Request(cid, tenant, model, text, kind, answer, equivalent))
    return out


def lines(reqs: Sequence[Request], seed: int) -> tuple[list[dict], list[dict], list[dict]]:
    rng = random.Random(f"outputs:{seed}")
    inputs, outputs, truth = [], [], []
    for r in reqs:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": r.text}]
        body = {"model": r.model, "temperature": 0, "messages": messages}
        inputs.append(
            {
                "custom_id": r.custom_id,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": body,
                "metadata": {"tenant": r.tenant},
            }
        )
        content = f"[{r.answer}] answer to: {r.text}"
        prompt_tokens = 18 + round(len(r.text.split()) * 1.3)
        completion_tokens = rng.randint(40, 400)
        chat_id = hashlib.sha256(f"{seed}:{r.custom_id}".encode()).hexdigest()[:12]
        completion = {
            "id": f"chatcmpl-{chat_id}",
            "object": "chat.completion",
            "created": CREATED,
            "model": r.model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        latency = min(15000.0, max(600.0, rng.lognormvariate(8.5, 0.45)))
        outputs.append(
            {
                "custom_id": r.custom_id,
                "response": {"status_code": 200, "body": completion},
                "latency_ms": round(latency, 1),
            }
        )
        truth.append(
            {
                "custom_id": r.custom_id,
                "kind": r.kind,
                "answer": r.answer,
                "equivalent_to": r.equivalent_to,
            }
        )
    return inputs, outputs, truth


def write(path: Path, rows: Sequence[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "pairs",
        type=Path,
        nargs="?",
        default=data.QQP_DEV,
        help="labelled pairs (JSON lines: query, cached, duplicate); default: the QQP dev pairs",
    )
    p.add_argument(
        "--out",
        default=str(data.REPLAY),
        metavar="PREFIX",
        help=f"files PREFIX.{{input,output,truth}}.jsonl (default: "
        f"{data.REPLAY.relative_to(data.ROOT)})",
    )
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    reqs = build(read_pairs(args.pairs), args.requests, args.seed)
    prefix = Path(args.out)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for part, rows in zip(("input", "output", "truth"), lines(reqs, args.seed), strict=True):
        write(prefix.with_name(f"{prefix.name}.{part}.jsonl"), rows)
    mix = {k: sum(r.kind == k for r in reqs) for k in MIX}
    scopes = len({(r.tenant, r.model) for r in reqs})
    print(f"{prefix}.{{input,output,truth}}.jsonl: {len(reqs)} requests, {scopes} scopes, {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
