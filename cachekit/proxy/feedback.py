"""The semantic hits a proxy process served, remembered by the fresh id each was sent with, so
that ``POST /v1/cachekit/feedback`` can record a user's verdict on one (and only its tenant's,
once)."""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["HITS_REMEMBERED", "ServedHits"]

#: Semantic hits remembered for feedback (response id -> tenant and the hit's reference),
#: least recently served forgotten first.
HITS_REMEMBERED = 10_000

#: What a verdict on an id this process does not hold is told.
UNKNOWN_ID = (
    "No semantic hit with this id is known to this proxy: the id is unknown, was reported "
    "already, was forgotten, or belongs to another API key."
)


class ServedHits:
    """Response id -> (tenant, the hit's feedback reference), bounded."""

    def __init__(self, limit: int = HITS_REMEMBERED) -> None:
        self.limit = limit
        self._hits: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._hits)

    def remember(self, rid: str, tenant: str, ref: str) -> None:
        self._hits[rid] = (tenant, ref)
        while len(self._hits) > self.limit:
            self._hits.popitem(last=False)

    def take(self, rid: str, tenant: str) -> str | None:
        """The reference of ``tenant``'s hit sent as ``rid``, forgotten (one verdict per answer
        sent); ``None`` when there is none."""
        held = self._hits.get(rid)
        if held is None or held[0] != tenant:
            return None
        del self._hits[rid]
        return held[1]
