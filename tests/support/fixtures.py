"""The example Slack payloads kept with the tests, in ``tests/fixtures/slack/``.

Each folder holds what reaches the bot (or answers it) one way:

- ``interactivity/``: interaction payloads (block_actions, view_submission, view_closed),
  which Slack sends as the form body ``payload=<url-encoded JSON>``;
- ``events/``: Events API bodies (event_callback envelopes, url_verification), sent as JSON;
- ``commands/``: slash command fields (and Slack's ``ssl_check`` ping), one JSON object of
  strings per file, which Slack sends form-encoded, one field per key;
- ``web_api/``: what the Web API answers the bot.

A fixture is named by its file name without ``.json``; names are unique across folders.
Loading gives a fresh copy, so a test may change what it loaded. Example::

    click = slack_fixture("block_actions_message")
    for name, payload in slack_fixtures(EVENTS).items():
        ...
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SLACK_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slack"

INTERACTIVITY = "interactivity"
EVENTS = "events"
COMMANDS = "commands"
WEB_API = "web_api"
GROUPS = (INTERACTIVITY, EVENTS, COMMANDS, WEB_API)


def slack_fixture_paths(group: str | None = None) -> list[Path]:
    """The fixture files of ``group`` (all groups when None), sorted; never empty."""
    if group is not None and group not in GROUPS:
        raise ValueError(f"no fixture group {group!r}; the groups are {GROUPS}")
    folders = [SLACK_FIXTURES / g for g in ([group] if group else GROUPS)]
    paths = sorted(path for folder in folders for path in folder.glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"no Slack fixtures in {', '.join(map(str, folders))}")
    return paths


def slack_fixtures(group: str | None = None) -> dict[str, dict[str, Any]]:
    """Every fixture of ``group`` (all groups when None) by name, freshly loaded."""
    return {path.stem: _load(path) for path in slack_fixture_paths(group)}


def slack_fixture(name: str) -> dict[str, Any]:
    """The fixture named ``name`` (its file name without ``.json``), freshly loaded."""
    found = [path for path in slack_fixture_paths() if path.stem == name]
    if len(found) != 1:
        raise LookupError(f"{len(found)} Slack fixtures named {name!r} in {SLACK_FIXTURES}")
    return _load(found[0])


def group_of(path: Path) -> str:
    """The group (folder) a fixture file is in."""
    return path.parent.name


def kinds_of(group: str, payload: dict[str, Any]) -> set[str]:
    """What a fixture is an example of, e.g. ``{"block_actions", "block_actions:home"}`` or
    ``{"event_callback", "message", "message:thread_reply"}``."""
    if group == INTERACTIVITY:
        return _interaction_kinds(payload)
    if group == EVENTS:
        return _event_kinds(payload)
    if group == COMMANDS:
        if "ssl_check" in payload:
            return {"ssl_check"}
        return {"slash_command"} | ({"slash_command:no_text"} if not payload["text"] else set())
    return {f"{WEB_API}:{'ok' if payload.get('ok') else 'error'}"}


def _interaction_kinds(payload: dict[str, Any]) -> set[str]:
    kind = str(payload["type"])
    kinds = {kind}
    if kind == "block_actions":
        container = payload.get("container") or {}
        if container.get("type") == "view":
            kinds.add(f"block_actions:{(payload.get('view') or {}).get('type')}")
        else:
            source = "ephemeral" if container.get("is_ephemeral") else "message"
            kinds.add(f"block_actions:{source}")
        if container.get("thread_ts"):
            kinds.add("block_actions:thread")
    return kinds


def _event_kinds(payload: dict[str, Any]) -> set[str]:
    kinds = {str(payload["type"])}
    event = payload.get("event")
    if not isinstance(event, dict):
        return kinds
    kind = str(event["type"])
    kinds.add(kind)
    if kind == "message":
        subtype = event.get("subtype")
        if subtype:
            kinds.add(f"message:{subtype}")
        elif event.get("bot_id"):
            kinds.add("message:from_app")
        if event.get("thread_ts") and event["thread_ts"] != event.get("ts"):
            kinds.add("message:thread_reply")
        if event.get("channel_type") == "im":
            kinds.add("message:im")
    if kind == "app_home_opened" and "view" in event:
        kinds.add("app_home_opened:with_view")
    return kinds


def _load(path: Path) -> dict[str, Any]:
    loaded = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} is not a JSON object")
    return loaded
