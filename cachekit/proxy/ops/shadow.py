"""Shadow mode (docs/shadow.md): the semantic tier decides on live traffic, and nothing semantic is
served.

With ``--shadow`` (``[proxy] shadow = true``), or for one request with ``x-cachekit-shadow: 1``:

* an exact hit is served as usual;
* the semantic lookup runs and decides. A semantic hit is not served: the request goes upstream as
  a miss, its response says ``x-cachekit-shadow: SEMANTIC_HIT <similarity>``, and once the
  upstream's answer is in, :meth:`Shadow.compare` scores it against the answer the cache would
  have served. A miss says ``x-cachekit-shadow: MISS`` with its reason when a neighbour was
  refused (``MISS slots: numbers 61 != 63``).

How a pair is scored: by default the cosine, under the cache's own embedder, of the two answers'
texts; they agree at :attr:`ProxySettings.shadow_agree` (0.9) or above. That needs no other model
and no upstream call, and it costs one embedding of two short texts, off the event loop. The
verifier of the hit policies (:mod:`cachekit.semantic.policy.verifier`) is trained on pairs of
questions, not of answers, so it is not the default. A judge you configure (``shadow_judge =
"module:callable"``, called with the query, the matched text and both answers' texts, returning
a bool or a score in [0, 1]) replaces it: a judge model call, say, for free-form answers that
embeddings compare poorly.

What is counted (``/metrics``): ``cachekit_proxy_shadow_lookups_total{decision}`` (``SEMANTIC_HIT``
or ``MISS``), ``cachekit_proxy_shadow_pairs_total{agree}`` (``true``, ``false``, ``unscored``:
the upstream answered with an error) and the histogram ``cachekit_proxy_shadow_answer_similarity``.
With ``shadow_log = FILE`` the first ``shadow_sample`` (10,000) scored pairs are appended to FILE
as JSON lines (see :data:`SAMPLE_FIELDS`); ``cachekit export-labels --shadow FILE`` turns them into
labelled pairs for ``cachekit tune``. The file holds prompts and answers in clear: it is created
readable by its owner only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Histogram

from cachekit.cache import Status
from cachekit.llm import CacheLookup, LLMCache, LLMRequest
from cachekit.llm.answers import AnswerComparator, answer_text
from cachekit.proxy.headers import Controls, miss_headers

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from cachekit.proxy.config import ProxySettings

__all__ = ["SAMPLE_FIELDS", "SHADOW_HEADER", "Shadow", "load_judge"]

log = logging.getLogger("cachekit.proxy.shadow")

#: The response header shadow mode adds.
SHADOW_HEADER = "x-cachekit-shadow"
#: One line of the shadow log: when, where, the query and the text it matched, their similarity,
#: both answers, the answers' score, whether they agree and who scored them.
SAMPLE_FIELDS = (
    "t",
    "endpoint",
    "model",
    "tenant",
    "query",
    "matched",
    "similarity",
    "stored_answer",
    "fresh_answer",
    "answer_score",
    "agree",
    "scorer",
)
_BUCKETS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)


def load_judge(spec: str) -> Callable[..., Any]:
    """The judge named ``module:callable``: called as ``judge(query, matched, stored, fresh)``
    with the texts of a shadowed pair, it returns a bool or a score in [0, 1]."""
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"shadow_judge must be 'module:callable', got {spec!r}")
    judge: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return judge


class Shadow:
    """Shadow mode for one proxy: ``settings`` say when and how, ``registry`` takes its
    metrics, ``llm`` embeds the answers compared."""

    def __init__(self, settings: ProxySettings, registry: CollectorRegistry, llm: LLMCache) -> None:
        self.always = settings.shadow
        self.agree_at = settings.shadow_agree
        self.judge = load_judge(settings.shadow_judge) if settings.shadow_judge else None
        self.scorer = settings.shadow_judge or "answer-cosine"
        self.llm = llm
        self._answers: AnswerComparator | None = None  # built on the first pair scored
        self.sample = _Sample(settings.shadow_log, settings.shadow_sample)
        self.lookups = Counter(
            "cachekit_proxy_shadow_lookups",
            "Shadowed lookups, by what the semantic tier decided.",
            ["decision"],
            registry=registry,
        )
        self.pairs = Counter(
            "cachekit_proxy_shadow_pairs",
            "Shadowed semantic hits scored against the upstream's answer.",
            ["agree"],
            registry=registry,
        )
        self.answer_similarity = Histogram(
            "cachekit_proxy_shadow_answer_similarity",
            "Score of the answer a shadowed semantic hit would have served against the fresh one.",
            buckets=_BUCKETS,
            registry=registry,
        )

    def on(self, controls: Controls) -> bool:
        """Whether this request is shadowed."""
        return self.always or controls.shadow

    def diverts(self, found: CacheLookup, controls: Controls) -> bool:
        """Whether ``found`` is a semantic hit that shadow mode sends upstream instead."""
        return found.status is Status.SEMANTIC_HIT and self.on(controls)

    def miss(
        self, found: CacheLookup, req: LLMRequest, controls: Controls
    ) -> tuple[dict[str, str], Controls]:
        """A miss's headers, and its controls (carrying a shadowed hit to :meth:`compare`)."""
        if not self.on(controls):
            return miss_headers(found, req.exact_only), controls
        if found.status is Status.SEMANTIC_HIT:
            self.lookups.labels("SEMANTIC_HIT").inc()
            out = {
                "x-cachekit-cache": "MISS",
                SHADOW_HEADER: f"SEMANTIC_HIT {found.similarity:.4f}",
            }
            return out, dataclasses.replace(controls, shadowed=found)
        out = miss_headers(found, req.exact_only)
        self.lookups.labels("MISS").inc()
        reason = out.get("x-cachekit-reason")
        out[SHADOW_HEADER] = "MISS" if reason is None else f"MISS {reason}"
        return out, controls

    async def compare(self, req: LLMRequest, found: CacheLookup, status: int, body: Any) -> None:
        """Score the upstream's answer ``body`` against the one ``found`` would have served,
        count it and keep it in the sample. Never raises."""
        if not 200 <= status < 300 or not isinstance(body, dict):
            self.pairs.labels("unscored").inc()
            return
        try:
            score = await asyncio.to_thread(self._score, req, found, body)
        except Exception as exc:  # a judge or the embedder failing costs the score only
            log.warning("shadow: could not score a pair: %r", exc)
            self.pairs.labels("unscored").inc()
            return
        agree = score >= self.agree_at
        self.pairs.labels("true" if agree else "false").inc()
        self.answer_similarity.observe(score)
        if self.sample.wanted():
            line = self._line(req, found, body, score, agree)
            await asyncio.to_thread(self.sample.write, line)

    def _score(self, req: LLMRequest, found: CacheLookup, body: dict[str, Any]) -> float:
        if self.judge is not None:
            stored, fresh = answer_text(found.response), answer_text(body)
            verdict = self.judge(req.text, found.nearest, stored, fresh)
            return float(verdict) if not isinstance(verdict, bool) else (1.0 if verdict else 0.0)
        if self._answers is None:  # the cache's own embedder: a hit means the tier exists
            self._answers = AnswerComparator(self.llm.semantic_tier.embedder)
        return self._answers.score(body, found.response)

    def _line(
        self, req: LLMRequest, found: CacheLookup, body: dict[str, Any], score: float, agree: bool
    ) -> dict[str, Any]:
        return {
            "t": round(time.time(), 3),
            "endpoint": req.endpoint,
            "model": req.model,
            "tenant": req.tenant,
            "query": req.text,
            "matched": found.nearest,
            "similarity": found.similarity,
            "stored_answer": answer_text(found.response),
            "fresh_answer": answer_text(body),
            "answer_score": round(score, 6),
            "agree": agree,
            "scorer": self.scorer,
        }


class _Sample:
    """The first ``limit`` lines appended to ``path`` (none without a path)."""

    def __init__(self, path: str, limit: int) -> None:
        self.path, self.limit = path, limit
        self.written = 0
        self._lock = threading.Lock()

    def wanted(self) -> bool:
        return bool(self.path) and self.written < self.limit

    def write(self, line: dict[str, Any]) -> None:
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        with self._lock:
            if self.written >= self.limit:
                return
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            self.written += 1
