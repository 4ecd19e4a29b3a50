"""What a workflow's ``ctx.request_info(request_data, response_type)`` becomes, and the
response its executor's ``@response_handler`` receives.

The request's shape picks the handoff; the response type picks what comes back:

=========================================  ===========  ==================================
``request_data``                           handoff      ``response_type``
=========================================  ===========  ==================================
a ``str``, or anything with ``question``   question     ``str`` (the answer) or
(and optionally ``choices``)                            ``HumanReply``
anything with ``draft`` (and optionally    correction   ``HumanReply``
``instructions``)
anything with ``action`` and ``args``      approval     ``HumanReply``
(and optionally ``description``)
an agent's request (``Content``: a tool    approval or  ``Content`` (as ``AgentExecutor``
approval, a declaration-only tool call)    question     asks)
anything else                              question     ``str`` or ``HumanReply``
                                           showing it
=========================================  ===========  ==================================

"Anything with" means an attribute or a mapping key: the adapter's own ``Question``,
``Correction`` and ``Approval`` dataclasses, or yours. A ``str`` response cannot tell a
rejected draft or action from an accepted one, so corrections and approvals need
``HumanReply``; a ``str`` answer to a question that nobody answered says why instead.

Checkpoint storages restore only the types they are allowed to (``FileCheckpointStorage``):
the adapter registers its own with ``register_checkpoint_type``; register yours too.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from agent_framework import Content, register_checkpoint_type
from pydantic_core import to_jsonable_python

from store.models import CorrectionPayload, Handoff, RequestType, Status
from worker.adapters.agent_framework import user_input
from worker.adapters.agent_framework.user_input import RequestKind, UnsupportedRequest
from worker.adapters.pauses import decision_note, edited_args, proposed_action

logger = logging.getLogger(__name__)

SHOWN_VALUE_CHARS = 2_000
"""Longest rendering of a request value that is neither a question nor a draft."""


@dataclass
class Question:
    """Ask a person: ``await ctx.request_info(Question("Which card?"), str)``."""

    question: str
    choices: list[str] | None = None


@dataclass
class Correction:
    """Have a person fix a draft: ``await ctx.request_info(Correction(draft), HumanReply)``."""

    draft: str
    instructions: str | None = None


@dataclass
class Approval:
    """Have a person approve an action, possibly editing its arguments:
    ``await ctx.request_info(Approval("refund", {"order_id": "A-1"}), HumanReply)``."""

    action: str
    args: dict[str, Any] = field(default_factory=dict)
    description: str | None = None


@dataclass
class HumanReply:
    """A person's reply, as a ``@response_handler`` receives it for ``HumanReply`` requests.

    ``type``: ``"answer"`` (a question answered, ``text``), ``"approve"`` (a draft or an
    action accepted as it was: ``text`` or ``args``), ``"edit"`` (accepted with changes:
    the corrected ``text`` or the whole ``args`` as approved), ``"reject"`` (refused,
    expired, cancelled or undeliverable: ``message`` says why). ``handoff_id`` is a stable
    idempotency key for the handler's side effects.
    """

    type: Literal["answer", "approve", "edit", "reject"]
    text: str | None = None
    args: dict[str, Any] | None = None
    message: str | None = None
    outcome: str = ""
    decided_by: str | None = None
    handoff_id: str = ""

    @property
    def accepted(self) -> bool:
        """Whether the person answered or approved (with or without changes)."""
        return self.type != "reject"


for _type in (Question, Correction, Approval, HumanReply):
    register_checkpoint_type(_type)


class RequestShape(StrEnum):
    """What a workflow request is, for a person."""

    QUESTION = "question"
    CORRECTION = "correction"
    APPROVAL = "approval"
    AGENT_APPROVAL = "agent_approval"
    AGENT_QUESTION = "agent_question"


class ReplyType(StrEnum):
    """What the executor's response handler takes."""

    TEXT = "text"  # str
    REPLY = "reply"  # HumanReply
    CONTENT = "content"  # Content, for an agent's request


@dataclass(frozen=True)
class WorkflowRequest:
    """One pending ``request_info`` request, as a handoff shows it."""

    request_id: str
    executor_id: str
    shape: RequestShape
    reply: ReplyType
    text: str
    """The question, or the draft."""
    choices: list[str] | None = None
    instructions: str | None = None
    action: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    agent_request: dict[str, Any] | None = None
    """An agent's request content (``Content.to_dict()``), which its answer is made from."""


