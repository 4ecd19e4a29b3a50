"""The Slack stand-in over real HTTP: a real WebClient calls it, a real server receives from it."""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient

from bot.standin import (
    BotUnreachable,
    ElementNotFound,
    Message,
    SlackStandIn,
    StandInError,
    StandInUser,
    interaction_body,
)
from tests.support.fixtures import slack_fixture

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
ALICE = StandInUser("U0ALICE", "alice", tz="Europe/Paris")
BOB = StandInUser("U0BOB", "bob", is_admin=True, is_owner=True)

APPROVAL_BLOCKS: list[dict[str, Any]] = [
    {"type": "section", "block_id": "summary", "text": {"type": "mrkdwn", "text": "*refund* A1"}},
    {
        "type": "actions",
        "block_id": "decide",
        "elements": [
            {
                "type": "button",
                "action_id": "approve",
                "value": "ho_01",
                "style": "primary",
                "text": {"type": "plain_text", "text": "Approve"},
            },
            {
                "type": "button",
                "action_id": "reject",
                "value": "ho_01",
                "style": "danger",
                "text": {"type": "plain_text", "text": "Reject"},
            },
        ],
    },
]

REASON_MODAL: dict[str, Any] = {
    "type": "modal",
    "callback_id": "reject_reason",
    "private_metadata": '{"handoff_id": "ho_01"}',
    "title": {"type": "plain_text", "text": "Reject request"},
    "submit": {"type": "plain_text", "text": "Reject"},
    "close": {"type": "plain_text", "text": "Cancel"},
    "blocks": [
        {
            "type": "input",
            "block_id": "reason",
            "optional": True,
            "label": {"type": "plain_text", "text": "Reason"},
            "element": {"type": "plain_text_input", "action_id": "value", "multiline": True},
        },
        {
            "type": "input",
            "block_id": "severity",
            "label": {"type": "plain_text", "text": "Severity"},
            "element": {
                "type": "static_select",
                "action_id": "pick",
                "options": [
                    {"text": {"type": "plain_text", "text": "Low"}, "value": "low"},
                    {"text": {"type": "plain_text", "text": "High"}, "value": "high"},
                ],
            },
        },
    ],
}


# A stand-in bot: a real HTTP server that checks Slack's signature and records what arrived.


@dataclass
class Received:
    """One request the recording bot received."""

    headers: dict[str, str]
    body: bytes
    signature_valid: bool

    def form(self) -> dict[str, str]:
        return dict(parse_qsl(self.body.decode(), keep_blank_values=True))

    def payload(self) -> dict[str, Any]:
        return dict(json.loads(self.form()["payload"]))

    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


Answer = Callable[[Received], tuple[int, bytes]]


@dataclass
class RecordingBot:
    """Answers 200 with an empty body unless ``answer`` says otherwise."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    answer: Answer | None = None


def _recording_handler(bot: RecordingBot, verifier: SignatureVerifier) -> type:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            got = Received(headers, body, verifier.is_valid_request(body, headers))
            bot.received.append(got)
            status, answer = bot.answer(got) if bot.answer else (200, b"")
            if not got.signature_valid and bot.answer is None:
                status, answer = 401, b"invalid signature"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class QuietServer(ThreadingHTTPServer):
    """The recording bot's server: a client that gave up (ack timeout) is no error here."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    with SlackStandIn(
        signing_secret=SECRET,
        users=[ALICE, BOB],
        usergroups={"S0REVIEWERS": ["U0ALICE", "U0BOB"]},
        channels={"C0APPROVALS": "approvals"},
    ) as running:
        running.invite_bot("C0APPROVALS")  # the bot is in no channel until it joins
        yield running


@pytest.fixture
def client(standin: SlackStandIn) -> WebClient:
    return WebClient(token=standin.bot_token, base_url=standin.api_url, timeout=5)


