"""Replaying a log through the cache ``cachekit serve`` would build.

Every request goes, in log order, through a fresh :class:`~cachekit.llm.LLMCache` made by
:func:`cachekit.llm.build_cache` (in-process: L1 and a local FAISS index, never Redis), with the
request rules of :mod:`cachekit.llm` (key, scope, tenant, semantic text, which responses may be
stored). Nothing is sent upstream: a miss stores the response the log recorded, if production
would have stored it.

The texts are embedded once, up front, in large batches (:mod:`cachekit.replay.vectors`); every
replay pass, one per sweep point, reuses those vectors.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cachekit.cache import Status
from cachekit.llm import (
    PRICES_AS_OF,
    CacheLookup,
    Endpoint,
    LLMCacheConfig,
    LLMRequest,
    PriceTable,
    RequestError,
    build_cache,
    cacheable_response,
    endpoint_of,
    prepare,
)
from cachekit.replay.capacity import rate_from_timestamps
from cachekit.replay.decision import default_sweep, exact_only, recommend
from cachekit.replay.logs import LogRecord, ParsedLog, Skipped, read_log
from cachekit.replay.policies import policy_factory
from cachekit.replay.report import (
    EXACT,
    MISS,
    SEMANTIC,
    Outcome,
    Report,
    Usage,
    build_report,
    money_by_model,
)
from cachekit.replay.truth import Truth, read_truth
from cachekit.replay.vectors import PrecomputedEmbedder, embed_all, single_text_ms
from cachekit.semantic.policy.hit_policy import ThresholdPolicy, operating_point_of

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder

__all__ = ["INVALID_REQUEST", "Prepared", "ReplayOptions", "prepare_log", "replay", "run_replay"]

INVALID_REQUEST = "invalid_request"

#: Progress hook: ``(task, advance, total)``; ``total`` is given once when a task starts.
Progress = Callable[[str, int, int | None], None]


@dataclass
class ReplayOptions:
    """Everything but the files. ``settings`` are the sweep points (each one a policy setting,
    for ``threshold`` the cosine threshold); ``setting`` is the headline run's (None: the
    policy's default)."""

    setting: float | None = None
    sweep: Sequence[float] = ()
    policy: str = "threshold"
    tenant_field: str = "metadata.tenant"
    prices_path: str | Path | None = None
    rate: float | None = None
    upstream_concurrency: int | None = None
    config: LLMCacheConfig | None = None
    #: The embedder of the replay (None: the default model, as ``cachekit serve`` uses).
    embedder: Embedder | None = None
    progress: Progress | None = None
    #: Dollars one wrong answer costs (``--wrong-cost``): taken off the net savings.
    wrong_cost: float = 0.0
    #: Without ``sweep``, sweep the threshold policy around its setting anyway (the command's
    #: default: :func:`cachekit.replay.decision.default_sweep`).
    default_sweep: bool = False
    #: The recommended setting's bound on wrong hits per request (``--max-wrong-rate``).
    max_wrong_rate: float = 0.01


def endpoint_ok(url: str) -> bool:
    return _endpoint(url) is not None


def _endpoint(url: str) -> str | None:
    path = urlsplit(url).path if "://" in url else url
    return endpoint_of(path)


@dataclass
class Prepared:
    """The replayable part of a log, keyed once by the production rules."""

    records: list[LogRecord]
    requests: list[LLMRequest]
    responses: list[dict[str, Any] | None]  # None: production would not have stored it
    usage: list[Usage]
    models: list[str]
    skipped: Skipped
    texts: list[str] = field(default_factory=list)  # each request's semantic text ("" if none)
    shown: list[str] = field(default_factory=list)  # what a person would call its text