def classify(request_id: str, executor_id: str, data: Any, response_type: Any) -> WorkflowRequest:
    """What the request asks of a person; ``UnsupportedRequest`` (naming the request and
    what would work) when its response type cannot carry the decision."""
    where = f"request {request_id} of executor {executor_id!r}"
    if user_input.is_user_input(data):
        asked = user_input.asked(data)
        content = data.to_dict()
        if asked.kind is RequestKind.APPROVAL:
            return WorkflowRequest(
                request_id,
                executor_id,
                RequestShape.AGENT_APPROVAL,
                ReplyType.CONTENT,
                "",
                action=asked.tool,
                args=asked.args,
                agent_request=content,
            )
        return WorkflowRequest(
            request_id,
            executor_id,
            RequestShape.AGENT_QUESTION,
            ReplyType.CONTENT,
            asked.question,
            choices=asked.choices,
            agent_request=content,
        )
    reply = _reply_type(response_type, where)
    draft = _field(data, "draft")
    action = _field(data, "action")
    if isinstance(draft, str) or (isinstance(action, str) and _field(data, "args") is not None):
        if reply is not ReplyType.REPLY:
            raise UnsupportedRequest(
                f"{where} asks for a correction or an approval with response_type str; use "
                "HumanReply (worker.adapters.agent_framework.replies) so the handler can tell "
                "a refusal from an answer"
            )
        if isinstance(draft, str):
            instructions = _field(data, "instructions")
            return WorkflowRequest(
                request_id,
                executor_id,
                RequestShape.CORRECTION,
                reply,
                draft,
                instructions=instructions if isinstance(instructions, str) else None,
            )
        args = to_jsonable_python(_field(data, "args"))
        if not isinstance(args, dict):
            raise UnsupportedRequest(f"{where}: args must be a mapping, not {type(args).__name__}")
        description = _field(data, "description")
        return WorkflowRequest(
            request_id,
            executor_id,
            RequestShape.APPROVAL,
            reply,
            "",
            action=str(action),
            args=args,
            description=description if isinstance(description, str) else None,
        )
    question = data if isinstance(data, str) else _field(data, "question")
    choices = _field(data, "choices")
    if not isinstance(question, str) or not question.strip():
        question = "The workflow asks for input:\n" + _shown(data)
    if not (isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices)):
        choices = None
    return WorkflowRequest(request_id, executor_id, RequestShape.QUESTION, reply, question, choices)


def response(
    shape: RequestShape, reply: ReplyType, agent_request: Content | None, member: Handoff
) -> Any:
    """What the executor's response handler receives for a decided handoff
    (``agent_request``: the agent's request content, for ``ReplyType.CONTENT``)."""
    if reply is ReplyType.CONTENT:
        if agent_request is None:
            raise ValueError(f"handoff {member.id} answers an agent's request it does not hold")
        if shape is RequestShape.AGENT_QUESTION:
            return user_input.tool_result(agent_request, user_input.answer_text(member))
        edited = edited_args(member) if member.status is Status.APPROVED else None
        if edited is not None:
            # The agent inside the workflow runs the arguments it was shown, and its answer
            # is a bare approval content: the edit is refused, never run as the old call.
            logger.warning(
                "refusing %s: the reviewer changed its arguments to %s, which an agent's "
                "approval in a workflow cannot take",
                proposed_action(member).name,
                json.dumps(edited, default=str),
                extra={"handoff_id": member.id, "run_id": member.run_id},
            )
        approved = member.status is Status.APPROVED and edited is None
        return user_input.approval(agent_request, approved)
    if reply is ReplyType.TEXT:
        return user_input.answer_text(member)
    return human_reply(member)


def human_reply(member: Handoff) -> HumanReply:
    """The ``HumanReply`` of a decided handoff."""
    decision = member.resume_data
    base: dict[str, Any] = {
        "outcome": member.status.value,
        "decided_by": decision.decided_by if decision else None,
        "handoff_id": member.id,
    }
    if member.status is Status.ANSWERED and decision is not None:
        return HumanReply("answer", text=decision.answer, **base)
    if member.status is Status.APPROVED and member.request_type is RequestType.APPROVAL:
        edited = edited_args(member)
        if edited is not None:
            return HumanReply("edit", args=edited, **base)
        return HumanReply("approve", args=proposed_action(member).args, **base)
    if member.status is Status.APPROVED and isinstance(member.payload, CorrectionPayload):
        corrected = decision.corrected_draft if decision else None
        if corrected is not None and corrected != member.payload.draft:
            return HumanReply("edit", text=corrected, **base)
        return HumanReply("approve", text=member.payload.draft, **base)
    return HumanReply("reject", message=decision_note(member), **base)


def _reply_type(response_type: Any, where: str) -> ReplyType:
    if response_type is str:
        return ReplyType.TEXT
    if isinstance(response_type, type) and issubclass(response_type, HumanReply):
        return ReplyType.REPLY
    name = getattr(response_type, "__name__", repr(response_type))
    raise UnsupportedRequest(
        f"{where} expects a {name} response; a person's reply can be a str (questions) or a "
        "HumanReply (worker.adapters.agent_framework.replies): use one of those"
    )


def _field(data: Any, name: str) -> Any:
    if isinstance(data, dict):
        return data.get(name)
    return getattr(data, name, None)


def _shown(data: Any) -> str:
    try:
        text = json.dumps(to_jsonable_python(data), indent=1, default=str)
    except (TypeError, ValueError):
        text = repr(data)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 1] + "…"


__all__ = [
    "Approval",
    "Correction",
    "HumanReply",
    "Question",
    "ReplyType",
    "RequestShape",
    "WorkflowRequest",
    "classify",
    "human_reply",
    "response",
]
