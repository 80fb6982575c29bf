"""What embedding one long text costs: the library's ``embed`` (which cuts a text to what the
model can read before tokenizing) vs the same model's ``SentenceTransformer.encode`` on the
whole text (what tokenizing it all costs), both backends, repetitions interleaved.

    python -m bench.embed.long_text [--mib 1] [--reps 5]

Reported per backend: the range and median of seconds per text over ``--reps`` repetitions,
and the cosine of the two embeddings (1.0: the cut changes nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    words = "the quick brown fox asks about   rivers,\n\nforests and 42 mountains "
    text = (words * int(args.mib * 2**20 / len(words) + 1))[: int(args.mib * 2**20)]
    for backend in ("onnx", "torch"):
        emb = SentenceTransformerEmbedder(backend=backend).load()
        model = emb.sentence_transformer
        emb.embed(["warm up"])
        cut: list[float] = []
        whole: list[float] = []
        for i in range(args.reps):
            t0 = time.perf_counter()
            ours = emb.embed([f"{i} {text}"])
            cut.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            full = model.encode([f"{i} {text}"], normalize_embeddings=True, convert_to_numpy=True)
            whole.append(time.perf_counter() - t0)
        cosine = float(np.dot(ours[0], full[0]))
        print(
            f"{backend}: {args.mib:g} MiB text: cut {min(cut):.3f}-{max(cut):.3f} s (median "
            f"{statistics.median(cut):.3f}), whole {min(whole):.3f}-{max(whole):.3f} s (median "
            f"{statistics.median(whole):.3f}); cosine {cosine:.6f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
