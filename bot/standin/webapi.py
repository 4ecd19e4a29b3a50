"""The Slack Web API methods the bot uses, answered the way Slack answers them.

Each method is a function ``(workspace, params) -> dict`` registered in ``METHODS``; it returns the
fields of a successful answer (``"ok": true`` is added by the caller) or raises ``ApiError`` with
Slack's error code. Callers hold ``workspace.lock``.
"""

from __future__ import annotations

import copy
import email.parser
import email.policy
import json
import secrets
import time
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

from bot.standin import scopes
from bot.standin.blockkit import (
    MAX_MESSAGE_BLOCKS,
    MAX_MESSAGE_TEXT,
    BlockKitError,
    check_blocks,
    check_view,
    fill_ids,
    message_blocks_too_long,
)
from bot.standin.records import Ephemeral, Message, MessageVersion, StandInUser, View
from bot.standin.workspace import MAX_VIEW_STACK, ApiError, Workspace

Method = Callable[[Workspace, dict[str, Any]], dict[str, Any]]

_JSON_FIELDS = ("blocks", "attachments", "metadata", "view")


def decode_params(query: str, body: bytes, content_type: str) -> dict[str, Any]:
    """The fields of a Web API request: query string plus a JSON, form or multipart body.

    Fields that carry JSON in a form body (blocks, attachments, metadata, view) are decoded.
    Raises ``ApiError("invalid_json")`` for a body that claims JSON and is not.
    """
    params: dict[str, Any] = dict(parse_qsl(query, keep_blank_values=True))
    media_type = content_type.split(";")[0].strip().lower()
    if media_type == "application/json":
        try:
            decoded = json.loads(body or b"{}")
        except ValueError as exc:
            raise ApiError("invalid_json") from exc
        if not isinstance(decoded, dict):
            raise ApiError("invalid_json")
        params.update(decoded)
    elif media_type == "multipart/form-data":
        parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        for part in parsed.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if name:
                payload = part.get_payload(decode=True)
                if isinstance(payload, bytes):
                    params[str(name)] = payload.decode("utf-8", "replace")
    elif body:
        params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    for key in _JSON_FIELDS:
        if isinstance(params.get(key), str) and params[key].strip():
            try:
                params[key] = json.loads(params[key])
            except ValueError as exc:
                raise ApiError("invalid_json", field=key) from exc
    return params


def _blocks_error(exc: BlockKitError, error: str = "invalid_blocks") -> ApiError:
    return ApiError(
        error,
        errors=exc.errors,
        response_metadata={"messages": [f"[ERROR] {message}" for message in exc.errors]},
    )


def _message_content(
    params: dict[str, Any], *, required: bool
) -> tuple[str | None, list[dict[str, Any]] | None, dict[str, Any] | None]:
    """Validated (text, blocks, metadata) of a post or update; None where not given."""
    text = params.get("text")
    blocks = params.get("blocks")
    metadata = params.get("metadata")
    if required and not text and not blocks and not params.get("attachments"):
        raise ApiError("no_text")
    if text is not None and len(str(text)) > MAX_MESSAGE_TEXT:
        raise ApiError("msg_too_long")
    if blocks is not None:
        try:
            check_blocks(blocks, limit=MAX_MESSAGE_BLOCKS)
        except BlockKitError as exc:
            raise _blocks_error(exc) from exc
        if message_blocks_too_long(blocks):
            raise ApiError("msg_blocks_too_long")
        blocks = copy.deepcopy(blocks)
        fill_ids(blocks)
    if metadata is not None and not (
        isinstance(metadata, dict)
        and isinstance(metadata.get("event_type"), str)
        and isinstance(metadata.get("event_payload", {}), dict)
    ):
        raise ApiError("invalid_metadata_format")
    return (None if text is None else str(text)), blocks, metadata


def _bot_message(ws: Workspace, params: dict[str, Any], *, method: str) -> Message:
    """Find the bot's own message named by channel and ts (chat.update, chat.delete)."""
    channel = ws.resolve_channel(params.get("channel"))
    message = ws.find_message(channel, str(params.get("ts", "")))
    if message is None or message.deleted:
        raise ApiError("message_not_found")
    if message.user != ws.bot_user_id:
        raise ApiError("cant_update_message" if method == "chat.update" else "cant_delete_message")
    return message


