"""The OpenAI request rules shared by the proxy, replay and the client adapter."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cachekit import Cache, Status
from cachekit.llm import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    MESSAGES,
    RESPONSES,
    LLMCache,
    LLMCacheConfig,
    PriceTable,
    RequestError,
    StreamAssembler,
    TenantResolver,
    build_cache,
    cacheable_response,
    completion_chunks,
    endpoint_of,
    exact_key,
    key_fingerprint,
    parse_body,
    prepare,
    scope_key,
    semantic_text,
    split_text,
    sse_stream,
)
from cachekit.llm.rules import INTEGER_RANGES
from cachekit.testing.clock import ManualClock
from cachekit.testing.embedders import DeterministicTestEmbedder


def chat(*messages: Any, **params: Any) -> dict[str, Any]:
    msgs = [m if isinstance(m, dict) else {"role": "user", "content": m} for m in messages]
    return {"model": "gpt-4o-mini", "messages": msgs, **params}


def completion(content: str = "Hello there, how can I help?", **extra: Any) -> dict[str, Any]:
    msg = {"role": "assistant", "content": content, **extra}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
    }


# ---------------------------------------------------------------------- endpoints, validation


def test_endpoints() -> None:
    assert endpoint_of("/v1/chat/completions") == CHAT
    assert endpoint_of("/v1/completions/") == COMPLETIONS
    assert endpoint_of("/v1/embeddings?x=1") == EMBEDDINGS
    assert endpoint_of("/v1/models") is None


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        (CHAT, {"messages": [{"role": "user", "content": "hi"}]}, "model"),
        (CHAT, {"model": "m"}, "messages"),
        (CHAT, {"model": "m", "messages": []}, "messages"),
        (CHAT, {"model": "m", "messages": ["hi"]}, "messages[0]"),
        (CHAT, {"model": "m", "messages": [{"content": "hi"}]}, "messages[0]"),
        (CHAT, chat("hi", temperature="hot"), "temperature"),
        (CHAT, chat("hi", n=0), "n"),
        (CHAT, chat("hi", stream="yes"), "stream"),
        (CHAT, chat("hi", max_tokens=1.5), "max_tokens"),
        (CHAT, chat("hi", stop=[1]), "stop"),
        (CHAT, chat("hi", tools={"a": 1}), "tools"),
        (COMPLETIONS, {"model": "m"}, "prompt"),
        (EMBEDDINGS, {"model": "m", "input": 3}, "input"),
        (EMBEDDINGS, {"model": 5, "input": "x"}, "model"),
    ],
)
def test_bad_requests_name_the_param(endpoint: str, body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as info:
        prepare(endpoint, body, "t")
    err = info.value
    assert err.status == 400 and err.param == param
    assert err.body()["error"]["type"] == "invalid_request_error"


def _int_cases() -> list[tuple[str, dict[str, Any], str]]:
    """Each integer field just outside its range on both sides, as a boolean, as a string."""
    cases = []
    for endpoint, ranges in INTEGER_RANGES.items():
        base = {
            CHAT: chat("hi"),
            COMPLETIONS: {"model": "m", "prompt": "hi"},
            EMBEDDINGS: {"model": "m", "input": "hi"},
            RESPONSES: {"model": "m", "input": "hi"},
            MESSAGES: {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
            },
        }[endpoint]
        for name, (lo, hi) in ranges.items():
            for bad in (lo - 1, hi + 1, True, str(lo)):
                cases.append((endpoint, {**base, name: bad}, name))
    return cases


@pytest.mark.parametrize(("endpoint", "body", "param"), _int_cases())
def test_integers_out_of_their_range_are_refused(
    endpoint: str, body: dict[str, Any], param: str
) -> None:
    lo, hi = INTEGER_RANGES[endpoint][param]
    with pytest.raises(RequestError) as info:
        prepare(endpoint, body, "t")
    err = info.value
    assert err.status == 400 and err.param == param
    assert f"'{param}'" in err.message and f"from {lo} to {hi}" in err.message
    assert err.body()["error"]["param"] == param
    # The range's ends are accepted.
    for ok in (lo, hi):
        prepare(endpoint, {**body, param: ok}, "t")


@pytest.mark.parametrize(
    ("endpoint", "body", "param", "code"),
    [
        (CHAT, chat("hi", max_tokens=int("9" * 4001)), "max_tokens", "integer_above_max_value"),
        (CHAT, chat("hi", max_tokens=10**30), "max_tokens", "integer_above_max_value"),
        (CHAT, chat("hi", max_tokens=1e30), "max_tokens", "invalid_type"),  # orjson's 10**30
        (CHAT, chat("hi", n=1_000_000_000), "n", "integer_above_max_value"),
        (CHAT, chat("hi", seed=2**63), "seed", "integer_above_max_value"),
        (CHAT, chat("hi", seed=-(2**63) - 1), "seed", "integer_below_min_value"),
        (CHAT, chat("hi", n=True), "n", "invalid_type"),
        (CHAT, chat("hi", logprobs=1), "logprobs", None),  # chat's logprobs is a boolean
        (CHAT, chat("hi", temperature=10**400), "temperature", None),  # no float holds it
        (CHAT, chat("hi", logit_bias={"50256": 101}), "logit_bias", None),
        (CHAT, chat("hi", logit_bias={"50256": True}), "logit_bias", None),
        (CHAT, chat("hi", logit_bias={"x": 1}), "logit_bias", None),
        (CHAT, chat("hi", logit_bias={"-1": 1}), "logit_bias", None),
        (CHAT, chat("hi", logit_bias={str(2**31): 1}), "logit_bias", None),
        (CHAT, chat("hi", logit_bias={"9" * 4000: 1}), "logit_bias", None),
        (CHAT, chat("hi", store="yes"), "store", None),
        (COMPLETIONS, {"model": "m", "prompt": [1, 2**31]}, "prompt", None),
        (COMPLETIONS, {"model": "m", "prompt": [[1], [-1]]}, "prompt", None),
        (COMPLETIONS, {"model": "m", "prompt": "x", "logprobs": True}, "logprobs", "invalid_type"),
        (EMBEDDINGS, {"model": "m", "input": [int("9" * 4001)]}, "input", None),
        (
            EMBEDDINGS,
            {"model": "m", "input": "x", "dimensions": 0},
            "dimensions",
            "integer_below_min_value",
        ),
    ],
)
def test_integers_are_checked_by_value_not_digits(
    endpoint: str, body: dict[str, Any], param: str, code: str | None
) -> None:
    with pytest.raises(RequestError) as info:
        prepare(endpoint, body, "t")
    err = info.value
    assert err.status == 400 and err.param == param and err.code == code, err.message
    assert len(err.message) < 300  # never the 4,001 digits


def test_integers_in_their_range_pass() -> None:
    prepare(
        CHAT,
        chat(
            "hi",
            n=128,
            max_tokens=2**31 - 1,
            seed=-(2**63),
            top_logprobs=20,
            logprobs=True,
            logit_bias={"0": -100, "2147483647": 100.0},
        ),
        "t",
    )
    prepare(COMPLETIONS, {"model": "m", "prompt": [0, 2**31 - 1], "max_tokens": 0}, "t")
    prepare(COMPLETIONS, {"model": "m", "prompt": "x", "logprobs": 5, "best_of": 20}, "t")
    prepare(EMBEDDINGS, {"model": "m", "input": [[1, 2], [3]], "dimensions": 256}, "t")
    # Python callers may key logit_bias by int, as the JSON encoder writes them as strings.
    prepare(CHAT, chat("hi", logit_bias={50256: -100}), "t")


@pytest.mark.parametrize("digits", [4001, 4300])
def test_a_long_integer_parses_then_is_refused_by_its_range(digits: int) -> None:
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": '
    body = parse_body(raw + b"9" * digits + b"}")
    with pytest.raises(RequestError) as info:
        prepare(CHAT, body, "t")
    assert info.value.param == "max_tokens"


def test_an_integer_too_long_to_parse_is_a_clean_400() -> None:
    raw = b'{"model": "m", "messages": [], "max_tokens": ' + b"9" * 5000 + b"}"
    with pytest.raises(RequestError) as info:
        parse_body(raw)
    err = info.value
    assert err.status == 400 and err.code == "number_too_long"
    assert "digits" in err.message and "set_int_max_str_digits" not in err.message


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b"\xff\xfe", b'"text"'])
def test_parse_body_refuses_non_objects(raw: bytes) -> None:
    with pytest.raises(RequestError):
        parse_body(raw)


def test_nan_is_refused() -> None:
    with pytest.raises(RequestError):
        prepare(CHAT, chat("hi", temperature=float("nan")), "t")


# ---------------------------------------------------------------------- keys and scope


def test_exact_key_ignores_fields_that_do_not_change_the_answer() -> None:
    base = exact_key(CHAT, chat("hi"), "t")
    same = chat(
        "hi",
        user="u1",
        stream=True,
        stream_options={"include_usage": True},
        metadata={"a": "b"},
        store=False,
        service_tier="auto",
        seed=None,
    )
    assert exact_key(CHAT, same, "t") == base
    assert exact_key(CHAT, chat("hi", temperature=1), "t") == exact_key(
        CHAT, chat("hi", temperature=1.0), "t"
    )
    # Key order in the body does not matter.
    assert exact_key(CHAT, dict(reversed(list(chat("hi").items()))), "t") == base


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.2},
        {"top_p": 0.5},
        {"seed": 1},
        {"max_tokens": 5},
        {"n": 2},
        {"stop": ["x"]},
        {"response_format": {"type": "json_object"}},
        {"logit_bias": {"1": 2}},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "auto"},
        {"model": "gpt-4o"},
        {"store": True},  # stored upstream (chat's default is false): its id can be fetched
    ],
)
def test_exact_key_and_scope_change_with_answer_fields(change: dict[str, Any]) -> None:
    assert exact_key(CHAT, chat("hi", **change), "t") != exact_key(CHAT, chat("hi"), "t")
    assert scope_key(CHAT, chat("hi", **change), "t") != scope_key(CHAT, chat("hi"), "t")


def test_tenant_endpoint_namespace_are_in_key_and_scope() -> None:
    body = chat("hi")
    keys = {
        exact_key(CHAT, body, "a"),
        exact_key(CHAT, body, "b"),
        exact_key(CHAT, body, "a", "ns"),
        exact_key(COMPLETIONS, body, "a"),
    }
    scopes = {
        scope_key(CHAT, body, "a"),
        scope_key(CHAT, body, "b"),
        scope_key(CHAT, body, "a", "ns"),
    }
    assert len(keys) == 4 and len(scopes) == 3


def test_scope_is_everything_but_the_last_user_text() -> None:
    sys_msg = {"role": "system", "content": "Be brief."}
    a = chat(sys_msg, "How do I reset my password?")
    b = chat(sys_msg, "What are the steps to reset my password?")
    assert scope_key(CHAT, a, "t") == scope_key(CHAT, b, "t")
    assert exact_key(CHAT, a, "t") != exact_key(CHAT, b, "t")
    other_system = chat({"role": "system", "content": "Be long."}, "How do I reset my password?")
    earlier = chat("hello", {"role": "assistant", "content": "hi"}, "How do I reset my password?")
    assert scope_key(CHAT, other_system, "t") != scope_key(CHAT, a, "t")
    assert scope_key(CHAT, earlier, "t") != scope_key(CHAT, chat("How do I reset?"), "t")


def test_semantic_text() -> None:
    assert semantic_text(CHAT, chat("sys", "last one")) == "last one"
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert semantic_text(CHAT, chat({"role": "user", "content": parts})) == "a\nb"
    image = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert semantic_text(CHAT, chat({"role": "user", "content": image})) is None
    assert semantic_text(CHAT, chat("q", n=2)) is None
    assert semantic_text(CHAT, chat("q", {"role": "tool", "content": "r"})) is None
    assert semantic_text(COMPLETIONS, {"model": "m", "prompt": "p"}) == "p"
    assert semantic_text(COMPLETIONS, {"model": "m", "prompt": ["p", "q"]}) is None
    assert semantic_text(EMBEDDINGS, {"model": "m", "input": "x"}) is None
    req = prepare(CHAT, chat("q", n=3), "t")
    assert req.text is None and req.scope is None


# ---------------------------------------------------------------------- tenants


def test_tenants_are_keyed_hashes_and_groups_share() -> None:
    r = TenantResolver("secret", {"team": ["sk-a", key_fingerprint("sk-b")]})
    t1 = r.resolve("Bearer sk-one")
    assert t1.startswith("key:") and "sk-one" not in t1
    assert r.resolve("bearer sk-one") == t1 != r.resolve("Bearer sk-two")
    assert TenantResolver("other").resolve("Bearer sk-one") != t1  # keyed by the secret
    assert r.resolve("Bearer sk-a") == r.resolve("Bearer sk-b") == "group:team"
    assert r.resolve(None) == r.resolve("Basic xyz") == "anonymous"
    assert r.resolve("Bearer sk-one", explicit="acme") == "explicit:acme"
    with pytest.raises(TypeError):
        TenantResolver("s", {"g": "sk-a"})


# ---------------------------------------------------------------------- responses


def test_cacheable_responses() -> None:
    assert cacheable_response(CHAT, 200, completion()) == (True, "")
    assert not cacheable_response(CHAT, 500, completion())[0]
    assert not cacheable_response(CHAT, 200, {"error": {"message": "x"}})[0]
    cut = completion()
    cut["choices"][0]["finish_reason"] = "length"
    assert not cacheable_response(CHAT, 200, cut)[0]
    assert cacheable_response(CHAT, 200, cut, cache_length=True)[0]
    unfinished = completion()
    unfinished["choices"][0]["finish_reason"] = None
    assert not cacheable_response(CHAT, 200, unfinished)[0]
    assert cacheable_response(EMBEDDINGS, 200, {"data": [{"embedding": [0.1]}]})[0]
    assert not cacheable_response(EMBEDDINGS, 200, {"data": []})[0]


# ---------------------------------------------------------------------- streaming


def test_split_text_round_trips() -> None:
    text = "The quick brown fox jumps over the lazy dog, twice.  Then rests."
    parts = split_text(text, 4)
    assert "".join(parts) == text and 3 <= len(parts) <= 5
    assert split_text("", 4) == [] and split_text("one", 4) == ["one"]


def _sse_bytes(obj: dict[str, Any], include_usage: bool) -> bytes:
    return b"".join(sse_stream(obj, include_usage=include_usage, pieces=5))


@pytest.mark.parametrize("split", [1, 7, 4096])
def test_stream_round_trip_chat(split: int) -> None:
    tool = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'},
    }
    original = completion(
        "It is sunny in Paris today, 21 degrees.",
        reasoning_content="The user asks about weather in Paris.",
        tool_calls=[tool],
    )
    original["system_fingerprint"] = "fp_1"
    raw = _sse_bytes(original, include_usage=True)
    chunks = [json.loads(e[6:]) for e in raw.split(b"\n\n") if e and e != b"data: [DONE]"]
    assert len(chunks) > 5 and raw.endswith(b"data: [DONE]\n\n")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == original["usage"]
    asm = StreamAssembler()
    for i in range(0, len(raw), split):
        asm.feed(raw[i : i + split])
    assert asm.complete
    assert asm.result() == original


def test_stream_without_usage_and_text_completions() -> None:
    text_completion = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "text": "one two three four", "logprobs": None, "finish_reason": "stop"}
        ],
    }
    chunks = completion_chunks(text_completion, include_usage=False, pieces=3)
    assert len(chunks) >= 3 and all("usage" not in c for c in chunks)
    asm = StreamAssembler()
    asm.feed(_sse_bytes(text_completion, include_usage=False))
    assert asm.complete and asm.result() == text_completion


def test_broken_streams_are_not_complete() -> None:
    raw = _sse_bytes(completion(), include_usage=False)
    cut = StreamAssembler()
    cut.feed(raw[: len(raw) // 2])
    assert not cut.complete
    no_finish = StreamAssembler()
    first = raw.split(b"\n\n")[0] + b"\n\n"
    no_finish.feed(first + b"data: [DONE]\n\n")
    assert not no_finish.complete
    error = StreamAssembler()
    error.feed(first + b'data: {"error": {"message": "overloaded"}}\n\ndata: [DONE]\n\n')
    assert not error.complete


# ---------------------------------------------------------------------- prices


def test_prices(tmp_path: Any) -> None:
    table = PriceTable()
    usage = {"prompt_tokens": 1_000_000, "completion_tokens": 1_000_000}
    assert table.cost("gpt-4o-mini-2024-07-18", usage) == pytest.approx(0.75)
    assert table.cost("gpt-4o-2024-08-06", usage) == pytest.approx(12.5)
    assert table.cost("unknown-model", usage) is None
    f = tmp_path / "prices.toml"
    f.write_text('[prices."my-model"]\ninput = 1.0\noutput = 2.0\n')
    assert PriceTable.load(f).cost("my-model", usage) == pytest.approx(3.0)
    f.write_text('[prices."bad"]\noutput = 2.0\n')
    with pytest.raises(ValueError):
        PriceTable.load(f)


# ---------------------------------------------------------------------- LLMCache


@pytest.fixture
def llm() -> Any:
    clock = ManualClock()
    cache = build_cache(
        LLMCacheConfig(ttl=100.0, threshold=0.8),
        clock=clock,
        embedder=DeterministicTestEmbedder(dim=128),
    )
    yield cache
    cache.close()


async def _lookup(llm: LLMCache, mode: str, *args: Any, **kw: Any) -> Any:
    return await llm.alookup(*args, **kw) if mode == "async" else llm.lookup(*args, **kw)


async def _store(llm: LLMCache, mode: str, *args: Any, **kw: Any) -> Any:
    return await llm.astore(*args, **kw) if mode == "async" else llm.store(*args, **kw)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_llm_cache_exact_semantic_and_tenants(llm: LLMCache, mode: str) -> None:
    q = chat("How do I reset my account password quickly?")
    assert (await _lookup(llm, mode, q, "t1")).status is Status.MISS
    assert await _store(llm, mode, q, completion(), "t1")
    status, response, similarity, age, reason, nearest = await _lookup(llm, mode, q, "t1")
    assert status is Status.HIT and response == completion() and similarity is None and age == 0
    assert reason is None and nearest is None
    para = chat("How do I reset my account password quickly please?")
    hit = await _lookup(llm, mode, para, "t1")
    assert hit.status is Status.SEMANTIC_HIT and hit.response == completion()
    assert hit.similarity is not None and 0.8 <= hit.similarity < 1.0
    # Another tenant sees nothing, exact or semantic.
    assert (await _lookup(llm, mode, q, "t2")).status is Status.MISS
    assert (await _lookup(llm, mode, para, "t2")).status is Status.MISS
    # The per-request bar only raises the policy's own.
    assert (await _lookup(llm, mode, para, "t1", min_similarity=0.999)).status is Status.MISS
    assert (await _lookup(llm, mode, q, "t1", semantic=False)).status is Status.HIT


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_llm_cache_feedback_demotes_the_entry_that_answered(llm: LLMCache, mode: str) -> None:
    q = chat("How do I reset my account password quickly?")
    para = chat("How do I reset my account password quickly please?")
    assert llm.feedback(para, False, "t1") is False  # nothing served yet
    await _store(llm, mode, q, completion(), "t1")
    assert (await _lookup(llm, mode, para, "t1")).status is Status.SEMANTIC_HIT
    ref = llm.feedback_ref(para, "t1")
    assert isinstance(ref, str) and ref == llm.feedback_ref(llm.request(para, "t1"))
    assert llm.feedback_ref(para, "t2") != ref  # another tenant's request is another hit
    assert llm.feedback(para, False, "t2") is False
    assert llm.feedback(ref, False) is True
    assert (await _lookup(llm, mode, para, "t1")).status is Status.MISS  # demoted
    assert (await _lookup(llm, mode, q, "t1")).status is Status.HIT  # the exact entry stays
    with pytest.raises(TypeError):
        llm.feedback(ref, "false")  # type: ignore[arg-type]
    assert llm.feedback_ref({"model": "m", "input": "x"}, "t1", endpoint=EMBEDDINGS) is None


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_llm_cache_ages_and_ttls(llm: LLMCache, mode: str) -> None:
    clock = llm.cache.clock
    q = chat("What is the capital of France?")
    await _store(llm, mode, q, completion("Paris."), "t", ttl=10)
    clock.advance(5)  # type: ignore[attr-defined]
    r = await _lookup(llm, mode, q, "t")
    assert r.status is Status.HIT and r.age == 5
    assert (await _lookup(llm, mode, q, "t", max_age=4)).status is Status.MISS
    clock.advance(6)  # type: ignore[attr-defined]
    assert (await _lookup(llm, mode, q, "t")).status is Status.MISS
    para = chat("What is the capital city of France?")
    assert (await _lookup(llm, mode, para, "t")).status is Status.MISS  # expired semantic too


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_llm_cache_exact_only_requests(llm: LLMCache, mode: str) -> None:
    emb = {"model": "text-embedding-3-small", "input": "hello"}
    body = {"object": "list", "data": [{"embedding": [0.1, 0.2]}]}
    await _store(llm, mode, emb, body, "t", endpoint=EMBEDDINGS)
    assert (await _lookup(llm, mode, emb, "t", endpoint=EMBEDDINGS)).response == body
    n2 = chat("Tell me a joke about caches", n=2)
    await _store(llm, mode, n2, completion(), "t")
    assert (await _lookup(llm, mode, n2, "t")).status is Status.HIT
    near = chat("Tell me a joke about caches please", n=2)
    assert (await _lookup(llm, mode, near, "t")).status is Status.MISS


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_unknown_llm_cache_options_are_refused_by_name(mode: str) -> None:
    llm = LLMCache(Cache(), semantic=False)
    try:
        with pytest.raises(TypeError, match=r"unknown keyword arguments \['max_agee'\]"):
            if mode == "sync":
                llm.lookup(chat("hi"), "t", max_agee=5)  # type: ignore[call-arg]
            else:
                await llm.alookup(chat("hi"), "t", max_agee=5)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"\['min_similarity'\]"):
            if mode == "sync":
                llm.store(chat("hi"), completion(), "t", min_similarity=0.9)  # type: ignore[call-arg]
            else:
                await llm.astore(chat("hi"), completion(), "t", min_similarity=0.9)  # type: ignore[call-arg]
        assert llm.lookup(chat("hi"), "t").status is Status.MISS  # nothing was stored
    finally:
        llm.close()


def test_llm_cache_redis_down_is_a_miss() -> None:
    cache = Cache(redis_url="redis://127.0.0.1:1/0", redis_timeout=0.02)
    llm = LLMCache(cache, semantic=False)
    try:
        q = chat("hi")
        assert llm.lookup(q, "t").status is Status.MISS
        llm.store(q, completion(), "t")  # kept locally, never raises
        assert llm.lookup(q, "t").status is Status.HIT
    finally:
        llm.close()


def test_config_from_toml(tmp_path: Any) -> None:
    f = tmp_path / "ck.toml"
    f.write_text(
        'namespace = "prod"\nttl = 60\nthreshold = 0.9\n'
        '[shared_scope]\nteam = ["sk-a", "sk-b"]\n'
        '[prices."m"]\ninput = 1.0\n[proxy]\nupstream = "http://x"\n'
    )
    config = LLMCacheConfig.from_toml(f)
    assert (config.namespace, config.ttl, config.threshold) == ("prod", 60, 0.9)
    assert config.tenants().resolve("Bearer sk-b") == "group:team"
    assert config.prices.price("m") is not None
    f.write_text("tresholdd = 0.9\n")
    with pytest.raises(ValueError, match="tresholdd"):
        LLMCacheConfig.from_toml(f)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_one_redis_entry_and_one_read_per_answer(redis_server: Any, mode: str) -> None:
    import redis as redis_py

    llm = build_cache(
        LLMCacheConfig(ttl=100.0, threshold=0.8, redis_url=redis_server.url, namespace=mode),
        embedder=DeterministicTestEmbedder(dim=128),
    )
    admin = redis_py.Redis.from_url(redis_server.url)

    def reads() -> int:
        stats = admin.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("get", "mget"))

    def exact_keys() -> list[bytes]:
        keys = admin.scan_iter(match=f"*{mode}*", count=1000)
        skip = (b"__version__", b":gen")  # the namespace version, the semantic store's token
        return [k for k in keys if admin.type(k) == b"string" and not any(s in k for s in skip)]

    q = chat("How do I reset my account password quickly?")
    try:
        assert (await _lookup(llm, mode, q, "t1")).status is Status.MISS
        assert await _store(llm, mode, q, completion(), "t1")
        assert len(exact_keys()) == 1  # the answer's one exact entry
        llm.cache.clear_local()  # the next lookup reads Redis
        before = reads()
        assert (await _lookup(llm, mode, q, "t1")).status is Status.HIT
        assert reads() - before == 1  # one read for one request
        stats = llm.cache.stats()
        assert (stats.hits, stats.misses) == (1, 1)  # each request counted once
    finally:
        llm.close()
        admin.close()
