"""Pauses: the handoffs of one stop of a run are resumed together, by exactly one of them."""

from __future__ import annotations

import threading

import pytest
from redis import Redis

from store.models import Handoff
from worker.adapters.pauses import PauseRef, Pauses, PauseState, ReadyPause, stable_id
from worker.client import Handoffs


def _pause(handoffs: Handoffs, pause_id: str, size: int) -> list[tuple[PauseRef, Handoff]]:
    items = [f"item-{i}" for i in range(size)]
    Pauses(handoffs).open(pause_id, items)
    return [
        (
            PauseRef(pause_id=pause_id, item=item, size=size),
            handoffs.ask(run_id="run-1", thread_id="t-1", question=f"{item}?"),
        )
        for item in items
    ]


def _answer(handoffs: Handoffs, handoff: Handoff) -> Handoff:
    return handoffs.decide(handoff.id, "answered", by="U1", answer="yes")


def test_a_pause_is_claimed_once_every_member_is_decided_and_by_one_member(
    handoffs: Handoffs,
) -> None:
    pauses = Pauses(handoffs)
    (ref_a, a), (ref_b, b) = _pause(handoffs, "p1", 2)

    assert pauses.claim_if_ready(_answer(handoffs, a), ref_a) is None  # b is pending
    ready = pauses.claim_if_ready(_answer(handoffs, b), ref_b)

    assert ready is not None and ready.state is PauseState.OPEN
    assert [m.id for m in ready.members.values()] == [a.id, b.id]  # in item order
    assert pauses.claim_if_ready(handoffs.get(a.id), ref_a) is None  # b resumes it
    assert pauses.claim_if_ready(handoffs.get(b.id), ref_b) is not None  # b's retry


def test_members_decided_at_the_same_moment_leave_exactly_one_resumer(
    handoffs: Handoffs,
) -> None:
    pauses = Pauses(handoffs)

    def claim(barrier: threading.Barrier, claims: list, ref: PauseRef, handoff: Handoff) -> None:
        barrier.wait()
        claims.append(pauses.claim_if_ready(handoff, ref))

    for round_ in range(20):
        members = _pause(handoffs, f"race-{round_}", 2)
        decided = [(ref, _answer(handoffs, handoff)) for ref, handoff in members]
        barrier = threading.Barrier(2)
        claims: list[ReadyPause | None] = []
        threads = [
            threading.Thread(target=claim, args=(barrier, claims, *pair)) for pair in decided
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(claim is not None for claim in claims) == 1


def test_a_retried_resumer_learns_that_its_earlier_attempt_started(
    handoffs: Handoffs,
) -> None:
    pauses = Pauses(handoffs)
    [(ref, handoff)] = _pause(handoffs, "p-alone", 1)
    decided = _answer(handoffs, handoff)

    first = pauses.claim_if_ready(decided, ref, starting=lambda members: True)
    again = pauses.claim_if_ready(decided, ref, starting=lambda members: True)

    assert first is not None and not first.started_before
    assert again is not None and again.started_before


def test_a_resumed_pause_is_kept_for_the_retention_period_only(
    redis: Redis, handoffs: Handoffs
) -> None:
    pauses = Pauses(handoffs)
    _pause(handoffs, "p-done", 1)

    pauses.mark("p-done", PauseState.RESUMED)

    assert pauses.fields("p-done")["state"] == PauseState.RESUMED
    assert 0 < redis.ttl(pauses.keys.pause("p-done")) <= pauses.retention_seconds


def test_a_handoff_of_an_unknown_pause_is_refused_and_leaves_nothing(
    redis: Redis, handoffs: Handoffs
) -> None:
    handoff = _answer(handoffs, handoffs.ask(run_id="r", thread_id="t", question="?"))
    pauses = Pauses(handoffs)

    for size in (1, 2):
        with pytest.raises(LookupError, match="not recorded"):
            pauses.claim_if_ready(handoff, PauseRef(pause_id="gone", item="x", size=size))
        assert not redis.exists(pauses.keys.pause("gone"))


def test_pause_ids_are_stable_and_never_32_hex_characters() -> None:
    one = stable_id("lgp", "thread", "a", "b")

    assert one == stable_id("lgp", "thread", "a", "b") != stable_id("lgp", "thread", "a")
    assert one.startswith("lgp_") and len(one) == 28