# auth, users, groups


def auth_test(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """auth.test: who the token belongs to."""
    return {
        "url": f"https://{ws.team_domain}.slack.com/",
        "team": "Stand-in",
        "user": ws.users[ws.bot_user_id].name,
        "team_id": ws.team_id,
        "user_id": ws.bot_user_id,
        "bot_id": ws.bot_id,
        "is_enterprise_install": False,
    }


def _tz_details(tz: str) -> tuple[str, int]:
    try:
        now = datetime.now(zoneinfo.ZoneInfo(tz))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return "UTC", 0
    offset = now.utcoffset()
    return now.tzname() or tz, int(offset.total_seconds()) if offset else 0


def user_info_object(ws: Workspace, user: StandInUser) -> dict[str, Any]:
    """A member as ``users.info`` describes them."""
    tz_label, tz_offset = _tz_details(user.tz)
    real_name = user.real_name or user.name
    return {
        "id": user.id,
        "team_id": ws.team_id,
        "name": user.name,
        "deleted": False,
        "real_name": real_name,
        "tz": user.tz,
        "tz_label": tz_label,
        "tz_offset": tz_offset,
        "profile": {
            "real_name": real_name,
            "display_name": user.name,
            "real_name_normalized": real_name,
            "display_name_normalized": user.name,
            "team": ws.team_id,
            **({"bot_id": ws.bot_id} if user.id == ws.bot_user_id else {}),
        },
        "is_admin": user.is_admin,
        "is_owner": user.is_owner,
        "is_primary_owner": user.is_owner,
        "is_restricted": False,
        "is_ultra_restricted": False,
        "is_bot": user.is_bot,
        "is_app_user": False,
        "updated": int(time.time()),
    }


def users_info(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """users.info: a configured member, or user_not_found."""
    user = ws.users.get(str(params.get("user", "")))
    if user is None:
        raise ApiError("user_not_found")
    return {"user": user_info_object(ws, user)}


def usergroups_users_list(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """usergroups.users.list: the members of a configured user group, or no_such_subteam."""
    group = str(params.get("usergroup", ""))
    if group not in ws.usergroups:
        raise ApiError("no_such_subteam")
    return {"users": list(ws.usergroups[group])}


def usergroups_list(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """usergroups.list: every configured user group, with members when ``include_users``."""
    with_users = str(params.get("include_users", "")).lower() in ("1", "true")
    groups = []
    for group, members in ws.usergroups.items():
        shaped: dict[str, Any] = {"id": group, "team_id": ws.team_id, "handle": group.lower()}
        if with_users:
            shaped["users"] = list(members)
            shaped["user_count"] = len(members)
        groups.append(shaped)
    return {"usergroups": groups}


# conversations


def _channel_object(ws: Workspace, channel: str) -> dict[str, Any]:
    kind = channel[0]
    shaped: dict[str, Any] = {
        "id": channel,
        "created": 1_700_000_000,
        "is_channel": kind == "C",
        "is_group": kind == "G",
        "is_im": kind == "D",
        "is_private": ws.is_private(channel),
        "is_archived": False,
        "is_member": ws.bot_is_member(channel),
    }
    if kind == "D":
        user = next((uid for uid in ws.users if ws.dm_channel(uid) == channel), None)
        shaped["user"] = user
    else:
        shaped["name"] = ws.channel_name(channel)
        shaped["is_general"] = False
    return shaped


def _visible(ws: Workspace, params: dict[str, Any]) -> str:
    """The conversation named by ``channel`` (an id), if the bot may see it: a private one
    only when the bot is in it."""
    channel = ws.resolve_channel(params.get("channel"))
    if ws.is_private(channel) and not ws.bot_is_member(channel):
        raise ApiError("channel_not_found")
    return channel


def conversations_info(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """conversations.info: a minimal channel object."""
    return {"channel": _channel_object(ws, _visible(ws, params))}


def conversations_join(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """conversations.join: the bot joins a public channel (a private one, or a DM, cannot
    be joined: ``method_not_supported_for_channel_type``)."""
    channel = ws.resolve_channel(params.get("channel"))
    if ws.is_private(channel):
        raise ApiError("method_not_supported_for_channel_type")
    warning = "already_in_channel" if ws.bot_is_member(channel) else None
    ws.bot_channels.add(channel)
    answer: dict[str, Any] = {"channel": _channel_object(ws, channel)}
    if warning:
        answer["warning"] = warning
        answer["response_metadata"] = {"warnings": [warning]}
    return answer


def conversations_members(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """conversations.members: a page of the channel's members (``limit``, ``cursor``)."""
    members = ws.members_of(_visible(ws, params))
    limit = max(1, min(int(params.get("limit") or 100), 1000))
    start = int(str(params.get("cursor") or "0").removeprefix("next:"))
    page = members[start : start + limit]
    more = start + limit < len(members)
    return {
        "members": page,
        "response_metadata": {"next_cursor": f"next:{start + limit}" if more else ""},
    }


def conversations_open(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """conversations.open: the bot's DM with one member."""
    users = [uid for uid in str(params.get("users", "")).split(",") if uid]
    if len(users) != 1 or users[0] not in ws.users:
        raise ApiError("user_not_found")
    return {"channel": {"id": ws.dm_channel(users[0])}}


def conversations_replies(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """conversations.replies: the thread's parent, then its replies oldest first.

    Honours ``oldest``/``latest`` (exclusive unless ``inclusive``) for the replies, ``limit``
    (default 1000; the parent counts; capped by a rate limit's page size) and ``cursor``. The
    parent comes first on every page whatever the window, as Slack lists it.
    """
    channel = ws.resolve_channel(params.get("channel"))
    ws.require_bot_in(channel)
    parent = ws.find_message(channel, str(params.get("ts", "")))
    if parent is None or parent.deleted:
        raise ApiError("thread_not_found")
    if parent.thread_ts and parent.thread_ts != parent.ts:
        parent = ws.find_message(channel, parent.thread_ts) or parent
    window = _Window.from_params(params, default_limit=1000)
    limit = ws.rate_limits.page_size("conversations.replies", window.limit)
    replies = ws.replies(channel, parent.ts)
    first = parent.to_slack(ws.team_id)
    if replies:
        first.update(
            thread_ts=parent.ts,
            reply_count=len(replies),
            reply_users=sorted({reply.user for reply in replies}),
            latest_reply=replies[-1].ts,
        )
    if not _truthy(params.get("include_all_metadata")):
        first.pop("metadata", None)
    inside = [reply for reply in replies if window.holds(float(reply.ts))]
    room = max(limit - 1, 1)
    page = inside[window.start : window.start + room]
    has_more = window.start + room < len(inside)
    shown = [reply.to_slack(ws.team_id) for reply in page]
    if not _truthy(params.get("include_all_metadata")):
        for reply in shown:
            reply.pop("metadata", None)
    return {
        "messages": [first, *shown],
        "has_more": has_more,
        "response_metadata": {"next_cursor": f"next:{window.start + room}" if has_more else ""},
    }


@dataclass(frozen=True)
class _Window:
    """The ``oldest``/``latest``/``inclusive``/``limit``/``cursor`` of a listing call."""

    oldest: float
    latest: float
    inclusive: bool
    limit: int
    start: int

    @classmethod
    def from_params(cls, params: dict[str, Any], *, default_limit: int) -> _Window:
        try:
            return cls(
                oldest=float(params.get("oldest") or 0),
                latest=float(params.get("latest") or "inf"),
                inclusive=_truthy(params.get("inclusive")),
                limit=min(max(int(params.get("limit") or default_limit), 1), 999),
                start=int(str(params.get("cursor") or "0").removeprefix("next:")),
            )
        except ValueError as exc:
            raise ApiError("invalid_arguments") from exc

    def holds(self, ts: float) -> bool:
        if self.inclusive:
            return self.oldest <= ts <= self.latest
        return self.oldest < ts < self.latest


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true")


def _shown(ws: Workspace, message: Message, *, with_metadata: bool) -> dict[str, Any]:
    """A channel message as the history methods list it: thread details on a parent, and
    ``metadata`` only when asked for (``include_all_metadata``), as Slack does."""
    shaped = message.to_slack(ws.team_id)
    if not with_metadata:
        shaped.pop("metadata", None)
    replies = ws.replies(message.channel, message.ts)
    if replies:
        shaped.update(
            thread_ts=message.ts,
            reply_count=len(replies),
            reply_users=sorted({reply.user for reply in replies}),
            latest_reply=replies[-1].ts,
        )
    return shaped


def conversations_history(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """conversations.history: the channel's top-level messages, newest first.

    Honours ``oldest``/``latest`` (exclusive unless ``inclusive``), ``limit`` (default 100,
    at most 999, and at most a rate limit's page size), ``cursor`` and
    ``include_all_metadata``.
    """
    channel = ws.resolve_channel(params.get("channel"))
    ws.require_bot_in(channel)
    window = _Window.from_params(params, default_limit=100)
    limit = ws.rate_limits.page_size("conversations.history", window.limit)
    found = sorted(
        (
            m
            for m in ws.messages
            if m.channel == channel
            and not m.deleted
            and (m.thread_ts is None or m.thread_ts == m.ts)
            and window.holds(float(m.ts))
        ),
        key=lambda m: float(m.ts),
        reverse=True,
    )
    start = window.start
    page = found[start : start + limit]
    has_more = start + limit < len(found)
    with_metadata = _truthy(params.get("include_all_metadata"))
    return {
        "messages": [_shown(ws, m, with_metadata=with_metadata) for m in page],
        "has_more": has_more,
        "pin_count": 0,
        "response_metadata": {"next_cursor": f"next:{start + limit}" if has_more else ""},
    }


# chat


def post_message(
    ws: Workspace,
    *,
    channel: str,
    text: str,
    blocks: list[dict[str, Any]],
    thread_ts: str | None,
    user: str,
    bot_id: str | None,
    metadata: dict[str, Any] | None,
    app_id: str | None = None,
) -> Message:
    """Record a new message (by the bot or by a person) and return it."""
    if thread_ts:
        parent = ws.find_message(channel, thread_ts)
        if parent is None or parent.deleted:
            raise ApiError("thread_not_found")
        thread_ts = parent.thread_ts or parent.ts
    ts = ws.next_ts()
    message = Message(
        channel=channel,
        ts=ts,
        text=text,
        blocks=blocks,
        thread_ts=thread_ts,
        user=user,
        bot_id=bot_id,
        metadata=metadata,
        permalink=ws.permalink(channel, ts, thread_ts),
        app_id=app_id,
    )
    ws.add_message(message)
    return message


def post_as_bot(
    ws: Workspace,
    *,
    channel: str,
    text: str,
    blocks: list[dict[str, Any]],
    thread_ts: str | None,
    metadata: dict[str, Any] | None,
) -> Message:
    """Record a message by the bot (chat.postMessage, in_channel replies)."""
    return post_message(
        ws,
        channel=channel,
        text=text,
        blocks=blocks,
        thread_ts=thread_ts,
        user=ws.bot_user_id,
        bot_id=ws.bot_id,
        metadata=metadata,
        app_id=ws.app_id,
    )


def chat_post_message(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """chat.postMessage: record the bot's message; reply_broadcast is ignored.

    The one method that takes a "#name" or a member's id (posting to the bot's DM with
    them) for ``channel``; it answers with the conversation's id. The bot posts in a
    private channel only when it is in it (else ``channel_not_found``), in a public one it
    is not in only with ``chat:write.public`` (else ``not_in_channel``)."""
    channel = ws.resolve_channel(params.get("channel"), ids_only=False)
    if not ws.bot_is_member(channel):
        if ws.is_private(channel):
            raise ApiError("channel_not_found")
        if ws.scopes is not None and scopes.POST_ANYWHERE not in ws.scopes:
            raise ApiError("not_in_channel")
    text, blocks, metadata = _message_content(params, required=True)
    message = post_as_bot(
        ws,
        channel=channel,
        text=text or "",
        blocks=blocks or [],
        thread_ts=str(params["thread_ts"]) if params.get("thread_ts") else None,
        metadata=metadata,
    )
    return {"channel": channel, "ts": message.ts, "message": message.to_slack(ws.team_id)}


def replace_message(
    message: Message | Ephemeral,
    *,
    text: str | None,
    blocks: list[dict[str, Any]] | None,
    metadata: dict[str, Any] | None,
    replaced_by: str,
) -> None:
    """Keep the current version in ``message.updates`` and apply the new content."""
    message.updates.append(
        MessageVersion(
            text=message.text,
            blocks=copy.deepcopy(message.blocks),
            metadata=copy.deepcopy(message.metadata) if isinstance(message, Message) else None,
            replaced_by=replaced_by,
        )
    )
    if text is not None:
        message.text = text
    if blocks is not None:
        message.blocks = blocks
    if metadata is not None and isinstance(message, Message):
        message.metadata = metadata


def chat_update(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """chat.update: replace the bot's message. Omitted blocks are removed, as Slack does
    now (the message is left with its text): an update that means to keep them sends them."""
    message = _bot_message(ws, params, method="chat.update")
    text, blocks, metadata = _message_content(params, required=True)
    if blocks is None:
        blocks = []
    replace_message(message, text=text, blocks=blocks, metadata=metadata, replaced_by="chat.update")
    return {
        "channel": message.channel,
        "ts": message.ts,
        "text": message.text,
        "message": message.to_slack(ws.team_id),
    }


def chat_delete(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """chat.delete: mark the bot's message deleted."""
    message = _bot_message(ws, params, method="chat.delete")
    message.deleted = True
    return {"channel": message.channel, "ts": message.ts}


def chat_post_ephemeral(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """chat.postEphemeral: record a message only ``user`` sees."""
    channel = ws.resolve_channel(params.get("channel"))
    if ws.is_private(channel) and not ws.bot_is_member(channel):
        raise ApiError("channel_not_found")
    user = str(params.get("user", ""))
    if user not in ws.users or not ws.is_member(channel, user):
        raise ApiError("user_not_in_channel")
    text, blocks, _ = _message_content(params, required=True)
    ts = ws.next_ts()
    ws.ephemerals.append(
        Ephemeral(
            channel=channel,
            user=user,
            text=text or "",
            blocks=blocks or [],
            source="chat.postEphemeral",
            ts=ts,
            thread_ts=str(params["thread_ts"]) if params.get("thread_ts") else None,
        )
    )
    return {"message_ts": ts}


def chat_get_permalink(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """chat.getPermalink: the link to a recorded message."""
    channel = ws.resolve_channel(params.get("channel"))
    message = ws.find_message(channel, str(params.get("message_ts", "")))
    if message is None or message.deleted:
        raise ApiError("message_not_found")
    return {"channel": channel, "permalink": message.permalink}


# views


def _new_hash() -> str:
    return f"{int(time.time())}.{secrets.token_urlsafe(6)}"


def _checked_view(sent: Any, *, kind: str) -> dict[str, Any]:
    try:
        check_view(sent, kind=kind)
    except BlockKitError as exc:
        raise _blocks_error(exc, "invalid_arguments") from exc
    view = copy.deepcopy(sent)
    fill_ids(view.setdefault("blocks", []))
    return view


def _shape_view(
    ws: Workspace,
    sent: dict[str, Any],
    *,
    view_id: str,
    view_hash: str,
    root_view_id: str | None,
    previous_view_id: str | None,
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The view as Slack stores and answers it."""
    view = dict(sent)
    view.update(
        id=view_id,
        team_id=ws.team_id,
        hash=view_hash,
        state=state if state is not None else {"values": {}},
        root_view_id=root_view_id,
        previous_view_id=previous_view_id,
        app_id=ws.app_id,
        bot_id=ws.bot_id,
        app_installed_team_id=ws.team_id,
    )
    for key, default in (
        ("private_metadata", ""),
        ("callback_id", ""),
        ("external_id", ""),
        ("clear_on_close", False),
        ("notify_on_close", False),
    ):
        view.setdefault(key, default)
    return view


def open_modal(
    ws: Workspace, user: str, sent: dict[str, Any], *, trigger_id: str | None, push: bool
) -> View:
    """Open ``sent`` (already checked) as the user's new root modal, or push it on their stack."""
    stack = [vid for vid in ws.stacks.get(user, []) if not ws.views[vid].closed]
    if push:
        if not stack:
            raise ApiError("not_found")
        if len(stack) >= MAX_VIEW_STACK:
            raise ApiError("push_limit_reached")
    else:
        for vid in stack:
            ws.views[vid].closed = True
        stack = []
    view_id = ws.next_id("V")
    view_hash = _new_hash()
    root = ws.views[stack[0]].id if stack else view_id
    view = View(
        id=view_id,
        user=user,
        trigger_id=trigger_id,
        view=_shape_view(
            ws,
            sent,
            view_id=view_id,
            view_hash=view_hash,
            root_view_id=root,
            previous_view_id=stack[-1] if stack else None,
        ),
        hash=view_hash,
        position=len(stack),
    )
    ws.views[view_id] = view
    ws.stacks[user] = [*stack, view_id]
    return view


def update_view(ws: Workspace, view: View, sent: dict[str, Any]) -> None:
    """Replace a view's content (already checked), keeping its id, stack place and state."""
    view.updates.append(copy.deepcopy(view.view))
    view.hash = _new_hash()
    view.view = _shape_view(
        ws,
        sent,
        view_id=view.id,
        view_hash=view.hash,
        root_view_id=view.view.get("root_view_id"),
        previous_view_id=view.view.get("previous_view_id"),
        state=view.view.get("state"),
    )
    view.errors = None


def views_open(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """views.open: needs a fresh, unused trigger_id the stand-in issued."""
    sent = _checked_view(params.get("view"), kind="modal")
    trigger_id = str(params.get("trigger_id", ""))
    user = ws.take_trigger(trigger_id)
    return {"view": open_modal(ws, user, sent, trigger_id=trigger_id, push=False).view}


def views_push(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """views.push: stack a modal on the person's open one (at most 3 deep)."""
    sent = _checked_view(params.get("view"), kind="modal")
    trigger_id = str(params.get("trigger_id", ""))
    user = ws.take_trigger(trigger_id)
    return {"view": open_modal(ws, user, sent, trigger_id=trigger_id, push=True).view}


def views_update(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """views.update: by view_id or external_id, refusing a stale ``hash``."""
    view: View | None = None
    if params.get("view_id"):
        view = ws.views.get(str(params["view_id"]))
    elif params.get("external_id"):
        view = next(
            (v for v in ws.views.values() if v.view.get("external_id") == params["external_id"]),
            None,
        )
    else:
        raise ApiError("invalid_arguments", errors=["view_id or external_id is required"])
    if view is None or view.closed:
        raise ApiError("not_found")
    if params.get("hash") and params["hash"] != view.hash:
        raise ApiError("hash_conflict")
    update_view(ws, view, _checked_view(params.get("view"), kind=view.type))
    return {"view": view.view}


def views_publish(ws: Workspace, params: dict[str, Any]) -> dict[str, Any]:
    """views.publish: set a person's App Home tab (kept per person, one view id each)."""
    user = str(params.get("user_id", ""))
    if user not in ws.users:
        raise ApiError("user_not_found")
    sent = _checked_view(params.get("view"), kind="home")
    existing = ws.views.get(ws.homes.get(user, ""))
    if existing is not None:
        if params.get("hash") and params["hash"] != existing.hash:
            raise ApiError("hash_conflict")
        update_view(ws, existing, sent)
        return {"view": existing.view}
    view_id = ws.next_id("V")
    view_hash = _new_hash()
    view = View(
        id=view_id,
        user=user,
        trigger_id=None,
        view=_shape_view(
            ws,
            sent,
            view_id=view_id,
            view_hash=view_hash,
            root_view_id=view_id,
            previous_view_id=None,
        ),
        hash=view_hash,
        position=0,
    )
    ws.views[view_id] = view
    ws.homes[user] = view_id
    return {"view": view.view}


METHODS: dict[str, Method] = {
    "auth.test": auth_test,
    "chat.delete": chat_delete,
    "chat.getPermalink": chat_get_permalink,
    "chat.postEphemeral": chat_post_ephemeral,
    "chat.postMessage": chat_post_message,
    "chat.update": chat_update,
    "conversations.history": conversations_history,
    "conversations.info": conversations_info,
    "conversations.join": conversations_join,
    "conversations.members": conversations_members,
    "conversations.open": conversations_open,
    "conversations.replies": conversations_replies,
    "usergroups.list": usergroups_list,
    "usergroups.users.list": usergroups_users_list,
    "users.info": users_info,
    "views.open": views_open,
    "views.publish": views_publish,
    "views.push": views_push,
    "views.update": views_update,
}
"""Every Web API method the stand-in answers; any other is ``unknown_method``."""
