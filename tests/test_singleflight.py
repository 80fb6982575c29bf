"""SingleFlight's batch claims: what a claim holds, what it waits on, what a release frees."""

from __future__ import annotations

import asyncio

from cachekit._engine.singleflight import SingleFlight


def test_disjoint_claims_hold_all_their_keys() -> None:
    sf = SingleFlight()
    first, mine, others = sf.claim(["a", "b"])
    assert mine == ["a", "b"] and others == {}
    second, mine2, others2 = sf.claim(iter(["c"]))
    assert mine2 == ["c"] and others2 == {}
    assert second is not first


def test_overlapping_claim_waits_on_the_holder_and_counts_once() -> None:
    sf = SingleFlight()
    first, _, _ = sf.claim(["a", "b"])
    second, mine, others = sf.claim(["a", "c", "b"])
    assert mine == ["c"]
    assert others == {"a": first, "b": first}
    assert sf.waiting() == 1  # one waiter on `first`, however many of its keys it wants
    sf.release(first, ["a", "b"], {"a": 1, "b": 2})
    assert first.wait() == {"a": 1, "b": 2}
    _, mine3, others3 = sf.claim(["a", "b"])  # released: a new flight may take them
    assert mine3 == ["a", "b"] and others3 == {}
    sf.release(second, ["c"])


def test_release_frees_only_its_own_claims() -> None:
    sf = SingleFlight()
    first, _, _ = sf.claim(["a"])
    second, _, _ = sf.claim(["b"])
    sf.release(second, ["a", "b"])  # "a" is first's: left alone
    _, mine, others = sf.claim(["a", "b"])
    assert mine == ["b"] and others == {"a": first}


def test_threads_and_each_event_loop_claim_apart() -> None:
    sf = SingleFlight()
    thread_flight, _, _ = sf.claim(["k"])

    async def claim_in_loop() -> list[object]:
        flight, mine, others = sf.claim(["k"], asyncio.get_running_loop())
        assert not others
        sf.release(flight, mine, loop=asyncio.get_running_loop())
        return mine

    assert asyncio.run(claim_in_loop()) == ["k"]
    assert asyncio.run(claim_in_loop()) == ["k"]  # another loop: its own scope again
    sf.release(thread_flight, ["k"])
    assert sf.waiting() == 0
