"""``cachekit replay``: what a cache would have saved on a team's own request log, how often it
would have served a wrong answer, and what it does to upstream capacity.

The log is replayed through the cache ``cachekit serve`` builds (:func:`cachekit.llm.build_cache`,
the same request rules), with responses taken from the log. See ``docs/replay.md``.

* :func:`run_replay` / :class:`ReplayOptions`: the whole run;
* :class:`Report`: the figures, :meth:`Report.to_dict` the JSON contract;
* :mod:`cachekit.replay.logs`, :mod:`~cachekit.replay.truth`: reading the files;
* :mod:`cachekit.replay.capacity`: Little's law and M/M/c queueing;
* :mod:`cachekit.replay.render`, :mod:`~cachekit.replay.html`: terminal and HTML output.

Names load on first access, so the command line can register ``replay`` without importing
numpy or the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachekit._core.lazy import lazy_exports

if TYPE_CHECKING:
    from cachekit.replay.policies import policy_names, register_policy
    from cachekit.replay.report import Report
    from cachekit.replay.runner import ReplayOptions, run_replay

__all__ = ["ReplayOptions", "Report", "policy_names", "register_policy", "run_replay"]

_LAZY = {
    "ReplayOptions": "cachekit.replay.runner",
    "run_replay": "cachekit.replay.runner",
    "Report": "cachekit.replay.report",
    "policy_names": "cachekit.replay.policies",
    "register_policy": "cachekit.replay.policies",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
