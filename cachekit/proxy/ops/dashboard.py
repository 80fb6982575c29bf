"""The proxy's live dashboard: ``GET /dashboard`` (one self-contained HTML page, see
:mod:`cachekit.proxy.ops.dashboard_page`) and ``GET /dashboard/data`` (JSON), added by
:func:`dashboard_routes`.

Everything comes from the process's own Prometheus registry
(:attr:`cachekit.proxy.metrics.ProxyMetrics.registry`, collected as ``/metrics`` renders it),
plus :meth:`cachekit.proxy.app.Proxy.health`; percentiles are estimated from the histograms'
buckets the way PromQL's ``histogram_quantile`` does (linear within a bucket), so they are as
fine as the buckets. The data is computed on a worker thread, never on the event loop. Each
request of ``/dashboard/data`` also keeps a sample for the rolling history, at most one a
second and the last :data:`HISTORY` of them, so that a page opened now draws the recent past;
the page keeps its own longer history from then on. With ``--workers N`` each worker keeps its
own numbers and each request shows the worker that answered it (``pid``).

``GET /dashboard/data`` (``?history=1`` adds ``history``)::

    {
      "version": 1, "t": 1767000000.0,            # wall clock, seconds
      "pid": 4242,                                # the worker that answered
      "requests": {
        "total": 12,                              # requests to the cached endpoints
        "by_outcome": {"HIT": 5, "SEMANTIC_HIT": 2, "MISS": 4, "COALESCED": 1,
                       "BYPASS": 0, "PASSTHROUGH": 0},
        "by_endpoint": {"chat": {"HIT": 5, ..., "total": 12, "lookups": 12,
                                 "hit_rate": 0.583}},
        "passthrough": 3                          # other /v1/... requests, forwarded
      },
      "hit_rate": {"all": 0.583, "exact": 0.417, "semantic": 0.167, "lookups": 12},
      "saved": {"tokens": 900, "prompt_tokens": 400, "completion_tokens": 500,
                "dollars": 0.0021, "unpriced_hits": 0},
      "models": [{"model": "gpt-4o-mini", "requests": 12, "hits": 7, "hit_rate": 0.583,
                  "tokens": 900, "dollars": 0.0021, "unpriced_hits": 0}],
      "latency": {                                # seconds; null where nothing was observed
        "hit": {"count": 7, "mean": 0.0004, "p50": 0.0003, "p95": 0.0009, "p99": 0.001},
        "exact_hit": {...}, "semantic_hit": {...},
        "upstream": {...},                        # every upstream call: what a miss costs
        "upstream_by_endpoint": {"chat": {...}}
      },
      "refusals": {"total": 2, "by_reason": {"numbers": 2}},
      "shadow": {"lookups": 0, "would_hit": 0, "would_hit_rate": null,   # shadow mode
                 "pairs": {"true": 0, "false": 0, "unscored": 0}, "agree_rate": null},
      "not_stored": {"total": 0, "by_reason": {}},
      "errors": {"total": 0, "by_reason": {}},
      "stored": 4,
      "miss_similarity": {"count": 3, "buckets": [{"le": 0.5, "count": 0}, ...,
                                                  {"le": 1.0, "count": 1}]},
      "in_flight": {"now": 0, "avg": 0.01},
      "health": {"status": "ok", "problems": [], "redis": null, "upstream": {...},
                 "upstream_in_flight": 0},        # what GET /healthz says
      "sample": {"t": ..., "pid": 4242, "tokens": 900, "dollars": 0.0021, "in_flight": 0,
                 "endpoints": {"chat": {"HIT": 5, "SEMANTIC_HIT": 2, "MISS": 4,
                                        "COALESCED": 1}}},
      "history": [<sample>, ...]                  # oldest first, with ?history=1
    }

The hit rates are hits over lookups: requests that looked in the cache (``HIT``,
``SEMANTIC_HIT``, ``MISS``, ``COALESCED``; ``BYPASS`` and ``PASSTHROUGH`` never did), ``null``
before the first lookup. ``models`` joins requests by the model a request names
(``cachekit_proxy_model_requests``; ``requests`` and ``hits`` are ``null`` while the proxy counts
none) with savings by the model its answer names; label values
are bounded as the metrics fold them (:class:`~cachekit.proxy.metrics.LabelFolder`: at most
``metrics_max_models`` model names and 32 reasons, the rest as ``other``), and endpoints are the
registered ones, so the document's size is bounded whatever the traffic. ``miss_similarity``
buckets are not cumulative: ``count`` of misses whose nearest entry was at or below ``le`` and
above the previous bucket's.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cachekit.proxy.metrics import ProxyMetrics
from cachekit.proxy.ops.dashboard_page import PAGE

if TYPE_CHECKING:
    from cachekit.proxy.app import Proxy

__all__ = [
    "HISTORY",
    "LOOKUPS",
    "OUTCOMES",
    "Dashboard",
    "collect",
    "dashboard_routes",
    "quantile",
]

#: Samples the server keeps for a page opened later (one a second at most: five minutes).
HISTORY = 300
#: The least time between two samples kept.
SAMPLE_EVERY_S = 1.0
#: The outcomes of requests that looked in the cache: the hit rate's denominator.
LOOKUPS = ("HIT", "SEMANTIC_HIT", "MISS", "COALESCED")
#: Every outcome ``cachekit_proxy_requests_total`` counts.
OUTCOMES = (*LOOKUPS, "BYPASS", "PASSTHROUGH")
_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

# The page: no resource from anywhere else may load, scripts and styles only inline.
_PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
_DATA_HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff"}

Samples = dict[str, list[tuple[str, dict[str, str], float]]]


def _families(metrics: ProxyMetrics) -> Samples:
    """Every sample of the registry, by sample name (``..._total``, ``..._bucket`` ...)."""
    out: Samples = defaultdict(list)
    for family in metrics.registry.collect():
        for s in family.samples:
            out[s.name].append((s.name, s.labels, s.value))
    return out


def _by(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """A counter's values summed by ``labels``."""
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for _, ls, value in samples.get(name, ()):
        out[tuple(ls.get(label, "") for label in labels)] += value
    return out


