"""The workbench in headless Chromium: a reviewer's clicks, modals, thread replies and slash
commands reach the real bot (`handoff serve`) as Slack sends them, the worker resumes the
agent's run, and the page shows the updated message."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from bot.blockkit import ids
from bot.standin import SlackStandIn, StandInUser, workbench
from tests.browser.conftest import Workbench, WorkbenchSlack
from tests.support.slack_env import ADMIN, ALICE, BOB, CHANNEL, wait_for

try:
    from playwright.sync_api import expect
except ImportError:  # the ``browser`` fixture skips the tests that need it, saying why
    expect = None


def _approval(slack: WorkbenchSlack, **options: Any) -> str:
    return slack.handoffs.request_approval(
        run_id="run-refunds-42",
        thread_id="support-thread-7",
        action="issue_refund",
        args={"order_id": "A-1001", "amount": 30},
        args_schema={
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "amount": {"type": "integer", "maximum": 100, "description": "in USD"},
            },
            "required": ["order_id", "amount"],
        },
        context="Dana Lee was charged twice for order A-1001; I want to refund one charge.",
        agent_name="support-agent",
        resume="tests.support.resume_targets:record",
        **options,
    ).id


def test_an_approval_is_approved_with_a_click(slack: WorkbenchSlack, workbench: Workbench) -> None:
    handoff_id = _approval(slack)
    posted = slack.posted(handoff_id)
    page = workbench.open(ALICE)
    message = workbench.message(posted.ts)
    expect(message).to_contain_text("Approval needed from support-agent: issue_refund")
    expect(message.locator(".b-fields")).to_contain_text("A-1001")
    workbench.screenshot("approval-message")

    message.get_by_role("button", name="Approve").click()
    confirm = page.get_by_role("alertdialog")
    expect(confirm).to_contain_text("Approve this action?")
    workbench.screenshot("approval-confirm")
    confirm.get_by_role("button", name="Approve").click()

    resumed = slack.resumed(handoff_id)
    assert resumed["status"] == "approved"
    assert resumed["resume_data"]["decided_by"] == ALICE
    expect(message).to_contain_text("Approved by @alice")
    expect(message.get_by_role("button", name="Approve")).to_have_count(0)
    expect(message).to_contain_text("(edited)")
    workbench.screenshot("approval-approved")


def test_a_reject_with_reason_modal_is_submitted(
    slack: WorkbenchSlack, workbench: Workbench
) -> None:
    handoff_id = _approval(slack)
    posted = slack.posted(handoff_id)
    page = workbench.open(ALICE)
    workbench.message(posted.ts).get_by_role("button", name="Reject").click()

    modal = page.get_by_role("dialog")
    expect(modal).to_contain_text("Reject request")
    modal.get_by_label("Reason (shared with the agent)").fill("Refunds over $20 need a manager.")
    workbench.screenshot("reject-modal")
    modal.get_by_role("button", name="Reject").click()
    expect(modal).to_be_hidden()

    resumed = slack.resumed(handoff_id)
    assert resumed["status"] == "rejected"
    assert resumed["resume_data"]["comment"] == "Refunds over $20 need a manager."
    message = workbench.message(posted.ts)
    expect(message).to_contain_text("Rejected by @alice")
    expect(message).to_contain_text("Reason: Refunds over $20 need a manager.")


def test_an_invalid_edit_shows_the_inline_error(
    slack: WorkbenchSlack, workbench: Workbench
) -> None:
    handoff_id = _approval(slack)
    posted = slack.posted(handoff_id)
    page = workbench.open(ALICE)
    workbench.message(posted.ts).get_by_role("button", name="Edit").click()

    modal = page.get_by_role("dialog")
    expect(modal).to_contain_text("Edit arguments")
    amount = modal.locator(f"[data-block-id='{ids.arg_block_id('amount')}']")
    amount.get_by_role("textbox").fill("500")
    modal.get_by_role("button", name="Approve edited").click()
    # The bot answered response_action "errors": shown under the input, the modal stays open.
    expect(amount.get_by_role("alert")).to_contain_text("100")
    expect(modal).to_be_visible()
    workbench.screenshot("edit-inline-error")

    amount.get_by_role("textbox").fill("25")
    modal.get_by_role("button", name="Approve edited").click()
    expect(modal).to_be_hidden()

    resumed = slack.resumed(handoff_id)
    assert resumed["status"] == "approved"
    assert resumed["resume_data"]["edited_args"] == {"order_id": "A-1001", "amount": 25}
    expect(workbench.message(posted.ts)).to_contain_text("With edited arguments")


def test_a_question_is_answered_in_its_thread(slack: WorkbenchSlack, workbench: Workbench) -> None:
    handoff_id = slack.handoffs.ask(
        run_id="run-deploy-9",
        thread_id="deploy-thread",
        question="Which region should I deploy the hotfix to first?",
        choices=["eu-west-1", "us-east-1"],
        context="Both regions run the affected version.",
        agent_name="deploy-agent",
        resume="tests.support.resume_targets:record",
    ).id
    posted = slack.posted(handoff_id)
    page = workbench.open(BOB)
    message = workbench.message(posted.ts)
    message.hover()
    message.get_by_role("button", name="Reply in thread").click()

    thread = page.get_by_role("complementary", name="Thread")
    reply = thread.get_by_label("Reply", exact=True)
    reply.fill("eu-west-1, it has fewer users right now")
    reply.press("Enter")

    resumed = slack.resumed(handoff_id)
    assert resumed["status"] == "answered"
    assert resumed["resume_data"]["answer"] == "eu-west-1, it has fewer users right now"
    assert resumed["resume_data"]["decided_by"] == BOB
    expect(message).to_contain_text("Answered by @bob")
    # The bot's short record of the decision joins the person's reply in the thread.
    expect(thread.locator(".msg[data-user='U0BOT']").last).to_contain_text("Answered by @bob")
    expect(message.get_by_role("button", name="2 replies")).to_be_visible()
    workbench.screenshot("question-thread")


def test_an_admin_runs_handoff_list_and_approves_from_it(
    slack: WorkbenchSlack, workbench: Workbench
) -> None:
    handoff_id = _approval(slack)
    posted = slack.posted(handoff_id)
    page = workbench.open(ALICE)
    workbench.act_as(ADMIN)
    expect(page.get_by_label("Act as user")).to_contain_text("@ada · admin")

    workbench.type_message("/handoff list")
    listing = page.locator("#messages .msg.ephemeral").last
    expect(listing).to_contain_text("All pending handoffs")
    expect(listing).to_contain_text(handoff_id)
    expect(listing).to_contain_text("Only visible to you")
    workbench.screenshot("admin-handoff-list")

    listing.get_by_role("button", name="Details").click()
    details = page.locator("#messages .msg.ephemeral").last
    expect(details).to_contain_text("Audit")
    details.get_by_role("button", name="Approve").click()
    page.get_by_role("alertdialog").get_by_role("button", name="Approve").click()

    resumed = slack.resumed(handoff_id)
    assert resumed["resume_data"]["decided_by"] == ADMIN
    expect(workbench.message(posted.ts)).to_contain_text("Approved by @ada")


def test_the_app_home_lists_the_queue_and_decides_from_it(
    slack: WorkbenchSlack, workbench: Workbench
) -> None:
    handoff_id = _approval(slack, reviewers=[BOB])
    posted = slack.posted(handoff_id)
    page = workbench.open(BOB, "app/home")
    home = page.locator("#home")
    expect(home).to_contain_text("issue_refund")
    workbench.screenshot("app-home")

    home.get_by_role("button", name="Approve").first.click()
    page.get_by_role("alertdialog").get_by_role("button", name="Approve").click()

    resumed = slack.resumed(handoff_id)
    assert resumed["resume_data"]["decided_by"] == BOB
    page.get_by_role("button", name="# approvals").click()
    expect(workbench.message(posted.ts)).to_contain_text("Approved by @bob")
    assert CHANNEL in page.url


# -- Block Kit rendering and input shapes, against a stub bot -----------------------------------


class StubBot:
    """A minimal Slack app: checks Slack's signature, records every request, opens a form
    modal when its "Open form" button is clicked, and refuses a quantity over 10."""

    def __init__(self, standin: SlackStandIn) -> None:
        self.standin = standin
        self.received: list[dict[str, Any]] = []
        self.verifier = SignatureVerifier(STUB_SECRET)
        bot = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if not bot.verifier.is_valid_request(body, dict(self.headers)):
                    self.send_response(401)
                    self.end_headers()
                    return
                payload = json.loads(parse_qs(body.decode())["payload"][0])
                bot.received.append(payload)
                answer = bot.answer(payload)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(answer).encode() if answer else b"")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        standin.bot_url = f"http://127.0.0.1:{self.server.server_address[1]}/slack/events"

    def answer(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        if payload["type"] == "block_actions" and payload["actions"][0]["action_id"] == "open":
            client = WebClient(token=self.standin.bot_token, base_url=self.standin.api_url)
            client.views_open(trigger_id=payload["trigger_id"], view=FORM)
        if payload["type"] == "view_submission":
            quantity = payload["view"]["state"]["values"]["qty"]["qty"]["value"]
            if int(quantity) > 10:
                return {"response_action": "errors", "errors": {"qty": "At most 10, please."}}
        return None

    def last(self, kind: str) -> dict[str, Any]:
        return [p for p in self.received if p["type"] == kind][-1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


STUB_SECRET = "stub-bot-signing-secret"
_PIXEL = (
    "data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' width='120' height='60'>"
    "<rect width='120' height='60' fill='%23ecb22e'/></svg>"
)
GALLERY = [
    {"type": "header", "text": {"type": "plain_text", "text": "Block Kit gallery :tada:"}},
    {
        "type": "section",
        "text": {
            "type": "mrkdwn",
            "text": "*bold* _italic_ ~struck~ `code` <@U0ALICE> <#C0APPROVALS> "
            "<!date^1893456000^{date_short} at {time}|Jan 1, 2030> <https://example.com|a link>"
            "\n>a quoted line &lt;escaped&gt;",
        },
        "accessory": {
            "type": "button",
            "text": {"type": "plain_text", "text": "Open form"},
            "action_id": "open",
            "value": "form",
        },
    },
    {
        "type": "section",
        "fields": [
            {"type": "mrkdwn", "text": "*Order*\nA-1001"},
            {"type": "mrkdwn", "text": "*Amount*\n$30"},
        ],
    },
    {
        "type": "context",
        "elements": [
            {"type": "image", "image_url": _PIXEL, "alt_text": "logo"},
            {"type": "mrkdwn", "text": "Context with an image"},
        ],
    },
    {"type": "divider"},
    {
        "type": "image",
        "image_url": _PIXEL,
        "alt_text": "a yellow box",
        "title": {"type": "plain_text", "text": "An image block"},
    },
    {
        "type": "actions",
        "block_id": "tools",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Delete"},
                "style": "danger",
                "action_id": "delete",
                "confirm": {
                    "title": {"type": "plain_text", "text": "Delete it?"},
                    "text": {"type": "plain_text", "text": "This cannot be undone."},
                    "confirm": {"type": "plain_text", "text": "Delete"},
                    "deny": {"type": "plain_text", "text": "Keep"},
                    "style": "danger",
                },
            },
            {
                "type": "static_select",
                "action_id": "priority",
                "placeholder": {"type": "plain_text", "text": "Priority"},
                "options": [
                    {"text": {"type": "plain_text", "text": "High"}, "value": "high"},
                    {"text": {"type": "plain_text", "text": "Low"}, "value": "low"},
                ],
            },
        ],
    },
    {"type": "video", "title": {"type": "plain_text", "text": "Demo"}, "video_url": "x"},
]
FORM = {
    "type": "modal",
    "callback_id": "form",
    "title": {"type": "plain_text", "text": "A form"},
    "submit": {"type": "plain_text", "text": "Save"},
    "close": {"type": "plain_text", "text": "Cancel"},
    "blocks": [
        {
            "type": "input",
            "block_id": "title",
            "label": {"type": "plain_text", "text": "Title"},
            "element": {"type": "plain_text_input", "action_id": "title"},
        },
        {
            "type": "input",
            "block_id": "notes",
            "optional": True,
            "label": {"type": "plain_text", "text": "Notes"},
            "element": {"type": "plain_text_input", "action_id": "notes", "multiline": True},
        },
        {
            "type": "input",
            "block_id": "team",
            "label": {"type": "plain_text", "text": "Team"},
            "element": {
                "type": "static_select",
                "action_id": "team",
                "options": [
                    {"text": {"type": "plain_text", "text": "Finance"}, "value": "finance"},
                    {"text": {"type": "plain_text", "text": "Support"}, "value": "support"},
                ],
            },
        },
        {
            "type": "input",
            "block_id": "checks",
            "optional": True,
            "label": {"type": "plain_text", "text": "Checks"},
            "element": {
                "type": "checkboxes",
                "action_id": "checks",
                "options": [
                    {"text": {"type": "plain_text", "text": "Refund"}, "value": "refund"},
                    {"text": {"type": "plain_text", "text": "Notify"}, "value": "notify"},
                ],
            },
        },
        {
            "type": "input",
            "block_id": "qty",
            "label": {"type": "plain_text", "text": "Quantity"},
            "element": {"type": "number_input", "action_id": "qty", "is_decimal_allowed": False},
        },
        {
            "type": "input",
            "block_id": "due",
            "label": {"type": "plain_text", "text": "Due"},
            "element": {"type": "datepicker", "action_id": "due"},
        },
    ],
}


@pytest.fixture
def stub(workbench_on: Any) -> Iterator[tuple[StubBot, Workbench]]:
    """A stand-in (no Redis, no real bot) with the stub bot, and a tab on its workbench."""
    users = [StandInUser(ALICE, "alice", real_name="Alice Reviewer")]
    with SlackStandIn(
        signing_secret=STUB_SECRET, users=users, channels={CHANNEL: "approvals"}
    ) as standin:
        bot = StubBot(standin)
        try:
            yield bot, workbench_on(standin)
        finally:
            bot.stop()


def test_block_kit_is_rendered_and_unsupported_blocks_show_their_json(
    stub: tuple[StubBot, Workbench],
) -> None:
    bot, workbench = stub
    client = WebClient(token=bot.standin.bot_token, base_url=bot.standin.api_url)
    posted = client.chat_postMessage(channel=CHANNEL, text="gallery", blocks=GALLERY)
    page = workbench.open(ALICE)
    message = workbench.message(posted["ts"])

    expect(message.locator(".b-header")).to_have_text("Block Kit gallery 🎉")
    text = message.locator(".b-section .mrkdwn").first
    expect(text.locator("b")).to_have_text("bold")
    expect(text.locator("i")).to_have_text("italic")
    expect(text.locator("s")).to_have_text("struck")
    expect(text.locator("code")).to_have_text("code")
    expect(text.locator(".mention")).to_have_text(["@alice", "#approvals"])
    expect(text.locator("time")).to_have_text("Jan 1, 2030 at 12:00 AM")
    expect(text.get_by_role("link", name="a link")).to_have_attribute("href", "https://example.com")
    expect(text.locator("blockquote")).to_have_text("a quoted line <escaped>")
    expect(message.locator(".b-fields")).to_contain_text("$30")
    expect(message.locator("figure img")).to_have_attribute("alt", "a yellow box")
    unsupported = message.locator("[data-unsupported=video]")
    expect(unsupported).to_contain_text("Unsupported block: video")
    expect(unsupported).to_contain_text('"video_url": "x"')
    workbench.screenshot("block-kit-gallery")

    message.locator("select[data-action-id=priority]").select_option("high")
    wait_for(lambda: [p for p in bot.received if p["type"] == "block_actions"])
    picked = bot.last("block_actions")
    assert picked["actions"][0]["selected_option"]["value"] == "high"
    assert picked["container"] == {
        "type": "message",
        "message_ts": posted["ts"],
        "channel_id": CHANNEL,
        "is_ephemeral": False,
    }

    message.get_by_role("button", name="Delete").click()
    confirm = page.get_by_role("alertdialog")
    expect(confirm).to_contain_text("This cannot be undone.")
    confirm.get_by_role("button", name="Keep").click()
    expect(confirm).to_be_hidden()
    assert not [p for p in bot.received if p["actions"][0]["action_id"] == "delete"]


def test_modal_inputs_reach_the_bot_in_slacks_shapes(stub: tuple[StubBot, Workbench]) -> None:
    bot, workbench = stub
    client = WebClient(token=bot.standin.bot_token, base_url=bot.standin.api_url)
    posted = client.chat_postMessage(channel=CHANNEL, text="gallery", blocks=GALLERY)
    page = workbench.open(ALICE)
    workbench.message(posted["ts"]).get_by_role("button", name="Open form").click()
    modal = page.get_by_role("dialog")
    expect(modal).to_contain_text("A form")

    # Slack's own client refuses an empty required input: nothing reaches the bot.
    modal.get_by_role("button", name="Save").click()
    expect(modal.locator("[data-block-id=title] [role=alert]")).to_have_text(
        "Please complete this required field."
    )
    assert not [p for p in bot.received if p["type"] == "view_submission"]

    modal.get_by_label("Title").fill("Quarterly refund audit")
    modal.get_by_label("Notes").fill("Line one\nLine two")
    modal.get_by_label("Team").select_option("finance")
    modal.get_by_label("Notify").check()
    modal.get_by_label("Quantity").fill("42")
    modal.get_by_label("Due").fill("2030-01-15")
    modal.get_by_role("button", name="Save").click()
    expect(modal.locator("[data-block-id=qty] [role=alert]")).to_have_text("At most 10, please.")
    modal.locator(".modal-body").evaluate("body => { body.scrollTop = 0; }")
    workbench.screenshot("modal-inputs")

    modal.get_by_label("Quantity").fill("7")
    modal.get_by_role("button", name="Save").click()
    expect(modal).to_be_hidden()
    values = bot.last("view_submission")["view"]["state"]["values"]
    assert values == {
        "title": {"title": {"type": "plain_text_input", "value": "Quarterly refund audit"}},
        "notes": {"notes": {"type": "plain_text_input", "value": "Line one\nLine two"}},
        "team": {
            "team": {
                "type": "static_select",
                "selected_option": {
                    "text": {"type": "plain_text", "text": "Finance"},
                    "value": "finance",
                },
            }
        },
        "checks": {
            "checks": {
                "type": "checkboxes",
                "selected_options": [
                    {"text": {"type": "plain_text", "text": "Notify"}, "value": "notify"}
                ],
            }
        },
        "qty": {"qty": {"type": "number_input", "value": "7"}},
        "due": {"due": {"type": "datepicker", "selected_date": "2030-01-15"}},
    }


_UNSAFE_LINKS = [
    {
        "type": "section",
        "text": {
            "type": "mrkdwn",
            "text": "<javascript:alert(1)|click> <JavaScript:alert(2)|shout> "
            "<data:text/html;base64,PHNjcmlwdD5hbGVydCgzKTwvc2NyaXB0Pg==|data> "
            "<vbscript:msgbox|vb> <ftp://x|ftp> "
            "<!date^1893456000^{date_short}^javascript:alert(4)|Jan 1, 2030> "
            "<https://example.com/ok|safe> <mailto:ops@example.com|mail>",
        },
    },
    {
        "type": "rich_text",
        "elements": [
            {
                "type": "rich_text_section",
                "elements": [
                    {"type": "link", "url": " javascript:alert(5)", "text": "rich"},
                    {"type": "link", "url": "https://example.com/rich", "text": "rich safe"},
                ],
            }
        ],
    },
    {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Evil button"},
                "action_id": "evil",
                "url": "javascript:alert(6)",
            },
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Docs button"},
                "action_id": "docs",
                "url": "https://example.com/docs",
            },
        ],
    },
]
"""Links of every kind a message can carry, with schemes that would run script in the page."""


def test_links_that_could_run_script_are_shown_as_plain_text(
    stub: tuple[StubBot, Workbench],
) -> None:
    bot, workbench = stub
    client = WebClient(token=bot.standin.bot_token, base_url=bot.standin.api_url)
    posted = client.chat_postMessage(channel=CHANNEL, text="links", blocks=_UNSAFE_LINKS)
    workbench.open(ALICE)
    message = workbench.message(posted["ts"])

    expect(message).to_contain_text("<javascript:alert(1)|click>")  # as typed, not a link
    expect(message).to_contain_text("Jan 1, 2030")
    hrefs = message.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert hrefs == [
        "https://example.com/ok",
        "mailto:ops@example.com",
        "https://example.com/rich",
    ]
    expect(message.get_by_text("rich", exact=True)).to_have_count(1)


def test_a_button_never_opens_a_url_that_could_run_script(stub: tuple[StubBot, Workbench]) -> None:
    bot, workbench = stub
    # Record what the page would open instead of opening it.
    workbench.page.add_init_script(
        "window.opened = []; window.open = (url) => { window.opened.push(String(url)); };"
    )
    client = WebClient(token=bot.standin.bot_token, base_url=bot.standin.api_url)
    posted = client.chat_postMessage(channel=CHANNEL, text="links", blocks=_UNSAFE_LINKS)
    page = workbench.open(ALICE)
    message = workbench.message(posted["ts"])

    # The click still reaches the app, as Slack sends one for a link button.
    message.get_by_role("button", name="Evil button").click()
    wait_for(lambda: [p for p in bot.received if p["actions"][0]["action_id"] == "evil"])
    message.get_by_role("button", name="Docs button").click()
    wait_for(lambda: [p for p in bot.received if p["actions"][0]["action_id"] == "docs"])
    assert page.evaluate("window.opened") == ["https://example.com/docs"]


# -- the workbench's HTTP side, without a browser ------------------------------------------------


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def _post(standin: SlackStandIn, route: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST ``body`` to the workbench's ``route`` as its page does (JSON, with the token)."""
    headers = {"Content-Type": "application/json", workbench.TOKEN_HEADER: standin.workbench.token}
    request = urllib.request.Request(
        f"{standin.url}workbench/{route}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    users = [StandInUser(ALICE, "alice"), StandInUser(BOB, "bob"), StandInUser(ADMIN, "ada")]
    with SlackStandIn(signing_secret="s", users=users, channels={CHANNEL: "approvals"}) as slack:
        slack.workbench.admins = frozenset({ADMIN})
        yield slack


def test_the_page_and_its_files_are_served_and_nothing_else(standin: SlackStandIn) -> None:
    status, content_type, page = _get(standin.url)
    assert (status, content_type) == (200, "text/html; charset=utf-8")
    assert b'src="/static/workbench.js"' in page
    assert _get(standin.url + "static/workbench.js")[:2] == (200, "text/javascript; charset=utf-8")
    assert _get(standin.url + "static/workbench.css")[0] == 200
    assert _get(standin.url + "static/../server.py")[0] == 404
    assert _get(standin.url + "static/%2e%2e/server.py")[0] == 404
    assert _get(standin.url + "static/missing.js")[0] == 404
    assert _get(standin.url + "elsewhere")[0] == 404


def test_state_shows_what_one_member_sees(standin: SlackStandIn) -> None:
    client = WebClient(token=standin.bot_token, base_url=standin.api_url)
    client.chat_postMessage(channel=CHANNEL, text="for everyone")
    client.chat_postMessage(channel=ALICE, text="for alice only")
    client.chat_postEphemeral(channel=CHANNEL, user=BOB, text="for bob's eyes")

    state = standin.workbench.state(BOB)
    assert state["me"] == BOB
    assert [m["text"] for m in state["messages"]] == ["for everyone"]
    assert [e["text"] for e in state["ephemerals"]] == ["for bob's eyes"]
    assert {c["id"]: c["kind"] for c in state["channels"]} == {CHANNEL: "channel", "D0BOB": "app"}
    roles = {u["id"]: u["role"] for u in state["users"]}
    assert roles == {ALICE: "member", BOB: "member", ADMIN: "admin", standin.bot_user_id: "app"}
    assert [m["text"] for m in standin.workbench.state(ALICE)["messages"]] == [
        "for everyone",
        "for alice only",
    ]


def test_a_waiting_state_request_answers_as_soon_as_the_bot_posts(
    standin: SlackStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = standin.workbench.state(ALICE)["version"]
    client = WebClient(token=standin.bot_token, base_url=standin.api_url)
    threading.Timer(0.3, lambda: client.chat_postMessage(channel=CHANNEL, text="news")).start()
    started = time.monotonic()
    status, _, body = _get(f"{standin.url}workbench/state?user={ALICE}&since={version}")
    assert status == 200
    assert [m["text"] for m in json.loads(body)["messages"]] == ["news"]
    assert 0.25 < time.monotonic() - started < 3

    monkeypatch.setattr(workbench, "LONG_POLL_SECONDS", 0.2)
    unchanged = json.loads(_get(f"{standin.url}workbench/state?since={version}x")[2])["version"]
    assert (
        json.loads(_get(f"{standin.url}workbench/state?since={unchanged}")[2])["version"]
        == unchanged
    )


def test_actions_that_cannot_reach_a_bot_say_why(standin: SlackStandIn) -> None:
    client = WebClient(token=standin.bot_token, base_url=standin.api_url)
    posted = client.chat_postMessage(channel=CHANNEL, text="hi", blocks=GALLERY[:2])
    click = json.dumps(
        {"user": ALICE, "action_id": "open", "message": {"channel": CHANNEL, "ts": posted["ts"]}}
    ).encode()

    status, answer = _post(standin, "click", click)
    assert (status, answer["ok"]) == (409, False)
    assert "bot_url" in answer["error"]

    standin.bot_url = "http://127.0.0.1:9/slack/events"
    status, answer = _post(standin, "click", click)
    assert status == 502
    assert "nothing answered" in answer["error"]

    assert _post(standin, "click", b"not json")[0] == 400
    assert _post(standin, "message", b'{"user": "U0ALICE"}')[0] == 400
    assert _post(standin, "nowhere", b"{}")[0] == 404