@pytest.fixture
def bot(standin: SlackStandIn) -> Iterator[RecordingBot]:
    recording = RecordingBot()
    server = QuietServer(("127.0.0.1", 0), _recording_handler(recording, SignatureVerifier(SECRET)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    recording.url = f"http://127.0.0.1:{server.server_address[1]}/slack/events"
    standin.bot_url = recording.url
    yield recording
    server.shutdown()
    server.server_close()
    thread.join()


def post_approval(client: WebClient, channel: str = "C0APPROVALS") -> str:
    answer = client.chat_postMessage(
        channel=channel,
        text="Approval needed: refund",
        blocks=APPROVAL_BLOCKS,
        metadata={"event_type": "handoff_posted", "event_payload": {"handoff_id": "ho_01"}},
    )
    return str(answer["ts"])


def open_modal_on_click(
    standin: SlackStandIn,
    client: WebClient,
    bot: RecordingBot,
    modal: dict[str, Any] = REASON_MODAL,
) -> Any:
    """Have the bot open ``modal`` (REASON_MODAL) from Alice's Reject click, as a handler
    would."""

    def answer(got: Received) -> tuple[int, bytes]:
        client.views_open(trigger_id=got.payload()["trigger_id"], view=modal)
        return 200, b""

    bot.answer = answer
    ts = post_approval(client)
    standin.click("U0ALICE", standin.message("C0APPROVALS", ts), "reject")
    bot.answer = None
    return standin.views("U0ALICE")[-1]


# The Web API, as the bot sees it through slack_sdk


def test_post_message_is_recorded_and_answered_like_slack(
    standin: SlackStandIn, client: WebClient
) -> None:
    answer = client.chat_postMessage(
        channel="C0APPROVALS",
        text="Approval needed: refund",
        blocks=APPROVAL_BLOCKS,
        metadata={"event_type": "handoff_posted", "event_payload": {"handoff_id": "ho_01"}},
    )

    example = slack_fixture("chat_postMessage_response")
    assert set(example) <= set(answer.data)
    assert set(example["message"]) <= set(answer["message"])
    [message] = standin.messages("C0APPROVALS")
    assert message.ts == answer["ts"]
    assert (message.user, message.bot_id) == ("U0BOT", "B0BOT")
    assert message.blocks == APPROVAL_BLOCKS
    assert message.metadata == {
        "event_type": "handoff_posted",
        "event_payload": {"handoff_id": "ho_01"},
    }
    assert (
        message.permalink
        == client.chat_getPermalink(channel="C0APPROVALS", message_ts=message.ts)["permalink"]
    )
    assert standin.calls("chat.postMessage")[0].params["blocks"] == APPROVAL_BLOCKS


def test_every_post_gets_a_unique_increasing_ts(standin: SlackStandIn, client: WebClient) -> None:
    stamps = [client.chat_postMessage(channel="C0APPROVALS", text=str(i))["ts"] for i in range(5)]

    assert stamps == sorted(set(stamps), key=float)
    assert all(len(ts.split(".")[1]) == 6 for ts in stamps)


def test_blocks_sent_without_ids_get_them_as_in_slack(
    standin: SlackStandIn, client: WebClient
) -> None:
    button = {"type": "button", "text": {"type": "plain_text", "text": "Go"}}
    client.chat_postMessage(
        channel="C0APPROVALS", text="x", blocks=[{"type": "actions", "elements": [button]}]
    )

    [block] = standin.messages()[0].blocks
    assert block["block_id"] and block["elements"][0]["action_id"]


def test_thread_replies_are_listed_by_thread_and_conversations_replies(
    standin: SlackStandIn, client: WebClient
) -> None:
    parent = post_approval(client)
    client.chat_postMessage(channel="C0APPROVALS", text="first", thread_ts=parent)
    client.chat_postMessage(
        channel="C0APPROVALS", text="second", thread_ts=parent, reply_broadcast=True
    )

    assert [m.text for m in standin.thread("C0APPROVALS", parent)] == ["first", "second"]
    assert [m.thread_ts for m in standin.messages()] == [None, parent, parent]
    replies = client.conversations_replies(channel="C0APPROVALS", ts=parent)["messages"]
    assert [m["text"] for m in replies] == ["Approval needed: refund", "first", "second"]
    assert replies[0]["reply_count"] == 2


def test_update_without_blocks_removes_them_and_keeps_the_history(
    standin: SlackStandIn, client: WebClient
) -> None:
    ts = post_approval(client)

    answer = client.chat_update(channel="C0APPROVALS", ts=ts, text="Approved by alice")

    message = standin.message("C0APPROVALS", ts)
    assert answer["ts"] == ts
    assert (message.text, message.blocks) == ("Approved by alice", []), "as Slack does now"
    assert [v.text for v in message.updates] == ["Approval needed: refund"]
    assert message.updates[0].blocks == APPROVAL_BLOCKS
    client.chat_update(channel="C0APPROVALS", ts=ts, text="Done", blocks=APPROVAL_BLOCKS[:1])
    assert standin.message("C0APPROVALS", ts).blocks == APPROVAL_BLOCKS[:1]


@pytest.mark.parametrize(
    ("method", "kwargs", "error"),
    [
        (
            "chat_update",
            {"channel": "C0APPROVALS", "ts": "1.000100", "text": "x"},
            "message_not_found",
        ),
        ("chat_postMessage", {"channel": "approvals", "text": "x"}, "channel_not_found"),
        ("chat_postMessage", {"channel": "C0APPROVALS"}, "no_text"),
        ("users_info", {"user": "U0NOBODY"}, "user_not_found"),
        ("usergroups_users_list", {"usergroup": "S0NONE"}, "no_such_subteam"),
        (
            "chat_postEphemeral",
            {"channel": "C0APPROVALS", "user": "U0NOBODY", "text": "x"},
            "user_not_in_channel",
        ),
    ],
)
@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
def test_web_api_errors_are_slacks(
    client: WebClient, method: str, kwargs: dict[str, Any], error: str
) -> None:
    with pytest.raises(SlackApiError) as raised:
        getattr(client, method)(**kwargs)

    assert raised.value.response.status_code == 200
    assert raised.value.response["error"] == error


def test_blocks_past_slack_limits_are_invalid_blocks(client: WebClient) -> None:
    divider = {"type": "divider"}
    long_button = {
        "type": "actions",
        "elements": [{"type": "button", "text": {"type": "plain_text", "text": "x" * 76}}],
    }

    for blocks in ([divider] * 51, [long_button]):
        with pytest.raises(SlackApiError) as raised:
            client.chat_postMessage(channel="C0APPROVALS", text="x", blocks=blocks)
        assert raised.value.response["error"] == "invalid_blocks"
        assert raised.value.response["errors"]


def _button(action_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": "Go"},
        **extra,
    }


def _confirm(**changes: Any) -> dict[str, Any]:
    plain = {"type": "plain_text"}
    return {
        "title": {**plain, "text": "Sure?"},
        "text": {**plain, "text": "The agent will act."},
        "confirm": {**plain, "text": "Yes"},
        "deny": {**plain, "text": "No"},
        **changes,
    }


@pytest.mark.parametrize(
    ("confirm", "pointer"),
    [
        (_confirm(text={"type": "mrkdwn", "text": "The *agent* will act."}), "confirm/text"),
        (_confirm(title={"type": "plain_text", "text": "x" * 101}), "confirm/title/text"),
        (_confirm(text={"type": "plain_text", "text": "x" * 301}), "confirm/text/text"),
        (_confirm(confirm={"type": "plain_text", "text": "x" * 31}), "confirm/confirm/text"),
        (_confirm(deny={"type": "plain_text", "text": "x" * 31}), "confirm/deny/text"),
        (_confirm(deny={"type": "mrkdwn", "text": "No"}), "confirm/deny"),
    ],
)
def test_a_confirm_dialog_slack_would_refuse_is_invalid_blocks(
    client: WebClient, confirm: dict[str, Any], pointer: str
) -> None:
    blocks = [{"type": "actions", "elements": [_button("go", confirm=confirm)]}]

    with pytest.raises(SlackApiError) as raised:
        client.chat_postMessage(channel="C0APPROVALS", text="x", blocks=blocks)

    assert raised.value.response["error"] == "invalid_blocks"
    assert any(f"/blocks/0/elements/0/{pointer}]" in e for e in raised.value.response["errors"])


def test_an_actions_block_takes_at_most_25_elements(client: WebClient) -> None:
    elements = [_button(f"b{i}", confirm=_confirm()) for i in range(26)]

    with pytest.raises(SlackApiError) as raised:
        client.chat_postMessage(
            channel="C0APPROVALS", text="x", blocks=[{"type": "actions", "elements": elements}]
        )
    assert raised.value.response["error"] == "invalid_blocks"
    assert raised.value.response["errors"] == [
        "must be less than 26 items [json-pointer:/blocks/0/elements]"
    ]
    client.chat_postMessage(
        channel="C0APPROVALS", text="x", blocks=[{"type": "actions", "elements": elements[:25]}]
    )


def test_a_wrong_or_missing_token_is_refused(standin: SlackStandIn) -> None:
    wrong = WebClient(token="xoxb-wrong", base_url=standin.api_url)
    anonymous = WebClient(base_url=standin.api_url)

    with pytest.raises(SlackApiError, match="invalid_auth"):
        wrong.auth_test()
    with pytest.raises(SlackApiError, match="not_authed"):
        anonymous.auth_test()


def test_form_bodies_with_a_token_field_work_and_unknown_methods_are_refused(
    standin: SlackStandIn,
) -> None:
    def call(method: str, fields: dict[str, str]) -> dict[str, Any]:
        body = urlencode(fields).encode()
        request = urllib.request.Request(standin.api_url + method, data=body)
        with urllib.request.urlopen(request, timeout=5) as answer:
            return dict(json.loads(answer.read()))

    blocks = json.dumps(APPROVAL_BLOCKS)
    posted = call(
        "chat.postMessage", {"token": standin.bot_token, "channel": "C0X", "blocks": blocks}
    )

    assert posted["ok"] and standin.messages("C0X")[0].blocks == APPROVAL_BLOCKS
    assert call("chat.fly", {"token": standin.bot_token})["error"] == "unknown_method"


def test_auth_users_groups_and_conversations_describe_the_workspace(
    standin: SlackStandIn, client: WebClient
) -> None:
    me = client.auth_test()
    alice = client.users_info(user="U0ALICE")["user"]
    bob = client.users_info(user="U0BOB")["user"]

    assert (me["user_id"], me["bot_id"], me["team_id"]) == ("U0BOT", "B0BOT", "T0STANDIN")
    assert (alice["name"], alice["tz"], alice["is_admin"], alice["is_bot"]) == (
        "alice",
        "Europe/Paris",
        False,
        False,
    )
    assert alice["tz_offset"] in (3600, 7200) and alice["profile"]["real_name"] == "alice"
    assert (bob["is_admin"], bob["is_owner"]) == (True, True)
    assert client.users_info(user="U0BOT")["user"]["is_bot"]
    assert client.usergroups_users_list(usergroup="S0REVIEWERS")["users"] == ["U0ALICE", "U0BOB"]
    assert client.conversations_info(channel="C0APPROVALS")["channel"]["name"] == "approvals"


def test_post_ephemeral_is_seen_only_by_its_user(standin: SlackStandIn, client: WebClient) -> None:
    answer = client.chat_postEphemeral(
        channel="C0APPROVALS", user="U0ALICE", text="Already decided"
    )

    [seen] = standin.ephemerals("U0ALICE")
    assert (seen.text, seen.source, seen.ts) == (
        "Already decided",
        "chat.postEphemeral",
        answer["message_ts"],
    )
    assert standin.ephemerals("U0BOB") == []


def test_an_ephemeral_needs_its_person_in_the_channel_and_the_bot_in_a_private_one(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.set_channel_members("C0APPROVALS", ["U0ALICE", standin.bot_user_id])
    standin.make_private("C0SECRET")
    standin.set_channel_members("C0SECRET", ["U0ALICE"])  # the bot was never invited

    refused = [
        _error(lambda: client.chat_postEphemeral(channel="C0APPROVALS", user="U0BOB", text="x")),
        _error(lambda: client.chat_postEphemeral(channel="C0SECRET", user="U0ALICE", text="x")),
    ]

    assert [r["error"] for r in refused] == ["user_not_in_channel", "channel_not_found"]
    assert standin.ephemerals("U0BOB") == standin.ephemerals("U0ALICE") == []
    standin.invite_bot("C0SECRET")
    assert client.chat_postEphemeral(channel="C0SECRET", user="U0ALICE", text="x")["ok"]


# Modals and trigger ids


def test_views_open_needs_a_trigger_id_the_standin_issued(client: WebClient) -> None:
    with pytest.raises(SlackApiError, match="invalid_trigger_id"):
        client.views_open(trigger_id="12345.98765.abcd", view=REASON_MODAL)


def test_a_click_trigger_opens_one_modal_for_the_person_who_clicked(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)

    assert (view.user, view.callback_id, view.private_metadata) == (
        "U0ALICE",
        "reject_reason",
        '{"handoff_id": "ho_01"}',
    )
    assert (view.title, view.position, view.closed) == ("Reject request", 0, False)
    assert view.view["state"] == {"values": {}} and view.hash == view.view["hash"]
    with pytest.raises(SlackApiError, match="exchanged_trigger_id"):
        client.views_open(trigger_id=view.trigger_id, view=REASON_MODAL)


def test_a_trigger_id_expires(standin: SlackStandIn, client: WebClient, bot: RecordingBot) -> None:
    standin.trigger_ttl = 0.2
    standin.click("U0ALICE", standin.message("C0APPROVALS", post_approval(client)), "reject")
    trigger_id = bot.received[0].payload()["trigger_id"]

    time.sleep(0.3)

    with pytest.raises(SlackApiError, match="expired_trigger_id"):
        client.views_open(trigger_id=trigger_id, view=REASON_MODAL)


def test_views_update_replaces_the_modal_and_refuses_a_stale_hash(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    thanks = {
        **REASON_MODAL,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "ok"}}],
    }

    updated = client.views_update(view_id=view.id, hash=view.hash, view=thanks)["view"]

    assert updated["id"] == view.id and updated["hash"] != view.hash
    assert standin.view(view.id).blocks[0]["text"]["text"] == "ok"
    with pytest.raises(SlackApiError, match="hash_conflict"):
        client.views_update(view_id=view.id, hash=view.hash, view=thanks)


def test_views_publish_keeps_one_home_tab_per_person(
    standin: SlackStandIn, client: WebClient
) -> None:
    home: dict[str, Any] = {
        "type": "home",
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "1"}}],
    }

    first = client.views_publish(user_id="U0ALICE", view=home)["view"]
    client.views_publish(user_id="U0ALICE", view={**home, "blocks": home["blocks"] * 2})

    published = standin.home("U0ALICE")
    assert published is not None and published.id == first["id"] and len(published.updates) == 1
    assert standin.home("U0BOB") is None and standin.views() == []


