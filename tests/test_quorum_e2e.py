"""An approval that needs two people, through Slack (the stand-in, a real worker and
`handoff serve`): each approval is a vote the voter is told about, the message shows the
count after every vote, a second click by the same person is refused, an edit in the modal
clears the approvals before it, and the second approval decides and resumes the run once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids
from store.models import Status, TaskState
from tests.support.slack_env import ALICE, BOB, CAROL, SlackEnv, running_slack, wait_for


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def _text(message) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(message.blocks)


def _shows(slack: SlackEnv, handoff_id: str, text: str):  # type: ignore[no-untyped-def]
    """The handoff's message once it shows ``text`` (the worker updates it after a vote)."""
    return wait_for(lambda: (m := slack.posted(handoff_id)) and text in _text(m) and m)


def test_two_approvals_decide_and_each_voter_is_told(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(approvals_required=2, reviewers=[ALICE, BOB, CAROL])
    assert "Approvals 0 of 2" in _text(slack.posted(handoff_id))

    slack.standin.click(ALICE, slack.posted(handoff_id), ids.APPROVE)
    assert "is recorded: 1 of 2 approvals" in slack.standin.ephemerals(ALICE)[-1].text
    counted = _shows(slack, handoff_id, "Approvals 1 of 2")
    assert f"<@{ALICE}> :white_check_mark:" in _text(counted)
    assert slack.handoffs.get(handoff_id).status is Status.PENDING

    slack.standin.click(ALICE, counted, ids.APPROVE)  # again: one vote per person
    assert "already voted" in slack.standin.ephemerals(ALICE)[-1].text
    assert len(slack.handoffs.get(handoff_id).votes) == 1

    slack.standin.click(BOB, counted, ids.APPROVE)
    resumed = slack.resumed(handoff_id)
    assert resumed["status"] == "approved"
    assert resumed["resume_data"]["approvers"] == [ALICE, BOB]
    final = _shows(slack, handoff_id, "Approved* by")
    assert f"<@{ALICE}>, <@{BOB}>" in _text(final)
    events = [e.event for e in slack.handoffs.audit(handoff_id)]
    assert (events.count("voted"), events.count("decided"), events.count("resumed")) == (1, 1, 1)


def test_an_edit_in_the_modal_clears_the_earlier_approval(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(approvals_required=2, reviewers=[ALICE, BOB, CAROL])
    slack.standin.click(ALICE, slack.posted(handoff_id), ids.APPROVE)
    counted = _shows(slack, handoff_id, "Approvals 1 of 2")

    slack.standin.click(BOB, counted, ids.EDIT)
    [modal] = slack.standin.views(BOB)
    values = {
        ids.arg_block_id("order_id"): {ids.VALUE: "A-1001"},
        ids.arg_block_id("amount"): {ids.VALUE: "20"},
    }
    answer = slack.standin.submit_view(BOB, modal, values)

    assert answer.json()["response_action"] == "update"  # the modal says the vote counted
    assert "1 of 2 approvals" in json.dumps(answer.json()["view"])
    edited = _shows(slack, handoff_id, "approvals given before the edit were cleared")
    assert "Approvals 1 of 2" in _text(edited) and f"<@{BOB}> :white_check_mark:" in _text(edited)
    assert f"<@{ALICE}> :white_check_mark:" not in _text(edited)

    slack.standin.click(ALICE, edited, ids.APPROVE)  # approves the new arguments
    resumed = slack.resumed(handoff_id)
    assert resumed["resume_data"]["edited_args"] == {"order_id": "A-1001", "amount": 20}
    assert resumed["resume_data"]["approvers"] == [BOB, ALICE]
    assert slack.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED


def _edit_amount(slack: SlackEnv, user: str, message, amount: str) -> None:  # type: ignore[no-untyped-def]
    slack.standin.click(user, message, ids.EDIT)
    modal = slack.standin.views(user)[-1]
    values = {
        ids.arg_block_id("order_id"): {ids.VALUE: "A-1001"},
        ids.arg_block_id("amount"): {ids.VALUE: amount},
    }
    slack.standin.submit_view(user, modal, values)


def test_approve_on_a_message_shown_before_anothers_edit_approves_nothing(
    slack: SlackEnv,
) -> None:
    """Carol's screen still shows the agent's 30 when Bob's edit to 3000 (his approval)
    lands: her Approve on that message is refused, not counted for 3000 (the button carries
    the digest of the arguments it showed)."""
    handoff_id = slack.refund_approval(approvals_required=2, reviewers=[ALICE, BOB, CAROL])
    shown_to_carol = slack.posted(handoff_id)
    _edit_amount(slack, BOB, shown_to_carol, "3000")

    slack.standin.click(CAROL, shown_to_carol, ids.APPROVE)

    assert "arguments were edited" in slack.standin.ephemerals(CAROL)[-1].text
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.status is Status.PENDING
    assert [v.by for v in handoff.votes if not v.cleared] == [BOB]
    # On the message as it is now (showing 3000), her approval counts.
    slack.standin.click(CAROL, _shows(slack, handoff_id, "3000"), ids.APPROVE)
    resumed = slack.resumed(handoff_id)
    assert resumed["resume_data"]["edited_args"]["amount"] == 3000
    assert resumed["resume_data"]["approvers"] == [BOB, CAROL]


def test_approve_on_an_old_show_reply_after_an_edit_approves_nothing(slack: SlackEnv) -> None:
    """A /handoff show reply is never refreshed: its buttons are bound to what it showed."""
    handoff_id = slack.refund_approval(approvals_required=2, reviewers=[ALICE, BOB, CAROL])
    message = slack.posted(handoff_id)
    shown = slack.command(CAROL, f"show {handoff_id}")
    _edit_amount(slack, BOB, message, "3000")
    _shows(slack, handoff_id, "3000")

    slack.standin.click(CAROL, slack.current(shown), ids.APPROVE)

    assert "arguments were edited" in slack.standin.ephemerals(CAROL)[-1].text
    assert slack.handoffs.get(handoff_id).status is Status.PENDING


def test_an_edit_modal_opened_before_anothers_edit_approves_nothing(slack: SlackEnv) -> None:
    """Carol opened Edit on 30; Bob's edit to 3000 lands; her submission (a new amount, her
    approval) is refused inline: it was made against arguments no longer up for approval."""
    handoff_id = slack.refund_approval(approvals_required=2, reviewers=[ALICE, BOB, CAROL])
    message = slack.posted(handoff_id)
    slack.standin.click(CAROL, message, ids.EDIT)
    carols_modal = slack.standin.views(CAROL)[-1]
    _edit_amount(slack, BOB, message, "3000")

    answer = slack.standin.submit_view(
        CAROL,
        carols_modal,
        {
            ids.arg_block_id("order_id"): {ids.VALUE: "A-1001"},
            ids.arg_block_id("amount"): {ids.VALUE: "40"},
        },
    )

    assert "arguments were edited" in answer.body.decode()
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.status is Status.PENDING
    assert handoff.current_args["amount"] == 3000
