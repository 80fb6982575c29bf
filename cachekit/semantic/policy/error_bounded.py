"""A hit policy with a bound on the rate of wrong hits, learned online (in the spirit of vCache).

No threshold is given; a bound ``max_error`` (delta) on wrong hits per lookup is. The policy
learns, from the function's own answers, how the chance that a neighbour's answer is right grows
with its score, and serves a neighbour only when a pessimistic estimate of its chance of being
wrong fits in the error budget that delta allows:

* **Score.** The candidate's cosine, or the verifier's log-odds when ``verifier=`` is given
  (``True`` for the packaged model).
* **Model.** ``P(right | score) = sigmoid(a * z + b)``, fitted by Bayesian logistic regression
  (Laplace approximation, a weak prior) on every verdict so far, refitted every few verdicts.
* **Level and budget.** ``max_error`` is a rate of wrong hits per lookup. Each hit is charged
  its pessimistic chance of being wrong (``1 - sigmoid(mean - k * sd)``, ``k`` = 1.645: the
  one-sided 95% bound). The best candidate is served only if that charge is at most a steady
  *level*, ``max_error / (share of lookups served so far)`` (capped at ``max_hit_error``): if a
  share ``h`` of lookups are hits each charged at most ``max_error / h``, the charges average at
  most ``max_error`` per lookup. A steady level serves the likeliest-right candidates all along,
  as a threshold does, instead of letting a saved-up budget buy doubtful hits. As a hard guard,
  the charge must also fit in the budget: ``max_error`` per lookup seen minus the charges so far.
  A candidate not served is a miss, and the function's fresh answer is compared with the
  candidate's (the check is free: the function runs anyway).
* **Exploration.** Even when it could serve, the policy computes instead with a probability
  ``explore_scale`` times the estimate's looseness (``upper - mean``), at least
  ``explore_floor``, so evidence keeps arriving from the region where it serves: that is what
  keeps the bound true when the traffic drifts.
* **Per entry.** An entry's answer refuted at similarity ``s`` is never served again at or
  below ``s`` (the tier's demotion), so each entry grows its own boundary from its verdicts.

The comparator decides whether two answers agree: equality by default,
:class:`EmbeddingComparator` for free text, or any ``(fresh, stored) -> bool`` (an LLM judge).
Randomness comes from ``rng`` (a :class:`random.Random`), so tests are deterministic.
"""

from __future__ import annotations

import math
import random
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cachekit.semantic.policy.hit_policy import Candidate, Decision, below_threshold, check_guard
from cachekit.semantic.policy.slots import DEFAULT_GUARD, SlotCheck
from cachekit.semantic.policy.verifier import VerifierModel

if TYPE_CHECKING:
    from cachekit._core.protocols import Embedder

__all__ = ["EmbeddingComparator", "ErrorBoundedPolicy"]

_Z_BOUND = 1.645
# Cosine scores are centred and scaled so that the prior (a=1, b=0) reads: a neighbour at 0.85
# is a coin flip, one at 0.95 right nine times in ten; a few verdicts outweigh it.
_COS_CENTRE, _COS_SCALE = 0.85, 20.0


