"""HumanLayer-compatible endpoints (``/humanlayer/v1``): code written against the
``humanlayer`` 0.7 SDK (``@hl.require_approval()``, ``hl.human_as_tool()``) runs unchanged
with ``HUMANLAYER_API_BASE`` pointed here and ``HUMANLAYER_API_KEY`` one of our keys.

What the SDK calls for function calls (approvals) and human contacts (questions): create, and
read the status it polls. A function call becomes an approval (its ``fn`` the action, its
``kwargs`` the editable arguments, its Slack channel and allowed responders the channel and
reviewers, its reject options shown to the reviewer); a human contact becomes a question (its
response options the choices). The SDK's ``call_id`` is the idempotency key, so its retries
ask once. The status is filled from our decision, failing closed: an expired, cancelled or
undeliverable approval reads as not approved, with why.

The bodies are our own models of the fields the SDK sends and reads (extra fields are kept,
as its later versions add some).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bot.api.auth import Key
from bot.api.problems import ApiProblem
from bot.api.schemas import CreateHandoff
from store.api_keys import ApiKey
from store.decoding import json_value_problem, well_formed
from store.models import Handoff, ProposedAction, RequestType, Status
from store.repository import Created, HandoffStore

PREFIX = "/humanlayer/v1"
CALL_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,120}$"
"""A call id as it can be read back in a URL path (the SDK's are letters, digits, dashes)."""
_METADATA = "humanlayer"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Body(_Open):
    """A whole body the SDK sends: storable as it is, or refused (422) saying why."""

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        # Kept whole in the handoff's metadata, so held to what the store takes: no NaN or
        # infinity (stored as null, silently), no nesting past what the encoders take, and
        # lone surrogates as U+FFFD.
        if problem := json_value_problem(data):
            raise ValueError(problem)
        return well_formed(data)


class SlackChannel(_Open):
    channel_or_user_id: str = Field(min_length=1, max_length=64)
    context_about_channel_or_user: str | None = None
    allowed_responder_ids: list[str] | None = None


class ContactChannel(_Open):
    slack: SlackChannel | None = None


class ResponseOption(_Open):
    name: str = Field(min_length=1, max_length=200)
    title: str | None = None
    description: str | None = None


class FunctionCallSpec(_Open):
    fn: str = Field(min_length=1, max_length=200)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    channel: ContactChannel | None = None
    reject_options: list[ResponseOption] | None = None
    state: dict[str, Any] | None = None


class FunctionCallStatus(_Open):
    requested_at: datetime | None = None
    responded_at: datetime | None = None
    approved: bool | None = None
    comment: str | None = None
    reject_option_name: str | None = None


class FunctionCall(_Body):
    run_id: str = Field(min_length=1, max_length=256)
    call_id: str = Field(pattern=CALL_ID_PATTERN)
    spec: FunctionCallSpec
    status: FunctionCallStatus | None = None


class HumanContactSpec(_Open):
    msg: str = Field(min_length=1)
    subject: str | None = None
    channel: ContactChannel | None = None
    response_options: list[ResponseOption] | None = None
    state: dict[str, Any] | None = None


class HumanContactStatus(_Open):
    requested_at: datetime | None = None
    responded_at: datetime | None = None
    response: str | None = None
    response_option_name: str | None = None


class HumanContact(_Body):
    run_id: str = Field(min_length=1, max_length=256)
    call_id: str = Field(pattern=CALL_ID_PATTERN)
    spec: HumanContactSpec
    status: HumanContactStatus | None = None


Create = Callable[[CreateHandoff, ApiKey, str | None], Created]
Visible = Callable[[str, ApiKey], Handoff]

_CLOSED = {
    Status.EXPIRED: "the request expired before anyone decided",
    Status.CANCELLED: "the request was cancelled",
    Status.UNDELIVERABLE: "the request could not be delivered to Slack",
}


def _routing(channel: ContactChannel | None) -> dict[str, Any]:
    slack = channel.slack if channel else None
    if slack is None:
        return {}
    return {"channel": slack.channel_or_user_id, "reviewers": slack.allowed_responder_ids or []}


def install_humanlayer(
    app: FastAPI, *, store: HandoffStore, create: Create, visible: Visible
) -> None:
    """Add the HumanLayer-compatible routes to ``app``."""
    router = APIRouter(prefix=PREFIX, tags=["HumanLayer compatibility"])

    def find(key: ApiKey, kind: str, call_id: str) -> Handoff:
        scoped = f"{key.name}/{kind}:{call_id}"
        handoff_id = store.created_under(scoped)
        handoff = visible(handoff_id, key) if handoff_id is not None else None
        # A handoff made over /v1 with a look-alike idempotency key is not a HumanLayer call.
        if handoff is None or not _is_call(handoff, kind):
            raise ApiProblem(404, f"no {kind.replace('-', ' ')} with call_id {call_id!r}")
        if not handoff.is_pending:
            # As /v1 does: no decision the replicas lack (503, try again), see
            # HandoffStore.confirm_replicated.
            store.confirm_replicated(handoff.id)
        return handoff

    @router.post("/function_calls", response_model=FunctionCall)
    def add_function_call(call: FunctionCall, key: Key) -> FunctionCall:
        """A function call to approve: an approval handoff."""
        options = call.spec.reject_options or []
        shown = "\n".join(
            f"• {o.title or o.name}" + (f": {o.description}" if o.description else "")
            for o in options
        )
        context = f"The agent wants to call `{call.spec.fn}`." + (
            f"\nIf you reject it, say which: \n{shown}" if shown else ""
        )
        body = CreateHandoff(
            request_type=RequestType.APPROVAL,
            run_id=call.run_id,
            thread_id=call.call_id,
            context=context,
            action=ProposedAction(name=call.spec.fn, args=call.spec.kwargs),
            metadata={_METADATA: {"call": call.model_dump(mode="json")}},
            **_routing(call.spec.channel),
        )
        handoff = create(body, key, f"function-call:{call.call_id}").handoff
        return _function_call(handoff)

    @router.get("/function_calls/{call_id}", response_model=FunctionCall)
    def get_function_call(call_id: str, key: Key) -> FunctionCall:
        return _function_call(find(key, "function-call", call_id))

    @router.post("/contact_requests", response_model=HumanContact)
    def add_contact_request(contact: HumanContact, key: Key) -> HumanContact:
        """A question for a person: a question handoff."""
        options = contact.spec.response_options or []
        body = CreateHandoff(
            request_type=RequestType.QUESTION,
            run_id=contact.run_id,
            thread_id=contact.call_id,
            context=contact.spec.subject or "",
            question=contact.spec.msg,
            choices=[o.title or o.name for o in options] or None,
            metadata={_METADATA: {"contact": contact.model_dump(mode="json")}},
            **_routing(contact.spec.channel),
        )
        handoff = create(body, key, f"human-contact:{contact.call_id}").handoff
        return _human_contact(handoff)

    @router.get("/contact_requests/{call_id}", response_model=HumanContact)
    def get_contact_request(call_id: str, key: Key) -> HumanContact:
        return _human_contact(find(key, "human-contact", call_id))

    app.include_router(router)


def _is_call(handoff: Handoff, kind: str) -> bool:
    """``handoff`` holds a HumanLayer call of ``kind`` as these routes stored it."""
    stored = handoff.metadata.get(_METADATA)
    model, field = (FunctionCall, "call") if kind == "function-call" else (HumanContact, "contact")
    if not isinstance(stored, dict):
        return False
    try:
        model.model_validate(stored.get(field))
    except ValidationError:
        return False
    return True


def _function_call(handoff: Handoff) -> FunctionCall:
    call = FunctionCall.model_validate(handoff.metadata[_METADATA]["call"])
    decision = handoff.resume_data
    status = FunctionCallStatus(requested_at=handoff.created_at)
    if decision is not None:
        status.responded_at = handoff.decided_at
        status.approved = decision.outcome is Status.APPROVED
        status.comment = decision.comment or _CLOSED.get(decision.outcome)
        edited = decision.edited_args
        # Compared as JSON (RFC 8785), where true is not 1 as it is to Python's ==.
        if status.approved and edited is not None and not _same_json(edited, call.spec.kwargs):
            # The SDK runs the function with its own kwargs, whatever we answer: an approval
            # of other arguments must not run the original ones. Fail closed, and say what
            # the reviewer approved so the agent can ask again with it.
            status.approved = False
            status.comment = (
                "approved only with other arguments, so the original call was not made: "
                f"{json.dumps(edited, sort_keys=True)}"
                + (f" ({decision.comment})" if decision.comment else "")
            )
    call.status = status
    return call


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _human_contact(handoff: Handoff) -> HumanContact:
    contact = HumanContact.model_validate(handoff.metadata[_METADATA]["contact"])
    decision = handoff.resume_data
    status = HumanContactStatus(requested_at=handoff.created_at)
    if decision is not None:
        status.responded_at = handoff.decided_at
        # The SDK polls until a response is there: a closed question answers why.
        status.response = decision.answer or _CLOSED.get(decision.outcome) or decision.comment
        options = contact.spec.response_options or []
        status.response_option_name = next(
            (o.name for o in options if decision.answer in (o.name, o.title)), None
        )
    contact.status = status
    return contact
