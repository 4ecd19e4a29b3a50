"""Approvals bound to the exact action: the decision records the SHA-256 of the RFC 8785
JSON of the action's name and approved arguments; an approval read before another voter's
edit is refused; and whoever executes checks it first: a worker refuses (for good, audited)
to resume an approval whose stored arguments were changed after it was approved, and
``@require_approval`` refuses to run what the people did not approve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from redis import Redis

from store.approved_action import check_approved_action
from store.canonical import action_digest, canonical_json
from store.exceptions import ActionDigestMismatch, ArgumentsChanged
from store.keys import body_fields, body_string
from store.models import Status, TaskState
from tests.conftest import ROOT, wait_until
from tests.support import resume_targets
from worker import require_approval
from worker.client import Handoffs


def _tamper(
    redis: Redis, handoffs: Handoffs, handoff_id: str, *, amount: int, digest_too: bool = False
) -> None:
    """Change the stored request's amount (and, when ``digest_too``, its stored digest)."""
    key = handoffs.store.keys.handoff_body(handoff_id)  # the long fields (store.keys)
    body = body_fields(redis.get(key))
    stored = json.loads(body["request"])
    stored["payload"]["action"]["args"]["amount"] = amount
    body["request"] = json.dumps(stored).encode()
    if digest_too:
        body["args_digest"] = action_digest("refund", {"amount": amount}).encode()
    redis.set(key, body_string(body))


def test_the_digest_is_sha256_of_rfc8785_name_and_args() -> None:
    # Key order and number spelling do not matter; the canonical form is RFC 8785's.
    assert canonical_json({"b": 1.0, "a": [True, None]}) == b'{"a":[true,null],"b":1}'
    assert action_digest("refund", {"b": 2, "a": 1}) == action_digest("refund", {"a": 1, "b": 2})
    assert action_digest("refund", {"a": 1}) != action_digest("refund", {"a": True})
    big = action_digest("refund", {"a": 2**60})  # beyond doubles: bound as its digits
    assert big.startswith("sha256:") and big != action_digest("refund", {"a": 2**60 + 1})


@pytest.mark.parametrize("edge", [2**53, -(2**53), 2**53 - 1])
def test_integers_at_the_edge_of_doubles_are_bound(redis: Redis, edge: int) -> None:
    """RFC 8785 writes integers only up to 2**53 - 1: 2**53 itself is bound as its digits, so
    an approval holding it is created, approved and its digest checked (it was a 500)."""
    handoffs = Handoffs(redis)
    handoff = handoffs.request_approval(
        run_id="r", thread_id="t", action="transfer", args={"n": edge}
    )
    approved = handoffs.decide(handoff.id, "approved", by="U0A", edited_args={"m": -edge})
    check_approved_action(approved)
    assert approved.resume_data and approved.resume_data.edited_args == {"n": edge, "m": -edge}


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"a": 2**60}, {"a": {"integer": str(2**60)}}),
        ({"a": {"object": {"integer": "1"}}}, {"a": {"integer": "1"}}),
        ({"a": {"object": 1}}, {"a": {"object": {"object": 1}}}),
    ],
)
def test_no_two_different_arguments_share_a_digest(one: dict, other: dict) -> None:
    """A wide integer is bound in a wrapped form, and an object that looks like that form is
    wrapped too, so no argument can pass for another (swapping one for the other after an
    approval is caught)."""
    assert action_digest("pay", one) != action_digest("pay", other)
    assert action_digest("pay", {"plain": {"a": 1}}) == action_digest("pay", {"plain": {"a": 1}})


def test_a_decision_records_the_digest_of_what_was_approved(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    plain = handoffs.request_approval(run_id="r", thread_id="t", action="refund", args={"n": 3})
    edited = handoffs.request_approval(run_id="r", thread_id="t", action="refund", args={"n": 3})

    as_asked = handoffs.store.decide(plain.id, Status.APPROVED, decided_by="U0A")
    with_edit = handoffs.store.decide(
        edited.id, Status.APPROVED, decided_by="U0A", edited_args={"n": 2}
    )

    assert as_asked.resume_data and with_edit.resume_data
    assert as_asked.resume_data.action_digest == action_digest("refund", {"n": 3})
    assert with_edit.resume_data.action_digest == action_digest("refund", {"n": 2})
    check_approved_action(as_asked)
    check_approved_action(with_edit)


def test_arguments_changed_in_redis_before_the_decision_cannot_be_approved(
    redis: Redis,
) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.request_approval(
        run_id="r", thread_id="t", action="refund", args={"amount": 30}
    )
    _tamper(redis, handoffs, handoff.id, amount=3000)

    with pytest.raises(ArgumentsChanged):
        handoffs.decide(handoff.id, "approved", by="U0A")
    assert handoffs.get(handoff.id).status is Status.PENDING


def test_an_approval_read_before_another_voters_edit_is_refused(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.request_approval(
        run_id="r", thread_id="t", action="refund", args={"n": 3}, approvals_required=2
    )
    read_before = handoffs.get(handoff.id)
    handoffs.store.decide(handoff.id, Status.APPROVED, decided_by="U0A", edited_args={"n": 9})

    with pytest.raises(ArgumentsChanged):
        handoffs.store.decide(handoff.id, Status.APPROVED, decided_by="U0B", current=read_before)

    assert [v.by for v in handoffs.get(handoff.id).live_votes("approved")] == ["U0A"]


def test_a_worker_refuses_an_approval_whose_stored_arguments_changed_after_it(
    redis: Redis, redis_url: str
) -> None:
    handoffs = Handoffs(redis)
    handoff = handoffs.request_approval(
        run_id="r",
        thread_id="t",
        action="refund",
        args={"amount": 30},
        resume="tests.support.resume_targets:record",
    )
    handoffs.store.decide(handoff.id, Status.APPROVED, decided_by="U0A")
    # Someone with write access to Redis raises the amount after the approval.
    _tamper(redis, handoffs, handoff.id, amount=3000)

    worked = subprocess.run(
        [sys.executable, "-m", "bot.cli", "worker", "--burst"],
        env={**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert worked.returncode == 0, worked.stderr
    resume = handoffs.get(handoff.id).resume
    assert resume.state is TaskState.FAILED and resume.attempt == 1  # for good, no retries
    assert "not the one approved" in (resume.last_error or "")
    refused = [e for e in handoffs.audit(handoff.id) if e.event == "action_refused"]
    assert len(refused) == 1 and refused[0].detail["approved"] == action_digest(
        "refund", {"amount": 30}
    )
    assert redis.lrange(resume_targets.COMPLETED, 0, -1) == []  # the target never ran


def test_require_approval_refuses_to_run_what_was_not_approved(redis: Redis) -> None:
    handoffs = Handoffs(redis)
    ran: list[int] = []

    @require_approval(handoffs=handoffs, timeout=20)
    def refund(amount: int) -> None:
        ran.append(amount)

    def tamper_then_approve() -> None:
        # The stored request and its digest are changed before the person looks: they
        # approve 3000, while the call in this process would run with 30.
        pending = wait_until(lambda: handoffs.list_pending().items)
        _tamper(redis, handoffs, pending[0].id, amount=3000, digest_too=True)
        handoffs.decide(pending[0].id, "approved", by="U0A")

    reviewer = threading.Thread(target=tamper_then_approve, daemon=True)
    reviewer.start()
    with pytest.raises(ActionDigestMismatch):
        refund(30)
    reviewer.join(timeout=10)

    assert ran == []
