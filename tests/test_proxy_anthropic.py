"""``cachekit serve`` in front of Anthropic's Messages API, end to end: the official ``anthropic``
client against the proxy started as a subprocess, in front of the fake upstream that speaks the
Messages API (``cachekit.testing.fake_messages``). Each test uses its own API key, hence its own
tenant. Also: answer buckets, LiteLLM's body controls, the temperature bound and hit usage
through the proxy (OpenAI's chat endpoint)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from cachekit.testing.clock import wait_until
from cachekit.testing.upstream import FakeUpstream

sys.path.insert(0, str(Path(__file__).parent))
from test_proxy import CHAT, MODEL, PARAPHRASE, ProxyProcess, msgs

MESSAGES = "/v1/messages"
#: The API version the SDK sends: keyed, so raw requests send it too.
VERSION: dict[str, str] = {
    "anthropic-version": str(anthropic.Anthropic(api_key="k").default_headers["anthropic-version"])
}
CLAUDE = "claude-sonnet-4-5"
SYSTEM = "Be brief."


@pytest.fixture(scope="module")
def proxy(upstream: FakeUpstream) -> Iterator[ProxyProcess]:
    p = ProxyProcess(upstream.url, "--upstream-timeout", "5").start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def claude(proxy: ProxyProcess, key: str) -> Iterator[Any]:
    c = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, timeout=20.0)
    yield c
    c.close()


def calls(upstream: FakeUpstream, key: str, path: str = MESSAGES) -> int:
    """Upstream calls on ``path`` made with ``key`` (the SDK sends it as x-api-key or Bearer)."""
    return sum(
        1
        for c in upstream.calls
        if c["path"] == path
        and key in (c["headers"].get("x-api-key"), c["headers"].get("authorization", "")[7:])
    )


def ask(client: Any, text: str, *, system: Any = SYSTEM, **kw: Any) -> tuple[Any, Any]:
    raw = client.messages.with_raw_response.create(
        model=kw.pop("model", CLAUDE),
        max_tokens=kw.pop("max_tokens", 256),
        system=system,
        messages=kw.pop("messages", None) or [{"role": "user", "content": text}],
        **kw,
    )
    return raw.parse(), raw.headers


def only_if_cached(proxy: ProxyProcess, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        proxy.url + MESSAGES,
        json=body,
        timeout=10.0,
        headers={"x-api-key": key, "cache-control": "only-if-cached", **VERSION},
    )


def wait_stored(proxy: ProxyProcess, key: str, text: str, **body: Any) -> None:
    payload = {
        "model": CLAUDE,
        "max_tokens": 256,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": text}],
        **body,
    }
    wait_until(lambda: only_if_cached(proxy, key, payload).status_code == 200, timeout=10.0)


def test_repeat_hit_paraphrase_semantic_hit_other_key_or_system_miss(
    proxy: ProxyProcess, upstream: FakeUpstream, claude: Any, key: str
) -> None:
    first, h1 = ask(claude, PARAPHRASE[0])
    assert type(first).__name__ == "Message"  # the SDK's own type
    assert h1["x-cachekit-cache"] == "MISS" and calls(upstream, key) == 1
    wait_stored(proxy, key, PARAPHRASE[0])
    again, h2 = ask(claude, PARAPHRASE[0])
    assert h2["x-cachekit-cache"] == "HIT" and calls(upstream, key) == 1
    assert again.content[0].text == first.content[0].text and again.id == first.id
    assert "x-cachekit-tokens-saved" not in h2  # only with hit_usage = "zero"
    para, h3 = ask(claude, PARAPHRASE[1])
    assert h3["x-cachekit-cache"] == "SEMANTIC_HIT" and calls(upstream, key) == 1
    assert para.content[0].text == first.content[0].text
    assert para.id.startswith("msg_ck") and para.id == h3["x-cachekit-response-id"]
    # cache_control markers and metadata do not change the answer: the same entry.
    blocks = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    _, h4 = ask(claude, PARAPHRASE[0], system=blocks, metadata={"user_id": "u-1"})
    assert h4["x-cachekit-cache"] == "HIT"
    _, h5 = ask(claude, PARAPHRASE[0], system="Answer in French.")
    assert h5["x-cachekit-cache"] == "MISS" and calls(upstream, key) == 2
    other = f"sk-ant-{uuid.uuid4().hex}"
    with anthropic.Anthropic(base_url=proxy.url, api_key=other, max_retries=0) as c2:
        _, h6 = ask(c2, PARAPHRASE[0])
    assert h6["x-cachekit-cache"] == "MISS" and calls(upstream, other) == 1


def test_beta_features_are_keyed_and_credentials_forwarded(
    proxy: ProxyProcess, upstream: FakeUpstream, claude: Any, key: str
) -> None:
    text = f"beta question {uuid.uuid4().hex[:6]}"
    ask(claude, text)
    wait_stored(proxy, key, text)
    _, h = ask(claude, text, extra_headers={"anthropic-beta": "some-feature-2026-01-01"})
    assert h["x-cachekit-cache"] == "MISS" and calls(upstream, key) == 2
    sent = [c for c in upstream.calls if c["path"] == MESSAGES][-1]["headers"]
    assert sent.get("anthropic-beta") == "some-feature-2026-01-01"
    assert key in (sent.get("x-api-key"), sent.get("authorization", "")[7:])


def test_x_api_key_is_the_tenant(proxy: ProxyProcess, upstream: FakeUpstream, key: str) -> None:
    body = {
        "model": CLAUDE,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": f"raw {uuid.uuid4().hex[:6]}"}],
    }
    r1 = httpx.post(
        proxy.url + MESSAGES, json=body, headers={"x-api-key": key, **VERSION}, timeout=10.0
    )
    assert r1.status_code == 200 and r1.headers["x-cachekit-cache"] == "MISS"
    assert upstream.calls[-1]["headers"]["x-api-key"] == key
    wait_until(lambda: only_if_cached(proxy, key, body).status_code == 200, timeout=10.0)
    bearer = {"authorization": f"Bearer {key}", **VERSION}
    r2 = httpx.post(proxy.url + MESSAGES, json=body, headers=bearer, timeout=10.0)
    assert r2.headers["x-cachekit-cache"] == "HIT"  # the same key, either header
    r3 = httpx.post(proxy.url + MESSAGES, json=body, headers={"x-api-key": key + "x", **VERSION})
    assert r3.headers["x-cachekit-cache"] == "MISS"


def test_streamed_repeat_parses_to_the_same_text_without_upstream(
    proxy: ProxyProcess, upstream: FakeUpstream, claude: Any, key: str
) -> None:
    text = f"stream me {uuid.uuid4().hex[:6]}"
    kw = {"model": CLAUDE, "max_tokens": 256, "system": SYSTEM}
    with claude.messages.stream(messages=[{"role": "user", "content": text}], **kw) as s:
        live = "".join(s.text_stream)
        live_final = s.get_final_message()
    assert calls(upstream, key) == 1
    wait_stored(proxy, key, text)
    with claude.messages.stream(messages=[{"role": "user", "content": text}], **kw) as s:
        replayed = "".join(s.text_stream)
        final = s.get_final_message()
    assert calls(upstream, key) == 1
    assert replayed == live and final.content == live_final.content
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    # The raw event stream too, and a whole request served from the streamed entry.
    events = list(
        claude.messages.create(messages=[{"role": "user", "content": text}], stream=True, **kw)
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and calls(upstream, key) == 1
    whole, h = ask(claude, text)
    assert h["x-cachekit-cache"] == "HIT" and whole.content[0].text == live


def test_tool_use_is_cached_and_replayed(
    proxy: ProxyProcess, upstream: FakeUpstream, claude: Any, key: str
) -> None:
    tools = [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}]
    text = f"weather in Paris {uuid.uuid4().hex[:6]}"
    first, _ = ask(claude, text, tools=tools)
    use = next(b for b in first.content if b.type == "tool_use")
    assert first.stop_reason == "tool_use"
    wait_stored(proxy, key, text, tools=tools)
    with claude.messages.stream(
        model=CLAUDE,
        max_tokens=256,
        system=SYSTEM,
        tools=tools,
        messages=[{"role": "user", "content": text}],
    ) as s:
        final = s.get_final_message()
    replayed = next(b for b in final.content if b.type == "tool_use")
    assert replayed.input == use.input and replayed.name == "weather"
    assert calls(upstream, key) == 1


def test_tool_result_turns_are_never_semantic_hits(
    proxy: ProxyProcess, upstream: FakeUpstream, claude: Any, key: str
) -> None:
    def turn(result: str) -> list[Any]:
        return [
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}],
            },
        ]

    ask(claude, "", messages=turn("It is 21 degrees and sunny in Paris today"))
    wait_until(
        lambda: (
            only_if_cached(
                proxy,
                key,
                {
                    "model": CLAUDE,
                    "max_tokens": 256,
                    "system": SYSTEM,
                    "messages": turn("It is 21 degrees and sunny in Paris today"),
                },
            ).status_code
            == 200
        ),
        timeout=10.0,
    )
    _, h = ask(claude, "", messages=turn("It is 21 degrees and sunny in Paris today!"))
    assert h["x-cachekit-cache"] == "MISS"
    assert h["x-cachekit-reason"] == "exact only: tool result"
    assert calls(upstream, key) == 2


def test_an_error_event_stream_is_never_stored(
    proxy: ProxyProcess, upstream: FakeUpstream, claude: Any, key: str
) -> None:
    text = f"overloaded {uuid.uuid4().hex[:6]}"
    body = {
        "model": "fake-error-event",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
    }
    with pytest.raises(anthropic.APIStatusError):
        for _ in claude.messages.create(stream=True, **body):
            pass
    with pytest.raises(anthropic.APIStatusError):
        for _ in claude.messages.create(stream=True, **body):
            pass
    assert calls(upstream, key) == 2  # never served from the cache
    r = only_if_cached(proxy, key, body)
    assert r.status_code == 504 and r.json()["type"] == "error"


def test_malformed_requests_get_anthropic_errors(
    proxy: ProxyProcess, claude: Any, key: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(
            model=CLAUDE, max_tokens=0, messages=[{"role": "user", "content": "x"}]
        )
    assert "max_tokens" in str(info.value)
    r = httpx.post(
        proxy.url + MESSAGES,
        json={"model": CLAUDE, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": key},
    )
    assert r.status_code == 400
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in err["error"]["message"]


def test_count_tokens_passes_through(
    proxy: ProxyProcess, upstream: FakeUpstream, claude: Any, key: str
) -> None:
    raw = claude.messages.with_raw_response.count_tokens(
        model=CLAUDE, messages=[{"role": "user", "content": "one two three"}]
    )
    assert raw.headers["x-cachekit-cache"] == "PASSTHROUGH"
    assert raw.parse().input_tokens == 3
    assert calls(upstream, key, MESSAGES + "/count_tokens") == 1


# ---------------------------------------------------------------------- buckets and controls


def _chat(
    proxy: ProxyProcess, key: str, text: str, headers: dict[str, str], **body: Any
) -> httpx.Response:
    payload = {"model": MODEL, "messages": msgs(text), **body}
    return httpx.post(
        proxy.url + CHAT,
        json=payload,
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=10.0,
    )


def test_bucket_of_three_makes_three_calls_then_serves_them_at_random(
    proxy: ProxyProcess, upstream: FakeUpstream, key: str
) -> None:
    text, bucket = f"tell me a joke {uuid.uuid4().hex[:6]}", {"x-cachekit-bucket-size": "3"}
    answers = []
    for i in range(3):
        r = _chat(proxy, key, text, bucket, temperature=0.8)
        assert r.headers["x-cachekit-cache"] == "MISS", i
        answers.append(r.json()["choices"][0]["message"]["content"])
        held = i + 1

        def joined(held: int = held) -> bool:
            r = _chat(
                proxy, key, text, {**bucket, "cache-control": "only-if-cached"}, temperature=0.8
            )
            return (held == 3 and r.status_code == 200) or (
                held < 3 and r.headers.get("x-cachekit-reason") == f"bucket filling {held}/3"
            )

        wait_until(joined, timeout=10.0)
    assert len(set(answers)) == 3 and calls(upstream, key, CHAT) == 3
    served = [_chat(proxy, key, text, bucket, temperature=0.8) for _ in range(24)]
    assert all(r.headers["x-cachekit-cache"] == "HIT" for r in served)
    seen = {r.json()["choices"][0]["message"]["content"] for r in served}
    assert seen <= set(answers) and len(seen) >= 2  # one of the three, at random
    assert calls(upstream, key, CHAT) == 3


def test_litellm_body_controls_are_honoured_and_stripped(
    proxy: ProxyProcess, upstream: FakeUpstream, key: str
) -> None:
    text = f"litellm {uuid.uuid4().hex[:6]}"
    r = _chat(proxy, key, text, {}, cache={"no-store": True})
    assert r.status_code == 200
    assert "cache" not in upstream.calls[-1]["body"]  # never forwarded
    r2 = _chat(proxy, key, text, {"cache-control": "only-if-cached"})
    assert r2.status_code == 504  # not stored
    _chat(proxy, key, text, {})
    wait_until(
        lambda: _chat(proxy, key, text, {"cache-control": "only-if-cached"}).status_code == 200
    )
    r3 = _chat(proxy, key, text, {}, cache={"no-cache": True})
    assert r3.headers["x-cachekit-cache"] == "BYPASS"
    assert _chat(proxy, key, text, {}, cache={"ttl": 600})
    bad = _chat(proxy, key, text, {}, cache={"no-cache": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "cache"


def test_requests_above_the_temperature_bound_skip_the_cache(
    proxy: ProxyProcess, upstream: FakeUpstream, key: str
) -> None:
    text = f"creative {uuid.uuid4().hex[:6]}"
    hot = {"x-cachekit-max-temperature": "0.5"}
    r = _chat(proxy, key, text, hot, temperature=0.9)
    assert r.headers["x-cachekit-cache"] == "BYPASS"
    assert r.headers["x-cachekit-reason"] == "temperature 0.9 > 0.5"
    r2 = _chat(proxy, key, text, {"cache-control": "only-if-cached"}, temperature=0.9)
    assert r2.status_code == 504  # never stored
    r3 = _chat(proxy, key, text, hot, temperature=0.2)
    assert r3.headers["x-cachekit-cache"] == "MISS"


def test_hit_usage_zero_reports_no_tokens_spent(upstream: FakeUpstream, tmp_path: Path) -> None:
    config = tmp_path / "cachekit.toml"
    config.write_text('hit_usage = "zero"\n')
    p = ProxyProcess(upstream.url, "--config", str(config)).start()
    try:
        key = f"sk-{uuid.uuid4().hex}"
        text = f"usage {uuid.uuid4().hex[:6]}"
        first = _chat(p, key, text, {}).json()
        wait_until(
            lambda: _chat(p, key, text, {"cache-control": "only-if-cached"}).status_code == 200
        )
        hit = _chat(p, key, text, {})
        usage = hit.json()["usage"]
        assert hit.headers["x-cachekit-cache"] == "HIT"
        assert usage["prompt_tokens"] == usage["completion_tokens"] == usage["total_tokens"] == 0
        saved = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]
        assert int(hit.headers["x-cachekit-tokens-saved"]) == saved
    finally:
        p.stop()


def test_each_api_family_can_have_its_own_upstream(upstream: FakeUpstream, tmp_path: Path) -> None:
    from cachekit.testing.upstream import serving

    with serving(FakeUpstream()) as claude_side:
        config = tmp_path / "cachekit.toml"
        config.write_text(f'[proxy.upstreams]\nanthropic = "{claude_side.url}"\n')
        p = ProxyProcess(upstream.url, "--config", str(config)).start()
        try:
            key = f"sk-{uuid.uuid4().hex}"
            with anthropic.Anthropic(base_url=p.url, api_key=key, max_retries=0) as c:
                ask(c, f"where {uuid.uuid4().hex[:6]}")
                c.messages.count_tokens(model=CLAUDE, messages=[{"role": "user", "content": "x"}])
            r = _chat(p, key, "chat goes to the main upstream", {})
            assert r.status_code == 200
            assert calls(claude_side, key) == 1 and calls(upstream, key) == 0
            assert calls(claude_side, key, MESSAGES + "/count_tokens") == 1
            assert calls(upstream, key, CHAT) == 1 and calls(claude_side, key, CHAT) == 0
        finally:
            p.stop()


def test_an_unknown_api_family_is_refused(tmp_path: Path) -> None:
    from cachekit.proxy.config import ProxyConfig

    config = tmp_path / "cachekit.toml"
    config.write_text(
        '[proxy]\nupstream = "http://127.0.0.1:9"\n[proxy.upstreams]\ngemini = "http://x"\n'
    )
    with pytest.raises(ValueError, match="unknown API family 'gemini'"):
        ProxyConfig.load(config)
