"""`cachekit tune`: pairs and measures, the adapter it writes, loading it, resuming, the CLI.

The tune runs here are tiny (a few steps on generated pairs, the real packaged model on CPU):
they check the machinery, not the quality (``bench/quality/tune.py`` measures that)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("peft")

from cachekit import Cache, Status
from cachekit.cli.main import main as cli_main
from cachekit.semantic.embed.adapter import (
    ADAPTER_FILE,
    MANIFEST,
    TunedEmbedder,
    is_tune_dir,
    load_embedder,
    read_manifest,
)
from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder
from cachekit.semantic.policy.hit_policy import (
    DEFAULT_THRESHOLD,
    operating_point_of,
    resolve_policy,
)
from cachekit.semantic.policy.pairs import (
    LabelledPair,
    average_precision,
    cache_protocol,
    component_parts,
    precision_at_recall,
    read_pairs,
    write_pairs,
)
from cachekit.semantic.train.settings import TuneConfig
from cachekit.semantic.train.tune import read_pair_files, recalibrate, tune

# A tune loads the real model and trains it on CPU: seconds on an idle machine, minutes on a
# loaded one. The fixtures' tunes count against the first test that uses them.
TUNE_TIMEOUT = pytest.mark.timeout(900)

TOPICS = [
    "cook rice",
    "learn Spanish",
    "fix a flat tyre",
    "grow tomatoes",
    "train a puppy",
    "save money",
    "sleep better",
    "write a resume",
    "paint a wall",
    "bake bread",
    "start running",
    "clean an oven",
    "tie a tie",
    "brew coffee",
    "learn guitar",
    "lose weight",
    "study for exams",
    "change a lightbulb",
    "plant a tree",
    "make friends",
]
OTHER = {
    "cook rice": "cook pasta",
    "learn Spanish": "learn French",
    "fix a flat tyre": "fix a broken chain",
}


def generated_pairs() -> list[tuple[str, str, bool]]:
    rows = []
    for i, topic in enumerate(TOPICS):
        other = OTHER.get(topic, TOPICS[(i + 1) % len(TOPICS)])
        rows.append((f"How do I {topic}?", f"What is the best way to {topic}?", True))
        rows.append((f"How can I {topic} quickly?", f"What is the best way to {topic}?", True))
        rows.append((f"Where can I {other}?", f"What is the best way to {topic}?", False))
        rows.append((f"Why do people {topic}?", f"What is the best way to {topic}?", False))
    return rows


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    write_pairs(path, generated_pairs())
    return path


TINY = TuneConfig(steps=3, batch_size=4, held_back=0.5, checkpoint_every=1, seed=7)


@pytest.fixture(scope="module")
def tuned_dir(pairs_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tuned")
    result = tune(pairs_file, out, TINY, log=lambda _: None, progress=False)
    assert result.steps_done == TINY.steps
    return out


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


# ------------------------------------------------------------------ pairs and measures


def test_read_pairs_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"query": "a", "cached": "b", "duplicate": true}\n{"query": "a"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2"):
        read_pairs(path)
    path.write_text('{"query": "a", "cached": "b", "duplicate": "yes"}\n')
    with pytest.raises(ValueError, match="duplicate bool"):
        read_pairs(path)
    path.write_text('{"query": " ", "cached": "b", "duplicate": true}\n')
    with pytest.raises(ValueError, match="blank"):
        read_pairs(path)


def test_component_parts_share_no_text_and_are_stable() -> None:
    rows = [LabelledPair(i, q, c, d) for i, (q, c, d) in enumerate(generated_pairs())]
    parts = component_parts(rows, 0.5)
    texts = {name: {t for p in ps for t in (p.query, p.cached)} for name, ps in parts.items()}
    assert not texts["train"] & texts["tune"]
    assert not texts["train"] & texts["test"]
    assert not texts["tune"] & texts["test"]
    assert sum(len(ps) for ps in parts.values()) == len(rows)
    assert component_parts(rows, 0.5) == parts
    with pytest.raises(ValueError):
        component_parts(rows, 1.0)


def test_average_precision_and_precision_at_recall() -> None:
    score = [0.9, 0.8, 0.7, 0.6]
    right = [True, False, True, False]
    assert average_precision(score, right) == pytest.approx((1 + 2 / 3) / 2)
    assert precision_at_recall(score, right, 0.5) == 1.0
    assert precision_at_recall(score, right, 1.0) == pytest.approx(2 / 3)
    assert np.isnan(average_precision([0.1], [False]))


def test_cache_protocol_judges_a_hit_by_the_entry_it_served() -> None:
    # One cached text in three pairs (one duplicate, two near misses): one entry, and a hit on
    # it is judged by each query's own label; a hit on another entry is wrong.
    pairs = [
        LabelledPair(0, "how to boil rice", "how do I cook rice", True),
        LabelledPair(1, "how to fry rice", "how do I cook rice", False),
        LabelledPair(2, "how to cook pasta", "how do I cook rice", False),
        LabelledPair(3, "best pasta sauce", "what sauce for pasta", True),
    ]
    nearest = [
        (0.95, "how do I cook rice"),
        (0.93, "how do I cook rice"),
        (0.80, "how do I cook rice"),
        (0.91, "how do I cook rice"),
    ]
    at_90 = cache_protocol(pairs, nearest, 0.90)
    assert (at_90.hits, at_90.correct, at_90.own_wrong) == (3, 1, 1)
    assert at_90.precision == pytest.approx(1 / 3)
    assert at_90.labelled_precision == pytest.approx(1 / 2)
    assert at_90.recall == pytest.approx(1 / 2)
    refused = cache_protocol(pairs, nearest, 0.90, served=[False, True, True, True])
    assert (refused.hits, refused.correct) == (2, 0)


def test_read_pair_files_keeps_the_last_label(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_pairs(a, [("q1", "c1", True), ("q2", "c2", False)])
    write_pairs(b, [("q1", "c1", False)])
    rows = read_pair_files([a, b])
    assert [(p.query, p.duplicate) for p in rows] == [("q2", False), ("q1", False)]
    assert [p.line for p in rows] == [0, 1]


def test_config_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="steps"):
        TuneConfig(steps=0)
    with pytest.raises(ValueError, match="learning_rate"):
        TuneConfig(learning_rate=2.0)
    with pytest.raises(ValueError, match="target_precision"):
        TuneConfig(target_precision=1.0)


@TUNE_TIMEOUT
def test_too_few_pairs_is_a_clear_error(tmp_path: Path) -> None:
    rows = [LabelledPair(0, "How do I cook rice?", "How to cook rice?", True)]
    with pytest.raises(ValueError, match="need at least"):
        tune(rows, tmp_path, TINY, log=lambda _: None, progress=False)


# ------------------------------------------------------------------ the artifact


@TUNE_TIMEOUT
def test_tune_writes_a_small_adapter_and_its_manifest(tuned_dir: Path) -> None:
    assert is_tune_dir(tuned_dir)
    assert (tuned_dir / ADAPTER_FILE).stat().st_size < 4_000_000
    manifest = read_manifest(tuned_dir)
    assert manifest["base"] == "all-MiniLM-L6-v2"
    assert 0.5 <= manifest["operating_point"] <= 1.0
    assert manifest["config"]["steps"] == TINY.steps
    assert set(manifest["figures"]) >= {"tune"}
    assert not (tuned_dir / ".checkpoint").exists()
    assert not (tuned_dir / "README.md").exists()  # peft's blank Hub card is not left behind


@TUNE_TIMEOUT
def test_tuned_embedder_loads_offline_with_its_own_name(tuned_dir: Path, model_cache: Path) -> None:
    tuned = load_embedder(tuned_dir, backend="torch", cache_dir=model_cache)
    base = SentenceTransformerEmbedder(backend="torch")
    assert isinstance(tuned, TunedEmbedder)
    assert "+tuned-" in tuned.name and tuned.name != base.name
    texts = ["How do I cook rice?", "What is the best way to cook rice?"]
    tv, bv = tuned.embed(texts), base.embed(texts)
    assert tv.shape == bv.shape == (2, 384)
    assert np.allclose(np.linalg.norm(tv, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(tv, bv, atol=1e-4)  # the adapter changed the model
    assert tuned.operating_point == read_manifest(tuned_dir)["operating_point"]


@TUNE_TIMEOUT
@pytest.mark.parametrize("quantize", [None, "int8"])
def test_tuned_embedder_exports_to_onnx(
    tuned_dir: Path, model_cache: Path, quantize: str | None
) -> None:
    torch_emb = load_embedder(tuned_dir, backend="torch", cache_dir=model_cache)
    onnx_emb = load_embedder(tuned_dir, backend="onnx", quantize=quantize, cache_dir=model_cache)  # type: ignore[arg-type]
    texts = ["How do I bake bread?", "Why do people plant a tree?"]
    cos = np.sum(torch_emb.embed(texts) * onnx_emb.embed(texts), axis=1)
    assert onnx_emb.backend == "onnx"
    assert cos.min() > (0.97 if quantize else 0.9999)
    assert onnx_emb.name.endswith("-int8" if quantize else ":onnx")


@TUNE_TIMEOUT
def test_cache_semantic_uses_the_tuned_operating_point(tuned_dir: Path, model_cache: Path) -> None:
    tuned = load_embedder(tuned_dir, backend="torch", cache_dir=model_cache)
    assert operating_point_of(tuned) == tuned.operating_point
    assert operating_point_of(object()) == DEFAULT_THRESHOLD
    policy = resolve_policy(None, None, tuned)
    assert policy.threshold == tuned.operating_point  # type: ignore[attr-defined]
    assert resolve_policy(0.95, None, tuned).threshold == 0.95  # type: ignore[attr-defined]
    cache = Cache(default_ttl=None)

    @cache.semantic(embedder=tuned)
    def answer(prompt: str) -> str:
        return prompt.upper()

    assert answer("How do I cook rice?") == "HOW DO I COOK RICE?"
    assert answer("How do I cook rice?") == "HOW DO I COOK RICE?"
    cache.close()


@TUNE_TIMEOUT
def test_a_tampered_or_foreign_adapter_is_refused(
    tuned_dir: Path, tmp_path: Path, model_cache: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tuned_dir, copy)
    data = bytearray((copy / ADAPTER_FILE).read_bytes())
    data[-1] ^= 0xFF
    (copy / ADAPTER_FILE).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match"):
        load_embedder(copy, cache_dir=model_cache)
    shutil.copy(tuned_dir / ADAPTER_FILE, copy / ADAPTER_FILE)
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["base_fingerprint"] = "0" * 16
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="another build"):
        load_embedder(copy, cache_dir=tmp_path / "fresh-cache")
    with pytest.raises(ValueError, match="not a tune directory"):
        load_embedder(tmp_path)


# ------------------------------------------------------------------ stopping and resuming


@TUNE_TIMEOUT
def test_stopped_tune_resumes_to_the_same_adapter(
    pairs_file: Path, tuned_dir: Path, tmp_path: Path
) -> None:
    def stop_on_estimate(line: str) -> None:
        if line.startswith("about "):  # logged after the third of 4 steps
            raise KeyboardInterrupt

    config = TuneConfig(steps=4, batch_size=4, held_back=0.5, checkpoint_every=1, seed=7)
    first = tune(pairs_file, tmp_path, config, log=stop_on_estimate, progress=False)
    assert first.steps_done < config.steps and not first.manifest
    assert (tmp_path / ".checkpoint" / "state.pt").is_file()
    lines: list[str] = []
    second = tune(pairs_file, tmp_path, config, log=lines.append, progress=False)
    assert second.resumed_from == first.steps_done
    assert any("resuming" in line for line in lines)
    straight = tune(pairs_file, tmp_path / "straight", config, log=lambda _: None, progress=False)
    assert second.manifest["adapter_sha256"] == straight.manifest["adapter_sha256"]


# ------------------------------------------------------------------ the command


def test_cli_tune_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert cli_main(["tune", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    assert cli_main(["tune", str(bad), "--out", str(tmp_path / "o"), "--steps", "0"]) == 2


@TUNE_TIMEOUT
def test_cli_tune_end_to_end(
    pairs_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import cachekit.semantic.train.tune as tune_module

    monkeypatch.setattr(tune_module, "HEARTBEAT_S", 0.0)  # a progress line at every step
    out = tmp_path / "cli"
    code = cli_main(
        [
            "tune",
            str(pairs_file),
            "--out",
            str(out),
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--no-progress",
            "--held-back",
            "0.5",
            "--eval",
            f"again={pairs_file}",
        ]
    )
    assert code == 0
    manifest = read_manifest(out)
    assert "again" in manifest["figures"]
    said = capsys.readouterr().out
    assert "step 2/2, loss " in said  # --no-progress: progress lines instead of a bar
    assert "labelled_precision: right hits over the hits the labels can judge" in said
    # Too few held-back duplicates to judge: no verdict, and it says why.
    assert manifest["verdict"]["use"] is None and "duplicates were held back" in said
    assert "verdict: no verdict: only" in said


def _figures(base: tuple[float, float], tuned: tuple[float, float], dups: int = 400) -> Any:
    def side(recall: float, precision: float) -> dict[str, Any]:
        return {"duplicates": dups, "cache": {"recall": recall, "labelled_precision": precision}}

    return {"test": {"base": side(*base), "tuned": side(*tuned)}}


@pytest.mark.parametrize(
    ("base", "tuned", "use", "words"),
    [
        ((0.50, 0.80), (0.60, 0.80), True, "serves more of the duplicates"),
        ((0.50, 0.80), (0.60, 0.79), True, "about the same precision"),
        ((0.50, 0.80), (0.50, 0.90), False, "no more of the duplicates"),
        ((0.50, 0.80), (0.70, 0.70), False, "more of its hits are wrong"),
    ],
)
def test_the_verdict_is_read_from_the_held_back_pairs(
    base: tuple[float, float], tuned: tuple[float, float], use: bool, words: str
) -> None:
    from cachekit.semantic.train.verdict import verdict

    found = verdict(_figures(base, tuned))
    assert found["use"] is use and words in found["why"]
    assert verdict(_figures(base, tuned, dups=10))["use"] is None
    floor = verdict(_figures(base, tuned), operating_point=0.5, floor=0.5)
    assert floor["use"] is False and "bottom of the grid" in floor["why"]


# ------------------------------------------------------------------ everywhere an embedder goes


def _chat_record(cid: str, text: str) -> dict[str, object]:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    answer = {
        "id": f"chatcmpl-{cid}",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"answer {cid}"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }
    return {"custom_id": cid, "request": body, "response": answer, "latency_ms": 500.0}


@TUNE_TIMEOUT
def test_replay_with_a_tune_dir_uses_its_operating_point(
    tuned_dir: Path, model_cache: Path, tmp_path: Path
) -> None:
    from cachekit.replay.runner import ReplayOptions, run_replay

    tuned = load_embedder(tuned_dir, backend="torch", cache_dir=model_cache)
    log = tmp_path / "log.jsonl"
    texts = ["How do I cook rice?", "How do I cook rice?", "What is the best way to cook rice?"]
    log.write_text(
        "".join(json.dumps(_chat_record(f"r{i}", t)) + "\n" for i, t in enumerate(texts))
    )
    report = run_replay(log, options=ReplayOptions(embedder=tuned))
    assert report.policy == f"threshold:{tuned.operating_point:g}"
    assert report.to_dict()["hits"]["exact"] == 1
    explicit = run_replay(log, options=ReplayOptions(embedder=tuned, setting=0.99))
    assert explicit.policy == "threshold:0.99"


@TUNE_TIMEOUT
def test_serve_and_langchain_take_a_tune_dir(tuned_dir: Path, model_cache: Path) -> None:
    pytest.importorskip("langchain_core")
    from cachekit.adapters.langchain import CachekitSemanticCache

    from cachekit.proxy.config import load_embedder as load_spec

    assert load_spec("") is None
    tuned = load_embedder(tuned_dir, backend="torch", cache_dir=model_cache)
    cache = Cache(default_ttl=None)
    lc = CachekitSemanticCache(cache, embedder=tuned)
    # No threshold given: the tune's operating point, as for @cache.semantic.
    assert lc.fn.policy.threshold == tuned.operating_point
    from langchain_core.outputs import Generation

    lc.update("How do I cook rice?", "llm", [Generation(text="boil it")])
    assert lc.lookup("How do I cook rice?", "llm") == [Generation(text="boil it")]
    cache.close()


@TUNE_TIMEOUT
def test_cli_tune_retrains_the_verifier_on_held_back_pairs_only(
    pairs_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cachekit.semantic.policy import verifier

    seen: list[list[LabelledPair]] = []
    real = verifier.train_verifier

    def spy(pairs: list[LabelledPair], out: Path, **kw: object) -> object:
        seen.append(list(pairs))
        return real(pairs, out, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(verifier, "train_verifier", spy)
    monkeypatch.setenv("CACHEKIT_CACHE_DIR", str(tmp_path / "models"))
    out = tmp_path / "with-verifier"
    args = ["tune", str(pairs_file), "--out", str(out), "--steps", "2", "--batch-size", "4"]
    assert cli_main([*args, "--no-progress", "--held-back", "0.5", "--verifier"]) == 0
    [held_back] = seen
    parts = component_parts(read_pairs(pairs_file), 0.5)
    assert {(p.query, p.cached) for p in held_back} == {(p.query, p.cached) for p in parts["tune"]}
    model = json.loads((out / "verifier.json").read_text())
    assert "+tuned-" in model["info"]["embedder"]


@TUNE_TIMEOUT
def test_recalibrate_chooses_the_point_again_and_keeps_the_adapter(
    tuned_dir: Path, pairs_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CACHEKIT_CACHE_DIR", str(tmp_path / "models"))
    copy = tmp_path / "copy"
    shutil.copytree(tuned_dir, copy)
    before = read_manifest(copy)
    name_before = load_embedder(copy).name
    # A target any bar meets: the lowest point of the grid with 20 hits is chosen.
    args = ["tune", str(pairs_file), "--out", str(copy), "--recalibrate"]
    assert cli_main([*args, "--target-precision", "0.01"]) == 0
    after = read_manifest(copy)
    assert after["previous_operating_points"][0]["operating_point"] == before["operating_point"]
    assert after["recalibrated_on_pairs"] == len(read_pairs(pairs_file))
    assert after["adapter_sha256"] == before["adapter_sha256"]
    reloaded = load_embedder(copy)
    assert reloaded.operating_point == after["operating_point"] <= 0.6
    assert reloaded.name == name_before  # same adapter: same entries
    with pytest.raises(ValueError, match="duplicates"):
        recalibrate(copy, [p for p in read_pairs(pairs_file) if not p.duplicate])


def test_base_and_tuned_embedders_never_share_entries(
    tuned_dir: Path, model_cache: Path, redis_url: str
) -> None:
    """The base model and a tuned adapter side by side on one Redis (half a fleet upgraded):
    each one's shared entries are never the other's candidates; the mismatch is counted and
    named."""
    from cachekit.llm import LLMCache, prepare
    from cachekit.semantic.embed.embedder import fingerprint_of
    from cachekit.testing import wait_until

    base = SentenceTransformerEmbedder(backend="torch")
    tuned = load_embedder(tuned_dir, backend="torch", cache_dir=model_cache)
    assert fingerprint_of(base) != fingerprint_of(tuned)
    assert fingerprint_of(base).startswith(base.name + "|384|")

    def request(text: str) -> Any:
        body = {"model": "m", "messages": [{"role": "user", "content": text}]}
        return prepare("/v1/chat/completions", body, "t")

    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Rinse it."},
                "finish_reason": "stop",
            }
        ],
    }
    caches = [
        LLMCache(Cache(redis_url=redis_url, namespace="side"), threshold=0.5, embedder=e)
        for e in (base, tuned, base)
    ]
    writer, other, same = caches
    try:
        for c in (other, same):
            c.warm(False, 30.0)
        assert writer.store(request("How do I cook rice?"), answer)
        para = request("What is the best way to cook rice?")
        wait_until(lambda: same.lookup(para).status is Status.SEMANTIC_HIT, timeout=20.0)
        wait_until(lambda: bool((other.semantic_health() or {}).get("embedder_mismatch")), 20.0)
        assert other.lookup(para).status is Status.MISS
        assert (other.semantic_health() or {})["foreign_embedders"] == [fingerprint_of(base)]
    finally:
        for c in caches:
            c.close()
