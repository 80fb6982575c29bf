"""Shadow mode: semantic hits decided on live traffic, scored against the upstream's answer and
counted, never served; the shadow log turned into labelled pairs by ``cachekit export-labels``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cachekit.proxy.config import ProxyConfig
from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream, serving

sys.path.insert(0, str(Path(__file__).parent))
from test_proxy import CHAT, PARAPHRASE, TEST_EMBEDDER, msgs
from test_proxy_coalesce import ProxyThread

SEMANTIC = {"semantic": True, "embedder": TEST_EMBEDDER, "threshold": 0.8}


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with serving(FakeUpstream()) as upstream:
        yield upstream


def _ask(
    base: str, text: str, headers: dict[str, str] | None = None, **body: Any
) -> httpx.Response:
    payload = {"model": "gpt-4o-mini", "messages": msgs(text), **body}
    sent = {"authorization": "Bearer sk-shadow", **(headers or {})}
    return httpx.post(base + CHAT, json=payload, headers=sent, timeout=20.0)


def _stored(base: str, text: str) -> bool:
    got = _ask(base, text, {"cache-control": "only-if-cached"})
    return got.status_code == 200


def _metric(base: str, name: str, **labels: str) -> float:
    text = httpx.get(base + "/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _calls(fake: FakeUpstream) -> int:
    return sum(1 for c in fake.calls if c["path"] == CHAT)


def test_a_paraphrase_goes_upstream_and_says_what_would_have_been_served(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    log = tmp_path / "shadow.jsonl"
    with ProxyThread(fake.url, shadow=True, shadow_log=str(log), **SEMANTIC) as p:
        first = _ask(p.url, PARAPHRASE[0])
        assert first.headers["x-cachekit-cache"] == "MISS"
        assert first.headers["x-cachekit-shadow"] == "MISS"
        wait_until(lambda: _stored(p.url, PARAPHRASE[0]))
        before = _calls(fake)
        para = _ask(p.url, PARAPHRASE[1])
        assert _calls(fake) == before + 1  # asked upstream, not served from the cache
        assert para.headers["x-cachekit-cache"] == "MISS"
        decision, similarity = para.headers["x-cachekit-shadow"].split(" ")
        assert decision == "SEMANTIC_HIT" and 0.8 <= float(similarity) <= 1.0
        fresh = para.json()["choices"][0]["message"]["content"]
        assert fresh.endswith(PARAPHRASE[1])  # the upstream's answer to this prompt
        repeat = _ask(p.url, PARAPHRASE[0])
        assert repeat.headers["x-cachekit-cache"] == "HIT"  # exact hits are served as usual
        assert _calls(fake) == before + 1
        wait_until(lambda: _metric(p.url, "cachekit_proxy_shadow_pairs_total") == 1)
        assert _metric(p.url, "cachekit_proxy_shadow_lookups_total", decision="SEMANTIC_HIT") == 1
        assert _metric(p.url, "cachekit_proxy_shadow_lookups_total", decision="MISS") == 1
        assert _metric(p.url, "cachekit_proxy_requests_total", cache="SEMANTIC_HIT") == 0
        wait_until(lambda: log.exists() and log.read_text().count("\n") == 1)
        shown = httpx.get(p.url + "/dashboard/data").json()["shadow"]
        assert shown["lookups"] == 2 and shown["would_hit"] == 1
        assert shown["would_hit_rate"] == 0.5 and sum(shown["pairs"].values()) == 1
    line = json.loads(log.read_text())
    assert line["query"] == PARAPHRASE[1] and line["matched"] == PARAPHRASE[0]
    assert line["stored_answer"].endswith(PARAPHRASE[0]) and line["fresh_answer"] == fresh
    assert line["scorer"] == "answer-cosine" and 0.0 <= line["answer_score"] <= 1.0
    assert line["agree"] == (line["answer_score"] >= 0.9)
    assert (log.stat().st_mode & 0o777) == 0o600  # prompts and answers in clear
    out = tmp_path / "pairs.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cachekit",
            "export-labels",
            "--shadow",
            str(log),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    pair = json.loads(out.read_text())
    assert pair == {"query": PARAPHRASE[1], "cached": PARAPHRASE[0], "duplicate": line["agree"]}


@pytest.mark.parametrize("stream", [False, True])
def test_one_request_opts_in_with_a_header(fake: FakeUpstream, stream: bool) -> None:
    with ProxyThread(fake.url, **SEMANTIC) as p:
        _ask(p.url, PARAPHRASE[0], stream=stream).read()
        wait_until(lambda: _stored(p.url, PARAPHRASE[0]))
        shadowed = _ask(p.url, PARAPHRASE[1], {"x-cachekit-shadow": "1"}, stream=stream)
        assert shadowed.headers["x-cachekit-shadow"].startswith("SEMANTIC_HIT ")
        assert PARAPHRASE[1] in _content(shadowed)  # the upstream's answer, streamed or whole
        wait_until(lambda: _metric(p.url, "cachekit_proxy_shadow_pairs_total") == 1)
        served = _ask(p.url, PARAPHRASE[1] + "?", stream=stream)
        assert served.headers["x-cachekit-cache"] == "SEMANTIC_HIT"  # not shadowed: served
        assert "x-cachekit-shadow" not in served.headers
        bad = _ask(p.url, PARAPHRASE[1], {"x-cachekit-shadow": "maybe"})
        assert bad.status_code == 400 and "x-cachekit-shadow" in bad.json()["error"]["message"]


def _content(response: httpx.Response) -> str:
    if not response.text.startswith("data:"):
        return str(response.json()["choices"][0]["message"]["content"])
    chunks = [json.loads(x[6:]) for x in response.text.split("\n\n") if x[6:].startswith("{")]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def judge_disagrees(query: str, matched: str, stored: str, fresh: str) -> bool:
    """A judge for the test below: every pair disagrees."""
    assert query == PARAPHRASE[1] and matched == PARAPHRASE[0] and stored and fresh
    return False


def test_a_configured_judge_scores_the_pairs(fake: FakeUpstream) -> None:
    with ProxyThread(
        fake.url, shadow=True, shadow_judge="test_shadow:judge_disagrees", **SEMANTIC
    ) as p:
        _ask(p.url, PARAPHRASE[0])
        wait_until(lambda: _stored(p.url, PARAPHRASE[0]))
        _ask(p.url, PARAPHRASE[1])
        wait_until(lambda: _metric(p.url, "cachekit_proxy_shadow_pairs_total", agree="false") == 1)


def test_shadow_settings_are_checked() -> None:
    for bad in ({"shadow_agree": 1.5}, {"shadow_sample": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ProxyConfig.load(None, {"upstream": "http://127.0.0.1:1", **bad})
