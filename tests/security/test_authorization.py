"""People who may not decide a handoff, or run admin commands, are refused on every surface:
buttons, modal submissions, thread replies, App Home buttons, the slash command and its
buttons. Each gets a clear refusal; nothing changes but the audit of the denial.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.blockkit.ids import LIST_NEXT, LIST_PREV, LIST_SHOW
from bot.blockkit.replies import PageRequest, encode_page
from bot.queries.listings import ListFilter, ListKind
from bot.standin import Message
from handlers.modal_metadata import ModalOrigin, metadata_key, seal
from store.models import Status
from tests.support import slack_env
from tests.support.security_harness import (
    InProcessBot,
    assert_unchanged,
    sink,
    snapshot,
    wait_quiet,
)
from tests.support.slack_env import ADMIN, ALICE, BOB, CAROL, CHANNEL, OWNER, SlackEnv, wait_for

ONLY_ALICE = f"Only <@{ALICE}> can decide this request."


def _text(blocks: list[dict[str, Any]], text: str = "") -> str:
    return text + json.dumps(blocks)


def _requests(slack: SlackEnv) -> dict[str, str]:
    """One pending handoff of every kind, for Alice to decide, posted; the second
    escalation claimed by Alice (so it shows Resolve and Send back)."""
    run: dict[str, Any] = {"run_id": "run-a", "thread_id": "t", "reviewers": [ALICE]}
    ids = {
        "approval": slack.refund_approval(reviewers=[ALICE]),
        "question": slack.handoffs.ask(question="Which region?", **run).id,
        "correction": slack.handoffs.request_correction(draft="Dear customer,", **run).id,
        "escalation": slack.handoffs.escalate(summary="Stuck on a refund", **run).id,
        "claimed escalation": slack.handoffs.escalate(summary="Stuck again", **run).id,
    }
    slack.standin.click(ALICE, slack.posted(ids["claimed escalation"]), block_ids.CLAIM)
    wait_for(lambda: slack.handoffs.get(ids["claimed escalation"]).claimed_by == ALICE)
    return ids


BUTTONS = {
    "approval": [block_ids.APPROVE, block_ids.REJECT, block_ids.EDIT],
    "question": [block_ids.ANSWER],
    "correction": [block_ids.CORRECT, block_ids.REJECT],
    "escalation": [block_ids.CLAIM],
    "claimed escalation": [block_ids.RESOLVE, block_ids.REJECT],
}


def _current(slack: SlackEnv, handoff_id: str) -> Message:
    """The handoff's message as it is now (after the claim's update, for instance)."""
    refs = slack.handoffs.get(handoff_id).message_refs
    return slack.standin.message(refs["channel"], refs["ts"])


def test_every_button_refuses_someone_who_may_not_decide(
    slack: SlackEnv, store_redis: Redis
) -> None:
    ids = _requests(slack)
    wait_for(
        lambda: block_ids.RESOLVE in json.dumps(_current(slack, ids["claimed escalation"]).blocks)
    )
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)
    modals = len(slack.standin.calls("views.open"))

    for kind, buttons in BUTTONS.items():
        message = _current(slack, ids[kind])
        for action_id in buttons:
            shown = len(slack.standin.ephemerals(CAROL))
            assert slack.standin.click(CAROL, message, action_id).status == 200
            replies = slack.standin.ephemerals(CAROL)
            assert len(replies) == shown + 1, f"{kind} {action_id}: no reply"
            assert replies[-1].text == ONLY_ALICE, f"{kind} {action_id}"

    assert len(slack.standin.calls("views.open")) == modals  # no modal opened for Carol
    for kind, handoff_id in ids.items():
        handoff = slack.handoffs.get(handoff_id)
        assert handoff.status is Status.PENDING, kind
        denied = [e for e in slack.handoffs.audit(handoff_id) if e.event == "denied"]
        assert {(e.actor, e.detail["via"]) for e in denied} == {(CAROL, "slack_button")}
    assert slack.handoffs.get(ids["claimed escalation"]).claimed_by == ALICE
    assert_unchanged(before, snapshot(store_redis), store_redis)


def test_the_requester_may_not_approve_their_own_request(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE, BOB], requester=ALICE)
    slack.standin.click(ALICE, slack.posted(handoff_id), block_ids.APPROVE)
    assert "someone else has to decide it" in slack.standin.ephemerals(ALICE)[-1].text
    assert slack.handoffs.get(handoff_id).status is Status.PENDING


def test_a_modal_submission_by_someone_who_may_not_decide_is_refused(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    removed = slack.refund_approval(reviewers=[ALICE])
    slack.standin.click(ALICE, slack.posted(handoff_id), block_ids.REJECT)
    slack.standin.click(ALICE, slack.posted(removed), block_ids.REJECT)
    alices_modals = wait_for(
        lambda: len(slack.standin.views(ALICE)) >= 2 and slack.standin.views(ALICE)
    )
    [modal] = [v for v in alices_modals if removed in v.view["private_metadata"]]

    # Alice is taken off the request while her modal is open: her submission no longer counts.
    slack.handoffs.store.reassign(removed, by=ADMIN, reviewers=[BOB])
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)
    answer = slack.standin.submit_view(
        ALICE, modal, {block_ids.REASON_BLOCK: {block_ids.VALUE: "no"}}
    )
    assert answer.json()["errors"] == {
        block_ids.REASON_BLOCK: f"Only @{BOB} can decide this request."
    }

    # Carol submits a modal for the handoff, even one sealed for her (as if she had opened it).
    values = {
        block_ids.REASON_BLOCK: {block_ids.VALUE: {"type": "plain_text_input", "value": "no"}}
    }
    for metadata in (
        json.dumps({"handoff_id": handoff_id, "channel": CHANNEL}),
        seal(metadata_key(slack_env.SIGNING_SECRET), ModalOrigin(handoff_id, CHANNEL, CAROL)),
    ):
        payload = {
            "type": "view_submission",
            "user": {"id": CAROL},
            "view": {**modal.view, "private_metadata": metadata, "state": {"values": values}},
        }
        reply = bot.interaction(payload)
        assert reply.status == 200
        assert json.loads(reply.body)["response_action"] == "errors"
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert slack.handoffs.get(removed).status is Status.PENDING
    assert_unchanged(before, snapshot(store_redis), store_redis)


def test_a_claimed_escalation_is_sent_back_only_by_its_claimer_or_an_admin(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    run: dict[str, Any] = {"run_id": "run-e", "thread_id": "t", "reviewers": [ALICE, BOB]}
    handoff_id = slack.handoffs.escalate(summary="Stuck on a refund", **run).id
    slack.standin.click(ALICE, slack.posted(handoff_id), block_ids.CLAIM)
    wait_for(lambda: block_ids.RESOLVE in json.dumps(_current(slack, handoff_id).blocks))
    wait_quiet(store_redis, slack)
    modals = len(slack.standin.calls("views.open"))

    # Bob may decide the escalation, but Alice claimed it: "Send back" is hers now.
    assert slack.standin.click(BOB, _current(slack, handoff_id), block_ids.REJECT).status == 200
    told = slack.standin.ephemerals(BOB)[-1].text
    assert (
        told
        == f"<@{ALICE}> has claimed this escalation; only they (or an admin) can decide it now."
    )
    assert len(slack.standin.calls("views.open")) == modals

    # A send-back modal submitted as Bob, sealed for him as if he had opened it, is refused.
    values = {
        block_ids.REASON_BLOCK: {block_ids.VALUE: {"type": "plain_text_input", "value": "no"}}
    }
    view = {
        "type": "modal",
        "callback_id": block_ids.REJECT_MODAL,
        "blocks": [{"type": "input", "block_id": block_ids.REASON_BLOCK}],
        "private_metadata": seal(
            metadata_key(slack_env.SIGNING_SECRET), ModalOrigin(handoff_id, CHANNEL, BOB)
        ),
        "state": {"values": values},
    }
    reply = bot.interaction({"type": "view_submission", "user": {"id": BOB}, "view": view})
    assert json.loads(reply.body)["errors"][block_ids.REASON_BLOCK].startswith(
        f"@{ALICE} has claimed this escalation"
    )
    assert slack.handoffs.get(handoff_id).status is Status.PENDING

    # An admin may send it back.
    admin_view = {
        **view,
        "private_metadata": seal(
            metadata_key(slack_env.SIGNING_SECRET), ModalOrigin(handoff_id, CHANNEL, ADMIN)
        ),
    }
    bot.interaction({"type": "view_submission", "user": {"id": ADMIN}, "view": admin_view})
    sent_back = slack.handoffs.get(handoff_id)
    assert sent_back.status is Status.REJECTED
    assert sent_back.resume_data is not None and sent_back.resume_data.decided_by == ADMIN


def test_a_thread_reply_by_someone_who_may_not_answer_is_refused(
    slack: SlackEnv, store_redis: Redis
) -> None:
    question = slack.region_question(run_id="run-t", reviewers=[ALICE])
    message = slack.posted(question.id)
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    _, response = slack.standin.post_message(CAROL, CHANNEL, "us-east-1", thread_ts=message.ts)

    assert response is not None and response.status == 200
    # Told privately once the event is answered.
    told = slack.standin.wait_for(lambda: slack.standin.ephemerals(CAROL), timeout=5)
    assert told[-1].text == ONLY_ALICE
    assert slack.handoffs.get(question.id).status is Status.PENDING
    assert [(e.event, e.actor) for e in slack.handoffs.audit(question.id)][-1] == (
        "denied",
        CAROL,
    )
    assert_unchanged(before, snapshot(store_redis), store_redis)


def test_a_stale_app_home_button_of_someone_taken_off_the_request_is_refused(
    slack: SlackEnv, store_redis: Redis
) -> None:
    handoff_id = slack.refund_approval(reviewers=[BOB])
    slack.posted(handoff_id)
    slack.standin.send_app_home_opened(BOB)
    stale = wait_for(
        lambda: (home := slack.standin.home(BOB)) and handoff_id in json.dumps(home.blocks) and home
    )
    slack.handoffs.store.reassign(handoff_id, by=ADMIN, reviewers=[ALICE])
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    block_id = f"home_actions_{handoff_id}"
    assert slack.standin.click(BOB, stale, block_ids.APPROVE, block_id=block_id).status == 200

    notice = json.dumps(slack.standin.home(BOB).blocks)
    assert "not on a message of that request" in notice or ONLY_ALICE in notice
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert_unchanged(before, snapshot(store_redis), store_redis)


# -- the slash command --------------------------------------------------------------------------

ADMIN_ONLY = [
    "cancel {id}",
    "cancel {id} not needed",
    "expire {id}",
    "reassign {id} <#C0ELSEWHERE>",
    "reassign {id} <@U0CAROL>",
    "retry {id}",
    "stats",
    "stats 30d",
    "list",
    "list pending",
    "list <#C0APPROVALS|approvals>",
    "list run run-refund",
    "list type approval",
]


@pytest.mark.parametrize("user", [CAROL, ALICE])
def test_admin_subcommands_are_refused_to_non_admins_and_change_nothing(
    slack: SlackEnv, store_redis: Redis, user: str
) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    slack.posted(handoff_id)
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    for text in ADMIN_ONLY:
        reply = slack.command(user, text.format(id=handoff_id))
        shown = _text(reply.blocks, reply.text)
        assert "Only handoff admins" in shown, f"{text}: {shown}"

    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    denials = [e for e in slack.handoffs.audit(handoff_id) if e.event == "denied"]
    assert {e.detail["command"] for e in denials} == {"cancel", "expire", "reassign", "retry"}
    time.sleep(0.3)  # stats answers after the ack, when it answers at all
    assert_unchanged(before, snapshot(store_redis), store_redis)


def test_admins_do_run_them(slack: SlackEnv) -> None:
    """The control for the test above: the same commands work for HANDOFF_ADMINS and for
    workspace owners (known through users.info)."""
    cancelled = slack.refund_approval(reviewers=[ALICE])
    expired = slack.refund_approval(reviewers=[ALICE])
    assert "Cancelled" in _text(slack.command(ADMIN, f"cancel {cancelled}").blocks)
    assert "Expired" in _text(slack.command(OWNER, f"expire {expired}").blocks)
    assert slack.handoffs.get(cancelled).status is Status.CANCELLED
    assert slack.handoffs.get(expired).status is Status.EXPIRED


def test_show_and_listing_buttons_refuse_what_the_user_may_not_see(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    shown = _text(slack.command(CAROL, f"show {handoff_id}").blocks)
    assert "You can see only the handoffs you may decide" in shown
    assert "A-1001" not in shown  # none of the request's content
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    # Clicks on the buttons of an ephemeral listing, their values forged to other listings
    # and to a handoff Carol may not see; the answers go to the response_url.
    forged = {
        LIST_NEXT: encode_page(PageRequest(ListFilter(ListKind.PENDING))),
        LIST_PREV: encode_page(PageRequest(ListFilter(ListKind.CHANNEL, CHANNEL))),
        LIST_SHOW: handoff_id,
    }
    for action_id, value in forged.items():
        with sink() as (url, answers):
            payload = {
                "type": "block_actions",
                "user": {"id": CAROL},
                "container": {
                    "type": "message",
                    "message_ts": "1700000000.000100",
                    "channel_id": CHANNEL,
                    "is_ephemeral": True,
                },
                "trigger_id": "1.2.forged",
                "response_url": url,
                "actions": [{"type": "button", "action_id": action_id, "value": value}],
            }
            assert bot.interaction(payload).status == 200
        [(_, told)] = answers
        text = told.decode()
        assert "Only handoff admins" in text or "You can see only" in text, action_id
        assert "A-1001" not in text
    assert_unchanged(before, snapshot(store_redis), store_redis)
