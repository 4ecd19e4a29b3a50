"""The workbench and the stand-in act only for their own page and for programs on this machine,
never for another web page the developer has open while `handoff dev` runs (issue 15, point 2).

What such a page can make the browser send is refused with 403 and changes nothing: a form's
text/plain or form-encoded post, a request from another origin (``Origin``), a request by an
attacker's host name resolved to 127.0.0.1 (DNS rebinding: a foreign ``Host``, which would let it
read the answers), and a post without this run's workbench token. The page's own requests, which
carry all of these right, still click through to the real bot (`handoff serve`).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.blockkit import ids
from bot.standin import Message, SlackStandIn
from bot.standin.workbench import TOKEN_HEADER
from store.models import Status
from tests.support.security_harness import capturing
from tests.support.slack_env import ALICE, SlackEnv, wait_for

Changes = Mapping[str, str | None]

ATTACKS: dict[str, Changes] = {
    "a form's text/plain post": {"Content-Type": "text/plain"},
    "a form post": {"Content-Type": "application/x-www-form-urlencoded"},
    "no content type": {"Content-Type": None},
    "another site's page": {"Origin": "https://evil.example"},
    "a page on another port of this machine": {"Origin": "http://127.0.0.1:1"},
    "a sandboxed frame": {"Origin": "null"},
    "DNS rebinding": {"Host": "evil.example:{port}"},
    "DNS rebinding to a loopback-looking name": {"Host": "127.0.0.1.evil.example:{port}"},
    "no token": {TOKEN_HEADER: None},
    "a wrong token": {TOKEN_HEADER: "guessed"},
}
"""What another page's request differs in from the workbench page's own (None: left out)."""


def _request(
    standin: SlackStandIn, method: str, path: str, body: Any = None, changes: Changes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """``method`` ``path`` as the workbench page sends it (its own Host and Origin, JSON, this
    run's token), with the headers in ``changes`` replaced or, if None, left out; "{port}" in
    a header is the stand-in's port. Returns the status, the headers and the body."""
    where = urlsplit(standin.url)
    headers = {
        "Host": where.netloc,
        "Origin": f"http://{where.netloc}",
        "Content-Type": "application/json",
        TOKEN_HEADER: standin.workbench.token,
    }
    for name, value in (changes or {}).items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value.format(port=where.port)
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
    try:
        sent = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=sent, headers=headers)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def _refused(status: int, body: bytes) -> str:
    """The error of a 403 answer (which must say why)."""
    assert status == 403, body
    answer = json.loads(body)
    assert answer["ok"] is False
    assert answer["error"].startswith("refused:")
    return str(answer["error"])


def _approve(message: Message) -> dict[str, Any]:
    """The page's click on Approve in ``message``, as Alice."""
    return {
        "user": ALICE,
        "action_id": ids.APPROVE,
        "block_id": ids.ACTIONS_BLOCK,
        "message": {"channel": message.channel, "ts": message.ts},
    }


@pytest.fixture
def approval(slack: SlackEnv) -> tuple[str, Message]:
    """A pending approval for Alice, and its message."""
    handoff_id = slack.refund_approval(run_id="run-workbench", reviewers=[ALICE])
    return handoff_id, slack.posted(handoff_id)


