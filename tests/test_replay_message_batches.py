"""``cachekit replay`` on Anthropic Message Batches files: the requests file given to
``messages.batches.create`` and the results file ``messages.batches.results`` streams, joined by
``custom_id`` like an OpenAI batch. The lines are hand-written in the shapes of Anthropic's docs
and of the ``anthropic`` SDK's types (``MessageBatchIndividualResponse`` and its results)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cachekit.replay.logs import read_log, read_message_batch
from cachekit.replay.runner import endpoint_ok
from cachekit.testing.embedders import DeterministicTestEmbedder

MODEL = "claude-sonnet-4-5"  # $3 / $15 per million tokens in the built-in table


def _params(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def _request(cid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"custom_id": cid, "params": _params(text, **extra)}


def _message(cid: str, text: str, input_tokens: int = 1000, output_tokens: int = 200) -> Any:
    return {
        "id": f"msg_{cid}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": f"About {text}"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _succeeded(cid: str, text: str) -> dict[str, Any]:
    return {"custom_id": cid, "result": {"type": "succeeded", "message": _message(cid, text)}}


def _error(kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": f"a {kind}"}}


def _errored(cid: str, kind: str) -> dict[str, Any]:
    return {"custom_id": cid, "result": {"type": "errored", "error": _error(kind)}}


def _unprocessed(cid: str, kind: str) -> dict[str, Any]:
    return {"custom_id": cid, "result": {"type": kind}}


def _lines(path: Path, items: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in items))
    return path


def _pair(tmp_path: Path, requests: list[Any], results: list[Any]) -> tuple[Path, Path]:
    req = _lines(tmp_path / "requests.jsonl", requests)
    return req, _lines(tmp_path / "results.jsonl", results)


def test_results_join_their_requests_in_request_order(tmp_path: Path) -> None:
    texts = {"a": "what is a haiku", "b": "name a prime number", "c": "spell cat backwards"}
    req, res = _pair(
        tmp_path,
        [_request(cid, t) for cid, t in texts.items()],
        [_succeeded(cid, t) for cid, t in reversed(texts.items())],  # results come in any order
    )
    parsed = read_message_batch(req, res, endpoint_ok=endpoint_ok)
    assert parsed.input_format == "message_batch"
    assert parsed.skipped.counts == {}
    assert [r.custom_id for r in parsed.records] == ["a", "b", "c"]
    assert [r.line for r in parsed.records] == [1, 2, 3]
    for rec, (cid, text) in zip(parsed.records, texts.items(), strict=True):
        assert rec.url == "/v1/messages"
        assert rec.request == _params(text)
        assert (rec.status_code, rec.response) == (200, _message(cid, text))
        assert rec.latency_ms is None and rec.timestamp is None and rec.tenant is None


def test_errored_results_keep_their_error_body_with_a_status(tmp_path: Path) -> None:
    kinds = ["invalid_request_error", "api_error", "overloaded_error"]
    req, res = _pair(
        tmp_path,
        [_request(k, "hello") for k in kinds],
        [_errored(k, k) for k in kinds],
    )
    parsed = read_message_batch(req, res, endpoint_ok=endpoint_ok)
    assert [(r.custom_id, r.status_code) for r in parsed.records] == [
        ("invalid_request_error", 400),
        ("api_error", 500),
        ("overloaded_error", 500),
    ]
    assert [r.response for r in parsed.records] == [_error(k) for k in kinds]


def test_every_line_that_cannot_be_replayed_is_counted_by_reason(tmp_path: Path) -> None:
    requests: list[Any] = [
        _request("ok", "what is a haiku"),  # 1
        _request("ok", "what is a haiku"),  # 2: duplicate id
        _request("lonely", "no result for me"),  # 3: no result line
        _request("stopped", "canceled before it ran"),  # 4
        _request("late", "expired before it ran"),  # 5
        {"custom_id": "noparams"},  # 6
        "{not json",  # 7
        _request("odd", "a result of an unknown type"),  # 8
        _request("bare", "a result without its message"),  # 9
    ]
    results: list[Any] = [
        _succeeded("ok", "what is a haiku"),  # 1
        _succeeded("ok", "what is a haiku"),  # 2: duplicate id
        _unprocessed("stopped", "canceled"),  # 3
        _unprocessed("late", "expired"),  # 4
        _succeeded("ghost", "no request for me"),  # 5
        {"custom_id": "noresult"},  # 6
        _unprocessed("odd", "pending"),  # 7
        {"custom_id": "bare", "result": {"type": "succeeded"}},  # 8
        {"custom_id": "noerr", "result": {"type": "errored"}},  # 9
    ]
    req, res = _pair(tmp_path, requests, results)
    parsed = read_message_batch(req, res, endpoint_ok=endpoint_ok)
    assert [r.custom_id for r in parsed.records] == ["ok"]
    assert parsed.skipped.counts == {
        "duplicate_custom_id": 2,
        "input_without_output": 3,
        "canceled": 1,
        "expired": 1,
        "output_without_input": 1,
        "missing_field": 5,
        "not_json": 1,
    }
    first = parsed.skipped.first_lines
    assert sorted(first["duplicate_custom_id"]) == ["requests.jsonl:2", "results.jsonl:2"]
    # a request whose result line was unreadable has no result either
    assert first["input_without_output"] == [
        "requests.jsonl:3",
        "requests.jsonl:8",
        "requests.jsonl:9",
    ]
    assert first["canceled"] == ["requests.jsonl:4"]  # counted once, at the request
    assert first["expired"] == ["requests.jsonl:5"]
    assert first["output_without_input"] == ["results.jsonl:5"]
    assert sorted(first["missing_field"]) == [
        "requests.jsonl:6",
        "results.jsonl:6",
        "results.jsonl:7",
        "results.jsonl:8",
        "results.jsonl:9",
    ]
    assert first["not_json"] == ["requests.jsonl:7"]


def test_the_tenant_is_a_dotted_field_of_the_line_or_the_params(tmp_path: Path) -> None:
    requests = [
        {**_request("a", "hi", metadata={"user_id": "u-1"}), "metadata": {"tenant": "acme"}},
        _request("b", "hi", metadata={"user_id": "u-2"}),
    ]
    req, res = _pair(tmp_path, requests, [_succeeded(c, "hi") for c in "ab"])
    default = read_message_batch(req, res, endpoint_ok=endpoint_ok)
    assert [r.tenant for r in default.records] == ["acme", None]
    by_user = read_log(req, res, endpoint_ok=endpoint_ok, tenant_field="metadata.user_id")
    assert [r.tenant for r in by_user.records] == ["u-1", "u-2"]


def test_read_log_tells_the_batch_formats_apart(tmp_path: Path) -> None:
    req, res = _pair(tmp_path, [_request("a", "hi")], [_succeeded("a", "hi")])
    assert read_log(req, res, endpoint_ok=endpoint_ok).input_format == "message_batch"
    with pytest.raises(ValueError, match=r"results file .* swap them \(cachekit replay .*requests"):
        read_log(res, req, endpoint_ok=endpoint_ok)
    with pytest.raises(ValueError, match=r"Message Batches requests file.*--outputs RESULTS"):
        read_log(req, endpoint_ok=endpoint_ok)
    # An unreadable first request: the results file says which format the pair is.
    bad_first = _lines(tmp_path / "bad.jsonl", ["{not json", _request("a", "hi")])
    parsed = read_log(bad_first, res, endpoint_ok=endpoint_ok)
    assert parsed.input_format == "message_batch" and parsed.skipped.counts == {"not_json": 1}
    # OpenAI's pair is still read as such.
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    inp = _lines(
        tmp_path / "in.jsonl",
        [{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body}],
    )
    out = _lines(
        tmp_path / "out.jsonl",
        [{"custom_id": "a", "response": {"status_code": 200, "body": {"id": "x"}}}],
    )
    assert read_log(inp, out, endpoint_ok=endpoint_ok).input_format == "batch"
    with pytest.raises(ValueError, match=r"OpenAI Batch API input file.*--outputs OUTPUT"):
        read_log(inp, endpoint_ok=endpoint_ok)


def test_replay_of_a_message_batch_counts_the_repeat_as_a_hit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cachekit.cli.main as cli
    from cachekit.replay import runner

    real = runner.ReplayOptions
    monkeypatch.setattr(
        runner,
        "ReplayOptions",
        lambda **kw: real(**{**kw, "embedder": DeterministicTestEmbedder(64)}),
    )
    haiku, other = "write a haiku about the sea", "spell the word cat backwards"
    user = {"metadata": {"user_id": "u-1"}}
    requests = [
        _request("a", haiku, **user),
        _request("b", haiku, **user),  # the same request again: an exact hit
        _request("c", haiku, metadata={"user_id": "u-2"}),  # another tenant: a miss
        _request("d", other, **user),
        _request("e", other, **user),  # d errored, so nothing was stored: a miss
        _request("f", other, **user),  # canceled: skipped
    ]
    results = [
        *(_succeeded(cid, haiku) for cid in "abc"),
        _errored("d", "api_error"),
        _succeeded("e", other),
        _unprocessed("f", "canceled"),
    ]
    req, res = _pair(tmp_path, requests, results)
    out_json = tmp_path / "report.json"
    args = ["replay", str(req), "--outputs", str(res), "--json", str(out_json), "--quiet"]
    assert cli.main([*args, "--tenant-field", "metadata.user_id"]) == 0
    d = json.loads(out_json.read_text())
    assert d["requests"] == 5
    assert d["hits"] == {"exact": 1, "semantic": 0} and d["misses"] == 4
    assert d["skipped"] == {"canceled": 1}
    assert d["tokens_saved"] == {"prompt": 1000, "completion": 200}
    dollars = 1000 * 3.0 / 1e6 + 200 * 15.0 / 1e6
    assert d["dollars_saved"]["by_model"][MODEL] == pytest.approx(dollars)
    assert d["dollars_saved"]["total"] == pytest.approx(dollars)
