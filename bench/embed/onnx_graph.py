"""The ONNX graph the embedder builds from the weights, against an ONNX file of the same model.

One process, one :class:`~cachekit.semantic.embed.onnx_runner.OnnxRunner` code path, two sessions:
the graph :func:`~cachekit.semantic.embed.bert_graph.build_bert_graph` builds from the model
folder's safetensors, and an ONNX file (``--against``: an exporter's output, e.g. the
``onnx/model_fused.onnx`` that cachekit 0.1.0 before the torch-free build exported with
optimum and fused with onnxruntime's transformer optimizer). Per round, every text is embedded
once by each, alternating which goes first; printed: p50 per call of each and their ratio,
per round and over all rounds, and the lowest cosine between the two sessions' vectors.

Also timed, in fresh processes: building the graph and opening a session from it (the first
load's cost: nothing is written to disk).

    python -m bench.embed.onnx_graph --against EXPORT/onnx/model_fused.onnx
    python -m bench.embed.onnx_graph --rounds 5 --threads 1   # build times alone, no --against
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

QUERIES = [
    "How do I reset my router password?",
    "What is the refund policy for annual subscriptions purchased through the app store?",
    "cancel order",
    "Why does the mobile app crash when I upload a profile photo larger than ten megabytes?",
    "Is there an API endpoint to export all of my calendar events as ICS files?",
    "Which city is the capital of France?",
    "router keeps dropping wifi",
    "Can I share my license with a second laptop at home?",
]

LOAD = """
import json, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
emb = SentenceTransformerEmbedder(backend="onnx", num_threads={threads})
t1 = time.perf_counter()
emb.load()
t2 = time.perf_counter()
emb.embed(["hello"])
t3 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "first_embed_s": t3 - t2}}))
"""


def load_times(threads: int) -> dict[str, float]:
    code = LOAD.format(root=str(ROOT), threads=threads)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    times: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return times


def runners(against: Path | None, threads: int) -> dict[str, object]:
    from cachekit.semantic.embed.bert_graph import build_bert_graph
    from cachekit.semantic.embed.model_files import read_layout, resolve_model
    from cachekit.semantic.embed.onnx_runner import OnnxRunner, onnx_session, session_options

    folder = resolve_model().path
    window = read_layout(folder).max_seq_length
    sources: dict[str, bytes | Path] = {"built": build_bert_graph(folder).SerializeToString()}
    if against is not None:
        sources["file"] = against
    return {
        name: OnnxRunner.from_folder(
            folder,
            onnx_session(source, session_options(threads)),
            max_seq_length=window,
            batch_size=4,
        )
        for name, source in sources.items()
    }


def timed_round(runs: dict[str, object], texts: list[str], first: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i, text in enumerate(texts):
        order = names if (i + first) % 2 == 0 else names[::-1]
        for name in order:
            start = time.perf_counter()
            runs[name].encode([text])  # type: ignore[attr-defined]
            times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", type=Path, help="an ONNX file of the same model to compare with")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--per-round", type=int, default=200, help="single-text calls per round")
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    p.add_argument("--loads", type=int, default=3, help="fresh-process loads to time")
    args = p.parse_args()
    for name in ("rounds", "per_round", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.loads < 0:
        p.error("--loads must be >= 0")
    if args.against is not None and not args.against.is_file():
        p.error(f"--against {args.against}: no such file")
    print(f"$ python -m bench.embed.onnx_graph {' '.join(sys.argv[1:])}")
    for i in range(args.loads):
        load = load_times(args.threads)
        print(
            f"load {i + 1}: import {load['import_s']:.2f} s, build + session "
            f"{load['load_s']:.2f} s, first embed {load['first_embed_s'] * 1e3:.1f} ms"
        )
    import numpy as np

    runs = runners(args.against, args.threads)
    vectors = {name: r.encode(QUERIES) for name, r in runs.items()}  # type: ignore[attr-defined]
    if "file" in vectors:
        cosines = np.sum(vectors["built"] * vectors["file"], axis=1)
        print(f"lowest cosine built vs file over {len(QUERIES)} texts: {cosines.min():.7f}")
    texts = (QUERIES * (args.per_round // len(QUERIES) + 1))[: args.per_round]
    for name in runs:  # warm-up
        timed_round({name: runs[name]}, texts[:20], 0)
    every: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.rounds):
        times = timed_round(runs, texts, r)
        line = ", ".join(f"{n} p50 {statistics.median(t) * 1e3:.3f} ms" for n, t in times.items())
        if "file" in times:
            ratio = statistics.median(times["built"]) / statistics.median(times["file"])
            line += f", built/file {ratio:.3f}x"
        print(f"round {r + 1}: {line}")
        for name, t in times.items():
            every[name].extend(t)
    summary = ", ".join(f"{n} p50 {statistics.median(t) * 1e3:.3f} ms" for n, t in every.items())
    print(f"all rounds: {summary}")


if __name__ == "__main__":
    main()
