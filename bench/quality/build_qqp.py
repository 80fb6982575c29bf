"""Build the labelled QQP pair files the benchmarks read, from their public source.

Source: GPTCache's benchmark file ``examples/benchmark/similiar_qqp_full.json.gz`` in the
zilliztech/GPTCache repository (MIT; the questions and labels are Quora Question Pairs, under
Quora's terms): a gzipped tar holding ``similiar_qqp_full.json``, a list of
``{"text_a", "text_b", "label"}`` (80,854 pairs, 30,141 labelled duplicate). The script
downloads it (or reads ``--source``), checks its SHA-256, drops repeated pairs (in either
order) and pairs of one text with itself, and splits the rest so that no question of one file
appears in the other: questions linked by a pair stay together, and whole groups are drawn
into the dev file, in an order shuffled with ``--seed``, until it holds ``--dev-size`` pairs.
Each file is then shuffled. Written to ``--out`` (default ``bench/data/qqp/``, git-ignored:
the files are never committed), one JSON object a line::

    {"query": "...", "cached": "...", "duplicate": true}

``cached`` is the source's ``text_a`` (the text whose answer is in the cache), ``query`` its
``text_b``, ``duplicate`` whether the label says they ask the same thing.

* ``qqp_pairs_dev.jsonl``: the pairs figures are reported on (6,000 by default);
* ``qqp_pairs_train.jsonl``: the rest, for training and tuning (``cachekit tune``, verifiers);
* ``qqp_build.json``: the source, its checksum, the seed and the counts.

    python -m bench.quality.build_qqp
    python -m bench.quality.build_qqp --source ~/Downloads/similiar_qqp_full.json.gz
    python -m bench.quality.build_qqp --out /tmp/qqp --dev-size 2000 --seed 1

Offline, download the file elsewhere from the URL below and pass it with ``--source``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import random
import sys
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.common import data

#: The commit of zilliztech/GPTCache that added the file (an ancestor of its main branch).
COMMIT = "79497fea723e1816b1e433459539a6cbac1b5fc7"
NAME = "similiar_qqp_full.json.gz"
URL = f"https://raw.githubusercontent.com/zilliztech/GPTCache/{COMMIT}/examples/benchmark/{NAME}"
#: SHA-256 of that file's bytes (3,876,675 bytes; git blob 523bbcba1cf3...), read from the
#: repository's history: the same bytes at the tip of its main branch.
SHA256 = "1fcd814990dd8ebbc1cdacd41fca11e56739e2e4d72e4ac119334084ed7e2b58"
MEMBER = "similiar_qqp_full.json"

DEV = "qqp_pairs_dev.jsonl"
TRAIN = "qqp_pairs_train.jsonl"
INFO = "qqp_build.json"

Pair = tuple[str, str, bool]  # cached, query, duplicate


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: Path) -> None:
    """``url`` to ``dest`` (through a ``.part`` file), or exit saying how to supply it by hand."""
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as fh:
            while block := response.read(1 << 20):
                fh.write(block)
    except (urllib.error.URLError, OSError) as exc:
        part.unlink(missing_ok=True)
        raise SystemExit(
            f"could not download {url}: {exc}\n"
            f"Download that file by hand (on any machine that can reach GitHub) and pass it:\n"
            f"    python -m bench.quality.build_qqp --source PATH/{NAME}"
        ) from None
    part.replace(dest)


def fetch_source(source: Path | None, out: Path, expect: str) -> Path:
    """The source file, checked against ``expect``: ``source`` if given, else a copy downloaded
    into ``out`` (kept there, and reused while its checksum holds)."""
    downloaded = False
    if source is None:
        source = out / NAME
        if not source.exists() or sha256_of(source) != expect:
            print(f"downloading {URL}", file=sys.stderr)
            download(URL, source)
            downloaded = True
    elif not source.is_file():
        raise SystemExit(f"--source {source}: no such file")
    got = sha256_of(source)
    if got != expect:
        if downloaded:
            source.unlink()
        raise SystemExit(
            f"{source}: SHA-256 {got} does not match the expected {expect}: not the file this "
            f"script builds from (a truncated or changed copy?). Get it from {URL}"
        )
    return source


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The source's rows: the JSON list in the gzipped tar (a plain gzipped JSON list too)."""
    raw = path.read_bytes()
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tf:
            member = next((m for m in tf.getmembers() if Path(m.name).name == MEMBER), None)
            if member is None or not member.isfile():
                raise SystemExit(f"{path}: the archive holds no {MEMBER}")
            fh = tf.extractfile(member)
            assert fh is not None
            text = fh.read()
    except tarfile.ReadError:
        text = gzip.decompress(raw)
    rows = json.loads(text)
    if not isinstance(rows, list):
        raise SystemExit(f"{path}: expected a JSON list of {{text_a, text_b, label}}")
    return rows