class ErrorBoundedPolicy:
    """See the module docstring. ``max_error``: the bound delta in (0, 1); ``verifier``: None
    (cosine), True (the packaged verifier model) or a :class:`VerifierModel`; ``comparator``:
    ``(fresh, stored) -> bool``; ``prefilter``: candidates below this cosine are ignored;
    ``guard``: the slot check candidates pass first (see
    :class:`~cachekit.semantic.policy.hit_policy.HitPolicy`; None opts out)."""

    def __init__(
        self,
        max_error: float = 0.05,
        *,
        verifier: VerifierModel | bool | None = None,
        comparator: Callable[[Any, Any], bool] | None = None,
        explore_floor: float = 0.01,
        explore_scale: float = 0.3,
        max_hit_error: float = 0.5,
        prefilter: float = 0.5,
        prior_weight: float = 2.0,
        refit_every: int = 8,
        memory: int = 20_000,
        rng: random.Random | None = None,
        guard: SlotCheck | None = DEFAULT_GUARD,
    ) -> None:
        self.guard = check_guard(guard)
        if not 0.0 < max_error < 1.0:
            raise ValueError(f"max_error must be in (0, 1), got {max_error!r}")
        if not 0.0 <= explore_floor <= 1.0:
            raise ValueError(f"explore_floor must be in [0, 1], got {explore_floor!r}")
        if not 0.0 <= explore_scale <= 1.0:
            raise ValueError(f"explore_scale must be in [0, 1], got {explore_scale!r}")
        if verifier is True:
            verifier = VerifierModel.load()
        self.max_error = float(max_error)
        self.verifier: VerifierModel | None = verifier or None
        self.comparator = comparator
        self.explore_floor = explore_floor
        self.explore_scale = explore_scale
        self.prefilter = prefilter
        self.prior_weight = prior_weight
        self.refit_every = max(1, refit_every)
        self.rng = rng or random.Random()
        self._obs: deque[tuple[float, int]] = deque(maxlen=memory)
        self._since_fit = 0
        self._lock = threading.Lock()
        self.a, self.b = 1.0, 0.0
        self.max_hit_error = max_hit_error
        # The error budget: max_error per lookup seen, spent by each hit's pessimistic chance of
        # being wrong.
        self.lookups = 0
        self.served = 0
        self.spent = 0.0
        self._cov = (1.0 / prior_weight, 0.0, 1.0 / prior_weight)  # (aa, ab, bb)

    @property
    def name(self) -> str:
        kind = "verified" if self.verifier is not None else "cosine"
        return f"error-bounded:{self.max_error:g}:{kind}"

    @property
    def floor(self) -> float:
        """Never serves (nor explores) below its pre-filter."""
        return self.prefilter

    # ------------------------------------------------------------------ scoring

    def score(self, query: str, candidate: Candidate) -> float:
        """The candidate's score ``z`` (higher: likelier right)."""
        if self.verifier is not None:
            return self.verifier.logit(candidate.similarity, query, candidate.text)
        return (candidate.similarity - _COS_CENTRE) * _COS_SCALE

    def error_bounds(self, z: float) -> tuple[float, float]:
        """``(estimated, pessimistic)`` probability that a candidate of score ``z`` is wrong."""
        with self._lock:
            a, b = self.a, self.b
            caa, cab, cbb = self._cov
        mean = a * z + b
        sd = math.sqrt(max(0.0, caa * z * z + 2 * cab * z + cbb))
        return 1.0 - _sigmoid(mean), 1.0 - _sigmoid(mean - _Z_BOUND * sd)

    # ------------------------------------------------------------------ protocol

    def decide(self, query: str, candidates: Sequence[Candidate]) -> Decision:
        best, best_z = None, -math.inf
        for i, c in enumerate(candidates):
            if c.similarity >= self.prefilter:
                z = self.score(query, c)
                if z > best_z:
                    best, best_z = i, z
        with self._lock:
            self.lookups += 1
        if best is None:
            return below_threshold(candidates[0].similarity, self.prefilter)
        estimate, upper = self.error_bounds(best_z)
        with self._lock:
            if upper > self._affordable():
                # A miss: the function runs and its answer is checked against the candidate.
                return Decision(explore=best, reason=f"error bound {upper:.2f} over budget")
            if self.rng.random() < max(self.explore_floor, self.explore_scale * (upper - estimate)):
                return Decision(explore=best, reason="explored: checked against a fresh answer")
            self.spent += upper
            self.served += 1
        return Decision(serve=best)

    def _affordable(self) -> float:
        """The highest charge a hit may have now: the steady level, within the budget left."""
        share = max(self.served / self.lookups, self.max_error)
        level = min(self.max_hit_error, self.max_error / share)
        return min(level, self.max_error * self.lookups - self.spent)

    def observe(self, query: str, candidate: Candidate, correct: bool) -> None:
        z = self.score(query, candidate)
        with self._lock:
            self._obs.append((z, int(correct)))
            self._since_fit += 1
            if self._since_fit < self.refit_every:
                return
            self._since_fit = 0
            obs = list(self._obs)
        a, b, cov = _fit(obs, self.prior_weight, (self.a, self.b))
        with self._lock:
            self.a, self.b, self._cov = a, b, cov

    def __repr__(self) -> str:
        kind = "verified" if self.verifier is not None else "cosine"
        return f"ErrorBoundedPolicy(max_error={self.max_error!r}, score={kind!r})"


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _fit(
    obs: list[tuple[float, int]], prior_weight: float, start: tuple[float, float]
) -> tuple[float, float, tuple[float, float, float]]:
    """MAP logistic fit of (a, b) with a N((1, 0), I / prior_weight) prior, by Newton's method
    from the previous estimate; returns the estimate and its Laplace covariance."""
    import numpy as np

    data = np.asarray(obs, dtype=np.float64)
    z, y = data[:, 0], data[:, 1]
    x = np.stack([z, np.ones_like(z)], axis=1)
    prior = np.array([1.0, 0.0])
    theta = np.array(start, dtype=np.float64)
    hess = np.eye(2) * prior_weight
    for _ in range(25):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ theta, -40, 40)))
        grad = x.T @ (p - y) + prior_weight * (theta - prior)
        hess = (x * (p * (1 - p))[:, None]).T @ x + prior_weight * np.eye(2)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if float(np.abs(step).sum()) < 1e-7:
            break
    cov = np.linalg.inv(hess)
    return float(theta[0]), float(theta[1]), (float(cov[0, 0]), float(cov[0, 1]), float(cov[1, 1]))


class EmbeddingComparator:
    """Two free-text answers agree when their embeddings' cosine is at least ``min_similarity``
    (identical values agree without embedding). Values that are not str are compared by
    ``str()``."""

    def __init__(self, embedder: Embedder | None = None, *, min_similarity: float = 0.9) -> None:
        self._embedder = embedder
        self.min_similarity = min_similarity
        self._lock = threading.Lock()

    def _get(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                from cachekit.semantic.embed.embedder import SentenceTransformerEmbedder

                self._embedder = SentenceTransformerEmbedder()
            return self._embedder

    def similarity(self, fresh: Any, stored: Any) -> float:
        """The cosine of the two values' embeddings (1.0 for equal values, 0.0 when either
        embeds to zero)."""
        if fresh == stored:
            return 1.0
        import numpy as np

        vecs = np.asarray(self._get().embed([str(fresh), str(stored)]), dtype=np.float64)
        norms = np.linalg.norm(vecs, axis=1)
        if not (norms > 0).all():
            return 0.0
        return float(vecs[0] @ vecs[1] / (norms[0] * norms[1]))

    def __call__(self, fresh: Any, stored: Any) -> bool:
        return self.similarity(fresh, stored) >= self.min_similarity
