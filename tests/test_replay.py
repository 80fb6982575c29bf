"""``cachekit replay`` on small hand-built logs whose report is worked out by hand here.

The embedder is the deterministic test double; every similarity the expectations rely on is
checked first (``test_the_texts_are_what_the_expectations_assume``), so a change to the double
fails loudly there instead of silently changing what the other tests mean.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from responses_bodies import responses_answer

from cachekit.replay.cli import parse_sweep
from cachekit.replay.logs import FIRST_LINES_KEPT
from cachekit.replay.report import NearMiss, Report, pick_near_sample
from cachekit.replay.runner import ReplayOptions, run_replay
from cachekit.testing.embedders import DeterministicTestEmbedder

ROUTER = "how do I reset the password of my home wifi router"
PARAPHRASE = "how can I reset the password of my home wifi router"
NEAR_MISS = "how do I reset the password of my office wifi router"
OTHER = "how do I change the name of my home wifi network"
FRANCE = "what is the capital of france"
PRIME = "name a prime number"
# A request that differs from an earlier one only in a number: as close as a paraphrase to the
# embedder, refused by the slot guard.
DRIVE_61 = "how long does it take to drive 61 km to the airport from the train station"
DRIVE_63 = "how long does it take to drive 63 km to the airport from the train station"
THRESHOLD = 0.85

# Dollars per million tokens chosen so every cost below is a round number: $0.2 for a
# 100-prompt/50-completion answer, $0.014 for a 10/2 one.
PRICES_TOML = '[prices."gpt-4o-mini"]\ninput = 1000.0\noutput = 2000.0\n'


def _completion(
    cid: str, text: str, model: str, prompt: int = 100, completion: int = 50
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{cid}",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": f"answer {cid}: {text}"},
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _sse(cid: str, model: str, *, complete: bool) -> str:
    base = {
        "id": f"chatcmpl-{cid}",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
    }
    chunks = [
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": "Par"},
                    "finish_reason": None,
                }
            ],
        },
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "is"},
                    "finish_reason": "stop" if complete else None,
                }
            ],
        },
        {**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}},
    ]
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks[: 3 if complete else 1])
    return events + ("data: [DONE]\n\n" if complete else "")


def _body(text: str, model: str = "gpt-4o-mini", stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": text},
        ],
    }
    if stream:
        body["stream"] = True
    return body


# (custom_id, tenant, model, text, stream, answer, kind, latency_ms, response override)
LOG: list[tuple[str, str, str, str, bool, str, str, float, Any]] = [
    ("a1", "acme", "gpt-4o-mini", ROUTER, False, "A", "new", 1000.0, None),
    ("a2", "acme", "gpt-4o-mini", ROUTER, False, "A", "repeat", 1000.0, None),
    ("a3", "acme", "gpt-4o-mini", PARAPHRASE, False, "A", "paraphrase", 1000.0, None),
    ("a4", "acme", "gpt-4o-mini", NEAR_MISS, False, "B", "near_miss", 1000.0, None),
    ("a5", "acme", "gpt-4o-mini", OTHER, False, "C", "new", 1000.0, None),
    ("g1", "globex", "gpt-4o-mini", ROUTER, False, "D", "new", 1000.0, None),
    ("m1", "acme", "gpt-4.1", ROUTER, False, "E", "new", 1000.0, None),
    ("s1", "acme", "gpt-4o-mini", FRANCE, True, "F", "new", 1000.0, "sse"),
    ("s2", "acme", "gpt-4o-mini", FRANCE, False, "F", "repeat", 400.0, "small"),
    ("t1", "acme", "gpt-4o-mini", PRIME, True, "G", "new", 1000.0, "broken"),
    ("t2", "acme", "gpt-4o-mini", PRIME, False, "G", "repeat", 1000.0, None),
]


def _response(cid: str, model: str, text: str, override: Any) -> Any:
    if override == "sse":
        return _sse(cid, model, complete=True)
    if override == "broken":  # the stream was cut: must never be stored
        return _sse(cid, model, complete=False)
    if override == "small":
        return _completion(cid, text, model, prompt=10, completion=2)
    return _completion(cid, text, model)


def write_records(path: Path, log: list[Any] = LOG) -> Path:
    with path.open("w") as f:
        for cid, tenant, model, text, stream, _, _, latency, override in log:
            f.write(
                json.dumps(
                    {
                        "custom_id": cid,
                        "request": _body(text, model, stream),
                        "response": _response(cid, model, text, override),
                        "latency_ms": latency,
                        "metadata": {"tenant": tenant},
                    }
                )
                + "\n"
            )
    return path


def write_batch(dir_: Path, log: list[Any] = LOG) -> tuple[Path, Path]:
    inp, out = dir_ / "in.jsonl", dir_ / "out.jsonl"
    with inp.open("w") as fi, out.open("w") as fo:
        for cid, tenant, model, text, stream, *_ in log:
            fi.write(
                json.dumps(
                    {
                        "custom_id": cid,
                        "method": "POST",
                        "url": "/v1/chat/completions",
                        "body": _body(text, model, stream),
                        "metadata": {"tenant": tenant},
                    }
                )
                + "\n"
            )
        # Outputs come back in any order in the Batch API: write them reversed.
        for cid, _, model, text, _, _, _, latency, override in reversed(log):
            fo.write(
                json.dumps(
                    {
                        "custom_id": cid,
                        "response": {
                            "status_code": 200,
                            "body": _response(cid, model, text, override),
                        },
                        "latency_ms": latency,
                    }
                )
                + "\n"
            )
    return inp, out


def write_truth(path: Path, log: list[Any] = LOG) -> Path:
    with path.open("w") as f:
        for cid, _, _, _, _, answer, kind, _, _ in log:
            f.write(
                json.dumps(
                    {"custom_id": cid, "kind": kind, "answer": answer, "equivalent_to": None}
                )
                + "\n"
            )
    return path


@pytest.fixture
def prices(tmp_path: Path) -> Path:
    p = tmp_path / "prices.toml"
    p.write_text(PRICES_TOML)
    return p


def _opts(prices: Path | None = None, **kw: Any) -> ReplayOptions:
    kw.setdefault("setting", THRESHOLD)
    return ReplayOptions(embedder=DeterministicTestEmbedder(64), prices_path=prices, **kw)


def test_the_texts_are_what_the_expectations_assume() -> None:
    e = DeterministicTestEmbedder(64)

    def cos(a: str, b: str) -> float:
        return float(e.vector(a) @ e.vector(b))

    assert cos(ROUTER, PARAPHRASE) >= 0.88  # hits at 0.85 and 0.88
    assert THRESHOLD <= cos(ROUTER, NEAR_MISS) < 0.88  # hits at 0.85 only
    assert cos(PARAPHRASE, NEAR_MISS) < 0.95
    for text in (OTHER, FRANCE, PRIME):
        assert cos(ROUTER, text) < THRESHOLD
        assert cos(NEAR_MISS, text) < THRESHOLD
    assert cos(DRIVE_61, DRIVE_63) >= 0.88  # would hit at 0.85 and 0.88 but for the number
    for text in (ROUTER, PARAPHRASE, NEAR_MISS, OTHER, FRANCE, PRIME):
        assert cos(DRIVE_61, text) < THRESHOLD and cos(DRIVE_63, text) < THRESHOLD


def _check_headline(d: dict[str, Any]) -> None:
    # Hits: a2 (exact, a1's entry), a3 (paraphrase of a1), a4 (near miss, wrongly, of a1),
    # s2 (exact: `stream` is not part of the key; s1's stream was stored assembled).
    # Misses: a1, a5 (unrelated), g1 (same text, other tenant), m1 (same text, other model),
    # s1, t1 (a cut stream), t2 (t1 was not stored, so its repeat misses too).
    assert d["requests"] == 11
    assert d["hits"] == {"exact": 2, "semantic": 2}
    assert d["misses"] == 7
    assert d["hit_rate"] == pytest.approx(4 / 11)
    assert d["tokens_saved"] == {"prompt": 100 * 3 + 10, "completion": 50 * 3 + 2}
    assert d["dollars_saved"]["by_model"]["gpt-4o-mini"] == pytest.approx(0.2 * 3 + 0.014)
    assert d["dollars_saved"]["by_model"]["gpt-4.1"] == 0.0
    assert d["dollars_saved"]["total"] == pytest.approx(0.614)
    assert d["latency_saved_s"] == pytest.approx(3.0 + 0.4)
    assert d["skipped"] == {}


def test_records_log_report_by_hand(tmp_path: Path, prices: Path) -> None:
    log = write_records(tmp_path / "log.jsonl")
    report = run_replay(log, options=_opts(prices))
    d = report.to_dict()
    _check_headline(d)
    assert "correct_hits" not in d and "sweep" not in d
    assert d["overhead_ms"]["p50"] > 0
    assert d["overhead_ms"]["p99"] >= d["overhead_ms"]["p50"]


def test_batch_files_give_the_same_report(tmp_path: Path, prices: Path) -> None:
    inp, out = write_batch(tmp_path)
    d = run_replay(inp, out, options=_opts(prices)).to_dict()
    _check_headline(d)


def test_truth_judges_every_hit(tmp_path: Path, prices: Path) -> None:
    log = write_records(tmp_path / "log.jsonl")
    report = run_replay(
        log, truth_path=write_truth(tmp_path / "truth.jsonl"), options=_opts(prices)
    )
    d = report.to_dict()
    assert d["correct_hits"] == 3  # a2, a3, s2
    assert d["wrong_hits"] == 1  # a4: the office router is not the home router
    assert d["semantic_precision"] == pytest.approx(1 / 2)  # a3 right, a4 wrong
    assert d["net_dollars_saved"]["total"] == pytest.approx(0.2 + 0.2 + 0.014)
    [wrong] = report.wrong_sample
    assert (wrong.custom_id, wrong.served_custom_id) == ("a4", "a1")
    assert (wrong.text, wrong.served_text) == (NEAR_MISS, ROUTER)
    assert wrong.similarity is not None and wrong.similarity >= THRESHOLD


def test_the_report_decides_baseline_breakdowns_every_wrong_hit_and_its_cost(
    tmp_path: Path, prices: Path
) -> None:
    log = write_records(tmp_path / "log.jsonl")
    truth = write_truth(tmp_path / "truth.jsonl")
    d = run_replay(log, truth_path=truth, options=_opts(prices, wrong_cost=1.0)).to_dict()
    # Semantic matching off: a3 and a4 miss (and are stored); a2 and s2 still hit exactly.
    assert d["exact_only"]["hits"] == 2
    assert d["exact_only"]["hit_rate"] == pytest.approx(2 / 11)
    assert d["exact_only"]["dollars_saved"] == pytest.approx(0.2 + 0.014)
    assert d["breakdown"]["tenant"] == {
        "acme": {"requests": 10, "hit_rate": pytest.approx(0.4), "wrong_hits": 1},
        "globex": {"requests": 1, "hit_rate": 0.0, "wrong_hits": 0},
    }
    assert d["breakdown"]["model"]["gpt-4.1"] == {"requests": 1, "hit_rate": 0.0, "wrong_hits": 0}
    [row] = d["wrong_hits_list"]
    assert (row["custom_id"], row["served_custom_id"], row["status"]) == ("a4", "a1", "semantic")
    assert row["served_answer_id"] == "chatcmpl-a1" and row["similarity"] >= THRESHOLD
    from cachekit.replay.html import render_html

    page = render_html(run_replay(log, truth_path=truth, options=_opts(prices)))
    assert "<h2>By tenant</h2>" in page and "<td>globex</td>" in page
    net = d["net_dollars_saved"]
    assert net["on_right_hits"] == pytest.approx(0.414) and net["wrong_cost"] == 1.0
    assert net["total"] == pytest.approx(0.414 - 1.0)  # a wrong answer can cost more than hits save


def test_sweep_embeds_each_text_once(tmp_path: Path, prices: Path) -> None:
    log = write_records(tmp_path / "log.jsonl")
    embedder = DeterministicTestEmbedder(64)
    batches: list[list[str]] = []
    inner = embedder.embed

    def spy(texts: Any) -> Any:
        batches.append(list(texts))
        return inner(texts)

    embedder.embed = spy  # type: ignore[method-assign]
    sweep = [0.85, 0.88, 0.95]
    report = run_replay(
        log,
        truth_path=write_truth(tmp_path / "truth.jsonl"),
        options=(ReplayOptions(embedder=embedder, prices_path=prices, sweep=sweep, setting=0.88)),
    )
    distinct = {ROUTER, PARAPHRASE, NEAR_MISS, OTHER, FRANCE, PRIME}
    [batch] = [b for b in batches if len(b) > 1]
    assert sorted(batch) == sorted(distinct)
    # The rest are one-text calls timing a lone lookup's embedding, at most 16 and a warm-up.
    assert all(len(b) == 1 for b in batches if b is not batch)
    assert len(batches) - 1 <= len(distinct) + 1

    d = report.to_dict()
    points = {p["threshold"]: p for p in d["sweep"]}
    assert list(points) == sweep
    assert points[0.85]["hits"] == {"exact": 2, "semantic": 2}
    assert (points[0.85]["correct_hits"], points[0.85]["wrong_hits"]) == (3, 1)
    assert points[0.88]["hits"] == {"exact": 2, "semantic": 1}  # the near miss now misses
    assert (points[0.88]["correct_hits"], points[0.88]["wrong_hits"]) == (3, 0)
    assert points[0.88]["semantic_precision"] == 1.0
    assert points[0.95]["hits"] == {"exact": 2, "semantic": 0}
    assert points[0.95]["semantic_precision"] is None  # no semantic hit to judge
    assert points[0.95]["net_dollars_saved"]["total"] == pytest.approx(0.2 + 0.014)
    # The headline is the 0.88 run, without its own threshold field.
    assert d["hits"] == points[0.88]["hits"] and "threshold" not in d
    assert set(points[0.88]) == set(d) - {"sweep", "exact_only", "recommended"} | {"threshold"}


def test_parse_sweep() -> None:
    assert parse_sweep("0.70:0.98:0.02") == [round(0.70 + 0.02 * i, 10) for i in range(15)]
    assert parse_sweep("0.9:0.9:0.1") == [0.9]
    for bad in ("0.7:0.9", "a:b:c", "0.9:0.7:0.1", "0.1:0.9:0"):
        with pytest.raises(Exception, match="sweep"):
            parse_sweep(bad)


def _lines(path: Path, items: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in items))
    return path


def test_every_kind_of_bad_line_is_counted_never_raised(tmp_path: Path) -> None:
    good = [("ok1", ROUTER), ("ok2", ROUTER)]
    inputs: list[Any] = [
        {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": _body(t)}
        for cid, t in good
    ]
    inputs += [
        "{not json",  # line 3
        {"custom_id": "nobody", "method": "POST", "url": "/v1/chat/completions"},  # 4
        {
            "custom_id": "img",
            "method": "POST",
            "url": "/v1/images/generations",
            "body": {"model": "dall-e-3", "prompt": "a cat"},
        },  # 5
        {
            "custom_id": "ok1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": _body(ROUTER),
        },  # 6: duplicate id
        {
            "custom_id": "lonely",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": _body(OTHER),
        },  # 7: no output
        {
            "custom_id": "nomsg",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini"},
        },  # 8: refused request
        [1, 2, 3],  # 9: not an object
    ]
    outputs: list[Any] = [
        {
            "custom_id": cid,
            "response": {"status_code": 200, "body": _completion(cid, t, "gpt-4o-mini")},
        }
        for cid, t in good
    ]
    outputs += [
        "",  # blank: ignored
        "\x00garbage",  # line 4
        {
            "custom_id": "ghost",
            "response": {"status_code": 200, "body": _completion("g", ROUTER, "gpt-4o-mini")},
        },
        {"response": {"status_code": 200, "body": {}}},  # 6: no custom_id
        {
            "custom_id": "nomsg",
            "response": {"status_code": 200, "body": _completion("n", OTHER, "gpt-4o-mini")},
        },
    ]
    inp, out = _lines(tmp_path / "in.jsonl", inputs), _lines(tmp_path / "out.jsonl", outputs)
    report = run_replay(inp, out, options=_opts())
    d = report.to_dict()
    assert d["requests"] == 2 and d["hits"]["exact"] == 1
    assert d["skipped"] == {
        "not_json": 2,
        "missing_field": 3,
        "unknown_endpoint": 1,
        "duplicate_custom_id": 1,
        "input_without_output": 1,
        "output_without_input": 1,
        "invalid_request": 1,
    }
    first = report.skipped.first_lines
    assert sorted(first["not_json"]) == ["in.jsonl:3", "out.jsonl:4"]
    assert sorted(first["missing_field"]) == ["in.jsonl:4", "in.jsonl:9", "out.jsonl:6"]
    assert first["unknown_endpoint"] == ["in.jsonl:5"]
    assert first["duplicate_custom_id"] == ["in.jsonl:6"]
    assert first["input_without_output"] == ["in.jsonl:7"]
    assert first["output_without_input"] == ["out.jsonl:5"]
    assert first["invalid_request"] == ["line 8"]


def test_first_lines_are_capped_but_counts_are_complete(tmp_path: Path) -> None:
    log = write_records(tmp_path / "log.jsonl", LOG[:1])
    with log.open("a") as f:
        f.write("nope\n" * 12)
    report = run_replay(log, options=_opts())
    assert report.to_dict()["skipped"] == {"not_json": 12}
    assert len(report.skipped.first_lines["not_json"]) == FIRST_LINES_KEPT


def test_error_responses_are_replayed_but_never_stored(tmp_path: Path) -> None:
    p = tmp_path / "log.jsonl"
    rows = [
        {"request": _body(ROUTER), "response": {"status_code": 500, "body": {"error": {}}}},
        {"request": _body(ROUTER), "response": _completion("x", ROUTER, "gpt-4o-mini")},
        {"request": _body(ROUTER), "response": _completion("y", ROUTER, "gpt-4o-mini")},
    ]
    report = run_replay(_lines(p, rows), options=_opts())
    d = report.to_dict()
    assert d["requests"] == 3 and d["misses"] == 2 and d["hits"]["exact"] == 1


def test_batch_input_without_its_outputs_is_a_usage_error(tmp_path: Path) -> None:
    inp, _ = write_batch(tmp_path)
    with pytest.raises(ValueError, match="--outputs"):
        run_replay(inp, options=_opts())


def test_swapped_batch_files_are_a_usage_error_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cachekit.cli.main import main

    inp, out = write_batch(tmp_path)
    with pytest.raises(ValueError, match=r"swap them \(cachekit replay .*in\.jsonl --outputs"):
        run_replay(out, inp, options=_opts())
    assert main(["replay", str(out), "--outputs", str(inp), "--quiet"]) == 2
    assert "swap them" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["", '{"nothing": "here"}\n'])
def test_a_log_with_no_replayable_request_exits_2(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cachekit.cli.main import main

    log = tmp_path / "log.jsonl"
    log.write_text(content)
    assert main(["replay", str(log), "--quiet"]) == 2
    assert "no request in" in capsys.readouterr().err


def test_unknown_policy_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown hit policy 'nope'.*threshold"):
        run_replay(tmp_path / "missing.jsonl", options=_opts(policy="nope"))


class NeverPolicy:
    """A policy of no built-in kind: it serves no neighbour, and counts what it was asked."""

    name = "never"
    asked = 0

    def decide(self, query: str, candidates: Any) -> Any:
        from cachekit.semantic.policy.hit_policy import Decision

        NeverPolicy.asked += 1
        return Decision(reason="never")

    def observe(self, query: str, candidate: Any, correct: bool) -> None:
        pass


def never_policy(setting: float | None) -> NeverPolicy:
    return NeverPolicy()


@pytest.mark.parametrize("how", ["registered", "module:callable"])
def test_a_custom_policy_runs_in_replay_by_name(tmp_path: Path, how: str) -> None:
    from cachekit.replay import register_policy

    name = "never-test"
    if how == "registered":
        register_policy(name, never_policy)
    else:
        name = f"{__name__}:never_policy"
    log = write_records(tmp_path / "log.jsonl")
    NeverPolicy.asked = 0
    d = run_replay(log, options=_opts(policy=name)).to_dict()
    assert d["hits"]["semantic"] == 0 and d["hits"]["exact"] == 2
    assert NeverPolicy.asked > 0  # the custom policy decided, not a threshold stand-in


def test_capacity_from_timestamps(tmp_path: Path) -> None:
    # 100 distinct requests, one every 0.5 s, each 1 s upstream: 2 req/s, so L = 2 x 1 = 2
    # in flight, half of the 4 slots.
    rows = [
        {
            "request": _body(f"question number {i} about topic {i * 7}"),
            "response": _completion(str(i), "q", "gpt-4o-mini"),
            "latency_ms": 1000.0,
            "timestamp": 1_700_000_000 + 0.5 * i,
        }
        for i in range(100)
    ]
    p = _lines(tmp_path / "log.jsonl", rows)
    # Threshold 1.0: only identical texts hit, and there are none.
    report = run_replay(p, options=_opts(upstream_concurrency=4, setting=1.0)).to_dict()
    assert report["misses"] == 100
    cap = report["capacity"]
    assert cap["rate_source"] == "timestamps"
    assert cap["rate_rps"] == pytest.approx(2.0)
    for side in ("without_cache", "with_cache"):
        assert cap[side]["in_flight"] == pytest.approx(2.0)
        assert cap[side]["utilisation"] == pytest.approx(0.5)


def test_rate_flag_overrides_timestamps(tmp_path: Path) -> None:
    rows = [
        {
            "request": _body(ROUTER),
            "response": _completion("x", ROUTER, "gpt-4o-mini"),
            "latency_ms": 2000.0,
            "timestamp": f"2026-01-01T00:00:0{i}Z",
        }
        for i in range(4)
    ]
    p = _lines(tmp_path / "log.jsonl", rows)
    cap = run_replay(p, options=_opts(rate=10.0)).to_dict()["capacity"]
    assert cap["rate_source"] == "--rate" and cap["rate_rps"] == 10.0
    # 3 of 4 are exact hits: 2.5 req/s go upstream, each 2 s.
    assert cap["with_cache"]["in_flight"] == pytest.approx(2.5 * 2.0)
    assert cap["without_cache"]["in_flight"] == pytest.approx(10.0 * 2.0)
    assert cap["upstream_concurrency"] is None and cap["with_cache"]["utilisation"] is None


def test_json_and_html_outputs_through_the_command_line(
    tmp_path: Path,
    prices: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import cachekit.cli.main as cli
    from cachekit.replay import runner

    real = runner.ReplayOptions

    def with_test_embedder(**kw: Any) -> ReplayOptions:
        return real(**{**kw, "embedder": DeterministicTestEmbedder(64)})

    monkeypatch.setattr(runner, "ReplayOptions", with_test_embedder)
    log = write_records(tmp_path / "log.jsonl")
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    rc = cli.main(
        [
            "replay",
            str(log),
            "--truth",
            str(write_truth(tmp_path / "t.jsonl")),
            "--sweep",
            "0.85:0.95:0.05",
            "--prices",
            str(prices),
            "--rate",
            "2",
            "--upstream-concurrency",
            "4",
            "--json",
            str(out_json),
            "--html",
            str(out_html),
        ]
    )
    assert rc == 0
    shown = capsys.readouterr().out
    assert "Semantic hits" in shown and "Correct / wrong hits" in shown and "Sweep" in shown
    d = json.loads(out_json.read_text())
    assert [p["threshold"] for p in d["sweep"]] == [0.85, 0.9, 0.95]
    page = out_html.read_text()
    assert page.count("<svg") == 2  # the capacity curve and the sweep curves
    for remote in ("<script", "<link", "src=", "@import", "url(http"):
        assert remote not in page


def test_html_shows_the_wrong_hits_escaped(tmp_path: Path) -> None:
    from cachekit.replay.html import render_html
    from cachekit.replay.report import WrongHit

    log = write_records(tmp_path / "log.jsonl")
    report = run_replay(log, truth_path=write_truth(tmp_path / "t.jsonl"), options=_opts())
    report.wrong_sample.append(
        WrongHit("x", "<script>alert(1)</script>", "y", "a & b", "semantic", 0.9)
    )
    page = render_html(report)
    assert NEAR_MISS in page and ROUTER in page
    assert "<script" not in page and "&lt;script&gt;" in page and "a &amp; b" in page


def test_html_indents_model_rows_keeps_ids_whole_marks_the_headline_and_asks_for_a_rate(
    tmp_path: Path,
) -> None:
    import re

    from cachekit.replay.html import render_html
    from cachekit.replay.report import WrongHit

    log = write_records(tmp_path / "log.jsonl")
    report = run_replay(log, options=_opts(sweep=(0.80, THRESHOLD, 0.95)))
    report.wrong_sample.append(WrongHit("req-with-a-long-id-0001", "t", "u", "v", "semantic", 0.9))
    page = render_html(report)
    # A per-model row is indented as in the terminal table, not flush with its parent.
    assert re.search(r'<td class="sub">gpt-[^<]+</td>', page)
    assert '<td class="id">req-with-a-long-id-0001</td>' in page
    assert "td.id{white-space:nowrap}" in page
    (marked,) = re.findall(r'<tr class="mark"><td>([^<]+)</td>', page)
    assert float(marked) == THRESHOLD and f"threshold:{THRESHOLD:g}" in page
    assert "Rate unknown: the log has no timestamps; pass --rate RPS" in page
    assert "Rate -" not in page


def test_command_line_reports_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import cachekit.cli.main as cli

    assert cli.main(["replay", str(tmp_path / "nope.jsonl"), "--quiet"]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


def test_python_dash_m_runs_the_command() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "cachekit", "replay", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--sweep" in done.stdout and "--upstream-concurrency" in done.stdout


@pytest.mark.parametrize("policy,setting", [("verified", None), ("error-bounded", 0.05)])
def test_named_policies_replay_like_production(
    tmp_path: Path, policy: str, setting: float | None
) -> None:
    log = write_records(tmp_path / "log.jsonl")
    report = run_replay(
        log,
        truth_path=write_truth(tmp_path / "truth.jsonl"),
        options=_opts(policy=policy, setting=setting),
    )
    d = report.to_dict()
    # Exact repeats do not depend on the policy; semantic hits never exceed the hittable ones.
    assert d["hits"]["exact"] == 2
    assert 0 <= d["hits"]["semantic"] <= 2
    assert d["correct_hits"] + d["wrong_hits"] == d["hits"]["exact"] + d["hits"]["semantic"]


def test_max_error_flag_sets_the_error_bounded_policy(tmp_path: Path) -> None:
    from cachekit.cli.main import build_parser

    log = str(tmp_path / "log.jsonl")
    args = build_parser().parse_args(
        ["replay", log, "--policy", "error-bounded", "--max-error", "0.03"]
    )
    assert (args.policy, args.max_error, args.threshold) == ("error-bounded", 0.03, None)
    with pytest.raises(SystemExit):  # one setting: --threshold, --max-error or --sweep
        build_parser().parse_args(["replay", log, "--threshold", "0.9", "--max-error", "0.1"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", log, "--sweep", "0.1:0.2:0.1", "--max-error", "0.1"])


def test_config_names_its_policy_and_refuses_unknown_ones() -> None:
    from cachekit.llm import LLMCacheConfig, build_cache
    from cachekit.semantic.policy.error_bounded import ErrorBoundedPolicy

    with pytest.raises(ValueError, match="unknown hit policy 'nope'"):
        LLMCacheConfig(policy="nope").check()
    with pytest.raises(ValueError, match="threshold applies to the threshold policy"):
        LLMCacheConfig(policy="verified", threshold=0.9).check()
    llm = build_cache(
        LLMCacheConfig(policy="error-bounded", policy_setting=0.02),
        embedder=DeterministicTestEmbedder(64),
    )
    try:
        assert isinstance(llm.policy, ErrorBoundedPolicy) and llm.policy.max_error == 0.02
    finally:
        llm.cache.close()


# ---------------------------------------------------------------------- refused near misses


def _numbers_log(answer: str = "M", kind: str = "near_miss") -> list[Any]:
    """LOG, then a request (n1) and one (n2) that differs from it only in a number; n2's truth
    line says whether n1's answer serves it (``answer`` "N" is n1's)."""
    return [
        *LOG,
        ("n1", "acme", "gpt-4o-mini", DRIVE_61, False, "N", "new", 1000.0, None),
        ("n2", "acme", "gpt-4o-mini", DRIVE_63, False, answer, kind, 1000.0, None),
    ]


def _numbers_report(tmp_path: Path, log: list[Any] | None = None, **kw: Any) -> Report:
    log = log if log is not None else _numbers_log()
    records = write_records(tmp_path / "log.jsonl", log)
    truth = write_truth(tmp_path / "truth.jsonl", log)
    return run_replay(records, truth_path=truth, options=_opts(**kw))


@pytest.mark.parametrize(
    "answer,kind,verdict", [("M", "near_miss", False), ("N", "paraphrase", True)]
)
def test_a_number_apart_is_refused_and_listed(
    tmp_path: Path, answer: str, kind: str, verdict: bool
) -> None:
    report = _numbers_report(tmp_path, _numbers_log(answer, kind))
    d = report.to_dict()
    # The headline's hits and nothing more: n2 is as close to n1 as a paraphrase, yet misses.
    assert d["hits"] == {"exact": 2, "semantic": 2} and d["misses"] == 9
    first = report.near_sample[0]  # the only judged-True one, or the most similar judged False
    assert (first.custom_id, first.nearest_custom_id) == ("n2", "n1")
    assert (first.text, first.nearest_text) == (DRIVE_63, DRIVE_61)
    assert first.reason.startswith("slots: numbers") and "61" in first.reason
    assert first.similarity >= 0.88
    assert first.verdict is verdict
    assert d["near_sample"][0] == {
        "custom_id": "n2",
        "text": DRIVE_63,
        "nearest_custom_id": "n1",
        "nearest_text": DRIVE_61,
        "similarity": pytest.approx(first.similarity),
        "reason": first.reason,
        "verdict": verdict,
    }


def test_without_truth_the_listing_is_by_similarity_and_unjudged(tmp_path: Path) -> None:
    log = write_records(tmp_path / "log.jsonl", _numbers_log())
    report = run_replay(log, options=_opts())
    sims = [n.similarity for n in report.near_sample]
    assert report.near_sample[0].custom_id == "n2"
    assert sims == sorted(sims, reverse=True) and len(sims) > 1
    assert all(n.verdict is None for n in report.near_sample)
    assert "wrong_sample" not in report.to_dict()


def test_the_nearest_entry_is_named_within_its_scope(tmp_path: Path) -> None:
    # x1 (globex) and n1 (acme) store the same text; x2's nearest entry is x1's, in its own scope,
    # though n1 stored that text last.
    log = [
        ("x1", "globex", "gpt-4o-mini", DRIVE_61, False, "X", "new", 1000.0, None),
        ("n1", "acme", "gpt-4o-mini", DRIVE_61, False, "N", "new", 1000.0, None),
        ("x2", "globex", "gpt-4o-mini", DRIVE_63, False, "Y", "near_miss", 1000.0, None),
    ]
    report = _numbers_report(tmp_path, log)
    [near] = report.near_sample
    assert (near.custom_id, near.nearest_custom_id) == ("x2", "x1")


def test_the_nearest_entry_is_named_after_the_request_that_stored_it_last(
    tmp_path: Path,
) -> None:
    # r1's entry expires (the default TTL is an hour), r2 stores the same text again (the entry
    # is replaced), so r3's nearest entry holds r2's answer, not r1's.
    rows = [
        {
            "custom_id": cid,
            "request": _body(text),
            "response": _completion(cid, text, "gpt-4o-mini"),
            "timestamp": 1_700_000_000 + at,
        }
        for cid, text, at in (("r1", DRIVE_61, 0), ("r2", DRIVE_61, 7200), ("r3", DRIVE_63, 7201))
    ]
    report = run_replay(_lines(tmp_path / "log.jsonl", rows), options=_opts())
    assert report.to_dict()["misses"] == 3
    [near] = report.near_sample
    assert (near.custom_id, near.nearest_custom_id) == ("r3", "r2")


def test_refusal_counts_by_kind_in_the_json_report(
    tmp_path: Path, prices: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cachekit.cli.main as cli
    from cachekit.replay import runner

    real = runner.ReplayOptions
    monkeypatch.setattr(
        runner,
        "ReplayOptions",
        lambda **kw: real(**{**kw, "embedder": DeterministicTestEmbedder(64)}),
    )
    log = _numbers_log()
    out_json = tmp_path / "r.json"
    args = ["replay", str(write_records(tmp_path / "log.jsonl", log)), "--quiet"]
    args += ["--truth", str(write_truth(tmp_path / "t.jsonl", log)), "--prices", str(prices)]
    assert cli.main([*args, "--sweep", "0.85:0.95:0.1", "--json", str(out_json)]) == 0
    d = json.loads(out_json.read_text())
    points = {p["threshold"]: p for p in d["sweep"]}
    low, high = points[0.85]["refusals"], points[0.95]["refusals"]
    # Misses with an entry in their scope: a5, s1, t1, t2, n1, n2 (a1, g1 and m1 found none).
    assert sum(low.values()) == 6 and low["numbers"] >= 1
    # At 0.95 the paraphrase a3 and the near miss a4 miss too, refused by the threshold.
    assert high["threshold"] == low["threshold"] + 2 and high["numbers"] == low["numbers"]
    # The headline (the default threshold): every miss but a1, g1 and m1 has a refusal.
    assert sum(d["refusals"].values()) == d["misses"] - 3
    assert d["refusals"]["numbers"] == low["numbers"]
    assert d["near_sample"][0]["custom_id"] == "n2"
    [wrong] = points[0.85]["wrong_sample"]
    assert (wrong["custom_id"], wrong["served_custom_id"]) == ("a4", "a1")


def test_terminal_and_html_show_the_refused_near_misses(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from cachekit.replay.html import render_html
    from cachekit.replay.render import print_report

    report = _numbers_report(tmp_path)
    console = Console(record=True, width=400, file=io.StringIO())
    print_report(report, console)
    text, page = console.export_text(), render_html(report)
    for shown in (text, page):
        assert "Refused near misses (sample)" in shown
        assert "nearest refused: numbers" in shown and "nearest refused: threshold" in shown
        assert report.near_sample[0].reason in shown
        assert DRIVE_63 in shown and f"{DRIVE_61} (n1)" in shown
    # Every listed refusal is judged: each kept a wrong answer out (nothing here was a paraphrase).
    rows = len(report.near_sample)
    assert rows > 1 and all(n.verdict is False for n in report.near_sample)
    assert text.count("prevented wrong hit") == rows and "missed paraphrase" not in text
    assert page.count("<td>prevented wrong hit</td>") == rows

    lone = run_replay(write_records(tmp_path / "one.jsonl", LOG[:1]), options=_opts())
    quiet = Console(record=True, width=400, file=io.StringIO())
    print_report(lone, quiet)
    for shown in (quiet.export_text(), render_html(lone)):
        assert "Refused near misses" not in shown and "nearest refused" not in shown


def _near(cid: str, similarity: float, verdict: bool | None) -> NearMiss:
    return NearMiss(cid, "q", "e", "t", similarity, "slots: numbers 1 != 2", verdict)


def test_near_sample_shows_missed_paraphrases_first_and_both_kinds() -> None:
    right = [_near(f"r{i}", 0.90 + i / 100, True) for i in range(8)]
    wrong = [_near(f"w{i}", 0.80 + i / 100, False) for i in range(3)]
    unjudged = [_near("u", 0.99, None)]
    picked = pick_near_sample([*wrong, *unjudged, *right], judged=True, size=10)
    # Three prevented wrong hits are all there are: the missed paraphrases take the rest.
    assert [n.custom_id for n in picked] == [f"r{i}" for i in range(7, 0, -1)] + [
        "w2",
        "w1",
        "w0",
    ]
    few = pick_near_sample([*right[:2], *wrong[:1], *unjudged], judged=True, size=10)
    assert [n.custom_id for n in few] == ["r1", "r0", "w0", "u"]  # unjudged only fill in
    plain = pick_near_sample([*wrong, *unjudged, *right], judged=False, size=3)
    assert [n.custom_id for n in plain] == ["u", "r7", "r6"]


def test_listed_texts_are_cut_around_their_difference() -> None:
    from cachekit.replay.render import shorten_pair

    preamble = "You are a careful assistant for the billing team of a small company. " * 8
    a, b = shorten_pair(preamble + "What is the fee on 61 units?", preamble + "And on 63 units?")
    assert len(a) <= 90 and len(b) <= 90
    assert a.startswith("…") and a.endswith("What is the fee on 61 units?")
    assert b.endswith("And on 63 units?")
    assert shorten_pair(DRIVE_61, DRIVE_63) == (DRIVE_61, DRIVE_63)  # short texts: whole


def test_batch_files_of_responses_requests_replay(tmp_path: Path) -> None:
    """A Batch API log whose lines target /v1/responses: keyed and stored by the same rules as
    the proxy, tokens saved read from input/output tokens; a background request is never
    cached, and an incomplete answer never stored."""
    rows = [
        ("a", "How do I reset my password", {}, "completed"),
        ("b", "How do I reset my password", {}, "completed"),  # exact repeat: a hit
        ("c", "Summarise the report", {"background": True}, "completed"),
        ("d", "Summarise the report", {"background": True}, "completed"),  # never cached
        ("e", "Write a long story", {}, "incomplete"),
        ("f", "Write a long story", {}, "completed"),  # the incomplete one was not stored
    ]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    with inp.open("w") as fi, out.open("w") as fo:
        for cid, text, extra, status in rows:
            body = {"model": "gpt-4.1-mini", "input": text, **extra}
            line = {"custom_id": cid, "method": "POST", "url": "/v1/responses", "body": body}
            fi.write(json.dumps(line) + "\n")
            answer = responses_answer(f"About {text}", rid=cid, input_tokens=20, output_tokens=8)
            if status != "completed":
                answer["status"] = status
                answer["incomplete_details"] = {"reason": "max_output_tokens"}
            result = {"status_code": 200, "body": answer}
            fo.write(json.dumps({"custom_id": cid, "response": result}) + "\n")
    d = run_replay(inp, out, options=_opts()).to_dict()
    assert d["requests"] == 6
    assert d["hits"]["exact"] == 1 and d["misses"] == 5
    assert d["tokens_saved"] == {"prompt": 20, "completion": 8}


def test_a_hit_below_the_threshold_names_the_rule_that_served_it() -> None:
    from cachekit.replay.report import EXACT, SEMANTIC, Outcome, rule_of

    bonus = rule_of("threshold:0.9", Outcome(SEMANTIC, 1.0, 0, 0.88))
    assert bonus is not None and "number bonus" in bonus and "0.86" in bonus
    assert rule_of("threshold:0.9", Outcome(SEMANTIC, 1.0, 0, 0.9)) is None
    assert rule_of("threshold:0.9", Outcome(EXACT, 1.0, 0, None)) is None
    assert rule_of("verified:0.8", Outcome(SEMANTIC, 1.0, 0, 0.5)) is None  # no threshold


def test_the_command_sweeps_by_default_and_recommends_a_setting(
    tmp_path: Path, prices: Path
) -> None:
    from cachekit.replay.decision import default_sweep

    assert default_sweep(0.9) == [0.86, 0.88, 0.9, 0.92, 0.94]
    assert default_sweep(0.99) == [0.95, 0.97, 0.99]
    log = write_records(tmp_path / "log.jsonl")
    truth = write_truth(tmp_path / "truth.jsonl")
    opts = _opts(prices, default_sweep=True, max_wrong_rate=0.0)
    d = run_replay(log, truth_path=truth, options=opts).to_dict()
    points = {p["threshold"]: p for p in d["sweep"]}
    assert sorted(points) == default_sweep(THRESHOLD)  # around the setting: 0.81 ... 0.89
    rec = d["recommended"]
    ok = [t for t, p in points.items() if p["wrong_hits"] == 0]
    assert rec["meets_bound"] is bool(ok)
    if ok:  # the highest hit rate without a wrong hit, the higher setting on a tie
        best = max(ok, key=lambda t: (points[t]["hit_rate"], t))
        assert rec["setting"] == best and rec["wrong_hit_rate"] == 0.0
    plain = run_replay(log, truth_path=truth, options=_opts(prices)).to_dict()
    assert "sweep" not in plain and plain["recommended"]["setting"] is None
    assert "needs a sweep" in plain["recommended"]["why"]