def _by_one(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {k[0]: v for k, v in _by(samples, name, label).items()}


def _buckets(
    samples: Samples, name: str, keep: Callable[[dict[str, str]], bool] = lambda ls: True
) -> list[tuple[float, float]]:
    """A histogram's cumulative ``(le, count)`` buckets, summed over the series ``keep``
    selects, in ``le`` order (``+Inf`` last)."""
    counts: dict[float, float] = defaultdict(float)
    for _, ls, value in samples.get(name + "_bucket", ()):
        if keep(ls):
            counts[float(ls["le"])] += value
    return sorted(counts.items())


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of a histogram given as cumulative ``(le, count)``
    buckets, as PromQL's ``histogram_quantile``: linear within the bucket it falls in (from 0
    for the first), the highest finite bound when it falls in ``+Inf``; ``None`` when empty."""
    bs = list(buckets)
    if not bs or bs[-1][1] <= 0:
        return None
    rank = q * bs[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in bs:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:  # only for q == 0
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def _latency(samples: Samples, name: str, keep: Callable[[dict[str, str]], bool]) -> dict[str, Any]:
    buckets = _buckets(samples, name, keep)
    count = buckets[-1][1] if buckets else 0.0
    total = sum(v for _, ls, v in samples.get(name + "_sum", ()) if keep(ls))
    out: dict[str, Any] = {"count": int(count), "mean": total / count if count else None}
    for key, q in _QUANTILES:
        out[key] = quantile(q, buckets)
    return out


def _label_is(label: str, value: str) -> Callable[[dict[str, str]], bool]:
    return lambda ls: ls.get(label) == value


def _rate(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def _reasons(samples: Samples, name: str) -> dict[str, Any]:
    by_reason = {k: int(v) for k, v in _by_one(samples, name, "reason").items() if v > 0}
    ordered = dict(sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0])))
    return {"total": sum(ordered.values()), "by_reason": ordered}


def _shadow(samples: Samples) -> dict[str, Any]:
    """Shadow mode's figures: lookups it decided, how many would have hit, and the pairs scored
    (``true``: the answers agreed)."""
    decided = _by_one(samples, "cachekit_proxy_shadow_lookups_total", "decision")
    got = _by_one(samples, "cachekit_proxy_shadow_pairs_total", "agree")
    pairs = {k: int(got.get(k, 0)) for k in ("true", "false", "unscored")}
    lookups, would = sum(decided.values()), decided.get("SEMANTIC_HIT", 0.0)
    return {
        "lookups": int(lookups),
        "would_hit": int(would),
        "would_hit_rate": _rate(would, lookups),
        "pairs": pairs,
        "agree_rate": _rate(pairs["true"], pairs["true"] + pairs["false"]),
    }


def collect(metrics: ProxyMetrics, now: float | None = None) -> dict[str, Any]:
    """The dashboard's document for ``metrics`` (everything but ``health``): see the module's
    docstring for its shape. Collects the whole registry: call it on a worker thread."""
    t = time.time() if now is None else now
    s = _families(metrics)
    requests = _by(s, "cachekit_proxy_requests_total", "endpoint", "cache")
    endpoints: dict[str, dict[str, Any]] = {}
    for (endpoint, outcome), value in sorted(requests.items()):
        counts = endpoints.setdefault(endpoint, dict.fromkeys(OUTCOMES, 0))
        counts[outcome] = counts.get(outcome, 0) + int(value)
    by_outcome = dict.fromkeys(OUTCOMES, 0)
    for counts in endpoints.values():
        for outcome in OUTCOMES:
            by_outcome[outcome] += counts[outcome]
        counts["total"] = sum(counts[o] for o in OUTCOMES)
        counts["lookups"] = sum(counts[o] for o in LOOKUPS)
        hits = counts["HIT"] + counts["SEMANTIC_HIT"]
        counts["hit_rate"] = _rate(hits, counts["lookups"])
    lookups = sum(by_outcome[o] for o in LOOKUPS)

    tokens = _by(s, "cachekit_proxy_tokens_saved_total", "model", "type")
    dollars = _by_one(s, "cachekit_proxy_dollars_saved_total", "model")
    unpriced = _by_one(s, "cachekit_proxy_unpriced_hits_total", "model")
    per_model = _by(s, "cachekit_proxy_model_requests_total", "model", "cache")
    names = {m for m, _ in tokens} | set(dollars) | set(unpriced) | {m for m, _ in per_model}
    models: list[dict[str, Any]] = []
    for name in names:
        looked = sum(v for (m, c), v in per_model.items() if m == name and c in LOOKUPS)
        hits = sum(
            v for (m, c), v in per_model.items() if m == name and c in ("HIT", "SEMANTIC_HIT")
        )
        counted = bool(per_model)  # else the proxy counts no requests by model
        models.append(
            {
                "model": name,
                "requests": int(sum(v for (m, _), v in per_model.items() if m == name))
                if counted
                else None,
                "hits": int(hits) if counted else None,
                "hit_rate": _rate(hits, looked),
                "tokens": int(sum(v for (m, _), v in tokens.items() if m == name)),
                "dollars": dollars.get(name, 0.0),
                "unpriced_hits": int(unpriced.get(name, 0.0)),
            }
        )
    models.sort(key=lambda r: (-r["dollars"], -r["tokens"], -(r["requests"] or 0), r["model"]))
    prompt = int(sum(v for (_, kind), v in tokens.items() if kind == "prompt"))
    completion = int(sum(v for (_, kind), v in tokens.items() if kind == "completion"))

    hit = "cachekit_proxy_hit_latency_seconds"
    up = "cachekit_proxy_upstream_latency_seconds"
    up_endpoints = sorted({ls["endpoint"] for _, ls, _ in s.get(up + "_count", ())})
    latency = {
        "hit": _latency(s, hit, lambda ls: True),
        "exact_hit": _latency(s, hit, _label_is("kind", "HIT")),
        "semantic_hit": _latency(s, hit, _label_is("kind", "SEMANTIC_HIT")),
        "upstream": _latency(s, up, lambda ls: True),
        "upstream_by_endpoint": {
            e: _latency(s, up, _label_is("endpoint", e)) for e in up_endpoints
        },
    }

    similarity = _buckets(s, "cachekit_proxy_miss_nearest_similarity")
    finite = [(le, c) for le, c in similarity if not math.isinf(le)]
    sim_buckets = []
    prev = 0.0
    for i, (le, cumulative) in enumerate(finite):
        upto = similarity[-1][1] if i == len(finite) - 1 else cumulative  # > 1.0 folds in
        sim_buckets.append({"le": le, "count": int(upto - prev)})
        prev = upto

    saved_tokens = prompt + completion
    saved_dollars = sum(dollars.values())
    in_flight = int(_by(s, "cachekit_proxy_upstream_in_flight")[()])
    return {
        "version": 1,
        "t": t,
        "pid": os.getpid(),
        "requests": {
            "total": sum(by_outcome.values()),
            "by_outcome": by_outcome,
            "by_endpoint": endpoints,
            "passthrough": int(_by(s, "cachekit_proxy_passthrough_requests_total")[()]),
        },
        "hit_rate": {
            "all": _rate(by_outcome["HIT"] + by_outcome["SEMANTIC_HIT"], lookups),
            "exact": _rate(by_outcome["HIT"], lookups),
            "semantic": _rate(by_outcome["SEMANTIC_HIT"], lookups),
            "lookups": lookups,
        },
        "saved": {
            "tokens": saved_tokens,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "dollars": saved_dollars,
            "unpriced_hits": int(sum(unpriced.values())),
        },
        "models": models,
        "latency": latency,
        "refusals": _reasons(s, "cachekit_proxy_semantic_refusals_total"),
        "shadow": _shadow(s),
        "not_stored": _reasons(s, "cachekit_proxy_not_stored_total"),
        "errors": _reasons(s, "cachekit_proxy_errors_total"),
        "stored": int(_by(s, "cachekit_proxy_stored_total")[()]),
        "miss_similarity": {"count": int(prev), "buckets": sim_buckets},
        "in_flight": {
            "now": in_flight,
            "avg": _by(s, "cachekit_proxy_upstream_in_flight_avg")[()],
        },
        "sample": {
            "t": t,
            "pid": os.getpid(),
            "tokens": saved_tokens,
            "dollars": saved_dollars,
            "in_flight": in_flight,
            "endpoints": {e: {o: c[o] for o in LOOKUPS} for e, c in endpoints.items()},
        },
    }


class Dashboard:
    """The dashboard of one proxy: its routes' handlers and the server's ring of recent samples
    (``history`` of them, one every ``every`` seconds at most)."""

    def __init__(
        self,
        proxy: Proxy,
        history: int = HISTORY,
        every: float = SAMPLE_EVERY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.proxy = proxy
        self._every = every
        self._clock = clock
        self._samples: deque[dict[str, Any]] = deque(maxlen=history)
        self._lock = threading.Lock()

    def data(self, history: bool = False) -> dict[str, Any]:
        """The document (blocking: :func:`collect` and the health report); keeps its sample
        when the last one kept is ``every`` seconds old."""
        out = collect(self.proxy.metrics, self._clock())
        out["health"] = self.proxy.health()
        sample = out["sample"]
        with self._lock:
            since = sample["t"] - self._samples[-1]["t"] if self._samples else self._every
            if since >= self._every or since < 0:  # < 0: the wall clock was set back
                self._samples.append(sample)
            if history:
                out["history"] = list(self._samples)
        return out

    async def page(self, request: Request) -> Response:
        return Response(PAGE, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)

    async def json(self, request: Request) -> Response:
        history = request.query_params.get("history", "") in ("1", "true")
        data = await asyncio.to_thread(self.data, history)
        body = json.dumps(data, separators=(",", ":")).encode()
        return Response(body, media_type="application/json", headers=_DATA_HEADERS)


def dashboard_routes(proxy: Proxy) -> list[Route]:
    """The dashboard's routes for ``proxy``: ``GET /dashboard`` and ``GET /dashboard/data``."""
    board = Dashboard(proxy)
    return [
        Route("/dashboard", board.page, methods=["GET"]),
        Route("/dashboard/data", board.json, methods=["GET"]),
    ]
