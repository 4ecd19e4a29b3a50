"""Approvals that need N of M people (store): each approve or reject is a vote, one per
person, recorded atomically; the vote that reaches N approvals decides (listing every
approver), the first rejection vetoes (or the R-th, when R are needed); an edit clears the
approvals given before it; expiry with some votes fails closed and lists them; the requester
never counts. Every case ends in exactly one decision and one queued resume."""

from __future__ import annotations

import json
import time

import pytest
from redis import Redis

from store.defaults import MAX_VOTES
from store.exceptions import (
    AlreadyDecided,
    AlreadyVoted,
    InvalidDecision,
    RequesterMayNotVote,
    TooManyVotes,
)
from store.models import Handoff, Status, TaskState
from worker.client import Handoffs

REQUESTER = "U0REQ"


def _approval(handoffs: Handoffs, **options: object) -> Handoff:
    return handoffs.request_approval(
        run_id="run-q",
        thread_id="t",
        action="issue_refund",
        args={"order": "A-1", "amount_usd": 900},
        resume="tests.support.resume_targets:record",
        requester=REQUESTER,
        **options,  # type: ignore[arg-type]
    )


def _decided_once(handoffs: Handoffs, handoff_id: str) -> Handoff:
    """The handoff, once asserting it was decided exactly once with one resume queued."""
    handoff = handoffs.get(handoff_id)
    events = [e.event for e in handoffs.audit(handoff_id)]
    assert events.count("decided") + events.count("expired") == 1, events
    assert handoff.resume.state is TaskState.QUEUED
    outbox = handoffs.store.redis.zrange(handoffs.store.keys.outbox, 0, -1)
    assert outbox.count(f"resume:{handoff_id}".encode()) == 1
    return handoff


@pytest.mark.parametrize("needed", [1, 2, 3])
def test_n_approvals_from_distinct_people_decide(redis: Redis, needed: int) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=needed)
    voters = ["U0A", "U0B", "U0C"][:needed]

    for i, voter in enumerate(voters):
        result = handoffs.store.decide(handoff.id, "approved", decided_by=voter)
        if i < needed - 1:
            assert result.is_pending
            assert [v.by for v in result.live_votes("approved")] == voters[: i + 1]

    decided = _decided_once(handoffs, handoff.id)
    assert decided.status is Status.APPROVED
    assert decided.resume_data is not None
    if needed == 1:
        assert decided.resume_data.votes is None  # one decision: no votes kept
    else:
        assert decided.resume_data.approvers == voters
        assert [v.by for v in decided.resume_data.votes or []] == voters
    with pytest.raises(AlreadyDecided):
        handoffs.store.decide(handoff.id, "approved", decided_by="U0D")


def test_a_second_vote_by_the_same_person_is_refused_and_changes_nothing(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)
    handoffs.store.decide(handoff.id, "approved", decided_by="U0A")
    before = handoffs.get(handoff.id)

    for outcome in ("approved", "rejected"):
        with pytest.raises(AlreadyVoted) as refused:
            handoffs.store.decide(handoff.id, outcome, decided_by="U0A")
        assert refused.value.outcome == "approved"

    after = handoffs.get(handoff.id)
    assert after.status is Status.PENDING
    assert (after.votes, after.version) == (before.votes, before.version)


def test_the_first_rejection_vetoes(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=3)
    handoffs.store.decide(handoff.id, "approved", decided_by="U0A")

    rejected = handoffs.store.decide(handoff.id, "rejected", decided_by="U0B", comment="too much")

    assert rejected.status is Status.REJECTED
    decided = _decided_once(handoffs, handoff.id)
    assert decided.resume_data is not None
    assert decided.resume_data.comment == "too much"
    assert [(v.by, v.outcome) for v in decided.resume_data.votes or []] == [
        ("U0A", "approved"),
        ("U0B", "rejected"),
    ]
    assert decided.resume_data.approvers is None


def test_rejections_needed_can_be_more_than_one(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=3, rejections_required=2)

    assert handoffs.store.decide(handoff.id, "rejected", decided_by="U0A").is_pending
    handoffs.store.decide(handoff.id, "approved", decided_by="U0B")
    handoffs.store.decide(handoff.id, "rejected", decided_by="U0C")

    assert _decided_once(handoffs, handoff.id).status is Status.REJECTED


def test_an_edit_clears_the_approvals_before_it_and_counts_the_editors(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)
    handoffs.store.decide(handoff.id, "approved", decided_by="U0A")
    # A number past float precision, passed on exactly (the store never re-encodes it).
    edited = {"order": "A-1", "amount_usd": 12345678901234567890}

    after_edit = handoffs.store.decide(handoff.id, "approved", decided_by="U0B", edited_args=edited)

    assert after_edit.is_pending
    assert after_edit.proposed_args == edited == after_edit.current_args
    assert [v.by for v in after_edit.live_votes("approved")] == ["U0B"]
    assert [v.cleared for v in after_edit.votes] == [True, False]
    # The first approver approved other arguments: they may vote again, on these.
    handoffs.store.decide(handoff.id, "approved", decided_by="U0A")
    decided = _decided_once(handoffs, handoff.id)
    assert decided.status is Status.APPROVED
    assert decided.resume_data is not None
    assert decided.resume_data.edited_args == edited
    assert decided.resume_data.approvers == ["U0B", "U0A"]
    assert any(e.event == "voted" and e.detail.get("cleared") for e in handoffs.audit(handoff.id))


