"""manifest.yml: a valid Slack app manifest that matches what the code listens to."""

from __future__ import annotations

import re

import yaml

from bot.config import Settings
from bot.standin import scopes as standin_scopes
from tests.conftest import ROOT


def _manifest() -> dict:
    return yaml.safe_load((ROOT / "manifest.yml").read_text())


def test_manifest_routes_events_and_interactivity_to_slack_events() -> None:
    settings = _manifest()["settings"]
    assert settings["event_subscriptions"]["request_url"].endswith("/slack/events")
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["interactivity"]["request_url"].endswith("/slack/events")


def test_manifest_grants_what_the_bot_calls_and_receives() -> None:
    manifest = _manifest()
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # chat.postMessage / chat.update / chat.postEphemeral; users.info; usergroups.list
    assert {"chat:write", "users:read", "usergroups:read"} <= scopes
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    # Thread replies arrive as message events, which need the matching history scopes.
    for event, scope in [
        ("message.channels", "channels:history"),
        ("message.groups", "groups:history"),
        ("message.im", "im:history"),
    ]:
        assert event in events
        assert scope in scopes
    # After a post's answer is lost, conversations.history looks for it before posting again.
    assert {"channels:history", "groups:history", "im:history"} <= scopes
    # conversations.members: who is in a handoff's channel (HANDOFF_ALLOW_ANY_CHANNEL_MEMBER).
    assert {"channels:read", "groups:read", "im:read", "mpim:read"} <= scopes
    assert manifest["features"]["bot_user"]["display_name"]


def test_manifest_declares_the_slash_command_and_the_app_home() -> None:
    manifest = _manifest()
    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == Settings().slash_command
    assert command["url"].endswith("/slack/events")
    # Escaped, `reassign <id> #channel` arrives as <#C123|name>: a channel id, not a name.
    assert command["should_escape"] is True
    assert "commands" in manifest["oauth_config"]["scopes"]["bot"]
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
    assert "app_home_opened" in manifest["settings"]["event_subscriptions"]["bot_events"]


_CALL = re.compile(r"\.((?:auth|chat|conversations|users|usergroups|views)_[A-Za-z_]+)\(")
"""A Web API call in the code, as slack_sdk names its methods (``chat_postMessage``)."""
_KINDS = ("channels", "groups", "im")
"""The conversations a handoff is posted in, and so read: public, private, DMs."""


def _methods_the_bot_calls() -> set[str]:
    sources = [
        path
        for package in ("bot", "handlers", "worker")
        for path in (ROOT / package).rglob("*.py")
        if "standin" not in path.parts  # the stand-in answers the calls; it makes none
    ]
    return {name.replace("_", ".") for path in sources for name in _CALL.findall(path.read_text())}


def test_every_method_the_bot_calls_has_its_scope_in_the_manifest() -> None:
    called = _methods_the_bot_calls()
    granted = set(_manifest()["oauth_config"]["scopes"]["bot"])
    # The scan finds what it should (a method the stand-in does not know would pass unseen).
    assert {"chat.postMessage", "conversations.join", "conversations.open", "views.open"} <= called
    for method in sorted(called):
        assert method in standin_scopes.SCOPES, f"the stand-in does not answer {method}"
        needed = standin_scopes.SCOPES[method]
        if needed is None:
            continue
        wanted = [needed.format(kind=kind) for kind in _KINDS] if "{kind}" in needed else [needed]
        missing = [scope for scope in wanted if scope not in granted]
        assert missing == [], f"{method} needs {missing}, which manifest.yml does not grant"
    # chat.postMessage in a public channel the bot has not joined yet.
    assert standin_scopes.POST_ANYWHERE in granted


def test_the_slack_setup_explains_every_scope_the_manifest_grants_and_no_other() -> None:
    # The README's Slack setup is docs/slack-setup.md: an upgrade's new scopes (channels:join,
    # im:write) must be named there, with why, for an admin to reinstall the app.
    setup = (ROOT / "docs" / "slack-setup.md").read_text()
    section = setup.split("## Scopes, and why each is needed", 1)[1].split("\n## ", 1)[0]
    explained = re.findall(r"^\| `([a-z.:_]+)` \|", section, flags=re.MULTILINE)
    granted = _manifest()["oauth_config"]["scopes"]["bot"]

    assert sorted(explained) == sorted(granted)
    readme = (ROOT / "README.md").read_text()
    assert "(docs/slack-setup.md)" in readme
    assert "`channels:join`" in readme and "`im:write`" in readme
