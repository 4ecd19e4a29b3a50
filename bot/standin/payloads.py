"""What Slack sends the bot: interaction payloads, Events API envelopes, slash command fields.

Shapes follow what Slack documents for each payload (see tests/fixtures/slack/). Every
builder takes the ``Workspace`` for team and app ids; none of them sends anything.
"""

from __future__ import annotations

import copy
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any

from bot.standin.blockkit import elements_of, find_option, generated_id, is_date, number_in
from bot.standin.records import StandInError
from bot.standin.workspace import Workspace

VERIFICATION_TOKEN = "standin-verification-token"
"""The deprecated verification token Slack still puts in payloads (Bolt ignores it)."""

_SELECT_TYPES = frozenset({"static_select", "external_select", "overflow", "radio_buttons"})
_MULTI_OPTION_TYPES = frozenset({"checkboxes", "multi_static_select", "multi_external_select"})
_PICKED_FIELD = {
    "users_select": "selected_user",
    "conversations_select": "selected_conversation",
    "channels_select": "selected_channel",
    "datepicker": "selected_date",
    "timepicker": "selected_time",
    "datetimepicker": "selected_date_time",
}
_MULTI_PICKED_FIELD = {
    "multi_users_select": "selected_users",
    "multi_conversations_select": "selected_conversations",
    "multi_channels_select": "selected_channels",
}
_TEXT_INPUT_TYPES = frozenset(
    {"plain_text_input", "number_input", "email_text_input", "url_text_input"}
)


def team_object(ws: Workspace) -> dict[str, str]:
    """The team as interaction payloads name it."""
    return {"id": ws.team_id, "domain": ws.team_domain}


def action_ts() -> str:
    """An action_ts / event_ts: the current time with microseconds."""
    return f"{time.time():.6f}"


def _option_for(element: dict[str, Any], value: str) -> dict[str, Any]:
    if element["type"] in ("external_select", "multi_external_select"):
        # External options come from the bot at typing time, not from the blocks.
        return {"text": {"type": "plain_text", "text": value}, "value": value}
    try:
        return find_option(element, value)
    except LookupError as exc:
        raise StandInError(str(exc)) from exc


def element_state(element: dict[str, Any], chosen: Any) -> dict[str, Any]:
    """An element's entry in ``state.values``, for a person's choice (None: left empty).

    A str is what the person typed or the value of the option they picked; a dict is taken as
    already shaped (``{"type": ..., "selected_option": ...}``); a list of str picks several.
    """
    kind = element["type"]
    if isinstance(chosen, Mapping):
        return {"type": kind, **chosen}
    if kind in _TEXT_INPUT_TYPES or kind == "rich_text_input":
        return {"type": kind, "value": chosen}
    if kind in _SELECT_TYPES:
        return {
            "type": kind,
            "selected_option": None if chosen is None else _option_for(element, chosen),
        }
    if kind in _MULTI_OPTION_TYPES:
        values = [] if chosen is None else [chosen] if isinstance(chosen, str) else list(chosen)
        return {"type": kind, "selected_options": [_option_for(element, v) for v in values]}
    if kind in _PICKED_FIELD:
        return {"type": kind, _PICKED_FIELD[kind]: chosen}
    if kind in _MULTI_PICKED_FIELD:
        values = [] if chosen is None else [chosen] if isinstance(chosen, str) else list(chosen)
        return {"type": kind, _MULTI_PICKED_FIELD[kind]: values}
    raise StandInError(f"the stand-in cannot fill in a {kind} element")


def action(
    block: dict[str, Any],
    element: dict[str, Any],
    *,
    value: str | None,
    selected_option: str | None,
) -> dict[str, Any]:
    """``actions[0]`` of a block_actions payload for using ``element``.

    For a button, ``value`` replaces the button's own value (to model a tampered payload).
    For selects, overflows and radio buttons, ``selected_option`` is the picked option's value.
    """
    kind = element["type"]
    shaped: dict[str, Any] = {
        "type": kind,
        "action_id": element["action_id"],
        "block_id": block["block_id"],
    }
    if kind == "button":
        shaped["text"] = element.get("text")
        button_value = value if value is not None else element.get("value")
        if button_value is not None:
            shaped["value"] = button_value
        if "style" in element:
            shaped["style"] = element["style"]
    else:
        if selected_option is None:
            raise StandInError(
                f"{kind} {element['action_id']!r} needs selected_option= (the value picked)"
            )
        shaped.update(element_state(element, selected_option))
        if "placeholder" in element:
            shaped["placeholder"] = element["placeholder"]
    shaped["action_ts"] = action_ts()
    return shaped