def test_a_modal_past_slack_limits_is_refused(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    too_long = {**REASON_MODAL, "title": {"type": "plain_text", "text": "x" * 25}}

    with pytest.raises(SlackApiError, match="invalid_arguments"):
        client.views_update(view_id=view.id, view=too_long)
    with pytest.raises(SlackApiError, match="invalid_arguments"):
        client.views_update(
            view_id=view.id, view={**REASON_MODAL, "blocks": [{"type": "divider"}] * 101}
        )


def _input(block_id: str, element: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "input",
        "block_id": block_id,
        "label": {"type": "plain_text", "text": block_id},
        "element": {"action_id": "value", **element},
        **extra,
    }


YES = {"text": {"type": "plain_text", "text": "Yes"}, "value": "true"}
TYPED_MODAL: dict[str, Any] = {
    **REASON_MODAL,
    "blocks": [
        _input("amount", {"type": "number_input", "is_decimal_allowed": True, "max_value": "500"}),
        _input("items", {"type": "number_input", "is_decimal_allowed": False, "min_value": "1"}),
        _input("agree", {"type": "checkboxes", "options": [YES]}, optional=True),
        _input("ship_by", {"type": "datepicker"}, optional=True),
        _input("note", {"type": "plain_text_input", "min_length": 3}, optional=True),
    ],
}


def test_submit_view_sends_numbers_checkboxes_and_dates_as_slack_does(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot, TYPED_MODAL)

    standin.submit_view(
        "U0ALICE",
        view,
        {
            "amount": {"value": "12.5"},
            "items": {"value": "3"},
            "agree": {"value": ["true"]},
            "ship_by": {"value": "2026-03-01"},
        },
    )

    assert bot.received[-1].payload()["view"]["state"]["values"] == {
        "amount": {"value": {"type": "number_input", "value": "12.5"}},
        "items": {"value": {"type": "number_input", "value": "3"}},
        "agree": {"value": {"type": "checkboxes", "selected_options": [YES]}},
        "ship_by": {"value": {"type": "datepicker", "selected_date": "2026-03-01"}},
        "note": {"value": {"type": "plain_text_input", "value": None}},
    }
    again = open_modal_on_click(standin, client, bot, TYPED_MODAL)
    standin.submit_view("U0ALICE", again, {"amount": {"value": "1"}, "items": {"value": "1"}})
    left_empty = bot.received[-1].payload()["view"]["state"]["values"]
    assert left_empty["agree"] == {"value": {"type": "checkboxes", "selected_options": []}}
    assert left_empty["ship_by"] == {"value": {"type": "datepicker", "selected_date": None}}


@pytest.mark.parametrize(
    ("entered", "refusal"),
    [
        ({"amount": "twelve"}, "takes a number"),
        ({"items": "2.5"}, "takes a whole number"),
        ({"items": "0"}, "within its min_value 1"),
        ({"amount": "500.5"}, "within its max_value 500"),
        ({"ship_by": "2026-02-30"}, "gives a date YYYY-MM-DD"),
        ({"note": "ab"}, "takes 3..3000 characters"),
        ({"agree": "maybe"}, "no option 'maybe'"),
    ],
)
def test_submit_view_refuses_what_slacks_client_would_not_send(
    standin: SlackStandIn,
    client: WebClient,
    bot: RecordingBot,
    entered: dict[str, str],
    refusal: str,
) -> None:
    view = open_modal_on_click(standin, client, bot, TYPED_MODAL)
    sent = len(bot.received)
    values = {"amount": "1", "items": "1", **entered}

    with pytest.raises(StandInError, match=refusal):
        standin.submit_view("U0ALICE", view, {k: {"value": v} for k, v in values.items()})
    assert len(bot.received) == sent


@pytest.mark.parametrize(
    ("block", "pointer"),
    [
        (
            _input(
                "a", {"type": "plain_text_input"}, hint={"type": "plain_text", "text": "h" * 2001}
            ),
            "/hint/text",
        ),
        (_input("a", {"type": "checkboxes", "options": [YES] * 11}), "/element/options"),
        (
            _input(
                "a",
                {
                    "type": "static_select",
                    "options": [{"text": {"type": "plain_text", "text": "x" * 76}, "value": "1"}],
                },
            ),
            "/element/options/0/text/text",
        ),
        (
            _input(
                "a",
                {
                    "type": "static_select",
                    "options": [{"text": {"type": "plain_text", "text": "x"}, "value": "v" * 151}],
                },
            ),
            "/element/options/0/value",
        ),
        (_input("a", {"type": "number_input"}), "/element"),
        (
            _input(
                "a",
                {
                    "type": "number_input",
                    "is_decimal_allowed": False,
                    "min_value": "5",
                    "max_value": "1",
                },
            ),
            "/element/min_value",
        ),
        (
            _input("a", {"type": "number_input", "is_decimal_allowed": True, "max_value": "lots"}),
            "/element/max_value",
        ),
        (
            _input("a", {"type": "plain_text_input", "min_length": 10, "max_length": 5}),
            "/element/min_length",
        ),
        (
            _input("a", {"type": "datepicker", "initial_date": "03/01/2026"}),
            "/element/initial_date",
        ),
        (
            _input(
                "a",
                {"type": "datepicker", "placeholder": {"type": "plain_text", "text": "p" * 151}},
            ),
            "/element/placeholder/text",
        ),
    ],
)
def test_an_input_slack_would_refuse_is_not_opened(
    standin: SlackStandIn,
    client: WebClient,
    bot: RecordingBot,
    block: dict[str, Any],
    pointer: str,
) -> None:
    view = open_modal_on_click(standin, client, bot)

    with pytest.raises(SlackApiError) as raised:
        client.views_update(view_id=view.id, view={**REASON_MODAL, "blocks": [block]})

    assert raised.value.response["error"] == "invalid_arguments"
    assert any(
        f"/view/blocks/0{pointer}]" in e
        for e in raised.value.response["response_metadata"]["messages"]
    )


# Fault injection


def test_a_rate_limit_is_honoured_by_the_rate_limit_retry_handler(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.fail_next("chat.postMessage", status=429, retry_after=0)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=1))

    answer = client.chat_postMessage(channel="C0APPROVALS", text="hi")

    assert answer["ok"]
    assert [c.http_status for c in standin.calls("chat.postMessage")] == [429, 200]
    assert standin.calls()[0].response == {"ok": False, "error": "ratelimited"}
    assert len(standin.messages()) == 1


