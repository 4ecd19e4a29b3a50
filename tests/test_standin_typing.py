"""A person's message in the stand-in is sent as Slack sends it (bot/standin/payloads.py
``typed_message``, ``SlackStandIn.message_event``): escaped, mentions and links wrapped, and
the broadcast and file-share replies in Slack's shapes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bot.standin import SlackStandIn, StandInError, StandInUser

SECRET = "typing-signing-secret"
CHANNEL = "C0APPROVALS"


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    # Never started: message_event records and shapes without sending anything.
    yield SlackStandIn(
        signing_secret=SECRET,
        users=[StandInUser("U0ALICE", "alice"), StandInUser("U0JERRY", "jerry")],
        channels={CHANNEL: "approvals", "C0GENERAL": "general"},
    )


def _parent(standin: SlackStandIn) -> str:
    parent, _ = standin.message_event("U0ALICE", CHANNEL, "Which region?")
    return parent.ts


def _inline(event: dict[str, Any]) -> list[dict[str, Any]]:
    [block] = event["blocks"]
    [section] = block["elements"]
    return list(section["elements"])


def test_typed_text_is_escaped_and_mentions_of_members_wrapped(standin: SlackStandIn) -> None:
    recorded, event = standin.message_event(
        "U0ALICE", CHANNEL, "Tom & Jerry <3 @jerry and @U0ALICE, not @nobody", thread_ts=None
    )

    wire = "Tom &amp; Jerry &lt;3 <@U0JERRY> and <@U0ALICE>, not @nobody"
    assert event["text"] == recorded.text == wire, "Slack stores and sends the wire form"
    assert _inline(event) == [
        {"type": "text", "text": "Tom & Jerry <3 "},
        {"type": "user", "user_id": "U0JERRY"},
        {"type": "text", "text": " and "},
        {"type": "user", "user_id": "U0ALICE"},
        {"type": "text", "text": ", not @nobody"},
    ]


def test_links_addresses_channels_and_special_mentions_are_wrapped(
    standin: SlackStandIn,
) -> None:
    _, event = standin.message_event(
        "U0ALICE",
        CHANNEL,
        "@here see https://x.y/a?b=1&c=2. Mail ann@b.co or ask in #general",
    )

    assert event["text"] == (
        "<!here> see <https://x.y/a?b=1&amp;c=2>. Mail <mailto:ann@b.co|ann@b.co> "
        "or ask in <#C0GENERAL>"
    )
    kinds = [e["type"] for e in _inline(event)]
    assert kinds == ["broadcast", "text", "link", "text", "link", "text", "channel"]


def test_raw_text_is_sent_exactly_as_given(standin: SlackStandIn) -> None:
    wire = "Tom &amp; Jerry &lt;3 <@U0JERRY>"
    recorded, event = standin.message_event("U0ALICE", CHANNEL, wire, raw=True)

    assert event["text"] == recorded.text == wire
    assert _inline(event) == [{"type": "text", "text": wire}]


def test_a_thread_broadcast_carries_its_thread_parent_as_root(standin: SlackStandIn) -> None:
    parent = _parent(standin)
    standin.message_event("U0JERRY", CHANNEL, "earlier reply", thread_ts=parent)

    reply, event = standin.message_event(
        "U0ALICE", CHANNEL, "eu-west-1", thread_ts=parent, subtype="thread_broadcast"
    )

    assert (event["subtype"], event["thread_ts"], event["ts"]) == (
        "thread_broadcast",
        parent,
        reply.ts,
    )
    assert "parent_user_id" not in event, "Slack's broadcast names the parent in root"
    root = event["root"]
    assert (root["ts"], root["user"], root["thread_ts"], root["text"]) == (
        parent,
        "U0ALICE",
        parent,
        "Which region?",
    )
    assert (root["reply_count"], root["reply_users"]) == (2, ["U0JERRY", "U0ALICE"])
    assert [m.text for m in standin.thread(CHANNEL, parent)] == ["earlier reply", "eu-west-1"]


def test_a_thread_broadcast_outside_a_thread_is_refused(standin: SlackStandIn) -> None:
    with pytest.raises(StandInError, match="thread_ts"):
        standin.message_event("U0ALICE", CHANNEL, "x", subtype="thread_broadcast")


def test_files_make_a_file_share_message_with_their_names(standin: SlackStandIn) -> None:
    parent = _parent(standin)

    _, event = standin.message_event(
        "U0ALICE", CHANNEL, "", thread_ts=parent, files=["report.pdf", "chart.png"]
    )

    assert (event["subtype"], event["text"], event["parent_user_id"]) == (
        "file_share",
        "",
        "U0ALICE",
    )
    assert "blocks" not in event, "no text, no rich text"
    assert [(f["name"], f["filetype"], f["user"]) for f in event["files"]] == [
        ("report.pdf", "pdf", "U0ALICE"),
        ("chart.png", "png", "U0ALICE"),
    ]
    assert all(f["id"].startswith("F") for f in event["files"])
    assert (event["upload"], event["display_as_bot"]) == (False, False)