def state_of_action(block: dict[str, Any], shaped: dict[str, Any]) -> dict[str, Any]:
    """``state.values`` of a block_actions payload: the used element, if it keeps a state."""
    if shaped["type"] == "button":
        return {"values": {}}
    kept = {k: v for k, v in shaped.items() if k not in ("action_id", "block_id", "action_ts")}
    kept.pop("placeholder", None)
    return {"values": {block["block_id"]: {shaped["action_id"]: kept}}}


def view_state_values(
    blocks: list[dict[str, Any]], values: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """``view.state.values`` for a submission: every input block, filled from ``values``.

    Raises ``StandInError`` for a block_id/action_id that is not an input of the view, and for
    what Slack's client itself would refuse: an empty required input, text outside min/max
    length, a number input holding no number (or a decimal where only whole numbers go, or
    one outside its min/max), a date picker holding anything but a date ``YYYY-MM-DD``. An
    already-shaped dict is sent as it is, unchecked (a submission no client checked).
    """
    inputs = {
        block["block_id"]: (block, element)
        for block in blocks
        if block.get("type") == "input"
        for element in elements_of(block)
    }
    for block_id, actions in values.items():
        if block_id not in inputs:
            raise StandInError(
                f"the view has no input block {block_id!r}; its inputs are {sorted(inputs)}"
            )
        element_action = inputs[block_id][1]["action_id"]
        unknown = set(actions) - {element_action}
        if unknown:
            raise StandInError(
                f"input block {block_id!r} has action_id {element_action!r}, not {sorted(unknown)}"
            )
    state: dict[str, dict[str, Any]] = {}
    for block_id, (block, element) in inputs.items():
        action_id = element["action_id"]
        chosen = values.get(block_id, {}).get(action_id)
        if chosen in (None, "", []) and not block.get("optional", False):
            raise StandInError(
                f"input {block_id!r} is required: Slack would not let the person submit it empty"
            )
        if isinstance(chosen, str) and element["type"] == "plain_text_input":
            min_length = int(element.get("min_length", 0))
            max_length = int(element.get("max_length", 3000))
            if chosen and not min_length <= len(chosen) <= max_length:
                raise StandInError(
                    f"input {block_id!r} takes {min_length}..{max_length} characters, "
                    f"got {len(chosen)}: Slack would not let the person submit it"
                )
        if isinstance(chosen, str) and chosen:
            _check_typed(block_id, element, chosen)
        state[block_id] = {action_id: element_state(element, None if chosen == "" else chosen)}
    return state


def _check_typed(block_id: str, element: dict[str, Any], chosen: str) -> None:
    """What Slack's client refuses to submit in a number input or a date picker (the
    workbench's page shows the same refusals)."""
    kind = element["type"]
    if kind == "number_input":
        decimals = bool(element.get("is_decimal_allowed"))
        number = number_in(chosen, decimals=decimals)
        if number is None:
            whole = "" if decimals else "whole "
            raise StandInError(
                f"input {block_id!r} takes a {whole}number, got {chosen!r}: "
                "Slack would not let the person submit it"
            )
        for key, outside in (("min_value", number.__lt__), ("max_value", number.__gt__)):
            bound = number_in(element.get(key), decimals=True)
            if bound is not None and outside(bound):
                raise StandInError(
                    f"input {block_id!r} takes numbers within its {key} {element[key]}, got "
                    f"{chosen}: Slack would not let the person submit it"
                )
    elif kind == "datepicker" and not is_date(chosen):
        raise StandInError(
            f"input {block_id!r} is a date picker: it gives a date YYYY-MM-DD, not {chosen!r}"
        )


def block_actions(
    ws: Workspace,
    *,
    user: str,
    trigger_id: str,
    container: dict[str, Any],
    action_payload: dict[str, Any],
    state: dict[str, Any],
    channel: str | None = None,
    message: dict[str, Any] | None = None,
    view: dict[str, Any] | None = None,
    response_url: str | None = None,
) -> dict[str, Any]:
    """A block_actions payload, as in block_actions.json."""
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": ws.user_object(user),
        "api_app_id": ws.app_id,
        "token": VERIFICATION_TOKEN,
        "container": container,
        "trigger_id": trigger_id,
        "team": team_object(ws),
        "enterprise": None,
        "is_enterprise_install": False,
    }
    if channel is not None:
        payload["channel"] = {"id": channel, "name": ws.channel_name(channel)}
    if message is not None:
        payload["message"] = message
    if view is not None:
        payload["view"] = view
    payload["state"] = state
    if response_url is not None:
        payload["response_url"] = response_url
    payload["actions"] = [action_payload]
    return payload