def test_a_rate_limit_without_a_retry_handler_raises_with_retry_after(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.fail_next("chat.update", status=429)

    with pytest.raises(SlackApiError) as raised:
        client.chat_update(channel="C0APPROVALS", ts="1.000100", text="x")

    assert raised.value.response.status_code == 429
    assert raised.value.response.headers["Retry-After"] == "1"


def test_server_errors_fail_the_given_number_of_times(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.fail_next("chat.postMessage", status=503, times=2)

    with pytest.raises(SlackApiError) as raised:
        client.chat_postMessage(channel="C0APPROVALS", text="hi")
    client.retry_handlers.append(
        ServerErrorRetryHandler(interval_calculator=FixedValueRetryIntervalCalculator(0.01))
    )
    client.chat_postMessage(channel="C0APPROVALS", text="hi")

    assert raised.value.response.status_code == 503
    assert raised.value.response["error"] == "service_unavailable"
    assert [c.http_status for c in standin.calls()] == [503, 503, 200]


def test_an_injected_error_is_an_ok_false_answer(standin: SlackStandIn, client: WebClient) -> None:
    standin.fail_next("*", error="channel_not_found")

    with pytest.raises(SlackApiError) as raised:
        client.chat_postMessage(channel="C0APPROVALS", text="hi")

    assert (raised.value.response.status_code, raised.value.response["error"]) == (
        200,
        "channel_not_found",
    )
    assert standin.messages() == []


def test_a_reset_connection_is_retried_by_slack_sdk_default_handler(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.fail_next("chat.postMessage", reset_connection=True)

    client.chat_postMessage(channel="C0APPROVALS", text="hi")

    assert [c.http_status for c in standin.calls()] == [0, 200]
    assert len(standin.messages()) == 1


def test_a_slow_answer_times_out_the_client_yet_the_post_happens(standin: SlackStandIn) -> None:
    # slack_sdk annotates timeout as int but passes it to urllib, which takes float seconds.
    impatient = WebClient(token=standin.bot_token, base_url=standin.api_url, timeout=0.2)  # type: ignore[arg-type]
    impatient.retry_handlers.clear()
    standin.fail_next("chat.postMessage", status=200, delay=0.5)

    with pytest.raises(TimeoutError):
        impatient.chat_postMessage(channel="C0APPROVALS", text="hi")

    posted = standin.wait_for(standin.messages, timeout=2)

    assert [m.text for m in posted] == ["hi"]


# Acting as a person


def test_click_sends_a_signed_block_actions_payload_naming_the_button(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    ts = post_approval(client)

    response = standin.click("U0ALICE", standin.message("C0APPROVALS", ts), "approve")

    assert response.status == 200
    [got] = bot.received
    assert got.signature_valid
    assert got.headers["content-type"] == "application/x-www-form-urlencoded"
    payload = got.payload()
    example = slack_fixture("block_actions_message")
    assert set(example) == set(payload)
    assert payload["user"] == {
        "id": "U0ALICE",
        "username": "alice",
        "name": "alice",
        "team_id": "T0STANDIN",
    }
    assert payload["container"] == {
        "type": "message",
        "message_ts": ts,
        "channel_id": "C0APPROVALS",
        "is_ephemeral": False,
    }
    assert payload["channel"] == {"id": "C0APPROVALS", "name": "approvals"}
    assert payload["message"]["blocks"] == APPROVAL_BLOCKS
    assert payload["message"]["metadata"]["event_payload"] == {"handoff_id": "ho_01"}
    [action] = payload["actions"]
    assert (action["action_id"], action["block_id"], action["value"], action["type"]) == (
        "approve",
        "decide",
        "ho_01",
        "button",
    )
    assert payload["response_url"].startswith(standin.url + "response/")
    assert payload["trigger_id"] != ""


def test_clicking_what_the_message_does_not_have_raises(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    message = standin.message("C0APPROVALS", post_approval(client))

    with pytest.raises(ElementNotFound, match="decide/approve"):
        standin.click("U0ALICE", message, "escalate")
    with pytest.raises(ElementNotFound):
        standin.click("U0ALICE", message, "approve", block_id="summary")
    with pytest.raises(StandInError, match="U0NOBODY"):
        standin.click("U0NOBODY", message, "approve")
    assert bot.received == []


def test_a_stale_snapshot_can_still_be_clicked_but_a_deleted_message_cannot(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    ts = post_approval(client)
    seen_by_bob = standin.message("C0APPROVALS", ts)
    client.chat_update(channel="C0APPROVALS", ts=ts, text="Approved", blocks=APPROVAL_BLOCKS[:1])

    standin.click("U0BOB", seen_by_bob, "reject")
    with pytest.raises(ElementNotFound):
        standin.click("U0BOB", standin.message("C0APPROVALS", ts), "reject")
    client.chat_delete(channel="C0APPROVALS", ts=ts)
    with pytest.raises(StandInError, match="gone"):
        standin.click("U0BOB", seen_by_bob, "reject")
    assert len(bot.received) == 1


def test_picking_an_option_sends_the_whole_option(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    select = REASON_MODAL["blocks"][1]["element"]
    client.chat_postMessage(
        channel="C0APPROVALS",
        text="pick",
        blocks=[
            {
                "type": "section",
                "block_id": "q",
                "text": {"type": "mrkdwn", "text": "?"},
                "accessory": select,
            }
        ],
    )

    standin.click("U0ALICE", standin.messages()[0], "pick", selected_option="high")

    [action] = bot.received[0].payload()["actions"]
    assert action["selected_option"] == select["options"][1]
    with pytest.raises(StandInError, match="no option 'medium'"):
        standin.click("U0ALICE", standin.messages()[0], "pick", selected_option="medium")


def test_clicks_in_a_modal_or_the_home_tab_name_the_view_not_a_message(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    button = {"type": "button", "action_id": "refresh", "text": {"type": "plain_text", "text": "R"}}
    actions = [{"type": "actions", "block_id": "tools", "elements": [button]}]
    client.views_publish(user_id="U0ALICE", view={"type": "home", "blocks": actions})
    modal = open_modal_on_click(standin, client, bot)
    client.views_update(view_id=modal.id, view={**REASON_MODAL, "blocks": actions})
    home = standin.home("U0ALICE")
    assert home is not None

    standin.click("U0ALICE", home, "refresh")
    standin.click("U0ALICE", standin.view(modal.id), "refresh")

    from_home, from_modal = (got.payload() for got in bot.received[-2:])
    assert from_home["container"] == {"type": "view", "view_id": home.id}
    assert from_home["view"]["type"] == "home" and "response_url" not in from_home
    assert from_modal["view"]["id"] == modal.id and "message" not in from_modal
    with pytest.raises(StandInError, match="U0ALICE's"):
        standin.click("U0BOB", home, "refresh")


def test_closing_a_modal_tells_the_bot_only_if_it_asked(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    client.views_update(view_id=view.id, view={**REASON_MODAL, "notify_on_close": True})

    response = standin.close_view("U0ALICE", standin.view(view.id))

    assert response is not None and bot.received[-1].payload()["type"] == "view_closed"
    assert standin.view(view.id).closed
    with pytest.raises(StandInError, match="not an open modal"):
        standin.submit_view("U0ALICE", view, {"severity": {"pick": "low"}})


def test_only_its_recipient_can_click_an_ephemeral_message(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    client.chat_postEphemeral(
        channel="C0APPROVALS", user="U0ALICE", text="x", blocks=APPROVAL_BLOCKS
    )
    [ephemeral] = standin.ephemerals("U0ALICE")

    standin.click("U0ALICE", ephemeral, "approve")
    WebhookClient(bot.received[0].payload()["response_url"]).send(
        text="Done", replace_original=True
    )

    payload = bot.received[0].payload()
    assert payload["container"]["is_ephemeral"] and "message" not in payload
    assert [e.text for e in standin.ephemerals("U0ALICE")] == ["Done"]
    with pytest.raises(StandInError, match="only U0ALICE"):
        standin.click("U0BOB", ephemeral, "approve")


def test_the_bot_answers_through_the_response_url(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    ts = post_approval(client)
    standin.click("U0BOB", standin.message("C0APPROVALS", ts), "approve")
    webhook = WebhookClient(bot.received[0].payload()["response_url"])

    webhook.send(text="Already decided by alice", response_type="ephemeral")
    webhook.send(text="Approved by bob", replace_original=True)

    [ephemeral] = standin.ephemerals("U0BOB")
    assert (ephemeral.text, ephemeral.source, ephemeral.channel) == (
        "Already decided by alice",
        "response_url",
        "C0APPROVALS",
    )
    message = standin.message("C0APPROVALS", ts)
    assert (message.text, message.blocks, message.updates[0].replaced_by) == (
        "Approved by bob",
        [],
        "response_url",
    )
    assert webhook.send(text="", delete_original=True).status_code == 200
    assert standin.messages() == []
    for _ in range(2):
        webhook.send(text="more")
    assert webhook.send(text="sixth use").body == "used_url"


def test_latency_delays_the_answer_of_a_call_already_carried_out(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.latency = 0.5
    started = time.monotonic()
    posting = threading.Thread(target=post_approval, args=(client,))
    posting.start()

    standin.wait_for(standin.messages, timeout=0.4)
    assert posting.is_alive(), "the message is there before the bot has the answer"
    posting.join()
    assert time.monotonic() - started >= 0.5


def test_a_response_url_reply_names_the_message_it_answers(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    first, second = post_approval(client), post_approval(client)
    standin.click("U0BOB", standin.message("C0APPROVALS", second), "approve")

    WebhookClient(bot.received[0].payload()["response_url"]).send(text="Already decided")

    [ephemeral] = standin.ephemerals("U0BOB")
    assert ephemeral.message_ts == second != first


def test_prepared_interactions_are_sent_as_the_person_helpers_send_them(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    parent = post_approval(client)
    click = standin.click_payload("U0BOB", standin.message("C0APPROVALS", parent), "approve")
    submission = standin.submission_payload(
        "U0ALICE", view, {"reason": {"value": "No"}, "severity": {"pick": "low"}}
    )
    reply, event = standin.message_event("U0ALICE", "C0APPROVALS", "Jane", thread_ts=parent)
    assert len(bot.received) == 1, "preparing sends nothing"
    assert [m.text for m in standin.thread("C0APPROVALS", parent)] == ["Jane"]

    for body, kind in (
        (interaction_body(click), "application/x-www-form-urlencoded"),
        (interaction_body(submission), "application/x-www-form-urlencoded"),
        (standin.event_body(event), "application/json"),
    ):
        assert standin.send_signed(body, content_type=kind).status == 200

    sent_click, sent_submission = bot.received[1].payload(), bot.received[2].payload()
    assert sent_click["actions"][0]["action_id"] == "approve"
    assert sent_click["response_url"].startswith(standin.url + "response/")
    assert sent_submission["type"] == "view_submission"
    assert sent_submission["view"]["state"]["values"]["reason"]["value"]["value"] == "No"
    assert bot.received[3].json()["event"]["ts"] == reply.ts
    assert all(got.signature_valid for got in bot.received)


def test_submit_view_sends_state_values_shaped_like_slack(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    example = slack_fixture("view_submission")
    reason = example["view"]["state"]["values"]["reason"]["value"]["value"]

    response = standin.submit_view(
        "U0ALICE", view, {"reason": {"value": reason}, "severity": {"pick": "low"}}
    )

    assert response.status == 200
    got = bot.received[-1]
    payload = got.payload()
    assert got.signature_valid and set(example) == set(payload)
    assert set(example["view"]) <= set(payload["view"])
    assert payload["view"]["state"]["values"] == {
        "reason": example["view"]["state"]["values"]["reason"],
        "severity": {
            "pick": {
                "type": "static_select",
                "selected_option": REASON_MODAL["blocks"][1]["element"]["options"][0],
            }
        },
    }
    assert (payload["view"]["id"], payload["view"]["hash"]) == (view.id, view.hash)
    assert payload["view"]["private_metadata"] == '{"handoff_id": "ho_01"}'
    assert standin.view(view.id).closed


def test_submit_view_records_validation_errors_and_keeps_the_modal_open(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    errors = {"response_action": "errors", "errors": {"reason": "Say why"}}
    bot.answer = lambda got: (200, json.dumps(errors).encode())

    standin.submit_view("U0ALICE", view, {"severity": {"pick": "high"}})

    current = standin.view(view.id)
    assert (current.errors, current.closed, current.submission_error) == (
        {"reason": "Say why"},
        False,
        None,
    )
    sent = bot.received[-1].payload()["view"]["state"]["values"]
    assert sent["reason"] == {"value": {"type": "plain_text_input", "value": None}}


def test_submission_answers_update_push_and_clear_the_modal_stack(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    thanks = {
        **REASON_MODAL,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "ok"}}],
    }

    def answer_with(action: str) -> None:
        body = (
            {"response_action": action, "view": thanks}
            if action != "clear"
            else {"response_action": action}
        )
        bot.answer = lambda got: (200, json.dumps(body).encode())

    answer_with("update")
    standin.submit_view("U0ALICE", view, {"severity": {"pick": "low"}})
    answer_with("push")
    standin.submit_view("U0ALICE", standin.view(view.id), {})
    root, pushed = standin.views("U0ALICE")
    answer_with("clear")
    standin.submit_view("U0ALICE", pushed, {})

    assert root.blocks[0]["text"]["text"] == "ok" and root.hash != view.hash
    assert (pushed.position, pushed.view["previous_view_id"]) == (1, root.id)
    assert all(v.closed for v in standin.views("U0ALICE"))


def test_submit_view_only_fills_inputs_the_modal_has(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    view = open_modal_on_click(standin, client, bot)
    sent_before = len(bot.received)

    with pytest.raises(StandInError, match="no input block 'comment'"):
        standin.submit_view(
            "U0ALICE", view, {"comment": {"value": "x"}, "severity": {"pick": "low"}}
        )
    with pytest.raises(StandInError, match="required"):
        standin.submit_view("U0ALICE", view, {"reason": {"value": "x"}})
    assert len(bot.received) == sent_before


def test_post_message_sends_a_thread_reply_event(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    parent = post_approval(client)

    message, response = standin.post_message(
        "U0ALICE", "C0APPROVALS", "Contact Jane", thread_ts=parent
    )

    assert response.status == 200 and message.thread_ts == parent
    got = bot.received[0]
    assert got.signature_valid and got.headers["content-type"] == "application/json"
    envelope = got.json()
    example = slack_fixture("event_thread_reply")
    assert set(example) == set(envelope) and envelope["type"] == "event_callback"
    event = envelope["event"]
    assert set(example["event"]) <= set(event)
    assert (event["type"], event["user"], event["text"], event["ts"]) == (
        "message",
        "U0ALICE",
        "Contact Jane",
        message.ts,
    )
    assert (event["thread_ts"], event["parent_user_id"], event["channel_type"]) == (
        parent,
        "U0BOT",
        "channel",
    )
    assert [m.text for m in standin.thread("C0APPROVALS", parent)] == ["Contact Jane"]


def test_resend_event_carries_the_same_event_id_and_retry_headers(
    standin: SlackStandIn, bot: RecordingBot
) -> None:
    _, first = standin.post_message("U0BOB", "C0APPROVALS", "hello", event_id="Ev0FIXED")

    standin.resend_event(first, retry_num=1, reason="http_timeout")
    standin.resend_event("Ev0FIXED", retry_num=2, reason="http_error")

    original, retry, second_retry = bot.received
    assert original.json()["event_id"] == retry.json()["event_id"] == "Ev0FIXED"
    assert retry.body == original.body and second_retry.body == original.body
    assert "x-slack-retry-num" not in original.headers
    assert (retry.headers["x-slack-retry-num"], retry.headers["x-slack-retry-reason"]) == (
        "1",
        "http_timeout",
    )
    assert second_retry.headers["x-slack-retry-num"] == "2"
    assert retry.signature_valid and second_retry.signature_valid


def test_send_signed_sends_forgeries_and_stale_requests_as_they_are(
    standin: SlackStandIn, bot: RecordingBot
) -> None:
    body = b'{"type": "event_callback"}'

    forged = standin.send_signed(body, content_type="application/json", signature="v0=" + "0" * 64)
    stale = standin.send_signed(
        body, content_type="application/json", timestamp=int(time.time()) - 600
    )
    unsigned = standin.send_signed(body, content_type="application/json", sign=False)

    assert (forged.status, stale.status, unsigned.status) == (401, 401, 401)
    assert bot.received[0].headers["x-slack-signature"] == "v0=" + "0" * 64
    assert "x-slack-signature" not in bot.received[2].headers
    assert not any(got.signature_valid for got in bot.received)


def test_send_signed_signs_like_slacks_published_example(
    standin: SlackStandIn, bot: RecordingBot
) -> None:
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
        b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
        b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
        b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )

    standin.send_signed(
        body, content_type="application/x-www-form-urlencoded", timestamp=1531420618
    )

    assert bot.received[0].headers["x-slack-signature"] == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )


def test_a_slash_command_is_form_fields_and_its_ack_is_shown_to_the_user(
    standin: SlackStandIn, bot: RecordingBot
) -> None:
    bot.answer = lambda got: (200, b'{"text": "2 pending"}')

    response = standin.send_command("U0BOB", "/handoff", "list pending", channel_id="C0APPROVALS")

    fields = bot.received[0].form()
    example = slack_fixture("slash_command")
    assert bot.received[0].signature_valid and set(example) == set(fields)
    assert (fields["command"], fields["text"], fields["user_name"], fields["channel_name"]) == (
        "/handoff",
        "list pending",
        "bob",
        "approvals",
    )
    assert response.json() == {"text": "2 pending"}
    assert [(e.text, e.source) for e in standin.ephemerals("U0BOB")] == [("2 pending", "ack")]


def test_app_home_opened_is_an_event_for_that_person(
    standin: SlackStandIn, bot: RecordingBot
) -> None:
    standin.send_app_home_opened("U0ALICE")

    envelope = bot.received[0].json()
    example = slack_fixture("event_app_home_opened")
    assert set(example["event"]) <= set(envelope["event"])
    assert (envelope["event"]["type"], envelope["event"]["user"], envelope["event"]["tab"]) == (
        "app_home_opened",
        "U0ALICE",
        "home",
    )


def answer_slowly(got: Received) -> tuple[int, bytes]:
    time.sleep(0.4)
    return 200, b""


def test_the_bots_errors_and_slowness_come_back_as_responses(
    standin: SlackStandIn, bot: RecordingBot
) -> None:
    bot.answer = lambda got: (500, b"boom")
    failed = standin.send_app_home_opened("U0ALICE")
    standin.ack_timeout = 0.2
    bot.answer = answer_slowly
    slow = standin.send_app_home_opened("U0ALICE")

    assert (failed.status, failed.text) == (500, "boom")
    assert (slow.status, slow.timed_out) == (0, True)


def test_acting_with_no_bot_listening_says_so(standin: SlackStandIn) -> None:
    standin.bot_url = None
    with pytest.raises(StandInError, match="bot_url"):
        standin.send_app_home_opened("U0ALICE")
    standin.bot_url = "http://127.0.0.1:9/slack/events"
    with pytest.raises(BotUnreachable):
        standin.send_app_home_opened("U0ALICE")


def test_snapshots_do_not_change_behind_the_tests_back(
    standin: SlackStandIn, client: WebClient
) -> None:
    ts = post_approval(client)
    before: Message = standin.message("C0APPROVALS", ts)

    client.chat_update(channel="C0APPROVALS", ts=ts, text="changed", blocks=APPROVAL_BLOCKS)
    before.blocks.clear()

    assert before.text == "Approval needed: refund"
    assert standin.message("C0APPROVALS", ts).blocks == APPROVAL_BLOCKS


def test_stop_releases_the_port() -> None:
    standin = SlackStandIn(signing_secret=SECRET)
    standin.start()
    url = standin.api_url
    standin.stop()
    standin.stop()

    with pytest.raises(OSError):
        urllib.request.urlopen(url + "auth.test", timeout=1)


def test_conversations_history_lists_top_level_messages_newest_first_with_metadata_on_request(
    standin: SlackStandIn, client: WebClient
) -> None:
    tagged = {"event_type": "handoff_posted", "event_payload": {"handoff_id": "ho_01"}}
    first = client.chat_postMessage(channel="C0APPROVALS", text="one", metadata=tagged)["ts"]
    client.chat_postMessage(channel="C0APPROVALS", text="reply", thread_ts=first)
    second = client.chat_postMessage(channel="C0APPROVALS", text="two")["ts"]
    client.chat_postMessage(channel="C0OTHER", text="elsewhere")

    plain = client.conversations_history(channel="C0APPROVALS")
    with_metadata = client.conversations_history(
        channel="C0APPROVALS", include_all_metadata=True, limit=1
    )
    rest = client.conversations_history(
        channel="C0APPROVALS",
        include_all_metadata=True,
        cursor=with_metadata["response_metadata"]["next_cursor"],
    )
    after_first = client.conversations_history(channel="C0APPROVALS", oldest=first)

    assert [m["ts"] for m in plain["messages"]] == [second, first]
    assert all("metadata" not in m for m in plain["messages"])
    assert plain["messages"][1]["reply_count"] == 1
    assert ([m["ts"] for m in with_metadata["messages"]], with_metadata["has_more"]) == (
        [second],
        True,
    )
    assert rest["messages"][0]["metadata"] == tagged
    assert [m["ts"] for m in after_first["messages"]] == [second]


def test_slacks_limits_for_non_marketplace_apps_allow_one_history_call_a_minute(
    standin: SlackStandIn, client: WebClient
) -> None:
    for n in range(20):
        client.chat_postMessage(channel="C0APPROVALS", text=f"m{n}")
    standin.limit_like_slack()

    page = client.conversations_history(channel="C0APPROVALS", limit=200)
    with pytest.raises(SlackApiError) as limited:
        client.conversations_history(channel="C0APPROVALS")
    replies_page = client.conversations_replies(channel="C0APPROVALS", ts=page["messages"][0]["ts"])

    assert len(page["messages"]) == 15 and page["has_more"], "15 messages a page at most"
    assert limited.value.response.status_code == 429
    assert 58 <= int(limited.value.response.headers["Retry-After"]) <= 60
    assert replies_page["ok"], "conversations.replies has a budget of its own"
    assert standin.refused_by_limits() == {"conversations.history": 1}


def test_a_shrunk_minute_lets_the_next_call_through_after_it(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.limit_like_slack(time_scale=0.005)  # 0.3 s
    client.conversations_history(channel="C0APPROVALS")
    with pytest.raises(SlackApiError) as limited:
        client.conversations_history(channel="C0APPROVALS")
    assert limited.value.response.headers["Retry-After"] == "1", "whole seconds, as Slack's"

    time.sleep(0.35)

    assert client.conversations_history(channel="C0APPROVALS")["ok"]


def test_conversations_replies_pages_a_window_of_the_thread_oldest_first(
    standin: SlackStandIn, client: WebClient
) -> None:
    parent = client.chat_postMessage(channel="C0APPROVALS", text="parent")["ts"]
    replies = [
        client.chat_postMessage(channel="C0APPROVALS", text=f"r{n}", thread_ts=parent)["ts"]
        for n in range(5)
    ]

    first = client.conversations_replies(channel="C0APPROVALS", ts=parent, limit=3)
    rest = client.conversations_replies(
        channel="C0APPROVALS", ts=parent, oldest=replies[1], latest=replies[4]
    )

    assert [m["ts"] for m in first["messages"]] == [parent, *replies[:2]]
    assert first["has_more"]
    assert [m["ts"] for m in rest["messages"]] == [parent, replies[2], replies[3]]


def test_a_fault_can_let_others_post_before_the_lost_answer(
    standin: SlackStandIn, client: WebClient
) -> None:
    def chatter(params: dict[str, Any]) -> None:
        for n in range(3):
            standin.message_event("U0ALICE", params["channel"], f"chatter {n}")

    client.retry_handlers.clear()
    standin.fail_next("chat.postMessage", reset_connection=True, carried_out=True, then=chatter)
    with pytest.raises(OSError):
        client.chat_postMessage(channel="C0APPROVALS", text="ours")

    texts = [m.text for m in standin.messages("C0APPROVALS")]
    assert texts == ["ours", "chatter 0", "chatter 1", "chatter 2"]


def test_random_faults_fail_about_the_given_share_of_calls_with_every_kind(
    standin: SlackStandIn,
) -> None:
    patient = WebClient(token=standin.bot_token, base_url=standin.api_url, timeout=0.2)  # type: ignore[arg-type]
    patient.retry_handlers.clear()
    faults = standin.fail_randomly(rate=0.3, seed=11, timeout_delay=0.3, retry_after=0)

    failed = 0
    for n in range(200):
        try:
            patient.chat_postMessage(channel="C0APPROVALS", text=f"m{n}")
        except (SlackApiError, OSError):
            failed += 1
    standin.fail_randomly(rate=0)
    patient.chat_postMessage(channel="C0APPROVALS", text="calm again")

    counts = faults.counts()
    assert set(counts) == {"ratelimited", "server_error", "timeout", "reset", "answer_lost"}
    assert sum(counts.values()) == failed
    assert 40 <= failed <= 80
    # Timeouts and lost answers were carried out (late ones land later); the others were not.
    expected = 200 - failed + counts["timeout"] + counts["answer_lost"] + 1
    standin.wait_for(lambda: len(standin.messages()) >= expected, timeout=2)
    time.sleep(0.4)
    assert len(standin.messages()) == expected


# -- membership, conversation ids and scopes, as Slack enforces them ------------------------


def _error(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(SlackApiError) as raised:
        call()
    return dict(raised.value.response.data)


def test_the_bot_reads_and_hears_only_the_public_channels_it_joined(
    standin: SlackStandIn, client: WebClient, bot: RecordingBot
) -> None:
    # chat:write.public: it posts in a channel it never joined...
    ts = client.chat_postMessage(channel="C0OTHER", text="Approve?")["ts"]
    # ...but Slack lets it read only where it is a member, and sends no events from there.
    assert _error(lambda: client.conversations_history(channel="C0OTHER"))["error"] == (
        "not_in_channel"
    )
    assert _error(lambda: client.conversations_replies(channel="C0OTHER", ts=ts))["error"] == (
        "not_in_channel"
    )
    _, unheard = standin.post_message("U0ALICE", "C0OTHER", "eu-west-1", thread_ts=ts)
    assert unheard is None and bot.received == []

    joined = client.conversations_join(channel="C0OTHER")

    assert joined["channel"]["is_member"] is True
    assert "U0BOT" in client.conversations_members(channel="C0OTHER")["members"]
    assert len(client.conversations_replies(channel="C0OTHER", ts=ts)["messages"]) == 2
    _, heard = standin.post_message("U0ALICE", "C0OTHER", "us-east-1", thread_ts=ts)
    assert heard is not None and len(bot.received) == 1
    assert client.conversations_join(channel="C0OTHER")["warning"] == "already_in_channel"


def test_a_private_channel_is_the_bots_only_once_it_is_invited(
    standin: SlackStandIn, client: WebClient
) -> None:
    standin.make_private("C0SECRET")
    for channel in ("G0PRIVATE", "C0SECRET"):
        refused = [
            _error(functools.partial(client.conversations_join, channel=channel)),
            _error(functools.partial(client.chat_postMessage, channel=channel, text="x")),
            _error(functools.partial(client.conversations_info, channel=channel)),
        ]
        assert [r["error"] for r in refused] == [
            "method_not_supported_for_channel_type",
            "channel_not_found",
            "channel_not_found",
        ]
        standin.invite_bot(channel)
        assert client.chat_postMessage(channel=channel, text="x")["channel"] == channel
        assert client.conversations_info(channel=channel)["channel"]["is_private"] is True


def test_only_chat_post_message_takes_a_user_id_or_a_channel_name(
    standin: SlackStandIn, client: WebClient
) -> None:
    posted = client.chat_postMessage(channel="U0ALICE", text="For you")
    dm = client.conversations_open(users="U0ALICE")["channel"]["id"]

    assert posted["channel"] == dm == "D0ALICE"
    assert client.chat_update(channel=dm, ts=posted["ts"], text="Done")["ok"]
    for call in (
        lambda: client.chat_update(channel="U0ALICE", ts=posted["ts"], text="Done"),
        lambda: client.conversations_history(channel="U0ALICE"),
        lambda: client.conversations_history(channel="#approvals"),
        lambda: client.chat_getPermalink(channel="U0ALICE", message_ts=posted["ts"]),
    ):
        assert _error(call)["error"] == "channel_not_found"


def test_a_call_needing_a_scope_the_token_lacks_is_refused_with_missing_scope() -> None:
    with SlackStandIn(
        signing_secret=SECRET, users=[ALICE], scopes={"chat:write", "channels:history"}
    ) as standin:
        client = WebClient(token=standin.bot_token, base_url=standin.api_url, timeout=5)
        refused = _error(lambda: client.users_info(user="U0ALICE"))
        assert (refused["error"], refused["needed"]) == ("missing_scope", "users:read")
        assert refused["provided"] == "channels:history,chat:write"
        # The conversation methods need the scope of the conversation's kind.
        assert _error(lambda: client.conversations_join(channel="C0X"))["needed"] == (
            "channels:join"
        )
        assert _error(lambda: client.conversations_history(channel="D0ALICE"))["needed"] == (
            "im:history"
        )
        assert _error(lambda: client.conversations_history(channel="G0X"))["needed"] == (
            "groups:history"
        )
        # Without chat:write.public, a public channel the bot is not in refuses its post.
        assert _error(lambda: client.chat_postMessage(channel="C0X", text="x"))["error"] == (
            "not_in_channel"
        )
        standin.invite_bot("C0X")
        assert client.chat_postMessage(channel="C0X", text="x")["ok"]


def test_limit_by_tier_plays_each_methods_tier_and_posts_per_channel(
    standin: SlackStandIn, client: WebClient
) -> None:
    quick = WebClient(token=standin.bot_token, base_url=standin.api_url, timeout=5)
    standin.limit_by_tier(time_scale=0.5)  # Slack's minute in 30 s: nothing frees up here

    ts = quick.chat_postMessage(channel="C0APPROVALS", text="x")["ts"]
    for _ in range(50):  # chat.update is tier 3: fifty a minute
        quick.chat_update(channel="C0APPROVALS", ts=ts, text="y")
    refused = _error(lambda: quick.chat_update(channel="C0APPROVALS", ts=ts, text="z"))
    assert refused["error"] == "ratelimited"
    # chat.postMessage: ten at once per channel, and another channel has its own.
    for _ in range(9):
        quick.chat_postMessage(channel="C0APPROVALS", text="x")
    assert _error(lambda: quick.chat_postMessage(channel="C0APPROVALS", text="x"))["error"] == (
        "ratelimited"
    )
    assert quick.chat_postMessage(channel="C0OTHER", text="x")["ok"]
    # A tier-4 method is not touched by the others' calls.
    assert quick.views_publish(user_id="U0ALICE", view={"type": "home", "blocks": []})["ok"]
    assert standin.refused_by_limits() == {"chat.update": 1, "chat.postMessage": 1}


def test_event_ids_are_never_repeated_by_another_stand_in() -> None:
    """A bot drops an event whose id it has seen (Slack's retries): a second `handoff dev`
    on the same Redis must not send the first one's ids again."""
    first, second = SlackStandIn(signing_secret="s"), SlackStandIn(signing_secret="s")

    ids = [first._ws.next_event_id(), first._ws.next_event_id(), second._ws.next_event_id()]

    assert len(set(ids)) == 3 and all(i.startswith("Ev") for i in ids)
