"""The stand-in's Socket Mode (bot.standin.socket_mode), spoken to as a raw WebSocket client
would: the URL and its ticket, the hello, envelopes and their acknowledgements, events sent
again, disconnect messages. `handoff serve --socket-mode` against it: test_socket_mode_e2e.py."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from bot.standin import BotUnreachable, SlackStandIn, StandInUser

ALICE = "U0ALICE"


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    with SlackStandIn(
        signing_secret="s", users=[StandInUser(ALICE, "alice")], socket_mode=True
    ) as standin:
        standin.ack_timeout = 0.5
        standin.event_retry_delays = (0.0,)
        yield standin


def _open(slack: SlackStandIn, *, token: str | None, as_parameter: bool = False) -> dict:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    body = b""
    if token and as_parameter:
        body = f"token={token}".encode()
    elif token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        slack.api_url + "apps.connections.open", data=body, headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return dict(json.loads(answer.read()))


def _acking(connection: ClientConnection, payload: dict[str, Any] | None = None) -> list[dict]:
    """Acknowledge every envelope on ``connection`` in a thread (with ``payload``); the
    envelopes received are appended to the returned list."""
    received: list[dict] = []

    def run() -> None:
        for raw in connection:
            message = json.loads(raw)
            received.append(message)
            if "envelope_id" in message:
                ack = {"envelope_id": message["envelope_id"]}
                connection.send(json.dumps({**ack, "payload": payload} if payload else ack))

    threading.Thread(target=run, daemon=True).start()
    return received


def test_the_url_takes_the_app_token_in_the_header_and_its_ticket_connects_once(
    slack: SlackStandIn,
) -> None:
    assert _open(slack, token=None)["error"] == "not_authed"
    assert _open(slack, token=slack.app_token, as_parameter=True)["error"] == "not_authed"
    assert _open(slack, token=slack.bot_token)["error"] == "not_allowed_token_type"
    assert _open(slack, token="xapp-1-other")["error"] == "invalid_auth"
    opened = _open(slack, token=slack.app_token)
    assert opened["ok"] is True and "/link/?ticket=" in opened["url"]

    with connect(opened["url"]) as connection:
        hello = json.loads(connection.recv(timeout=5))
        assert hello["type"] == "hello" and hello["num_connections"] == 1
        assert hello["connection_info"] == {"app_id": "A0STANDIN"}
        slack.wait_for_socket_mode()
    with pytest.raises(InvalidStatus) as used:
        connect(opened["url"])
    assert used.value.response.status_code == 401
    # A web page's connection (it carries an Origin) is refused whatever its ticket.
    with pytest.raises(InvalidStatus) as page:
        connect(_open(slack, token=slack.app_token)["url"], origin="https://evil.example")
    assert page.value.response.status_code == 403


def test_the_app_token_calls_no_other_method(slack: SlackStandIn) -> None:
    request = urllib.request.Request(
        slack.api_url + "auth.test",
        data=b"",
        headers={"Authorization": f"Bearer {slack.app_token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert json.loads(answer.read())["error"] == "not_allowed_token_type"


def test_a_command_is_an_envelope_whose_acknowledgement_is_the_answer(
    slack: SlackStandIn,
) -> None:
    with connect(_open(slack, token=slack.app_token)["url"]) as connection:
        received = _acking(connection, payload={"text": "Nothing pending"})
        slack.wait_for_socket_mode()
        response = slack.send_command(ALICE, "/handoff", "list")

    assert (response.status, response.json()) == (200, {"text": "Nothing pending"})
    [_hello, envelope] = received
    assert envelope["type"] == "slash_commands" and envelope["accepts_response_payload"]
    assert envelope["payload"]["command"] == "/handoff"
    assert "retry_attempt" not in envelope
    [shown] = slack.ephemerals(ALICE)
    assert shown.text == "Nothing pending"


def test_an_event_not_acknowledged_is_sent_again_and_an_interaction_is_not(
    slack: SlackStandIn,
) -> None:
    with connect(_open(slack, token=slack.app_token)["url"]) as connection:
        slack.wait_for_socket_mode()
        lost = slack.send_event({"type": "app_home_opened", "user": ALICE})
        command = slack.send_command(ALICE, "/handoff", "list")
        received = [json.loads(connection.recv(timeout=1)) for _ in range(4)]

    assert lost.timed_out and command.timed_out
    events = [m for m in received if m.get("type") == "events_api"]
    assert [(e["retry_attempt"], e["retry_reason"]) for e in events] == [(0, ""), (1, "timeout")]
    assert events[0]["payload"]["event_id"] == events[1]["payload"]["event_id"]
    assert events[0]["envelope_id"] != events[1]["envelope_id"]
    assert [m["type"] for m in received].count("slash_commands") == 1


def test_a_lost_acknowledgement_sends_the_event_again(slack: SlackStandIn) -> None:
    with connect(_open(slack, token=slack.app_token)["url"]) as connection:
        _acking(connection)
        slack.wait_for_socket_mode()
        slack.lose_acks(1)
        response = slack.send_event({"type": "app_home_opened", "user": ALICE})

    assert response.status == 200
    first, again = slack.envelopes()
    assert first.ack_lost and first.ack is None
    assert again.retry_attempt == 1 and again.ack == {"envelope_id": again.envelope_id}


def test_disconnect_tells_the_app_and_sends_nothing_more_on_that_connection(
    slack: SlackStandIn,
) -> None:
    with connect(_open(slack, token=slack.app_token)["url"]) as old:
        json.loads(old.recv(timeout=5))  # hello
        slack.wait_for_socket_mode()
        assert slack.disconnect_socket_mode("warning", close_after=0.2) == 1
        assert json.loads(old.recv(timeout=5)) == {
            "type": "disconnect",
            "reason": "warning",
            "debug_info": {"host": "applink-standin"},
        }
        assert slack.socket_mode_connections() == 0
        with connect(_open(slack, token=slack.app_token)["url"]) as new:
            received = _acking(new)
            slack.wait_for_socket_mode()
            assert slack.send_event({"type": "app_home_opened", "user": ALICE}).status == 200
        assert [m["type"] for m in received] == ["hello", "events_api"]
        with pytest.raises(ConnectionClosed):  # closed by the stand-in
            old.recv(timeout=5)


def test_without_a_connection_the_bot_is_unreachable(slack: SlackStandIn) -> None:
    with pytest.raises(BotUnreachable, match="Socket Mode"):
        slack.send_command(ALICE, "/handoff", "list")
