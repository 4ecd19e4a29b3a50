"""The DECIDE script's own check of the digest an approval was read with against the 128 bits
an approval keeps from its creation (``digest_matches`` in ``store.scripts``): only a whole
``sha256:`` digest whose first 128 bits are those is it. The store always passes a whole one
it computed; the script does not lean on that."""

from __future__ import annotations

import pytest
from redis import Redis

from store.canonical import action_digest
from store.ids import new_handoff_id
from store.models import HandoffRequest, ResumeData, Status
from store.repository import _ALL_TYPES, HandoffStore, StoreConfig

ARGS = {"order_id": "A-7", "amount": 30}
REQUEST = HandoffRequest.model_validate(
    {
        "run_id": "run-lua-digest",
        "thread_id": "t",
        "request_type": "approval",
        "payload": {"kind": "approval", "action": {"name": "issue_refund", "args": ARGS}},
    }
)
DIGEST = action_digest("issue_refund", ARGS)


def _decide_with(store: HandoffStore, handoff_id: str, seen: str) -> str:
    decision = ResumeData(
        decision_id=new_handoff_id(),
        outcome=Status.APPROVED,
        decided_by="U0REVIEWER",
        via="api",
        action_digest=DIGEST,
    )
    args = store._decide_args(
        handoff_id,
        decision,
        event="decided",
        resume=True,
        fitting_types=_ALL_TYPES,
        seen_digest=seen,
    )
    reply = store._scripts["DECIDE"](keys=[store.keys.handoff(handoff_id)], args=args)
    return reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])


@pytest.mark.parametrize(
    "seen",
    [
        DIGEST[:39],  # the prefix and the 128 bits kept, no more
        DIGEST[:39] + "junk",
        DIGEST + "0",
        DIGEST[:39] + "Z" * 32,
    ],
)
def test_a_seen_digest_that_is_no_whole_digest_is_refused_by_the_script(
    redis: Redis, seen: str
) -> None:
    store = HandoffStore(redis, StoreConfig(namespace="luadig"))
    handoff_id = store.create(REQUEST, handoff_id=new_handoff_id()).handoff.id
    assert _decide_with(store, handoff_id, seen) == "changed"
    assert store.get(handoff_id).is_pending


def test_the_whole_digest_is_taken_by_the_script(redis: Redis) -> None:
    store = HandoffStore(redis, StoreConfig(namespace="luadig"))
    handoff_id = store.create(REQUEST, handoff_id=new_handoff_id()).handoff.id
    assert _decide_with(store, handoff_id, DIGEST) == "ok"
    assert store.get(handoff_id).status is Status.APPROVED
