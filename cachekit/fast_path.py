"""The L1 hit path of a decorated function, built once per function as a closure.

:func:`l1_fast_path` returns the function a sync decorator's wrapper *is*: a Python call layer
costs about a tenth of an L1 hit, so the hit path is built with everything it reads bound to
local names. Built by :meth:`cachekit.engine.Engine.l1_fast_path`, which documents it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any

from cachekit.keys import FLOAT_SIGNATURES, SCALAR_SIGNATURES, all_scalar, local_key
from cachekit.namespace import Namespace
from cachekit.serialization import Packed
from cachekit.storage.memory import MemoryStore
from cachekit.telemetry import FunctionCounters, TierCounters
from cachekit.types import Envelope

__all__ = ["HIT_SAMPLE_EVERY", "KeyShape", "l1_fast_path"]

#: The positional fast path of a decorated function, from ``ArgNormalizer.positional_fast_path``:
#: (fewest positional arguments, most positional arguments, the defaults filling the rest, the
#: argument count that needs no filling or -1).
KeyShape = tuple[int, int, tuple[Any, ...], int]

#: L1 hit latency is recorded for one fast-path hit in this many (a power of two): timing every
#: hit would cost more than the rest of the hit path.
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
) -> Callable[..., Any]:
    """Serve a fresh entry of ``l1`` while ``namespace``'s version needs no re-read, and hand
    everything else to ``on_miss(args, kwargs)``. For positional scalar arguments within
    ``shape`` the local key ``(fname, values, types)`` is built inline; other calls get theirs
    from ``local_key_of(args, kwargs)``. Every attribute lookup here shows in the hit cost,
    hence the local names."""
    l1_item = l1.getitem if l1 is not None else None
    first_default, nparams, defaults, whole = shape if shape is not None else (0, -1, (), -1)
    # Argument-type signatures known to be all scalars: tested inline first, since even the
    # call to all_scalar shows in the hit cost.
    scalar_sigs = SCALAR_SIGNATURES
    float_sigs = FLOAT_SIGNATURES.get
    perf_counter = time.perf_counter
    record = l1_counters.latency.record
    sample_mask = HIT_SAMPLE_EVERY - 1
    packed = Packed
    ns = namespace

    def fast(*args: Any, **kwargs: Any) -> Any:
        if l1_item is None:
            return on_miss(args, kwargs)
        n = len(args)
        if not kwargs and first_default <= n <= nparams:
            values = args if n == whole else args + defaults[n:]
            types = tuple(map(type, values))
            lk: Hashable | None = None
            if types in scalar_sigs:
                lk = (fname, values, types)
            elif (floats := float_sigs(types)) is not None:
                # Scalars and floats: keyed by value unless a float is zero or NaN, whose ==
                # does not tell keys apart (those take local_key's digest). Asked before
                # all_scalar, whose call alone costs a tenth of a float-argument hit.
                lk = (fname, values, types)
                for i in floats:
                    x = values[i]
                    if x == 0.0 or x != x:
                        lk = None
                        break
            elif all_scalar(types):
                lk = (fname, values, types)
            if lk is None:
                plain = local_key(values, types)
                lk = (fname, *plain) if plain is not None else local_key_of(args, kwargs)
        else:
            lk = local_key_of(args, kwargs)
        sampled = not timing.hits & sample_mask
        t0 = perf_counter() if sampled else 0.0
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
        if sampled:
            record(perf_counter() - t0)
        v = env.value
        return v.load() if type(v) is packed else v

    return fast
