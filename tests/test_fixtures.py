"""The Slack payload fixtures in tests/fixtures/slack/: there, complete, and shaped like Slack's.

Tests read example payloads only from there (tests/support/fixtures.py), never from outside
the checkout: a clone on another machine has nothing beside it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bot.http.shape import parse_body
from tests.conftest import ROOT
from tests.support.fixtures import (
    COMMANDS,
    EVENTS,
    GROUPS,
    INTERACTIVITY,
    SLACK_FIXTURES,
    WEB_API,
    group_of,
    kinds_of,
    slack_fixture,
    slack_fixture_paths,
    slack_fixtures,
)

USED_BY_NAME = [
    "block_actions_message",  # test_prefetch, test_standin
    "view_submission",  # test_standin
    "event_thread_reply",  # test_standin
    "event_app_home_opened",  # test_prefetch, test_standin
    "slash_command",  # test_standin
    "chat_postMessage_response",  # test_standin
]
"""Fixtures the tests load by name."""

REQUIRED_KINDS = {
    "block_actions:message",
    "block_actions:thread",
    "block_actions:home",
    "block_actions:ephemeral",
    "view_submission",
    "view_closed",
    "url_verification",
    "event_callback",
    "message",
    "message:thread_reply",
    "message:from_app",
    "message:bot_message",
    "message:message_changed",
    "message:im",
    "app_home_opened",
    "app_home_opened:with_view",
    "slash_command",
    "slash_command:no_text",
    "ssl_check",
    "web_api:ok",
}
"""The payload types the tests rely on (test_form, test_prefetch, test_standin and the
fuzzer in tests/security/test_fuzz.py start from all of them)."""

SLASH_COMMAND_FIELDS = {
    "token", "team_id", "team_domain", "channel_id", "channel_name", "user_id", "user_name",
    "command", "text", "api_app_id", "is_enterprise_install", "response_url", "trigger_id",
}  # fmt: skip
ENVELOPE_FIELDS = {
    "token", "team_id", "api_app_id", "event", "type", "event_id", "event_time", "authorizations",
}  # fmt: skip


def test_every_group_has_fixtures_and_every_file_is_in_one() -> None:
    everything = sorted(SLACK_FIXTURES.rglob("*.json"))
    names = Counter(path.stem for path in everything)

    assert everything, f"no fixtures in {SLACK_FIXTURES}"
    assert all(slack_fixture_paths(group) for group in GROUPS)
    assert everything == slack_fixture_paths()
    assert all(
        group_of(path) in GROUPS and path.parent.parent == SLACK_FIXTURES for path in everything
    )
    assert [name for name, count in names.items() if count > 1] == []


def test_the_fixtures_cover_the_payload_types_the_tests_rely_on() -> None:
    covered = set().union(
        *(kinds_of(group_of(path), slack_fixture(path.stem)) for path in slack_fixture_paths())
    )

    assert REQUIRED_KINDS - covered == set()
    for name in USED_BY_NAME:
        assert slack_fixture(name), name


def _as_sent(group: str, payload: dict[str, Any]) -> tuple[str, str]:
    """The body and content type Slack sends ``payload`` with."""
    if group == INTERACTIVITY:
        return urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded"
    if group == COMMANDS:
        return urlencode(payload), "application/x-www-form-urlencoded"
    return json.dumps(payload), "application/json"


def test_every_request_fixture_has_a_shape_the_bot_accepts() -> None:
    for group in (INTERACTIVITY, EVENTS, COMMANDS):
        for name, payload in slack_fixtures(group).items():
            assert parse_body(*_as_sent(group, payload)) == payload, name


def test_interaction_fixtures_are_shaped_like_slacks() -> None:
    for name, payload in slack_fixtures(INTERACTIVITY).items():
        assert set(payload["user"]) >= {"id", "username", "name", "team_id"}, name
        assert {"api_app_id", "token", "team", "enterprise", "is_enterprise_install"} <= set(
            payload
        ), name
        if payload["type"] == "block_actions":
            container = payload["container"]
            assert payload["trigger_id"] and payload["state"] == {"values": {}}, name
            assert all(
                {"type", "action_id", "block_id", "action_ts"} <= set(a) for a in payload["actions"]
            )
            if container["type"] == "view":
                assert container["view_id"] == payload["view"]["id"], name
                assert not {"channel", "message", "response_url"} & set(payload), name
            else:
                assert container["channel_id"] == payload["channel"]["id"], name
                assert payload["response_url"].startswith("https://hooks.slack.com/actions/"), name
                # Slack leaves the message out of clicks on an ephemeral message.
                assert ("message" in payload) is not container["is_ephemeral"], name
                if "message" in payload:
                    assert payload["message"]["ts"] == container["message_ts"], name
        else:
            view = payload["view"]
            assert view["type"] == "modal" and view["callback_id"], name
            assert {"id", "hash", "state", "private_metadata", "root_view_id"} <= set(view), name
            inputs = {b["block_id"] for b in view["blocks"] if b["type"] == "input"}
            assert set(view["state"]["values"]) <= inputs, name
            if payload["type"] == "view_submission":
                assert payload["trigger_id"] and payload["response_urls"] == [], name
            else:
                assert payload["is_cleared"] is False and view["notify_on_close"], name


def test_event_fixtures_are_shaped_like_slacks() -> None:
    for name, payload in slack_fixtures(EVENTS).items():
        if payload["type"] == "url_verification":
            assert set(payload) == {"token", "challenge", "type"}, name
            continue
        assert payload["type"] == "event_callback" and set(payload) >= ENVELOPE_FIELDS, name
        assert payload["event_id"].startswith("Ev") and isinstance(payload["event_time"], int), name
        event = payload["event"]
        assert int(float(event["event_ts"])) == payload["event_time"], name
        if event["type"] == "message":
            assert event["channel_type"] in ("channel", "group", "im", "mpim"), name
            if event.get("subtype") == "message_changed":
                assert event["hidden"] is True, name
                assert event["message"]["ts"] == event["previous_message"]["ts"], name
            elif event.get("subtype") != "bot_message":
                assert event["user"] and event["ts"] == event["event_ts"], name


def test_command_fixtures_are_form_fields() -> None:
    for name, fields in slack_fixtures(COMMANDS).items():
        assert all(isinstance(value, str) for value in fields.values()), name
        if "ssl_check" in fields:
            assert fields == {"ssl_check": "1", "token": fields["token"]}, name
        else:
            assert set(fields) == SLASH_COMMAND_FIELDS and fields["command"].startswith("/"), name


def test_web_api_fixtures_are_answers() -> None:
    for name, answer in slack_fixtures(WEB_API).items():
        assert isinstance(answer["ok"], bool), name


def _values(node: Any, key: str) -> list[Any]:
    if isinstance(node, dict):
        found = [node[key]] if key in node else []
        return found + [v for value in node.values() for v in _values(value, key)]
    if isinstance(node, list):
        return [v for value in node for v in _values(value, key)]
    return []


def test_the_fixtures_are_from_one_made_up_workspace() -> None:
    fixtures = list(slack_fixtures().values())

    assert {v for f in fixtures for v in _values(f, "team_id")} == {"T06HRBR2QK"}
    assert {v for f in fixtures for v in _values(f, "api_app_id")} == {"A06HNDF7XP"}


def test_no_test_or_benchmark_reads_from_outside_the_checkout() -> None:
    # Spelt in pieces, so this file does not name what it looks for.
    outside = ("/work" + "/", "slack-" + "payloads", '"shared"', "../" + "shared")
    files = [
        path
        for folder in (ROOT / "tests", ROOT / "bench")
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.suffix in ("", ".py", ".sh", ".toml", ".cfg", ".ini")
    ]

    assert files
    found = [
        f"{path.relative_to(ROOT)}: {needle}"
        for path in files
        if path != Path(__file__).resolve()
        for needle in outside
        if needle in path.read_text(errors="replace")
    ]
    assert found == []
