"""The pydantic models: what agents may send, and how a stored handoff is read back."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError
from redis import Redis

from store.ids import new_handoff_id
from store.models import (
    ApprovalPayload,
    AuditEvent,
    CorrectionPayload,
    EscalationPayload,
    Handoff,
    HandoffRequest,
    ProposedAction,
    QuestionPayload,
    RequestType,
    ResumeData,
    Status,
    TaskState,
)
from store.repository import READ_BATCH, HandoffStore

PAYLOADS: dict[str, dict[str, Any]] = {
    "approval": {"kind": "approval", "action": {"name": "refund", "args": {"amount": 30}}},
    "question": {"kind": "question", "question": "Which customer?", "choices": ["A", "B"]},
    "correction": {"kind": "correction", "draft": "Dear customer", "instructions": "be polite"},
    "escalation": {"kind": "escalation", "summary": "Customer threatens legal action"},
}


def request_data(request_type: str, **overrides: Any) -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "thread_id": "t-1",
        "request_type": request_type,
        "payload": PAYLOADS[request_type],
        **overrides,
    }


@pytest.mark.parametrize("request_type", list(PAYLOADS))
def test_each_request_type_accepts_its_own_payload(request_type: str) -> None:
    request = HandoffRequest.model_validate(request_data(request_type))

    assert request.request_type is RequestType(request_type)
    assert request.payload.kind == request_type


@pytest.mark.parametrize(
    ("request_type", "payload_kind"),
    [
        ("approval", "question"),
        ("question", "approval"),
        ("correction", "escalation"),
        ("escalation", "correction"),
    ],
)
def test_payload_kind_must_match_request_type(request_type: str, payload_kind: str) -> None:
    data = request_data(request_type, payload=PAYLOADS[payload_kind])

    with pytest.raises(ValidationError, match="payload"):
        HandoffRequest.model_validate(data)


def test_unknown_request_type_is_rejected() -> None:
    with pytest.raises(ValidationError, match="request_type"):
        HandoffRequest.model_validate({**request_data("question"), "request_type": "bogus"})


def test_unknown_payload_kind_is_rejected() -> None:
    data = request_data("question", payload={"kind": "poll", "question": "?"})

    with pytest.raises(ValidationError):
        HandoffRequest.model_validate(data)


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (HandoffRequest, {**request_data("question"), "priority": "high"}),
        (QuestionPayload, {"question": "?", "urgent": True}),
        (ApprovalPayload, {"action": {"name": "x"}, "note": "n"}),
        (ProposedAction, {"name": "x", "arguments": {}}),
        (CorrectionPayload, {"draft": "d", "tone": "warm"}),
        (EscalationPayload, {"summary": "s", "severity": 1}),
        (ResumeData, {"decision_id": "d", "outcome": "approved", "decided_by": "U1", "x": 1}),
    ],
)
def test_extra_fields_are_forbidden(model: type, data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        model.model_validate(data)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("run_id", ""),
        ("thread_id", ""),
        ("idempotency_key", ""),
        ("expires_in_seconds", 0),
        ("expires_in_seconds", -5),
    ],
)
def test_request_fields_are_validated(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=field):
        HandoffRequest.model_validate({**request_data("question"), field: value})


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "question", "question": ""},
        {"kind": "approval", "action": {"name": ""}},
        {"kind": "correction", "draft": ""},
        {"kind": "escalation", "summary": ""},
    ],
)
def test_payloads_need_their_main_text(payload: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HandoffRequest.model_validate(request_data(payload["kind"], payload=payload))


def test_a_stored_hash_reads_back_with_every_field(redis: Redis) -> None:
    request = HandoffRequest.model_validate(
        request_data(
            "approval",
            context="Customer was double charged",
            channel="C01",
            reviewers=["U01", "S02"],
            requester="U09",
            agent_name="billing-bot",
            resume_target="tests.support.resume_targets:record",
            idempotency_key="k1",
            expires_in_seconds=60,
            metadata={"ticket": 42},
        )
    )
    decision = ResumeData(
        decision_id="d-1",
        outcome=Status.APPROVED,
        decided_by="U1",
        via="slack",
        comment="ok",
        edited_args={"amount": 25},
    )
    fields = {
        "request": request.model_dump_json(),
        "status": "approved",
        "decision": decision.model_dump_json(exclude={"decided_at"}),
        "created_at": "1700000000000",
        "decided_at": "1700000005000",
        "expires_at": "1700000060000",
        "claimed_by": "",
        "claimed_at": "0",
        "deliver_state": "completed",
        "deliver_attempt": "1",
        "deliver_limit": "8",
        "deliver_done_at": "1700000001000",
        "resume_state": "retrying",
        "resume_attempt": "2",
        "resume_limit": "5",
        "resume_error": "timeout",
        "message_refs": json.dumps({"channel": "C1", "ts": "1.2"}),
        "version": "4",
    }

    handoff = _stored(redis, "ho_X", fields)

    assert handoff.id == "ho_X"
    assert handoff.payload == request.payload
    for name in ("run_id", "thread_id", "request_type", "context", "channel", "reviewers"):
        assert getattr(handoff, name) == getattr(request, name), name
    for name in ("requester", "agent_name", "resume_target", "idempotency_key", "metadata"):
        assert getattr(handoff, name) == getattr(request, name), name
    assert handoff.status is Status.APPROVED
    assert not handoff.is_pending
    assert handoff.created_at == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert handoff.decided_at == datetime(2023, 11, 14, 22, 13, 25, tzinfo=UTC)
    assert handoff.expires_at == datetime(2023, 11, 14, 22, 14, 20, tzinfo=UTC)
    assert handoff.claimed_by is None
    assert handoff.claimed_at is None
    assert handoff.resume_data == decision.model_copy(update={"decided_at": handoff.decided_at})
    assert handoff.delivery.state is TaskState.COMPLETED
    assert handoff.delivery.completed_at == datetime(2023, 11, 14, 22, 13, 21, tzinfo=UTC)
    assert handoff.resume.state is TaskState.RETRYING
    assert (handoff.resume.attempt, handoff.resume.max_attempts) == (2, 5)
    assert handoff.resume.last_error == "timeout"
    assert handoff.message_refs == {"channel": "C1", "ts": "1.2"}
    assert handoff.version == 4


def test_a_stored_hash_overrides_the_request_and_keeps_any_text_intact(redis: Redis) -> None:
    # The store's scripts return a handoff as one JSON document in which the hash's fields
    # follow the request's: a reassigned channel or reviewer list and the policy's
    # escalation target must win over what the request said, and free text must survive
    # any character.
    request = HandoffRequest.model_validate(
        request_data("question", channel="C01", reviewers=["U01"], escalate_to="C0REQUEST")
    )
    awkward = 'quote " backslash \\ newline \n tab \t nul \x00 emoji \U0001f600 </script>'
    fields = {
        # The request as stored before unset fields were left out (nulls included).
        "request": request.model_dump_json(),
        "status": "answered",
        "decision": ResumeData(
            decision_id="d-1", outcome=Status.ANSWERED, decided_by="U2", answer=awkward
        ).model_dump_json(),
        "created_at": "1700000000000",
        "decided_at": "1700000005000",
        "channel_override": "C2",
        "reviewers_override": json.dumps(["U2", "S3"]),
        "policy": json.dumps({"escalate_to": "C_POLICY"}),
        "claimed_by": awkward,
        "resume_state": "failed",
        "resume_error": awkward,
        "remind_done": "2",
    }

    handoff = _stored(redis, "ho_X", fields)

    assert (handoff.channel, handoff.reviewers) == ("C2", ["U2", "S3"])
    assert handoff.escalate_to == "C_POLICY"
    assert handoff.claimed_by == awkward
    assert handoff.resume.last_error == awkward
    assert handoff.resume_data is not None
    assert handoff.resume_data.answer == awkward
    assert handoff.resume_data.decided_at == datetime(2023, 11, 14, 22, 13, 25, tzinfo=UTC)
    assert handoff.reminders_sent == 2
    assert handoff.version == 0


def test_stored_handoff_reads_back_as_created(redis: Redis) -> None:
    store = HandoffStore(redis)
    request = HandoffRequest.model_validate(
        request_data("correction", context="draft reply", metadata={"lang": "en"})
    )

    created = store.create(request, handoff_id="ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC").handoff
    reread = store.get(created.id)

    assert reread == created
    assert reread.payload == request.payload
    assert reread.metadata == {"lang": "en"}
    assert reread.status is Status.PENDING
    assert reread.resume_data is None
    assert reread.delivery.state is TaskState.QUEUED
    assert reread.resume.state is TaskState.NONE


def test_many_handoffs_read_back_in_order_without_the_missing(redis: Redis) -> None:
    store = HandoffStore(redis)
    first, second = (
        store.create(
            HandoffRequest.model_validate(request_data("question")), handoff_id=handoff_id
        ).handoff
        for handoff_id in ("ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC", "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BD")
    )
    missing = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BE"

    assert store.get_many([second.id, missing, first.id]) == [second, first]
    assert store.get_many([]) == []


def test_more_handoffs_than_one_script_call_reads_come_back_in_order(redis: Redis) -> None:
    store = HandoffStore(redis)
    request = HandoffRequest.model_validate(request_data("question"))
    created = [
        store.create(request, handoff_id=new_handoff_id()).handoff
        for _ in range(READ_BATCH * 2 + 5)
    ]
    wanted = list(reversed(created))

    assert store.get_many([h.id for h in wanted]) == wanted


def _stored(redis: Redis, handoff_id: str, fields: dict[str, str]) -> Handoff:
    """The handoff read back from a hash holding ``fields``, written as they are."""
    store = HandoffStore(redis)
    redis.hset(store.keys.handoff(handoff_id), mapping=fields)
    return store.get(handoff_id)


def test_audit_event_reads_lua_json_with_empty_detail_array() -> None:
    raw = json.dumps(
        {"event": "claimed", "handoff_id": "ho_X", "actor": "U1", "at": 1700000000000, "detail": []}
    )

    event = AuditEvent.from_json(raw)

    assert event.detail == {}
    assert event.at == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert (event.event, event.handoff_id, event.actor) == ("claimed", "ho_X", "U1")


@pytest.mark.parametrize(
    "target", ["S1> <!channel> <https://evil.example|Approve", "C1 <@U1>", "S 1", "#oncall"]
)
def test_escalate_to_takes_only_a_channel_or_group_id(target: str) -> None:
    # It is posted to and mentioned: anything but an id could ping or link.
    with pytest.raises(ValidationError, match="escalate_to"):
        HandoffRequest.model_validate(request_data("question", escalate_to=target))


# -- Slack ids in the routing fields -------------------------------------------------------

BAD_IDS = [
    pytest.param("S1> <!channel> <https://evil|x>", id="mention-and-link"),
    pytest.param("bob", id="a-name"),
    pytest.param("C1", id="too-short"),
    pytest.param("c0123abcd", id="lowercase"),
    pytest.param("<#C0123>", id="escaped-mention"),
    pytest.param("", id="empty"),
    pytest.param("C0123\n", id="trailing-newline"),
    pytest.param("C" + "0" * 32, id="too-long"),
]
"""Values the routing fields refuse, whatever their kind: none is a Slack id."""

FIELD_ERRORS = {
    "channel": (
        "channel",
        "a Slack channel id (C…/G…/D…) or user id (U…/W…, for their DM with the bot)",
    ),
    "reviewers": ("reviewers.0", "a Slack user id (U…/W…) or user-group id (S…)"),
    "escalate_to": ("escalate_to", "a Slack channel id (C…/G…/D…) or user-group id (S…)"),
}


def _routed(field: str, value: str) -> dict[str, Any]:
    return request_data("question", **{field: [value] if field == "reviewers" else value})


@pytest.mark.parametrize("field", list(FIELD_ERRORS))
@pytest.mark.parametrize("value", BAD_IDS)
def test_routing_fields_take_only_slack_ids(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as refused:
        HandoffRequest.model_validate(_routed(field, value))

    [error] = refused.value.errors()
    where, what = FIELD_ERRORS[field]
    assert ".".join(str(part) for part in error["loc"]) == where
    assert error["type"] == "slack_id"
    # Said plainly, without pydantic's "Value error," prefix: what was given, what it
    # should be, and how an id looks.
    assert error["msg"].startswith(f"{value!r} is not {what}, such as ")
    assert "a capital letter, then 2 to 31 capitals or digits" in error["msg"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("channel", "C0123ABCD"),
        ("channel", "G0PRIVATE"),
        ("channel", "D0DIRECT"),
        ("channel", "C" + "0" * 31),  # 32 characters, the longest taken
        ("reviewers", "U0ALICE"),
        ("reviewers", "W0GRIDUSER"),
        ("reviewers", "S0FINANCE"),
        ("escalate_to", "C0ONCALL"),
        ("escalate_to", "S0ONCALL"),
    ],
)
def test_routing_fields_take_channel_user_and_group_ids(field: str, value: str) -> None:
    request = HandoffRequest.model_validate(_routed(field, value))

    assert getattr(request, field) == ([value] if field == "reviewers" else value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("channel", "S0TEAM"),
        ("reviewers", "C0APPROVALS"),  # a channel decides nothing
        ("escalate_to", "U0ALICE"),  # escalation goes to a channel or a group
    ],
)
def test_routing_fields_refuse_an_id_of_the_wrong_kind(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(FIELD_ERRORS[field][1])):
        HandoffRequest.model_validate(_routed(field, value))


def test_a_requester_may_be_any_name_of_bounded_length() -> None:
    # Not only Slack users ask: a name is shown escaped, never mentioned (bot.mrkdwn).
    named = HandoffRequest.model_validate(request_data("question", requester="billing <bot>"))

    assert named.requester == "billing <bot>"
    with pytest.raises(ValidationError, match="requester"):
        HandoffRequest.model_validate(request_data("question", requester="x" * 257))


def test_a_handoff_stored_before_ids_were_checked_still_reads_back(redis: Redis) -> None:
    # Records written by an older version may hold any text in the routing fields: reading
    # them goes through the stored model, which checks nothing, so none is stranded.
    old_request = {
        **request_data("question"),
        "context": "",
        "channel": "#approvals",
        "reviewers": ["bob", "S1> <!channel> <https://evil|x>"],
        "requester": "<!here>",
        "escalate_to": "oncall",
    }
    fields = {
        "request": json.dumps(old_request),
        "status": "pending",
        "created_at": "1",
        "policy": json.dumps({"escalate_to": "oncall"}),  # where the store keeps the target
    }

    handoff = _stored(redis, "ho_X", fields)

    assert handoff.channel == "#approvals"
    assert handoff.reviewers == ["bob", "S1> <!channel> <https://evil|x>"]
    assert (handoff.requester, handoff.escalate_to) == ("<!here>", "oncall")


def test_half_a_utf16_pair_in_request_or_decision_text_is_stored_as_a_replacement_character() -> (
    None
):
    """JSON may carry a lone surrogate ("\\ud83d", an emoji cut in two) that no UTF-8 encoder
    writes; the models replace it, so storing never fails (Socket Mode skips the HTTP gate)."""
    request = HandoffRequest.model_validate(
        {
            "run_id": "r",
            "thread_id": "t",
            "request_type": "question",
            "context": "half \ud83d",
            "payload": {"kind": "question", "question": "Which \ude00?"},
            "metadata": {"k\ud800": ["v\udfff"]},
        }
    )
    decision = ResumeData(
        decision_id="d", outcome="rejected", decided_by="U0ALICE", comment="no \ud83d"
    )

    assert request.context == "half \ufffd"
    assert request.metadata == {"k\ufffd": ["v\ufffd"]}
    assert "\ufffd" in request.model_dump_json()
    assert decision.comment == "no \ufffd"
    decision.model_dump_json().encode()  # no UnicodeEncodeError