def test_expiry_with_some_votes_fails_closed_and_lists_them(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2, expires_in=0.5)
    handoffs.store.decide(handoff.id, "approved", decided_by="U0A")
    time.sleep(0.6)

    with pytest.raises(AlreadyDecided):
        handoffs.store.decide(handoff.id, "approved", decided_by="U0B")

    expired = _decided_once(handoffs, handoff.id)
    assert expired.status is Status.EXPIRED
    assert expired.resume_data is not None
    assert [(v.by, v.outcome) for v in expired.resume_data.votes or []] == [("U0A", "approved")]


def test_the_requesters_vote_is_refused(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)

    with pytest.raises(RequesterMayNotVote):
        handoffs.store.decide(handoff.id, "approved", decided_by=REQUESTER)

    assert handoffs.get(handoff.id).votes == []
    assert [e.event for e in handoffs.audit(handoff.id)] == ["created"]


def test_a_cancel_closes_a_quorum_at_once_with_its_votes(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)
    handoffs.store.decide(handoff.id, "approved", decided_by="U0A")

    cancelled = handoffs.store.cancel(handoff.id, cancelled_by="U0ADMIN")

    assert cancelled.status is Status.CANCELLED
    assert cancelled.resume_data is not None and len(cancelled.resume_data.votes or []) == 1


def test_quorum_fields_are_checked(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    # Strict: true, 2.0 or "2" are no counts of people.
    for bad in (0, 26, True, 2.0, "2"):
        with pytest.raises(Exception, match="approvals_required"):
            _approval(handoffs, approvals_required=bad)
    assert handoffs.list_pending().items == []


@pytest.mark.parametrize("spelled", ["u0req", "<@U0REQ>", " <@U0REQ|req> "])
def test_the_requester_spelled_otherwise_is_still_the_requester(redis: Redis, spelled: str) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)

    with pytest.raises(RequesterMayNotVote):
        handoffs.store.decide(handoff.id, "approved", decided_by=spelled)

    assert handoffs.get(handoff.id).votes == []


def test_one_person_spelled_two_ways_votes_once(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)
    handoffs.store.decide(handoff.id, "approved", decided_by="U0ALICE")

    with pytest.raises(AlreadyVoted):
        handoffs.store.decide(handoff.id, "approved", decided_by="<@u0alice>")

    assert handoffs.get(handoff.id).is_pending


@pytest.mark.parametrize("actor", ["system", "SYSTEM", "policy:small-refunds"])
def test_the_stores_own_actors_cannot_be_claimed_by_a_decision(redis: Redis, actor: str) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs)

    with pytest.raises(InvalidDecision, match="kept for what the store decides"):
        handoffs.store.decide(handoff.id, "approved", decided_by=actor)

    assert handoffs.get(handoff.id).is_pending


def test_votes_are_bounded_and_cleared_votes_keep_no_arguments(redis: Redis) -> None:
    """Two voters editing in turn clear each other's vote and vote again: the handoff keeps at
    most MAX_VOTES votes, and only the proposal up for approval holds arguments."""
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=3)
    for turn in range(MAX_VOTES):
        voter = ("U0A", "U0B")[turn % 2]
        handoffs.store.decide(
            handoff.id, "approved", decided_by=voter, edited_args={"amount_usd": turn}
        )

    with pytest.raises(TooManyVotes):
        handoffs.store.decide(handoff.id, "approved", decided_by="U0C")

    raw = redis.hget(handoffs.store.keys.handoff(handoff.id), "votes")
    votes = json.loads(raw)
    assert len(votes) == MAX_VOTES
    assert [v for v in votes if "args" in v] == [votes[-1]]
    assert handoffs.get(handoff.id).is_pending


def test_an_edit_that_changes_nothing_is_a_plain_approval(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)
    handoffs.store.decide(handoff.id, "approved", decided_by="U0A")

    handoffs.store.decide(handoff.id, "approved", decided_by="U0B", edited_args={"amount_usd": 900})

    decided = _decided_once(handoffs, handoff.id)
    assert decided.status is Status.APPROVED
    assert decided.resume_data is not None
    assert decided.resume_data.approvers == ["U0A", "U0B"]  # U0A's vote was not cleared
    assert decided.resume_data.edited_args is None


def test_each_vote_records_the_surface_it_came_through(redis: Redis) -> None:
    """An admin API key may name anyone as the voter: each vote keeps the key (``via``), in
    the votes and in its audit event."""
    handoffs = Handoffs(redis)
    handoff = _approval(handoffs, approvals_required=2)

    handoffs.store.decide(handoff.id, "approved", decided_by="U0A", via="api:ops-console")

    [vote] = handoffs.get(handoff.id).votes
    assert vote.via == "api:ops-console"
    voted = [e for e in handoffs.audit(handoff.id) if e.event == "voted"]
    assert voted[0].detail["via"] == "api:ops-console"
