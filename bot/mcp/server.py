"""The MCP server: one tool per kind of handoff, plus ``get_handoff`` and the agent hosts'
``permission_prompt`` contract. Each tool creates its handoff over the HTTP API, then holds
the call with long-polls (``?wait=``) up to its timeout, sending progress notifications so the
host does not time the call out, and returns the decision, or ``pending`` with the id for a
later ``get_handoff``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal
from urllib.parse import quote

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from store.models import MAX_QUORUM

POLL_SECONDS = 25.0
"""Longest single long-poll (the API holds up to 60 s); progress goes out between polls."""
DEFAULT_TIMEOUT_SECONDS = 600.0
MAX_TIMEOUT_SECONDS = 3600.0


class HandoffResult(BaseModel):
    """What the person decided (or ``pending`` when the tool's time was up)."""

    id: str
    status: Literal[
        "pending", "approved", "rejected", "answered", "expired", "cancelled", "undeliverable"
    ]
    request_type: str
    decided_by: str | None = None
    comment: str | None = Field(default=None, description="The reviewer's reason or note.")
    answer: str | None = None
    answer_data: dict[str, Any] | None = Field(
        default=None, description="The typed answer, for a question asked with answer_schema."
    )
    edited_args: dict[str, Any] | None = None
    corrected_draft: str | None = None
    approvers: list[str] | None = Field(
        default=None, description="Everyone whose approval counted, when several were needed."
    )

    @classmethod
    def of(cls, handoff: dict[str, Any]) -> HandoffResult:
        decision = handoff.get("resume_data") or {}
        return cls(
            id=handoff["id"],
            status=handoff["status"],
            request_type=handoff["request_type"],
            decided_by=decision.get("decided_by"),
            comment=decision.get("comment"),
            answer=decision.get("answer"),
            answer_data=decision.get("answer_data"),
            edited_args=decision.get("edited_args"),
            corrected_draft=decision.get("corrected_draft"),
            approvers=decision.get("approvers"),
        )


class Api:
    """The HTTP API, as the tools call it."""

    def __init__(self, url: str, key: str, *, client: httpx.AsyncClient | None = None) -> None:
        self.client = client or httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx.Timeout(10.0, read=POLL_SECONDS + 15),
        )

    async def create(self, body: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        try:
            # NaN and infinities are no JSON: refused here, as the API refuses them.
            # UTF-8 as it is, not \u escapes: the API's size limit counts bytes.
            content = json.dumps(body, allow_nan=False, ensure_ascii=False).encode()
        except ValueError as exc:
            raise ToolError(f"the arguments are not JSON the API takes: {exc}") from None
        headers["content-type"] = "application/json"
        return await self._call("POST", "/v1/handoffs", content=content, headers=headers)

    async def get(self, handoff_id: str, wait: float = 0) -> dict[str, Any]:
        params = {"wait": f"{wait:g}"} if wait > 0 else {}
        return await self._call("GET", f"/v1/handoffs/{quote(handoff_id, safe='')}", params=params)

    async def _call(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        try:
            answer = await self.client.request(method, path, **options)
        except httpx.LocalProtocolError:
            # The request could not even be written: a key with a newline or non-ASCII in it.
            raise ToolError(
                "cannot send the request: check HANDOFF_API_KEY (one line, as printed)"
            ) from None
        except httpx.HTTPError as exc:
            raise ToolError(
                f"cannot reach the handoff API ({type(exc).__name__}); check HANDOFF_API_URL"
            ) from None
        if answer.status_code >= 400:
            try:
                detail = answer.json().get("detail") or answer.text
            except ValueError:
                detail = answer.text
            raise ToolError(f"the handoff API refused ({answer.status_code}): {detail}")
        return dict(answer.json())


async def _wait(api: Api, handoff: dict[str, Any], timeout: float, ctx: Context) -> HandoffResult:
    """Hold the call until ``handoff`` is decided or ``timeout`` passes."""
    started = time.monotonic()
    while handoff["status"] == "pending":
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            break
        await ctx.report_progress(
            time.monotonic() - started, timeout, f"waiting for a person to decide {handoff['id']}"
        )
        handoff = await api.get(handoff["id"], wait=min(POLL_SECONDS, remaining))
    return HandoffResult.of(handoff)


Timeout = Annotated[
    float,
    Field(
        gt=0,
        le=MAX_TIMEOUT_SECONDS,
        description="Seconds to wait for the decision; after them the result is pending "
        "(call get_handoff with its id later).",
    ),
]
Key = Annotated[
    str | None,
    Field(
        pattern=r"^[!-~]{1,180}$",
        description="The same key returns the same handoff: pass one so a retried call does "
        "not ask twice.",
    ),
]
Reviewers = Annotated[
    list[str] | None, Field(description="Slack user (U…) or user-group (S…) ids who decide.")
]
Required = Annotated[str, Field(min_length=1)]


def build_server(api: Api | Callable[[Context], Api], *, run_id: str = "mcp") -> MCPServer:
    """The server over ``api`` (or, for Streamable HTTP, ``api(ctx)``: the API as the caller's
    key sees it); handoffs are created in run ``run_id``."""

    def api_of(ctx: Context) -> Api:
        return api(ctx) if callable(api) else api

    server = MCPServer(
        "slack-handoff",
        instructions="Ask a person in Slack: approvals, questions, corrections, escalations.",
    )

    async def create_and_wait(
        fields: dict[str, Any],
        *,
        context: str,
        channel: str | None = None,
        reviewers: list[str] | None = None,
        key: str | None,
        timeout: float,
        ctx: Context,
    ) -> HandoffResult:
        """Create the handoff of ``fields`` (its type's own) with the routing every tool takes,
        and wait for its decision."""
        body = {
            "run_id": run_id,
            "thread_id": run_id,
            **fields,
            "context": context,
            "channel": channel,
            "reviewers": reviewers or [],
        }
        caller = api_of(ctx)
        try:
            created = await caller.create(body, key)
            return await _wait(caller, created, timeout, ctx)
        finally:
            if callable(api):  # a client for this call only
                await caller.client.aclose()

    @server.tool()
    async def request_approval(
        action: Annotated[
            str, Field(min_length=1, max_length=200, description="What may be done.")
        ],
        args: Annotated[dict[str, Any] | None, Field(description="Its arguments.")] = None,
        context: str = "",
        channel: str | None = None,
        reviewers: Reviewers = None,
        timeout_seconds: Timeout = DEFAULT_TIMEOUT_SECONDS,
        idempotency_key: Key = None,
        approvals_required: Annotated[
            int,
            Field(
                ge=1,
                le=MAX_QUORUM,
                description="How many different people must approve (the first rejection "
                "still rejects).",
            ),
        ] = 1,
        *,
        ctx: Context,
    ) -> HandoffResult:
        """Ask a person in Slack to approve, reject or edit an action before you take it."""
        fields: dict[str, Any] = {
            "request_type": "approval",
            "action": {"name": action, "args": args or {}},
        }
        if approvals_required != 1:
            fields["approvals_required"] = approvals_required
        return await create_and_wait(
            fields,
            context=context,
            channel=channel,
            reviewers=reviewers,
            key=idempotency_key,
            timeout=timeout_seconds,
            ctx=ctx,
        )

    @server.tool()
    async def ask_human(
        question: Required,
        choices: list[str] | None = None,
        context: str = "",
        channel: str | None = None,
        reviewers: Reviewers = None,
        timeout_seconds: Timeout = DEFAULT_TIMEOUT_SECONDS,
        idempotency_key: Key = None,
        answer_schema: Annotated[
            dict[str, Any] | None,
            Field(
                description="For a typed answer (not with choices): the JSON Schema of a flat "
                "object whose fields the person fills in a form: string (minLength, maxLength), "
                'string with format "date", enum of strings, number and integer (minimum, '
                "maximum), boolean; title and description per field; required. The result's "
                "answer_data holds the object."
            ),
        ] = None,
        *,
        ctx: Context,
    ) -> HandoffResult:
        """Ask a person in Slack a question and get their answer (typed, with answer_schema)."""
        fields: dict[str, Any] = {
            "request_type": "question",
            "question": question,
            "choices": choices,
        }
        if answer_schema is not None:
            fields["answer_schema"] = answer_schema
        return await create_and_wait(
            fields,
            context=context,
            channel=channel,
            reviewers=reviewers,
            key=idempotency_key,
            timeout=timeout_seconds,
            ctx=ctx,
        )

    @server.tool()
    async def request_correction(
        draft: Required,
        instructions: str | None = None,
        context: str = "",
        channel: str | None = None,
        reviewers: Reviewers = None,
        timeout_seconds: Timeout = DEFAULT_TIMEOUT_SECONDS,
        idempotency_key: Key = None,
        *,
        ctx: Context,
    ) -> HandoffResult:
        """Have a person in Slack fix a draft; returns the corrected text."""
        fields = {
            "request_type": "correction",
            "draft": draft,
            "instructions": instructions,
        }
        return await create_and_wait(
            fields,
            context=context,
            channel=channel,
            reviewers=reviewers,
            key=idempotency_key,
            timeout=timeout_seconds,
            ctx=ctx,
        )

    @server.tool()
    async def escalate(
        summary: Required,
        context: str = "",
        channel: str | None = None,
        reviewers: Reviewers = None,
        timeout_seconds: Timeout = DEFAULT_TIMEOUT_SECONDS,
        idempotency_key: Key = None,
        *,
        ctx: Context,
    ) -> HandoffResult:
        """Hand the task to a person in Slack, who claims and resolves it."""
        fields = {
            "request_type": "escalation",
            "summary": summary,
        }
        return await create_and_wait(
            fields,
            context=context,
            channel=channel,
            reviewers=reviewers,
            key=idempotency_key,
            timeout=timeout_seconds,
            ctx=ctx,
        )

    @server.tool()
    async def get_handoff(
        id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_]{1,64}$")],
        wait_seconds: Annotated[float, Field(ge=0, le=MAX_TIMEOUT_SECONDS)] = 0,
        *,
        ctx: Context,
    ) -> HandoffResult:
        """A handoff's state; with wait_seconds, once it is decided or the time is up."""
        caller = api_of(ctx)
        try:
            found = await caller.get(id)
            return await _wait(caller, found, wait_seconds, ctx)
        finally:
            if callable(api):
                await caller.client.aclose()

    @server.tool(structured_output=False)
    async def permission_prompt(
        tool_name: Annotated[str, Field(min_length=1, max_length=200)],
        input: dict[str, Any] | None = None,
        tool_use_id: Annotated[str | None, Field(pattern=r"^[!-~]{1,160}$")] = None,
        *,
        ctx: Context,
    ) -> str:
        """Agent hosts' permission prompt: may this tool run with this input? Answers
        {"behavior": "allow", "updatedInput": {...}} or {"behavior": "deny", "message": ...}."""
        result = await create_and_wait(
            {"request_type": "approval", "action": {"name": tool_name, "args": input or {}}},
            context=f"The agent wants to run `{tool_name}`.",
            key=f"permission-{tool_use_id}" if tool_use_id else None,
            timeout=DEFAULT_TIMEOUT_SECONDS,
            ctx=ctx,
        )
        if result.status == "approved" and result.request_type == "approval":
            allowed = result.edited_args if result.edited_args is not None else (input or {})
            return json.dumps({"behavior": "allow", "updatedInput": allowed})
        # Rejected, expired, cancelled, undeliverable, or nobody in time: fail closed.
        reason = result.comment or {
            "pending": "nobody decided in time",
            "expired": "the request expired",
            "cancelled": "the request was cancelled",
        }.get(result.status, f"the request ended {result.status}")
        return json.dumps({"behavior": "deny", "message": f"{result.status}: {reason}"})

    return server