def _last_message(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        return str(messages[-1].get("content"))
    return str(body.get("prompt", body.get("input", "")))[:500]


def _usage(body: dict[str, Any] | None, api: Endpoint) -> Usage:
    counts = api.usage_counts(body.get("usage") if isinstance(body, dict) else None)
    return Usage(*counts) if counts is not None else Usage(0, 0)


def prepare_log(parsed: ParsedLog, config: LLMCacheConfig) -> Prepared:
    """Key every record with the production rules; a request production would refuse is
    skipped as ``invalid_request``."""
    tenants = config.tenants()
    out = Prepared([], [], [], [], [], parsed.skipped)
    for rec in parsed.records:
        endpoint = _endpoint(rec.url) or rec.url
        tenant = tenants.resolve(explicit=rec.tenant) if rec.tenant is not None else "anonymous"
        try:
            req = prepare(endpoint, rec.request, tenant, config.namespace)
        except RequestError:
            out.skipped.add(INVALID_REQUEST, f"line {rec.line}")
            continue
        body, complete = req.api.assemble_logged(rec.response)
        ok = (
            complete
            and cacheable_response(
                endpoint,
                rec.status_code,
                body,
                cache_length=config.cache_length,
                cache_refusals=config.cache_refusals,
            )[0]
        )
        out.records.append(rec)
        out.requests.append(req)
        out.responses.append(body if ok else None)
        out.usage.append(_usage(body, req.api) if 200 <= rec.status_code < 300 else Usage(0, 0))
        out.models.append(req.model)
        out.texts.append((req.text or "") if config.semantic else "")
        out.shown.append(req.text or _last_message(rec.request))
    return out


class _ReplayClock:
    """The cache's clock during a replay: the logged time of the request being replayed, so
    entries expire as they would have in production."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _times(prep: Prepared, rate: float | None) -> list[float]:
    stamps = [r.timestamp for r in prep.records]
    if all(s is not None for s in stamps) and stamps:
        return [float(s) for s in stamps if s is not None]
    if rate:
        return [i / rate for i in range(len(stamps))]
    return [0.0] * len(stamps)  # no time passes: nothing expires during the replay


def _fingerprint(response: dict[str, Any]) -> int:
    return hash(json.dumps(response, sort_keys=True, separators=(",", ":")))


class _Sources:
    """Which request stored what, to name the request behind an entry the cache returns.

    A response is recognised by its content; a semantic entry by its scope and text (the tier's
    entry id: storing the same text in a scope again replaces the entry, so the latest request
    that stored it is the one whose answer the entry holds)."""

    def __init__(self) -> None:
        self.responses: dict[int, int] = {}
        self.texts: dict[tuple[str | None, str], int] = {}

    def stored(self, i: int, req: LLMRequest, response: dict[str, Any], text: str) -> None:
        self.responses[_fingerprint(response)] = i
        if text:
            self.texts[(req.scope, text)] = i

    def served_by(self, response: dict[str, Any]) -> int | None:
        return self.responses.get(_fingerprint(response))

    def nearest_by(self, req: LLMRequest, nearest: str | None) -> int | None:
        return None if nearest is None else self.texts.get((req.scope, nearest))


def replay(
    prep: Prepared,
    config: LLMCacheConfig,
    embedder: Embedder,
    *,
    embed_ms: float = 0.0,
    times: Sequence[float] | None = None,
    progress: Progress | None = None,
    task: str = "replay",
) -> list[Outcome]:
    """One pass over the log through a fresh cache; the cache's time per request is measured
    (lookup, plus the store on a miss) and ``embed_ms`` added where production would have
    embedded the text (the vectors here are computed in advance)."""
    clock = _ReplayClock()
    llm = build_cache(config, embedder=embedder, clock=clock)
    sources = _Sources()
    outcomes: list[Outcome] = []
    times = times if times is not None else [0.0] * len(prep.requests)
    if progress:
        progress(task, 0, len(prep.requests))
    perf = time.perf_counter
    try:
        for i, (req, resp) in enumerate(zip(prep.requests, prep.responses, strict=True)):
            clock.now = times[i]
            t0 = perf()
            found = llm.lookup(req)
            if not found.hit and resp is not None:
                llm.store(req, resp)
            elapsed = (perf() - t0) * 1000.0
            if found.status is not Status.HIT and prep.texts[i]:
                elapsed += embed_ms
            outcomes.append(_outcome(found, elapsed, req, sources))
            if not found.hit and resp is not None:
                sources.stored(i, req, resp, prep.texts[i])
            if progress and (i + 1) % 1000 == 0:
                progress(task, 1000, None)
    finally:
        llm.close()
    if progress:
        progress(task, len(prep.requests) % 1000, None)
    return outcomes


def _outcome(found: CacheLookup, elapsed_ms: float, req: LLMRequest, sources: _Sources) -> Outcome:
    """A hit names the request that stored its answer; a miss keeps why its nearest entry was
    refused and which request stored that entry, for the report's near-miss listing."""
    if not found.hit or found.response is None:
        near = sources.nearest_by(req, found.nearest)
        return Outcome(MISS, elapsed_ms, None, found.similarity, found.reason, near)
    status = EXACT if found.status is Status.HIT else SEMANTIC
    return Outcome(status, elapsed_ms, sources.served_by(found.response), found.similarity)


@dataclass
class _Context:
    prep: Prepared
    truth: Truth | None
    prices: PriceTable
    prices_label: str
    rate: float | None
    rate_source: str | None
    times: list[float]


def _prices(config: LLMCacheConfig, path: str | Path | None) -> tuple[PriceTable, str]:
    if path is None:
        return config.prices, f"built-in table of {PRICES_AS_OF}"
    table = PriceTable.load(path, base=config.prices.prices)
    return table, f"{Path(path).name} over the built-in table of {PRICES_AS_OF}"


def _config_for(
    base: LLMCacheConfig, policy: str, setting: float | None, embedder: Embedder | None = None
) -> LLMCacheConfig:
    """The production config with the replay's policy setting; always in-process. With no
    setting, the threshold policy uses the config's threshold, else the embedder's operating
    point (a tuned embedder's), else the library default."""
    hit_policy = policy_factory(policy)(setting)  # a bad name or setting fails here
    if policy == "threshold" and isinstance(hit_policy, ThresholdPolicy):
        threshold = hit_policy.threshold
        if setting is None:
            threshold = base.threshold or operating_point_of(embedder)
        return dataclasses.replace(
            base,
            policy="threshold",
            threshold=threshold,
            policy_setting=None,
            redis_url=None,
            redis_cluster_url=None,
        )
    return dataclasses.replace(
        base,
        policy=policy,
        policy_setting=setting,
        threshold=None,
        redis_url=None,
        redis_cluster_url=None,
    )


def _setting_of(config: LLMCacheConfig) -> float | None:
    """The one number that sets the config's policy (its threshold, for threshold)."""
    return config.threshold if config.policy == "threshold" else config.policy_setting


def run_replay(
    input_path: str | Path,
    outputs_path: str | Path | None = None,
    truth_path: str | Path | None = None,
    options: ReplayOptions | None = None,
) -> Report:
    """Read, embed once, replay (once, plus once per sweep point) and report."""
    opts = options or ReplayOptions()
    base = opts.config or LLMCacheConfig()
    # A bad policy fails before any work:
    _config_for(base, opts.policy, opts.setting, opts.embedder)
    parsed = read_log(
        input_path, outputs_path, endpoint_ok=endpoint_ok, tenant_field=opts.tenant_field
    )
    truth = read_truth(truth_path, parsed.skipped) if truth_path is not None else None
    prep = prepare_log(parsed, base)
    rate, source = (opts.rate, "--rate") if opts.rate else (None, None)
    if rate is None:
        rate = rate_from_timestamps([r.timestamp for r in prep.records])
        source = "timestamps" if rate is not None else None
    prices, label = _prices(base, opts.prices_path)
    ctx = _Context(prep, truth, prices, label, rate, source, _times(prep, rate))

    embedder = opts.embedder
    if embedder is None:
        from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    table, embed_ms = _embed_texts(prep, embedder, opts.progress)

    def run(setting: float | None) -> Report:
        config = _config_for(base, opts.policy, setting, opts.embedder)
        value = _setting_of(config)
        name = opts.policy if value is None else f"{opts.policy}:{value:g}"
        outcomes = replay(
            prep,
            config,
            table,
            embed_ms=embed_ms,
            times=ctx.times,
            progress=opts.progress,
            task=f"replay {name}",
        )
        report = _report(ctx, outcomes, opts, name, setting)
        report.embed_ms = embed_ms
        return report

    chosen = _setting_of(_config_for(base, opts.policy, opts.setting, opts.embedder))
    settings = list(opts.sweep)
    if not settings and opts.default_sweep and opts.policy == "threshold" and chosen is not None:
        settings = default_sweep(chosen)
    points = [run(s) for s in settings]
    head = next(
        (
            p
            for p in points
            if p.threshold is not None and chosen is not None and abs(p.threshold - chosen) < 1e-9
        ),
        None,
    )
    report = head if head is not None else run(opts.setting)
    report = dataclasses.replace(report, sweep=points, threshold=None)
    report.exact_only = _exact_only(ctx, base, table, opts)
    report.recommended = recommend(points, opts.max_wrong_rate, truth is not None)
    return report


def _exact_only(
    ctx: _Context, base: LLMCacheConfig, table: Embedder, opts: ReplayOptions
) -> dict[str, Any]:
    """The baseline: one more pass with semantic matching off (no embedding: exact keys)."""
    config = dataclasses.replace(base, semantic=False)
    outcomes = replay(
        ctx.prep, config, table, times=ctx.times, progress=opts.progress, task="exact"
    )
    hit = [o.status != MISS for o in outcomes]
    return exact_only(outcomes, money_by_model(hit, ctx.prep.usage, ctx.prep.models, ctx.prices))


def _embed_texts(
    prep: Prepared, embedder: Embedder, progress: Progress | None
) -> tuple[PrecomputedEmbedder, float]:
    texts = list(dict.fromkeys(t for t in prep.texts if t))
    if progress:
        progress("embedding", 0, len(texts))
    vectors, _ = embed_all(
        texts, embedder, progress=(lambda n: progress("embedding", n, None)) if progress else None
    )
    embed_ms = single_text_ms(texts, embedder)
    return PrecomputedEmbedder(texts, vectors, name=embedder.name, fallback=embedder), embed_ms


def _report(
    ctx: _Context, outcomes: list[Outcome], opts: ReplayOptions, policy: str, setting: float | None
) -> Report:
    return build_report(
        ctx.prep.records,
        outcomes,
        usage=ctx.prep.usage,
        models=ctx.prep.models,
        texts=ctx.prep.shown,
        prices=ctx.prices,
        prices_label=ctx.prices_label,
        skipped=ctx.prep.skipped,
        policy=policy,
        truth=ctx.truth,
        rate=ctx.rate,
        rate_source=ctx.rate_source,
        upstream_concurrency=opts.upstream_concurrency,
        threshold=setting,
        answer_ids=[r.get("id") if isinstance(r, dict) else None for r in ctx.prep.responses],
        wrong_cost=opts.wrong_cost,
    )
