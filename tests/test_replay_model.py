"""``cachekit replay`` end to end with the real default embedder, through the command line.
Slow: loads the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cachekit.cli.main as cli

pytestmark = pytest.mark.model

SAME = "How do I reset my password?"
PARAPHRASE = "What are the steps to reset my password?"
UNRELATED = "What is the capital of France?"


def _row(cid: str, text: str, answer: str) -> dict[str, object]:
    return {
        "custom_id": cid,
        "request": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]},
        "response": {
            "id": f"c-{cid}",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": answer},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20},
        },
        "latency_ms": 800.0,
        "metadata": {"tenant": "t"},
    }


def test_real_model_replay_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")  # the default embedder's runtime (no torch)
    log = tmp_path / "log.jsonl"
    rows = [
        _row("r1", SAME, "a"),
        _row("r2", SAME, "a"),
        _row("r3", PARAPHRASE, "a"),
        _row("r4", UNRELATED, "b"),
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "report.json"
    assert cli.main(["replay", str(log), "--quiet", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    # r2 repeats r1 exactly; r3 means the same (well above the default threshold with
    # all-MiniLM-L6-v2); r4 is unrelated.
    assert d["hits"] == {"exact": 1, "semantic": 1}
    assert d["misses"] == 2
    assert d["tokens_saved"] == {"prompt": 20, "completion": 40}
    assert d["latency_saved_s"] == pytest.approx(1.6)
    # The overhead includes embedding one text with the real model: well above a dict lookup.
    assert d["overhead_ms"]["p99"] > d["overhead_ms"]["p50"] > 0.0