@pytest.mark.parametrize("changes", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_click_another_page_sends_is_refused_and_reaches_nobody(
    slack: SlackEnv, approval: tuple[str, Message], changes: Changes
) -> None:
    handoff_id, message = approval
    with capturing(slack.standin) as sent:
        status, _, body = _request(
            slack.standin, "POST", "/workbench/click", _approve(message), changes
        )
    _refused(status, body)
    assert sent == []  # no click left the stand-in
    assert slack.handoffs.get(handoff_id).status is Status.PENDING


def test_the_pages_own_click_still_approves(slack: SlackEnv, approval: tuple[str, Message]) -> None:
    handoff_id, message = approval
    # Parameters of the content type are fine.
    changes = {"Content-Type": "application/json; charset=utf-8"}
    status, _, body = _request(
        slack.standin, "POST", "/workbench/click", _approve(message), changes
    )
    assert (status, json.loads(body)["ok"]) == (200, True), body
    wait_for(lambda: slack.handoffs.get(handoff_id).resume_data)
    decided = slack.handoffs.get(handoff_id)
    assert decided.status is Status.APPROVED
    assert decided.resume_data is not None
    assert decided.resume_data.decided_by == ALICE


def test_an_answer_typed_into_a_thread_by_another_page_is_refused(slack: SlackEnv) -> None:
    question = slack.region_question(run_id="run-workbench-q", reviewers=[ALICE])
    message = slack.posted(question.id)
    reply = {"user": ALICE, "channel": message.channel, "thread_ts": message.ts, "text": "eu"}
    with capturing(slack.standin) as sent:
        status, _, body = _request(
            slack.standin, "POST", "/workbench/message", reply, {"Content-Type": "text/plain"}
        )
    _refused(status, body)
    assert sent == []
    assert slack.standin.thread(message.channel, message.ts) == []
    assert slack.handoffs.get(question.id).status is Status.PENDING


@pytest.mark.parametrize("path", ["/", "/workbench/state", "/static/workbench.js"])
def test_an_attackers_host_name_reads_nothing(slack: SlackEnv, path: str) -> None:
    # DNS rebinding makes the attacker's page same-origin with the stand-in: only Host tells.
    status, _, body = _request(slack.standin, "GET", path, changes={"Host": "evil.example"})
    error = _refused(status, body)
    assert "evil.example" in error
    assert slack.standin.workbench.token.encode() not in body


@pytest.mark.parametrize(
    "host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "localhost"]
)
def test_the_page_is_served_by_a_loopback_name_with_its_token_and_never_in_a_frame(
    slack: SlackEnv, host: str
) -> None:
    status, headers, page = _request(
        slack.standin, "GET", "/", changes={"Host": host, "Origin": None}
    )
    assert status == 200
    assert f'content="{slack.standin.workbench.token}"'.encode() in page
    assert headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_every_stand_in_has_a_token_of_its_own(slack: SlackEnv) -> None:
    with SlackStandIn(signing_secret="s") as other:
        assert other.workbench.token != slack.standin.workbench.token
        assert len(other.workbench.token) >= 32
        assert other.bot_token != SlackStandIn(signing_secret="s").bot_token


def test_the_web_api_refuses_other_pages_and_a_published_token(slack: SlackEnv) -> None:
    standin = slack.standin
    calls = len(standin.calls())
    # A chat.update another page would send, with the bot's real token even.
    update = {"token": standin.bot_token, "channel": "C0APPROVALS", "ts": "1", "text": "forged"}
    for changes in ({"Origin": "https://evil.example"}, {"Host": "evil.example:{port}"}):
        status, _, body = _request(standin, "POST", "/api/chat.update", update, changes)
        _refused(status, body)
    # Nothing of the forged call was recorded (the bot's own calls may go on meanwhile).
    assert not [c for c in standin.calls()[calls:] if c.params.get("text") == "forged"]

    with SlackStandIn(signing_secret="s") as fresh:
        client = WebClient(token="xoxb-standin-token", base_url=fresh.api_url)
        with pytest.raises(SlackApiError) as refused:
            client.chat_postMessage(channel="C0APPROVALS", text="from the README")
        assert refused.value.response["error"] == "invalid_auth"


@pytest.mark.parametrize("length", ["abc", "-1", "1e3"])
def test_a_bad_content_length_gets_400_and_changes_nothing(
    slack: SlackEnv, approval: tuple[str, Message], length: str
) -> None:
    handoff_id, message = approval
    status, _, body = _request(
        slack.standin, "POST", "/workbench/click", _approve(message), {"Content-Length": length}
    )

    assert status == 400
    assert "bad Content-Length" in json.loads(body)["error"]
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
