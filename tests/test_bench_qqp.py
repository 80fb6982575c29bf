"""bench/quality/build_qqp.py builds the QQP pair files from a copy of their public source, and
bench/replay/build_log.py a request log from them: checked offline on a tiny archive laid out
here (``--source``), never the real file and never the network."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
import urllib.error
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # bench is a folder of the checkout, not an installed package

from bench.quality import build_qqp  # noqa: E402
from bench.replay import build_log  # noqa: E402

ROWS: list[dict[str, Any]] = [
    # a chain: q1-q2-q3 share questions, so they must land in one file
    {
        "text_a": "How do I learn Python?",
        "text_b": "What is the best way to learn Python?",
        "label": 1,
    },
    {"text_a": "What is the best way to learn Python?", "text_b": "Is Python hard?", "label": 0},
    # the same pair again, reversed: dropped
    {
        "text_a": "What is the best way to learn Python?",
        "text_b": "How do I learn Python?",
        "label": 1,
    },
    # a text with itself: dropped
    {"text_a": "Why is the sky blue?", "text_b": "Why is the sky blue?", "label": 1},
    {
        "text_a": "How do I lose weight?",
        "text_b": "What is the fastest way to lose weight?",
        "label": 1,
    },
    {"text_a": "Is coffee bad for you?", "text_b": "Is tea bad for you?", "label": 0},
    {"text_a": "Who invented the telephone?", "text_b": "Who made the first phone?", "label": 1},
    {"text_a": "How tall is Everest?", "text_b": "How tall is K2?", "label": 0},
    {"text_a": "What causes rain?", "text_b": "Why does it rain?", "label": 1},
    {"text_a": "Can dogs eat grapes?", "text_b": "Can cats eat grapes?", "label": 0},
]
DISTINCT = len(ROWS) - 2


def archive(tmp_path: Path, rows: list[dict[str, Any]] = ROWS) -> tuple[Path, str]:
    """A gzipped tar laid out as GPTCache's: ``examples/benchmark/similiar_qqp_full.json``."""
    payload = json.dumps(rows).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("examples/benchmark/similiar_qqp_full.json")
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    path = tmp_path / "similiar_qqp_full.json.gz"
    path.write_bytes(buf.getvalue())
    return path, hashlib.sha256(buf.getvalue()).hexdigest()


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def build(tmp_path: Path, out: str = "out", *extra: str) -> Path:
    source, digest = archive(tmp_path)
    argv = ["--source", str(source), "--out", str(tmp_path / out), "--expect-sha256", digest]
    assert build_qqp.main([*argv, "--dev-size", "3", *extra]) == 0
    return tmp_path / out


def test_builds_dev_and_train_pair_files_in_the_benchmarks_format(tmp_path: Path) -> None:
    out = build(tmp_path)
    dev, train = read(out / build_qqp.DEV), read(out / build_qqp.TRAIN)
    assert len(dev) == 3 and len(dev) + len(train) == DISTINCT
    for row in dev + train:
        assert list(row) == ["query", "cached", "duplicate"]
        assert isinstance(row["query"], str) and isinstance(row["cached"], str)
        assert isinstance(row["duplicate"], bool) and row["query"] != row["cached"]
    # cached is the source's text_a, query its text_b, duplicate its label
    source = {(r["text_a"], r["text_b"]): r["label"] == 1 for r in ROWS}
    assert all(source[(r["cached"], r["query"])] == r["duplicate"] for r in dev + train)
    pairs = [frozenset((r["query"], r["cached"])) for r in dev + train]
    assert len(set(pairs)) == len(pairs), "a pair repeats"
    info = json.loads((out / build_qqp.INFO).read_text())
    assert info["files"][build_qqp.DEV] == {
        "pairs": 3,
        "duplicates": sum(r["duplicate"] for r in dev),
    }


@pytest.mark.parametrize("seed", ["0", "1", "2", "3"])
def test_no_question_appears_in_both_files(tmp_path: Path, seed: str) -> None:
    out = build(tmp_path, "out", "--seed", seed)
    dev, train = read(out / build_qqp.DEV), read(out / build_qqp.TRAIN)
    questions = [{t for r in rows for t in (r["query"], r["cached"])} for rows in (dev, train)]
    assert questions[0] and questions[1] and not questions[0] & questions[1]


def test_the_same_seed_builds_the_same_files(tmp_path: Path) -> None:
    a, b = build(tmp_path, "a"), build(tmp_path, "b")
    for name in (build_qqp.DEV, build_qqp.TRAIN):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_a_wrong_checksum_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    source, _ = archive(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:  # checked against the published file's checksum
        build_qqp.main(["--source", str(source), "--out", str(out)])
    message = str(exc.value)
    assert "SHA-256" in message and build_qqp.SHA256 in message and str(source) in message
    assert not (out / build_qqp.DEV).exists() and not (out / build_qqp.TRAIN).exists()


def test_offline_the_error_names_the_url_and_the_source_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(*args: Any, **kwargs: Any) -> Any:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(build_qqp.urllib.request, "urlopen", offline)
    with pytest.raises(SystemExit) as exc:
        build_qqp.main(["--out", str(tmp_path / "out")])
    message = str(exc.value)
    assert build_qqp.URL in message and "--source" in message
    assert list((tmp_path / "out").iterdir()) == []  # no partial download left behind


def test_a_plain_gzipped_json_list_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "rows.json.gz"
    path.write_bytes(gzip.compress(json.dumps(ROWS).encode()))
    assert len(build_qqp.distinct_pairs(build_qqp.read_rows(path))) == DISTINCT


def test_the_replay_log_built_from_pairs_is_consistent(tmp_path: Path) -> None:
    out = build(tmp_path)
    prefix = tmp_path / "log" / "replay"
    assert (
        build_log.main([str(out / build_qqp.TRAIN), "--out", str(prefix), "--requests", "40"]) == 0
    )
    inputs, outputs, truth = (
        read(Path(f"{prefix}.{p}.jsonl")) for p in ("input", "output", "truth")
    )
    assert len(inputs) == len(outputs) == len(truth) > 0
    by_id: dict[str, Any] = {}
    for req, resp, t in zip(inputs, outputs, truth, strict=True):
        assert req["custom_id"] == resp["custom_id"] == t["custom_id"]
        assert req["url"] == "/v1/chat/completions" and req["metadata"]["tenant"]
        assert resp["response"]["status_code"] == 200 and resp["latency_ms"] > 0
        assert resp["response"]["body"]["usage"]["total_tokens"] > 0
        assert t["kind"] in ("new", "repeat", "paraphrase", "near_miss")
        assert (t["equivalent_to"] is None) == (t["kind"] in ("new", "near_miss"))
        scope = (req["metadata"]["tenant"], req["body"]["model"])
        if t["equivalent_to"] is not None:
            earlier, earlier_scope = by_id[t["equivalent_to"]]
            assert earlier["answer"] == t["answer"] and earlier_scope == scope
        by_id[t["custom_id"]] = (t, scope)
    assert {t["kind"] for t in truth} >= {"new", "repeat"}
