"""How Slack applies what the bot answers outside the Web API.

Three kinds: posts to a response_url (ephemeral reply, new message, replaced or deleted original),
the HTTP answer to a view_submission (``response_action``), and the HTTP answer to a slash command
(Bolt's ``ack("...")``). Callers hold ``workspace.lock``.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from bot.standin import webapi
from bot.standin.blockkit import (
    MAX_MESSAGE_BLOCKS,
    BlockKitError,
    check_blocks,
    check_view,
    fill_ids,
)
from bot.standin.records import Ephemeral, Message, Response, View
from bot.standin.workspace import (
    RESPONSE_URL_TTL_SECONDS,
    RESPONSE_URL_USES,
    ApiError,
    Workspace,
)


def flag(value: Any) -> bool:
    """A boolean as Slack reads it from JSON (true) or a form ("1", "true")."""
    if isinstance(value, str):
        return value.lower() in ("1", "true")
    return bool(value)


def _original(ws: Workspace, token: str) -> Message | Ephemeral | None:
    target = ws.response_urls[token]
    if target.message_ts is None:
        return None
    if not target.is_ephemeral:
        return ws.find_message(target.channel, target.message_ts)
    return next(
        (
            e
            for e in ws.ephemerals
            if e.channel == target.channel and e.ts == target.message_ts and e.user == target.user
        ),
        None,
    )


def post_to_response_url(ws: Workspace, token: str, sent: Any) -> tuple[int, str]:
    """Apply a POST to ``/response/<token>``; returns the HTTP status and body Slack answers.

    ``delete_original`` deletes the message the interaction came from, ``replace_original``
    replaces it (blocks not given are removed, as in Slack), ``response_type: in_channel`` posts
    a new message as the bot, and anything else is an ephemeral for the person who acted.
    """
    target = ws.response_urls.get(token)
    if target is None or time.monotonic() - target.issued_at > RESPONSE_URL_TTL_SECONDS:
        return 404, "expired_url"
    if target.uses >= RESPONSE_URL_USES:
        return 404, "used_url"
    if not isinstance(sent, dict):
        return 400, "invalid_payload"
    target.uses += 1
    original = _original(ws, token)
    if flag(sent.get("delete_original")):
        if original is None or original.deleted:
            return 404, "message_not_found"
        original.deleted = True
        return 200, "ok"
    text = str(sent.get("text") or "")
    blocks = copy.deepcopy(sent.get("blocks") or [])
    if not text and not blocks:
        return 400, "no_text"
    try:
        check_blocks(blocks, limit=MAX_MESSAGE_BLOCKS)
    except BlockKitError:
        return 400, "invalid_blocks"
    fill_ids(blocks)
    if flag(sent.get("replace_original")):
        if original is None or original.deleted:
            return 404, "message_not_found"
        webapi.replace_message(
            original,
            text=text,
            blocks=blocks,
            metadata=sent.get("metadata"),
            replaced_by="response_url",
        )
        return 200, "ok"
    thread_ts = str(sent["thread_ts"]) if sent.get("thread_ts") else None
    if sent.get("response_type") == "in_channel":
        try:
            webapi.post_as_bot(
                ws,
                channel=target.channel,
                text=text,
                blocks=blocks,
                thread_ts=thread_ts,
                metadata=sent.get("metadata"),
            )
        except ApiError as exc:
            return 404, exc.error
        return 200, "ok"
    ws.ephemerals.append(
        Ephemeral(
            channel=target.channel,
            user=target.user,
            text=text,
            blocks=blocks,
            source="response_url",
            ts=ws.next_ts(),
            thread_ts=thread_ts,
            message_ts=target.message_ts,
        )
    )
    return 200, "ok"


def close_modal(ws: Workspace, view: View, *, cleared: bool) -> None:
    """Close ``view``, or its person's whole modal stack if ``cleared``."""
    closing = ws.stacks.get(view.user, []) if cleared else [view.id]
    for view_id in closing:
        ws.views[view_id].closed = True


def _checked(sent: Any) -> dict[str, Any]:
    check_view(sent, kind="modal")
    view = copy.deepcopy(sent)
    fill_ids(view.setdefault("blocks", []))
    return view


def apply_submission_answer(ws: Workspace, view: View, response: Response) -> None:
    """Apply the bot's answer to a view_submission of ``view`` the way Slack does.

    An empty 200 closes the modal; ``response_action`` "errors" (keyed by input block_ids) keeps
    it open with ``view.errors`` set; "update", "push" and "clear" change the stack. Anything
    else is what the person sees as a generic error: ``view.submission_error`` says why.
    """
    view.submission_error = None
    if response.status != 200:
        view.submission_error = "timed out" if response.timed_out else f"HTTP {response.status}"
        return
    if not response.body.strip():
        close_modal(ws, view, cleared=False)
        return
    try:
        answer = response.json()
    except ValueError:
        view.submission_error = "the answer is neither empty nor JSON"
        return
    action = answer.get("response_action") if isinstance(answer, dict) else None
    try:
        if action == "errors":
            errors = answer.get("errors") or {}
            inputs = {b.get("block_id") for b in view.blocks if b.get("type") == "input"}
            unknown = sorted(set(errors) - inputs)
            if unknown:
                view.submission_error = f"errors name blocks that are not inputs: {unknown}"
            else:
                view.errors = dict(errors)
        elif action == "update":
            webapi.update_view(ws, view, _checked(answer.get("view")))
        elif action == "push":
            webapi.open_modal(
                ws, view.user, _checked(answer.get("view")), trigger_id=None, push=True
            )
        elif action == "clear":
            close_modal(ws, view, cleared=True)
        else:
            view.submission_error = f"unknown response_action {action!r}"
    except (BlockKitError, ApiError) as exc:
        view.submission_error = f"response_action {action} refused: {exc}"


def show_command_ack(ws: Workspace, user: str, channel: str, answer: dict[str, Any]) -> None:
    """Show a slash command's HTTP answer: an ephemeral, or a message if ``in_channel``."""
    text = str(answer.get("text") or "")
    blocks = copy.deepcopy(answer.get("blocks") or [])
    fill_ids(blocks)
    if answer.get("response_type") == "in_channel":
        webapi.post_as_bot(
            ws, channel=channel, text=text, blocks=blocks, thread_ts=None, metadata=None
        )
    else:
        ws.ephemerals.append(Ephemeral(channel, user, text, blocks, source="ack", ts=ws.next_ts()))
