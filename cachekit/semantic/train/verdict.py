"""What ``cachekit tune`` tells its user at the end: whether to use the tune, and what its
precision figures mean (docs/tuning.md, "Reading the result").

The verdict is read from the held-back test part, which neither trained the adapter nor chose
its operating point, through the cache with the default policy, each model at its own operating
point (the lowest threshold whose labelled precision reaches the target on the tune part).
"""

from __future__ import annotations

from typing import Any

__all__ = ["MIN_TEST_DUPLICATES", "PRECISION_SLACK", "PRECISION_TERMS", "verdict"]

#: Fewer duplicates than this in the test part say too little to judge a tune on.
MIN_TEST_DUPLICATES = 50
#: How much lower the tuned labelled precision may be than the base's and still count as the
#: same (the test part's sampling noise at a few hundred hits).
PRECISION_SLACK = 0.02
#: The two precision figures, as the command and tune.json name them.
PRECISION_TERMS = (
    "precision: right hits over every hit served, a hit on another pair's entry counted wrong "
    "(those are unlabelled, so this is pessimistic); labelled_precision: right hits over the "
    "hits the labels can judge (each query's own pair), the figure the operating point targets. "
    "They differ by the hits on other pairs' entries."
)


def verdict(
    figures: dict[str, Any], operating_point: float | None = None, floor: float | None = None
) -> dict[str, Any]:
    """``{"use": True | False | None, "why": ...}`` from the manifest's ``figures["test"]``
    (None: too few held-back duplicates to say). An ``operating_point`` at the bottom of its
    grid (``floor``) is never a tune to use: the target precision held at every threshold,
    which says the labels hold too few non-duplicates to place the bar."""
    if operating_point is not None and floor is not None and operating_point <= floor + 1e-9:
        return {
            "use": False,
            "why": f"its operating point fell to the bottom of the grid ({operating_point:g}): "
            "the labels hold too few non-duplicates to place the bar, and it would serve "
            "almost any neighbour; add labelled non-duplicates",
        }
    test = figures.get("test")
    if not test:
        return {"use": None, "why": "no held-back test part: raise --held-back"}
    dups = test["tuned"].get("duplicates", 0)
    if dups < MIN_TEST_DUPLICATES:
        return {
            "use": None,
            "why": f"only {dups} duplicates were held back to test on (fewer than "
            f"{MIN_TEST_DUPLICATES}): add pairs or raise --held-back",
        }
    b, t = test["base"]["cache"], test["tuned"]["cache"]
    recall = f"recall {b['recall']:.3f} -> {t['recall']:.3f}"
    labelled = f"labelled precision {b['labelled_precision']:.3f} -> {t['labelled_precision']:.3f}"
    if t["recall"] <= b["recall"]:
        return {
            "use": False,
            "why": f"it serves no more of the duplicates than the base ({recall})",
        }
    if t["labelled_precision"] < b["labelled_precision"] - PRECISION_SLACK:
        return {
            "use": False,
            "why": f"it serves more duplicates ({recall}) but more of its hits are wrong "
            f"({labelled})",
        }
    return {
        "use": True,
        "why": f"on the held-back pairs it serves more of the duplicates ({recall}) at about "
        f"the same precision ({labelled})",
    }
