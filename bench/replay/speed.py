"""Speed of ``cachekit replay`` against the embedder's batched ceiling, measured side by side.

Embedding dominates a replay, so its yardstick is the embedder's own batched ceiling on the same
texts: every distinct text of the log embedded in calls of 1,024 (``ceiling``), against the whole
replay (read, key, embed once, replay through a fresh cache, report; the model loaded before
either is timed). The ratio ``ceiling time / replay time`` is the replay's speed as a fraction
of the ceiling (``--ceiling-sample N`` times the ceiling on N of the texts and scales it).
Rounds alternate ceiling and replay; medians and ranges are printed.

``--copies N`` synthesizes a log N times the size (in a temporary directory, deleted after):
copy k gets ids ``<id>-k``, its own tenants (copies never hit each other), and ``(variant k)``
appended to every user message, so every copy's texts are new to the embedder. Peak resident
memory of the process is printed after the replay.

Examples::

    python -m bench.replay.speed bench/data/replay/replay_dev.input.jsonl \\
        bench/data/replay/replay_dev.output.jsonl --rounds 3
    python -m bench.replay.speed bench/data/replay/replay_dev.input.jsonl \\
        bench/data/replay/replay_dev.output.jsonl --copies 20 --rounds 1
    python -m bench.replay.speed bench/data/replay/replay_dev.input.jsonl \\
        bench/data/replay/replay_dev.output.jsonl --device cuda   # the torch embedder on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bench.common import data
from cachekit.llm import LLMCacheConfig
from cachekit.replay.logs import read_log
from cachekit.replay.runner import ReplayOptions, endpoint_ok, prepare_log, run_replay
from cachekit.replay.vectors import embed_all
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder


def synthesize(inp: Path, out: Path, copies: int, into: Path) -> tuple[Path, Path]:
    """``copies`` perturbed copies of a Batch API input/output pair, written under ``into``."""
    src_in = [json.loads(line) for line in inp.read_text().splitlines() if line.strip()]
    src_out = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    big_in, big_out = into / "input.jsonl", into / "output.jsonl"
    with big_in.open("w") as fi, big_out.open("w") as fo:
        for k in range(copies):
            for row in src_in:
                r = json.loads(json.dumps(row))
                r["custom_id"] = f"{row['custom_id']}-{k}"
                meta = r.setdefault("metadata", {})
                meta["tenant"] = f"{meta.get('tenant', 'anon')}-{k}"
                last = r["body"]["messages"][-1]
                last["content"] = f"{last['content']} (variant {k})"
                fi.write(json.dumps(r) + "\n")
            for row in src_out:
                fo.write(json.dumps({**row, "custom_id": f"{row['custom_id']}-{k}"}) + "\n")
    return big_in, big_out


def distinct_texts(inp: Path, out: Path) -> list[str]:
    prep = prepare_log(read_log(inp, out, endpoint_ok=endpoint_ok), LLMCacheConfig())
    return list(dict.fromkeys(t for t in prep.texts if t))


def max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    log = f"{data.REPLAY.relative_to(data.ROOT)}"
    ap.add_argument(
        "input",
        type=Path,
        nargs="?",
        default=Path(f"{data.REPLAY}.input.jsonl"),
        help=f"requests (default: {log}.input.jsonl)",
    )
    ap.add_argument(
        "outputs",
        type=Path,
        nargs="?",
        default=Path(f"{data.REPLAY}.output.jsonl"),
        help=f"their responses (default: {log}.output.jsonl)",
    )
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--ceiling-sample",
        type=int,
        default=0,
        help="measure the ceiling on this many distinct texts (default: all)",
    )
    ap.add_argument(
        "--sweep",
        type=int,
        default=0,
        help="also time a sweep of this many points (once, after the rounds)",
    )
    ap.add_argument(
        "--device",
        default="cpu",
        help="the embedder's device: cpu (default), cuda or cuda:N (the torch backend there)",
    )
    args = ap.parse_args()
    if args.device != "cpu" and not args.device.startswith("cuda"):
        ap.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    print(f"# {shlex.join(sys.argv)}")
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}")

    with tempfile.TemporaryDirectory() as tmp:
        inp, out = data.need(args.input), data.need(args.outputs)
        if args.copies > 1:
            inp, out = synthesize(inp, out, args.copies, Path(tmp))
        texts = distinct_texts(inp, out)
        if args.device == "cpu":
            embedder = SentenceTransformerEmbedder().load()
        else:
            embedder = SentenceTransformerEmbedder(backend="torch", device=args.device).load()
        embedder.embed(texts[:64])  # warm-up: first calls allocate
        rss_loaded = max_rss_mib()
        print(
            f"# requests file {inp.name}: {len(texts):,} distinct texts; "
            f"embedder {embedder.name}; peak RSS after model load {rss_loaded:,.0f} MiB"
        )

        ceil_s: list[float] = []
        replay_s: list[float] = []
        requests = 0
        sample = texts[: args.ceiling_sample] if args.ceiling_sample else texts
        for rnd in range(args.rounds):
            _, seconds = embed_all(sample, embedder)
            # Seconds the ceiling would take for all the texts, at the rate measured.
            ceil_s.append(seconds * len(texts) / len(sample))
            t0 = time.perf_counter()
            report = run_replay(inp, out, options=ReplayOptions(embedder=embedder))
            replay_s.append(time.perf_counter() - t0)
            requests = report.requests
            print(
                f"round {rnd + 1}: ceiling {len(texts) / ceil_s[-1]:,.0f} texts/s "
                f"({seconds:.1f} s for {len(sample):,}); "
                f"replay {replay_s[-1]:.1f} s for {requests:,} requests "
                f"({requests / replay_s[-1]:,.0f} req/s, hit rate {report.hit_rate:.3f}); "
                f"ratio {ceil_s[-1] / replay_s[-1]:.2f}"
            )
        ratios = [c / r for c, r in zip(ceil_s, replay_s, strict=True)]
        print(
            f"ceiling texts/s: median {len(texts) / statistics.median(ceil_s):,.0f} "
            f"(range {len(texts) / max(ceil_s):,.0f}-{len(texts) / min(ceil_s):,.0f})"
        )
        print(
            f"replay wall s: median {statistics.median(replay_s):.1f} "
            f"(range {min(replay_s):.1f}-{max(replay_s):.1f}) for {requests:,} requests"
        )
        print(
            f"replay speed / ceiling: median {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f})"
        )
        print(f"peak RSS {max_rss_mib():,.0f} MiB (after model load {rss_loaded:,.0f} MiB)")
        if args.sweep:
            points = [round(0.70 + 0.28 * i / max(1, args.sweep - 1), 4) for i in range(args.sweep)]
            t0 = time.perf_counter()
            run_replay(inp, out, options=ReplayOptions(embedder=embedder, sweep=points))
            print(
                f"sweep of {len(points)} points (+ headline): "
                f"{time.perf_counter() - t0:.1f} s; peak RSS {max_rss_mib():,.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