def view_submission(
    ws: Workspace, *, user: str, trigger_id: str, view: dict[str, Any]
) -> dict[str, Any]:
    """A view_submission payload, as in view_submission.json (``view`` carries the state)."""
    return {
        "type": "view_submission",
        "team": team_object(ws),
        "user": ws.user_object(user),
        "api_app_id": ws.app_id,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id,
        "enterprise": None,
        "is_enterprise_install": False,
        "view": view,
        "response_urls": [],
    }


def view_closed(ws: Workspace, *, user: str, view: dict[str, Any], cleared: bool) -> dict[str, Any]:
    """A view_closed payload (sent only for views with ``notify_on_close``)."""
    return {
        "type": "view_closed",
        "team": team_object(ws),
        "user": ws.user_object(user),
        "api_app_id": ws.app_id,
        "token": VERIFICATION_TOKEN,
        "view": view,
        "is_cleared": cleared,
        "enterprise": None,
        "is_enterprise_install": False,
    }


def event_callback(ws: Workspace, event: dict[str, Any], *, event_id: str) -> dict[str, Any]:
    """An Events API envelope around ``event``, as in event_thread_reply.json."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": ws.team_id,
        "api_app_id": ws.app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": ws.team_id,
                "user_id": ws.bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{secrets.token_urlsafe(16)}",
    }


def rich_text(text: str) -> list[dict[str, Any]]:
    """The blocks Slack attaches to a message a person typed."""
    return [
        {
            "type": "rich_text",
            "block_id": generated_id(),
            "elements": [
                {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
            ],
        }
    ]


# What a person types that Slack turns into a token: a link, a special mention, a mention
# of a member (by name or id) or a channel (by name). Anything else is text.
_TYPED = re.compile(
    r"(?P<url>(?:https?|mailto):[^\s<>]+?)(?=[.,;:!?)'\"]*(?:\s|$))"
    r"|(?<![\w@])@(?P<special>here|channel|everyone)\b"
    r"|(?P<email>(?<![\w.+\-])[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+)"
    r"|(?<![\w@])@(?P<user>[\w.\-]*\w)"
    r"|(?<![\w#])#(?P<channel>[\w\-]+)"
)


def escape(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped, as Slack escapes what people type."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def typed_message(ws: Workspace, typed: str) -> tuple[str, list[dict[str, Any]]]:
    """The ``text`` and ``blocks`` Slack sends for a message a person typed as ``typed``.

    As in Slack: ``&``, ``<`` and ``>`` are escaped; ``@alice`` or ``@U0ALICE`` (a member,
    by name or id) becomes ``<@U0ALICE>``; ``@here``, ``@channel`` and ``@everyone`` become
    ``<!here>``...; ``#general`` (a channel the workspace names) becomes ``<#C0GENERAL>``;
    a URL becomes ``<https://x.y>``, an address ``<mailto:a@b.c|a@b.c>``. Other ``@words``
    stay text. The blocks hold the same
    as rich text (text, user, broadcast, channel and link elements), unescaped.

    Example: ``typed_message(ws, "Tom & Jerry <3 @alice")`` gives
    ``"Tom &amp; Jerry &lt;3 <@U0ALICE>"``.
    """
    by_name = {user.name: user.id for user in ws.users.values()}
    channels = {name: channel for channel, name in ws.channel_names.items()}
    wire: list[str] = []
    elements: list[dict[str, Any]] = []

    def add_text(text: str) -> None:
        if not text:
            return
        wire.append(escape(text))
        if elements and elements[-1]["type"] == "text":
            elements[-1]["text"] += text
        else:
            elements.append({"type": "text", "text": text})

    end = 0
    for found in _TYPED.finditer(typed):
        token: str | None = None
        element: dict[str, Any] | None = None
        if found["url"]:
            token, element = escape(found["url"]), {"type": "link", "url": found["url"]}
        elif found["special"]:
            special = found["special"]
            token, element = f"!{special}", {"type": "broadcast", "range": special}
        elif found["email"]:
            email = found["email"]
            token = f"mailto:{email}|{email}"
            element = {"type": "link", "url": f"mailto:{email}", "text": email}
        elif found["user"]:
            name = found["user"]
            user = name if name in ws.users else by_name.get(name)
            if user is not None:
                token, element = f"@{user}", {"type": "user", "user_id": user}
        elif found["channel"] in channels:
            channel = channels[found["channel"]]
            token, element = f"#{channel}", {"type": "channel", "channel_id": channel}
        if token is None or element is None:
            continue  # an @word of nobody: text, sent with what follows it
        add_text(typed[end : found.start()])
        wire.append(f"<{token}>")
        elements.append(element)
        end = found.end()
    add_text(typed[end:])
    blocks = [
        {
            "type": "rich_text",
            "block_id": generated_id(),
            "elements": [{"type": "rich_text_section", "elements": elements}],
        }
    ]
    return "".join(wire), blocks if elements else []


def file_object(ws: Workspace, *, name: str, user: str) -> dict[str, Any]:
    """A file as a ``file_share`` message event lists it (the fields a bot is shown)."""
    extension = name.rpartition(".")[2].lower() if "." in name else "binary"
    file_id = ws.next_id("F")
    return {
        "id": file_id,
        "created": int(time.time()),
        "timestamp": int(time.time()),
        "name": name,
        "title": name,
        "mimetype": "application/octet-stream",
        "filetype": extension,
        "pretty_type": extension.upper(),
        "user": user,
        "user_team": ws.team_id,
        "mode": "hosted",
        "editable": False,
        "is_external": False,
        "external_type": "",
        "is_public": True,
        "public_url_shared": False,
        "display_as_bot": False,
        "username": "",
        "size": 1024,
        "url_private": f"https://files.slack.com/files-pri/{ws.team_id}-{file_id}/{name}",
        "permalink": f"https://{ws.team_domain}.slack.com/files/{user}/{file_id}/{name}",
    }


def channel_type(channel: str) -> str:
    """The ``channel_type`` of message events in ``channel``."""
    return {"C": "channel", "G": "group", "D": "im"}.get(channel[:1], "channel")


def message_event(
    ws: Workspace,
    *,
    message: dict[str, Any],
    channel: str,
    parent_user_id: str | None,
    subtype: str | None,
    root: dict[str, Any] | None = None,
    files: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ``message`` event for a message already shaped by ``Message.to_slack``.

    A ``thread_broadcast`` (a reply also sent to the channel) carries its thread's parent
    message as ``root`` and no ``parent_user_id``, as in Slack's example of that subtype; a
    ``file_share`` carries its ``files``.
    """
    event = copy.deepcopy(message)
    event.pop("team", None)
    if subtype:
        event["subtype"] = subtype
    if files is not None:
        event.update(files=files, upload=False, display_as_bot=False)
    event.update(channel=channel, event_ts=message["ts"], channel_type=channel_type(channel))
    if subtype == "thread_broadcast" and root is not None:
        event["root"] = root
    elif parent_user_id:
        event["parent_user_id"] = parent_user_id
    event["team"] = ws.team_id
    return event


def slash_command(
    ws: Workspace,
    *,
    user: str,
    command: str,
    text: str,
    channel: str,
    response_url: str,
    trigger_id: str,
) -> dict[str, str]:
    """The form fields of a slash command, as in slash_command.json."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": ws.team_id,
        "team_domain": ws.team_domain,
        "channel_id": channel,
        "channel_name": ws.channel_name(channel),
        "user_id": user,
        "user_name": ws.user(user).name,
        "command": command,
        "text": text,
        "api_app_id": ws.app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }
