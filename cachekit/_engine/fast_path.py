"""The L1 hit path of a decorated function, built once per function as a closure.

:func:`l1_fast_path` returns the function a sync decorator's wrapper *is*: a Python call layer
costs about a tenth of an L1 hit, so the hit path is built with everything it reads bound to
local names. Built by :meth:`cachekit._engine.engine.Engine.l1_fast_path`, which documents it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any

from cachekit._core.keys import FLOAT_SIGNATURES, float_positions, local_key
from cachekit._core.serialization import Packed
from cachekit._core.types import Envelope
from cachekit._engine.namespace import Namespace
from cachekit._engine.telemetry import FunctionCounters, TierCounters
from cachekit.backends.memory import MemoryStore

__all__ = ["HIT_SAMPLE_EVERY", "KeyShape", "l1_fast_path"]

#: The positional fast path of a decorated function, from ``ArgNormalizer.positional_fast_path``:
#: (fewest positional arguments, most positional arguments, the defaults filling the rest, the
#: argument count that needs no filling or -1).
KeyShape = tuple[int, int, tuple[Any, ...], int]

#: L1 read latency is recorded for one fast-path hit in this many (a power of two), by timing a
#: second read of the entry it hit: timing every hit would cost more than the rest of the hit
#: path.
HIT_SAMPLE_EVERY = 64


def l1_fast_path(
    l1: MemoryStore[Envelope] | None,
    clock: Callable[[], float],
    namespace: Namespace,
    l1_counters: TierCounters,
    fname: str,
    shape: KeyShape | None,
    local_key_of: Callable[[tuple[Any, ...], dict[str, Any]], Hashable],
    timing: FunctionCounters,
    on_miss: Callable[[tuple[Any, ...], dict[str, Any]], Any],
    bind: Callable[[tuple[Any, ...], dict[str, Any]], tuple[Any, ...] | None] | None = None,
) -> Callable[..., Any]:
    """Serve a fresh entry of ``l1`` while ``namespace``'s version needs no re-read, and hand
    everything else to ``on_miss(args, kwargs)``. For scalar arguments, positional within
    ``shape`` or bound by ``bind`` (``ArgNormalizer.bind``: the same values) when given by
    keyword, the local key ``(fname, values, types)`` is built inline; other calls get theirs
    from ``local_key_of(args, kwargs)``. Every attribute lookup here shows in the hit cost,
    hence the local names."""
    l1_item = l1.getitem if l1 is not None else None
    first_default, nparams, defaults, whole = shape if shape is not None else (0, -1, (), -1)
    float_sigs = FLOAT_SIGNATURES.get
    unseen: Any = object()
    width = len(defaults)
    fills = [defaults[k:] for k in range(width + 1)]  # what args of each length lack
    defaults_plain = not any(type(d) is float and (d == 0.0 or d != d) for d in defaults)
    perf_counter = time.perf_counter
    record = l1_counters.latency.record
    sample_mask = HIT_SAMPLE_EVERY - 1
    packed = Packed
    ns = namespace

    def fast(*args: Any, **kwargs: Any) -> Any:
        if l1_item is None:
            return on_miss(args, kwargs)
        n = len(args)
        values: tuple[Any, ...] | None = None
        if not kwargs:
            if first_default <= n <= nparams:
                values = args if n == whole else args + fills[n]
        elif bind is not None:
            values = bind(args, kwargs)
        if values is not None:
            # tuple(map(...)) costs about a tenth of a hit: one or two values are typed inline
            if width == 1:
                types: tuple[type, ...] = (type(values[0]),)
            elif width == 2:
                types = (type(values[0]), type(values[1]))
            else:
                types = tuple(map(type, values))
            # One lookup tells scalars (no float: keyed as they are) from scalars and floats
            # (keyed by value unless a float is zero or NaN, whose == does not tell keys apart:
            # those take local_key's digest) from anything else (None).
            floats = float_sigs(types, unseen)
            if floats is unseen:
                floats = float_positions(types)
            lk: Hashable | None = None
            if floats is not None:
                lk = (fname, values, types)
                # the defaults were checked once: with positional arguments only, floats past
                # them are defaults and need no check
                if floats and (kwargs or floats[0] < n or not defaults_plain):
                    for i in floats:
                        x = values[i]
                        if x == 0.0 or x != x:
                            lk = None
                            break
            if lk is None:
                plain = local_key(values, types)
                lk = (fname, *plain) if plain is not None else local_key_of(args, kwargs)
        else:
            lk = local_key_of(args, kwargs)
        try:
            env = l1_item(lk).value
        except KeyError:
            return on_miss(args, kwargs)
        # Freshness implies the store's own expiry (fresh-until <= stored-until), so one clock
        # read decides both; past the version check time, the slow path checks it.
        now = clock()
        if (env.ttl is not None and now >= env.created_at + env.ttl) or now >= ns.next_check:
            return on_miss(args, kwargs)
        timing.hits += 1
        if not timing.hits & sample_mask:
            # the sampled hit times a second read of its entry: timing every read (or even
            # deciding before the read whether to) costs more than the rest of the hit path
            t0 = perf_counter()
            try:
                l1_item(lk)
            except KeyError:  # evicted since the first read: this hit still stands
                pass
            record(perf_counter() - t0)
        v = env.value
        return v.load() if type(v) is packed else v

    return fast