def distinct_pairs(rows: Iterable[dict[str, Any]]) -> list[Pair]:
    """``(cached, query, duplicate)`` per row, the first of any pair that repeats (in either
    order) kept, and no pair of a text with itself."""
    seen: set[frozenset[str]] = set()
    out: list[Pair] = []
    for row in rows:
        a, b, label = row["text_a"], row["text_b"], row["label"]
        if not isinstance(a, str) or not isinstance(b, str) or label not in (0, 1):
            raise SystemExit(f"not a {{text_a, text_b, label}} row: {row!r}")
        key = frozenset((a, b))
        if not a.strip() or not b.strip() or len(key) == 1 or key in seen:
            continue
        seen.add(key)
        out.append((a, b, label == 1))
    return out


def groups(pairs: Sequence[Pair]) -> list[list[int]]:
    """Indices of ``pairs`` in groups that share no question with one another (the connected
    components of the question graph), in the order of their first pair."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for cached, query, _ in pairs:
        a, b = root(cached), root(query)
        if a != b:
            parent[a] = b
    by_root: dict[str, list[int]] = {}
    for i, (cached, _, _) in enumerate(pairs):
        by_root.setdefault(root(cached), []).append(i)
    return list(by_root.values())


def split(pairs: Sequence[Pair], dev_size: int, seed: int) -> tuple[list[Pair], list[Pair]]:
    """``(dev, train)``: whole groups drawn in a seeded order into dev while they fit in
    ``dev_size`` pairs, every other group into train; each file shuffled."""
    rng = random.Random(seed)
    order = groups(pairs)
    rng.shuffle(order)
    dev: list[Pair] = []
    train: list[Pair] = []
    for group in order:
        target = dev if len(dev) + len(group) <= dev_size else train
        target.extend(pairs[i] for i in group)
    rng.shuffle(dev)
    rng.shuffle(train)
    return dev, train


def write_pairs(path: Path, pairs: Iterable[Pair]) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        for cached, query, duplicate in pairs:
            row = {"query": query, "cached": cached, "duplicate": duplicate}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--out",
        type=Path,
        default=data.QQP_DIR,
        help=f"folder to write to (default: {data.QQP_DIR.relative_to(data.ROOT)})",
    )
    p.add_argument("--source", type=Path, help=f"a downloaded copy of {NAME} (no download)")
    p.add_argument("--dev-size", type=int, default=6000, help="pairs in the dev file")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the shuffles")
    p.add_argument(
        "--expect-sha256",
        default=SHA256,
        metavar="HEX",
        help="the source's checksum (default: the published file's; for tests)",
    )
    args = p.parse_args(argv)
    if args.dev_size < 1:
        p.error("--dev-size must be positive")
    args.out.mkdir(parents=True, exist_ok=True)
    source = fetch_source(args.source, args.out, args.expect_sha256.lower())
    pairs = distinct_pairs(read_rows(source))
    dev, train = split(pairs, args.dev_size, args.seed)
    if len(dev) < args.dev_size:
        raise SystemExit(f"only {len(dev)} pairs fit in the dev file; lower --dev-size")
    write_pairs(args.out / DEV, dev)
    write_pairs(args.out / TRAIN, train)
    counts = {
        name: {"pairs": len(rows), "duplicates": sum(r[2] for r in rows)}
        for name, rows in ((DEV, dev), (TRAIN, train))
    }
    info = {
        "source": URL,
        "sha256": args.expect_sha256.lower(),
        "seed": args.seed,
        "dev_size": args.dev_size,
        "distinct_pairs": len(pairs),
        "files": counts,
    }
    (args.out / INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    for name, c in counts.items():
        print(f"{args.out / name}: {c['pairs']} pairs, {c['duplicates']} duplicates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
