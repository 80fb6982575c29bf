"""A semantic tier's entries and indexes on disk, without Redis: what :meth:`SemanticTier.save`
writes and :meth:`SemanticTier.load` reads back.

Layout under the directory: ``meta.json`` (format, tier name, embedder name, one sub-directory
per scope), ``entries.msgpack`` (one row per entry) and ``scopes/s<i>/`` (each scope's index, in
its own format). A snapshot is only read by a tier with the same embedder: vectors of another
model are not comparable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from cachekit.semantic.entries import SemanticEntry

if TYPE_CHECKING:
    from cachekit._core.protocols import VectorIndex

__all__ = ["SAVE_FORMAT", "read_snapshot", "write_snapshot"]

SAVE_FORMAT = 1


def write_snapshot(
    root: Path,
    name: str,
    embedder_name: str,
    indexes: Mapping[str, VectorIndex],
    entries: Iterable[SemanticEntry],
) -> None:
    """Write ``entries`` and each scope's index under ``root`` (created if needed)."""
    root.mkdir(parents=True, exist_ok=True)
    scopes_dir = root / "scopes"
    scopes_dir.mkdir(exist_ok=True)
    names: dict[str, str] = {}
    for i, (scope, index) in enumerate(indexes.items()):
        names[scope] = f"s{i}"
        index.save(scopes_dir / names[scope])
    rows = [
        [e.id, e.scope, e.text, e.value, e.created_at, e.expires_at, e.version] for e in entries
    ]
    (root / "entries.msgpack").write_bytes(msgpack.packb(rows, use_bin_type=True))
    meta = {"format": SAVE_FORMAT, "name": name, "scopes": names, "embedder": embedder_name}
    (root / "meta.json").write_text(json.dumps(meta, indent=2))


def read_snapshot(
    root: Path, embedder_name: str, load_index: Callable[[Path], VectorIndex]
) -> tuple[dict[str, VectorIndex], list[SemanticEntry]]:
    """The indexes and entries saved under ``root``: ids an index holds without an entry are
    removed from it, and an index left empty is dropped. ValueError for another format or
    another embedder."""
    meta = json.loads((root / "meta.json").read_text())
    if meta.get("format") != SAVE_FORMAT:
        raise ValueError(f"unsupported semantic tier format {meta.get('format')!r} in {root}")
    if meta.get("embedder") != embedder_name:
        raise ValueError(
            f"{root} was written with embedder {meta.get('embedder')!r}, this tier uses "
            f"{embedder_name!r}; its vectors are not comparable"
        )
    indexes = {scope: load_index(root / "scopes" / sub) for scope, sub in meta["scopes"].items()}
    rows = msgpack.unpackb((root / "entries.msgpack").read_bytes(), raw=False)
    stamp = time.monotonic()
    entries = [
        SemanticEntry(id_, scope, text, value, created, expires, version, stamp=stamp)
        for id_, scope, text, value, created, expires, version in rows
    ]
    for scope, index in list(indexes.items()):
        known = {e.id for e in entries if e.scope == scope}
        orphans = set(_index_ids(index)) - known
        if orphans:
            index.remove(np.asarray(sorted(orphans), dtype=np.int64))
        if len(index) == 0:
            del indexes[scope]
    return indexes, entries


def _index_ids(index: Any) -> list[int]:
    ids = getattr(index, "ids", None)  # a VectorIndex need not list its ids
    return [int(i) for i in ids()] if callable(ids) else []
