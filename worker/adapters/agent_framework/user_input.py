"""What an Agent Framework user-input request becomes, and what a decision sends back.

Agent Framework stops a run for a person with ``user_input_request`` contents, in agent
responses (``AgentResponse.user_input_requests``) and, from agents inside a workflow, as the
data of ``request_info`` events. Two kinds reach a person through the adapters:

- ``function_approval_request``: a call to a tool with ``approval_mode="always_require"``,
  answered with ``request.to_function_approval_response(approved)``: an approval handoff.
- ``function_call`` of a declaration-only tool (``FunctionTool(func=None)``, such as
  ``ask_human_tool()``): the caller supplies the result, answered with a
  ``function_result`` content: a question handoff.

Anything else (an OAuth consent, a computer-use call) is refused with ``UnsupportedRequest``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent_framework import Content

from store.exceptions import HandoffError
from store.models import Handoff, Status
from worker.adapters.pauses import refusal_message


class UnsupportedRequest(HandoffError, TypeError):
    """A run stopped for a kind of user input the adapter cannot hand to a person."""


class RequestKind(StrEnum):
    """What a person is asked."""

    APPROVAL = "approval"  # run this tool call?
    QUESTION = "question"  # what should this declaration-only tool return?


@dataclass(frozen=True)
class Asked:
    """One user-input request, as a handoff shows it."""

    kind: RequestKind
    request_id: str
    tool: str
    args: dict[str, Any]
    occurrence: str = ""
    """The framework's id of the call asked about: the request's own id, except for a
    replacement approval request, which asks again about the same call."""
    hosted: bool = False
    """A provider-hosted tool (its arguments cannot be edited here)."""

    @property
    def question(self) -> str:
        """The question of a question request: the tool's ``question`` argument, or the
        call itself for another declaration-only tool."""
        question = self.args.get("question")
        if isinstance(question, str) and question.strip():
            return question
        return f"What should {self.tool}({json.dumps(self.args, default=str)}) return?"

    @property
    def choices(self) -> list[str] | None:
        """The question's suggested answers, when the tool call gave some."""
        choices = self.args.get("choices")
        if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
            return choices
        return None


def is_user_input(request: Any) -> bool:
    """Whether ``request`` is a user-input request content this module turns into a
    handoff (anything else is not Agent Framework's to answer)."""
    return isinstance(request, Content) and request.type in (
        "function_approval_request",
        "function_call",
    )


def asked(request: Content) -> Asked:
    """What ``request`` asks of a person; ``UnsupportedRequest`` for other kinds."""
    if request.type == "function_approval_request" and request.function_call is not None:
        call = request.function_call
        request_id = _request_id(request)
        return Asked(
            RequestKind.APPROVAL,
            request_id,
            call.name or "tool",
            _arguments(call),
            occurrence=call.id or request_id,
            hosted=bool(call.hosted),
        )
    if request.type == "function_call" and request.user_input_request:
        request_id = _request_id(request)
        name = request.name or "tool"
        return Asked(
            RequestKind.QUESTION, request_id, name, _arguments(request), occurrence=request_id
        )
    raise UnsupportedRequest(
        f"the run stopped for a {request.type!r} request, which the adapter cannot hand to a "
        "person (it hands off tool approvals and calls to declaration-only tools)"
    )


def approval(request: Content, approved: bool) -> Content:
    """The framework's answer to an approval request."""
    return request.to_function_approval_response(approved)


def tool_result(request: Content, result: str) -> Content:
    """The result of a declaration-only tool call, as the caller supplies it."""
    return Content.from_function_result(call_id=request.call_id or "", id=request.id, result=result)


def answer_text(member: Handoff) -> str:
    """What a question handoff gives the model as the tool's result: the answer, or why
    there is none."""
    decision = member.resume_data
    if member.status is Status.ANSWERED and decision is not None and decision.answer is not None:
        return decision.answer
    return refusal_message(member, question=True)


def canonical(args: Any) -> str:
    """Arguments as comparable JSON text (key order ignored)."""
    return json.dumps(args, sort_keys=True, default=str)


def _request_id(request: Content) -> str:
    if not request.id:
        raise UnsupportedRequest(f"a {request.type!r} request without an id cannot be answered")
    return request.id


def _arguments(call: Content) -> dict[str, Any]:
    parsed = call.parse_arguments()
    return dict(parsed) if parsed else {}
