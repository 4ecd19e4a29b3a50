"""Block Kit of command replies and of the App Home: within Slack's limits (checked by the
stand-in's independent checks) for the largest inputs, agent text escaped, buttons shared
with the channel message."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from bot.blockkit import ids, message
from bot.blockkit.home import render_home
from bot.blockkit.ids import home_actions_block_id
from bot.blockkit.replies import (
    PageRequest,
    decode_page,
    encode_page,
    render_detail,
    render_help,
    render_listing,
    render_stats,
)
from bot.queries.listings import ListFilter, Listing, ListKind
from bot.queries.stats import Stats
from bot.standin.blockkit import (
    MAX_MESSAGE_BLOCKS,
    check_blocks,
    check_view,
    message_blocks_too_long,
)
from store.models import AuditEvent, Handoff, ResumeData, Status
from tests.support.blockkit import (
    CREATED,
    INJECTION_TEXT,
    INJECTIONS,
    approval,
    make_handoff,
    question,
)

HUGE = "x" * 50_000


def _fits_a_message(blocks: list[dict]) -> None:
    check_blocks(blocks, limit=MAX_MESSAGE_BLOCKS)
    assert not message_blocks_too_long(blocks)


def _many(count: int, **options: object) -> list[Handoff]:
    return [
        make_handoff(
            approval({"note": HUGE}, description=HUGE), context=HUGE, **options
        ).model_copy(update={"id": f"ho_01JDZ3Q6T5N9W2V8K4M7R1X{n:03d}"})
        for n in range(count)
    ]


def test_a_page_of_20_huge_handoffs_fits_an_ephemeral_message() -> None:
    items = _many(20, reviewers=["U0ALICE", "S0FINANCE"], channel="C0APPROVALS")
    listing = Listing(
        ListFilter(ListKind.RUN, "r" * 256),
        items,
        prev_cursor=items[0].id,
        next_cursor=items[-1].id,
        total=100_000,
        offset=40,
    )
    reply = render_listing(listing)
    _fits_a_message(reply.blocks)
    assert "41 to 60 of 100000" in json.dumps(reply.blocks)
    buttons = next(b for b in reply.blocks if b.get("block_id") == "handoff_list_pages")
    for button in buttons["elements"]:
        assert len(button["value"]) <= 2000
        request = decode_page(button["value"])
        assert request.filter == listing.filter


def test_page_values_round_trip_and_tampered_ones_are_refused() -> None:
    request = PageRequest(ListFilter(ListKind.CHANNEL, "C0X"), before="ho_1")
    assert decode_page(encode_page(request)) == request
    for tampered in (
        "",
        "{}",
        '{"k": "secret"}',
        '{"k": "type", "v": "refund"}',
        "[1]",
        # Cursors that are no ids (found by the break-it review: an int reached bisect).
        '{"k": "failed", "a": 5}',
        '{"k": "failed", "b": [1]}',
        '{"k": "pending", "a": {"x": 1}}',
    ):
        with pytest.raises(ValueError):
            decode_page(tampered)


def test_show_of_a_huge_handoff_with_a_long_audit_trail_fits_a_message() -> None:
    handoff = make_handoff(approval({"note": HUGE}), context=HUGE, requester="U0BOB")
    audit = [
        AuditEvent(
            event="denied",
            handoff_id=handoff.id,
            at=CREATED + timedelta(seconds=n),
            actor="U0CAROL",
            detail={"via": "slack_button", "note": HUGE[:500]},
        )
        for n in range(300)
    ]
    reply = render_detail(handoff, audit)
    _fits_a_message(reply.blocks)
    text = json.dumps(reply.blocks)
    assert "earlier events not shown" in text
    assert ids.APPROVE in text and ids.VIEW_FULL in text


def test_show_escapes_agent_text() -> None:
    handoff = make_handoff(question(INJECTION_TEXT), context=INJECTION_TEXT)
    text = json.dumps(render_detail(handoff, []).blocks)
    for injection in INJECTIONS:
        assert injection not in text


HOSTILE_CHANNEL = "C0X> <!channel> <https://evil.example/login|Approve here"


def test_a_channel_that_is_no_conversation_id_is_shown_escaped_everywhere() -> None:
    handoff = make_handoff(question(), channel=HOSTILE_CHANNEL)
    stats = Stats(
        window=timedelta(days=7),
        since=CREATED,
        pending=1,
        pending_by_type={"question": 1},
        pending_by_channel={HOSTILE_CHANNEL: 1},
        decided=0,
        expired=0,
        cancelled=0,
        median_decision_seconds=None,
        p90_decision_seconds=None,
        failed_resumes=0,
        failing_resumes=0,
    )
    rendered = {
        "show": render_detail(handoff, []).blocks,
        "list": render_listing(Listing(ListFilter(ListKind.PENDING), [handoff])).blocks,
        "list of the channel": render_listing(
            Listing(ListFilter(ListKind.CHANNEL, HOSTILE_CHANNEL), [handoff])
        ).blocks,
        "home": render_home(Listing(ListFilter(ListKind.MINE), [handoff]), [], command="/h"),
        "stats": render_stats(stats).blocks,
    }
    for where, blocks in rendered.items():
        text = json.dumps(blocks)
        assert "<!channel>" not in text and "<https://evil" not in text, where
        assert "#C0X&gt; &lt;!channel&gt;" in text, where


def test_a_conversation_id_is_shown_as_a_channel_link() -> None:
    text = json.dumps(render_detail(make_handoff(question(), channel="C0REFUNDS"), []).blocks)
    assert "<#C0REFUNDS>" in text


def test_show_of_a_decided_handoff_says_who_decided() -> None:
    decision = ResumeData(
        decision_id="d", outcome=Status.REJECTED, decided_by="U0ALICE", comment="no"
    )
    handoff = make_handoff(approval(), status=Status.REJECTED, resume_data=decision)
    text = json.dumps(render_detail(handoff, []).blocks)
    assert "Rejected* by <@U0ALICE>" in text
    assert ids.APPROVE not in text


def test_show_names_the_api_key_that_created_a_handoff_and_its_webhook_resume() -> None:
    from store.models import Callback

    handoff = make_handoff(
        approval(), api_key="billing-agent", callback=Callback(url="https://a.example/h")
    )
    plain = make_handoff(approval())

    text = json.dumps(render_detail(handoff, []).blocks)

    assert "created by API key `billing-agent`" in text
    assert "resume by webhook" in text
    assert "API key" not in json.dumps(render_detail(plain, []).blocks)


def test_home_with_a_full_queue_and_recent_decisions_fits_a_home_tab() -> None:
    queue = Listing(ListFilter(ListKind.MINE), _many(20), next_cursor="ho_next")
    decision = ResumeData(decision_id="d", outcome=Status.APPROVED, decided_by="U0ALICE")
    recent = _many(10, status=Status.APPROVED, resume_data=decision)
    view = render_home(queue, recent, command="/handoff", notice="Already approved by <@U0BOB>.")
    check_view(view, kind="home")
    assert len(view["blocks"]) <= 100
    assert "`/handoff list mine`" in json.dumps(view["blocks"])


def test_home_buttons_are_the_channel_messages_own() -> None:
    handoff = make_handoff(approval({"amount": 30}))
    view = render_home(Listing(ListFilter(ListKind.MINE), [handoff]), [], command="/handoff")
    [on_home] = [
        b for b in view["blocks"] if b.get("block_id") == home_actions_block_id(handoff.id)
    ]
    [in_channel] = [b for b in message.render_message(handoff).blocks if b["type"] == "actions"]
    assert on_home["elements"] == in_channel["elements"]


def test_help_names_the_configured_command() -> None:
    reply = render_help("/agents", problem="I don't know the subcommand `x`.")
    _fits_a_message(reply.blocks)
    assert "/agents list" in json.dumps(reply.blocks)
    assert reply.text.startswith("I don't know")


def test_stats_reply_shows_every_figure() -> None:
    stats = Stats(
        since=CREATED,
        window=timedelta(days=7),
        pending=12,
        pending_by_type={"approval": 10, "question": 2},
        pending_by_channel={"C0A": 7, "C0B": 3},
        decided=30,
        expired=5,
        cancelled=5,
        median_decision_seconds=125,
        p90_decision_seconds=3 * 3600 + 60,
        failed_resumes=2,
        failing_resumes=1,
    )
    reply = render_stats(stats)
    _fits_a_message(reply.blocks)
    text = json.dumps(reply.blocks)
    for expected in ("last 7 days", "10 approval", "<#C0A>: 7", "median 2m 5s", "p90 3h 1m"):
        assert expected in text
    assert "12% of 40 closed" in text
    assert "2 in the window, 1 failed now" in text
    assert ids.LIST_NEXT not in text
