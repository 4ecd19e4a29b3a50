"""The Slack bot end to end over real HTTP: the stand-in posts signed clicks, submissions
and thread replies to `handoff serve`; a real worker delivers, updates and resumes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from redis import Redis

from bot.blockkit import ids
from store.models import Status, TaskState
from tests.support import resume_targets, slack_env
from tests.support.redis_state import snapshot
from tests.support.slack_env import ADMIN, ALICE, BOB, CAROL, CHANNEL, SlackEnv, wait_for


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from slack_env.running_slack(redis, redis_url, tmp_path)


def _resumed(redis: Redis) -> list[dict]:
    return [json.loads(raw) for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)]


def _wait_resumed(slack: SlackEnv, handoff_id: str) -> dict:
    wait_for(lambda: slack.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    [entry] = [e for e in _resumed(slack.redis) if e["handoff_id"] == handoff_id]
    return entry


def _resumed_by_modal(
    slack: SlackEnv, user: str, handoff_id: str, button: str, values: dict, message=None
) -> dict:
    """``user`` clicks ``button`` on ``message`` (default: the handoff's posted message),
    submits the modal it opens with ``values``: what the run was then resumed with."""
    slack.standin.click(user, message or slack.posted(handoff_id), button)
    [modal] = slack.standin.views(user)
    slack.standin.submit_view(user, modal, values)
    return _wait_resumed(slack, handoff_id)


def _wait_updated(slack: SlackEnv, handoff_id: str):
    wait_for(lambda: slack.handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)
    return slack.posted(handoff_id)


def _action_ids(blocks: list[dict]) -> set[str]:
    return {
        element.get("action_id")
        for block in blocks
        if block.get("type") == "actions"
        for element in block.get("elements", [])
    }


def _text(blocks: list[dict]) -> str:
    return json.dumps(blocks)


def _approval(slack: SlackEnv, **options) -> str:
    return slack.handoffs.request_approval(
        run_id="run-e2e",
        thread_id="thread-1",
        action="issue_refund",
        args={"order_id": "A-1001", "amount": 30},
        args_schema={
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "amount": {"type": "integer", "maximum": 100},
            },
            "required": ["order_id", "amount"],
        },
        context="Customer was charged twice.",
        resume="tests.support.resume_targets:record",
        **options,
    ).id


def test_approval_click_decides_updates_the_message_and_resumes_the_run(slack: SlackEnv) -> None:
    handoff_id = _approval(slack)
    message = slack.posted(handoff_id)
    assert message.channel == CHANNEL
    assert {ids.APPROVE, ids.REJECT, ids.EDIT} <= _action_ids(message.blocks)
    assert message.metadata["event_payload"]["handoff_id"] == handoff_id

    response = slack.standin.click(ALICE, message, ids.APPROVE)
    assert response.status == 200

    assert slack.handoffs.get(handoff_id).status is Status.APPROVED
    resumed = _wait_resumed(slack, handoff_id)
    assert resumed["status"] == "approved"
    assert resumed["resume_data"]["decided_by"] == ALICE
    assert resumed["resume_data"]["via"] == "slack_button"

    updated = _wait_updated(slack, handoff_id)
    assert _action_ids(updated.blocks) == set()
    assert f"Approved* by <@{ALICE}>" in _text(updated.blocks)
    [record] = slack.standin.thread(CHANNEL, updated.ts)
    assert f"<@{ALICE}>" in record.text


def test_double_click_and_two_reviewers_at_once_make_one_decision(slack: SlackEnv) -> None:
    handoff_id = _approval(slack, reviewers=[ALICE, BOB])
    message = slack.posted(handoff_id)
    barrier = threading.Barrier(3)
    statuses: list[int] = []

    def click(user: str) -> None:
        barrier.wait()
        statuses.append(slack.standin.click(user, message, ids.APPROVE).status)

    threads = [threading.Thread(target=click, args=(u,)) for u in (ALICE, ALICE, BOB)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200, 200, 200]

    winner = slack.handoffs.get(handoff_id).resume_data.decided_by
    assert winner in (ALICE, BOB)
    _wait_resumed(slack, handoff_id)
    time.sleep(0.5)
    assert len([e for e in _resumed(slack.redis) if e["handoff_id"] == handoff_id]) == 1
    told = [e for e in slack.standin.ephemerals() if "Already approved" in e.text]
    assert len(told) == 2
    assert all(f"<@{winner}>" in e.text for e in told)
    assert [e.event for e in slack.handoffs.audit(handoff_id)].count("decided") == 1


def test_unauthorized_click_is_denied_audited_and_changes_nothing(slack: SlackEnv) -> None:
    handoff_id = _approval(slack, reviewers=[ALICE, "S0FINANCE"])
    message = slack.posted(handoff_id)

    slack.standin.click(CAROL, message, ids.APPROVE)

    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    [denial] = slack.standin.ephemerals(CAROL)
    assert f"Only <@{ALICE}>" in denial.text
    assert "denied" in [e.event for e in slack.handoffs.audit(handoff_id)]
    # A member of the listed user group may decide.
    slack.standin.click(BOB, message, ids.APPROVE)
    assert slack.handoffs.get(handoff_id).resume_data.decided_by == BOB


def test_reject_with_a_reason_through_the_modal(slack: SlackEnv) -> None:
    handoff_id = _approval(slack)
    slack.standin.click(ALICE, slack.posted(handoff_id), ids.REJECT)
    [modal] = slack.standin.views(ALICE)
    assert modal.callback_id == ids.REJECT_MODAL

    response = slack.standin.submit_view(
        ALICE, modal, {ids.REASON_BLOCK: {ids.VALUE: "Refund policy: 90 days passed"}}
    )
    assert response.status == 200

    resumed = _wait_resumed(slack, handoff_id)
    assert resumed["status"] == "rejected"
    assert resumed["resume_data"]["comment"] == "Refund policy: 90 days passed"
    assert resumed["resume_data"]["via"] == "slack_modal"
    assert "Refund policy" in _text(_wait_updated(slack, handoff_id).blocks)


def test_edit_shows_inline_errors_then_approves_with_typed_arguments(slack: SlackEnv) -> None:
    handoff_id = _approval(slack)
    slack.standin.click(ALICE, slack.posted(handoff_id), ids.EDIT)
    [modal] = slack.standin.views(ALICE)
    amount_block = ids.arg_block_id("amount")
    order_block = ids.arg_block_id("order_id")

    bad = slack.standin.submit_view(
        ALICE, modal, {order_block: {ids.VALUE: "A-1001"}, amount_block: {ids.VALUE: "thirty"}}
    )
    assert bad.json()["response_action"] == "errors"
    assert amount_block in bad.json()["errors"]
    too_much = slack.standin.submit_view(
        ALICE, modal, {order_block: {ids.VALUE: "A-1001"}, amount_block: {ids.VALUE: "500"}}
    )
    assert "100" in too_much.json()["errors"][amount_block]
    assert slack.handoffs.get(handoff_id).status is Status.PENDING

    good = slack.standin.submit_view(
        ALICE, modal, {order_block: {ids.VALUE: "A-1001"}, amount_block: {ids.VALUE: "25"}}
    )
    assert good.status == 200
    assert not good.body or "errors" not in good.text

    resumed = _wait_resumed(slack, handoff_id)
    assert resumed["resume_data"]["edited_args"] == {"order_id": "A-1001", "amount": 25}


def test_question_answered_in_a_modal(slack: SlackEnv) -> None:
    handoff = slack.handoffs.ask(
        run_id="run-q",
        thread_id="t",
        question="Which customer first?",
        choices=["Dana", "Sam"],
        resume="tests.support.resume_targets:record",
    )
    answer = {ids.ANSWER_BLOCK: {ids.VALUE: "Dana, she is enterprise"}}
    resumed = _resumed_by_modal(slack, BOB, handoff.id, ids.ANSWER, answer)
    assert resumed["status"] == "answered"
    assert resumed["resume_data"]["answer"] == "Dana, she is enterprise"


def test_question_answered_in_its_thread_once_despite_slack_retries(slack: SlackEnv) -> None:
    handoff = slack.handoffs.ask(
        run_id="run-q",
        thread_id="t",
        question="Which region?",
        resume="tests.support.resume_targets:record",
    )
    message = slack.posted(handoff.id)

    _, first = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)
    retry = slack.standin.resend_event(first)
    _, second = slack.standin.post_message(BOB, CHANNEL, "us-east-1", thread_ts=message.ts)
    assert (first.status, retry.status, second.status) == (200, 200, 200)

    resumed = _wait_resumed(slack, handoff.id)
    assert resumed["resume_data"]["answer"] == "eu-west-1"
    assert resumed["resume_data"]["via"] == "slack_thread"
    assert [e.event for e in slack.handoffs.audit(handoff.id)].count("decided") == 1
    # The loser is told privately once the event is answered.
    slack.standin.wait_for(
        lambda: any("Already answered" in e.text for e in slack.standin.ephemerals(BOB)),
        timeout=5,
    )
    assert slack.standin.ephemerals(ALICE) == []
    # The bot confirms in the thread.
    _wait_updated(slack, handoff.id)
    replies = [m for m in slack.standin.thread(CHANNEL, message.ts) if m.bot_id]
    assert len(replies) == 1 and "eu-west-1" in replies[0].text


def test_bot_and_edited_messages_in_the_thread_are_ignored(slack: SlackEnv) -> None:
    handoff = slack.handoffs.ask(run_id="run-q", thread_id="t", question="Which region?")
    message = slack.posted(handoff.id)
    slack.standin.post_message(ALICE, CHANNEL, "from a bot", thread_ts=message.ts, bot_id="B0OTHER")
    slack.standin.post_message(
        ALICE, CHANNEL, "edited", thread_ts=message.ts, subtype="message_changed"
    )
    slack.standin.post_message(ALICE, CHANNEL, "top level, not in the thread")
    assert slack.handoffs.get(handoff.id).status is Status.PENDING


def test_a_reply_in_the_thread_of_a_handoff_that_is_gone_is_ignored(slack: SlackEnv) -> None:
    handoff = slack.handoffs.ask(run_id="run-q", thread_id="t", question="Which region?")
    message = slack.posted(handoff.id)
    store = slack.handoffs.store
    # Gone, while a link to it is left (as purges before the links were kept in a set did).
    slack.redis.delete(store.keys.handoff(handoff.id))
    assert store.handoff_for_message(CHANNEL, message.ts) == handoff.id

    def stored() -> dict:
        """The namespace's keys, less the request gate's replay markers (one per request)."""
        prefix, replay = store.keys.prefix.encode(), b":bot:request:"
        return {
            k: v
            for k, v in snapshot(slack.redis).items()
            if k.startswith(prefix) and replay not in k
        }

    before = stored()

    _, response = slack.standin.post_message(ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts)

    assert response.status == 200, response.text
    served = "".join(p.read_text() for p in slack.log_dir.glob("serve-*.log"))
    assert " ERROR " not in served and "Traceback" not in served, served
    assert slack.standin.ephemerals(ALICE) == []
    assert [m for m in slack.standin.thread(CHANNEL, message.ts) if m.bot_id] == []
    assert stored() == before  # not even the event is marked seen


def test_correction_is_edited_and_sent_back(slack: SlackEnv) -> None:
    handoff = slack.handoffs.request_correction(
        run_id="run-c",
        thread_id="t",
        draft="Dear custmer, we refunded you.",
        instructions="Fix typos",
        resume="tests.support.resume_targets:record",
    )
    draft = {f"{ids.DRAFT_BLOCK_PREFIX}0": {ids.VALUE: "Dear customer, we refunded you."}}
    resumed = _resumed_by_modal(slack, ALICE, handoff.id, ids.CORRECT, draft)
    assert resumed["status"] == "approved"
    assert resumed["resume_data"]["corrected_draft"] == "Dear customer, we refunded you."


def test_escalation_is_claimed_then_resolved_by_its_claimer(slack: SlackEnv) -> None:
    handoff = slack.handoffs.escalate(
        run_id="run-x",
        thread_id="t",
        summary="Customer threatens legal action",
        resume="tests.support.resume_targets:record",
    )
    slack.standin.click(ALICE, slack.posted(handoff.id), ids.CLAIM)
    assert slack.handoffs.get(handoff.id).claimed_by == ALICE
    claimed = wait_for(
        lambda: (m := slack.posted(handoff.id)) and ids.RESOLVE in _action_ids(m.blocks) and m
    )
    assert f"Claimed by <@{ALICE}>" in _text(claimed.blocks)

    slack.standin.click(BOB, claimed, ids.RESOLVE)
    assert slack.standin.views(BOB) == []
    assert "claimed" in slack.standin.ephemerals(BOB)[0].text

    resolution = {ids.RESOLUTION_BLOCK: {ids.VALUE: "Called them; settled."}}
    resumed = _resumed_by_modal(slack, ALICE, handoff.id, ids.RESOLVE, resolution, claimed)
    assert resumed["status"] == "answered"
    assert resumed["resume_data"]["answer"] == "Called them; settled."


def test_view_full_opens_the_whole_50_kb_payload(slack: SlackEnv) -> None:
    big = "".join(f"line {i}: " + "x" * 40 + "\n" for i in range(1100))
    assert len(big) > 50_000
    handoff = slack.handoffs.request_correction(
        run_id="run-big", thread_id="t", draft=big, context="long"
    )
    message = slack.posted(handoff.id)
    assert ids.VIEW_FULL in _action_ids(message.blocks)

    slack.standin.click(CAROL, message, ids.VIEW_FULL)
    [modal] = slack.standin.views(CAROL)
    shown = "".join(
        block["text"]["text"]
        for block in modal.blocks
        if block.get("text", {}).get("type") == "plain_text"
    )
    assert big in shown
    assert "viewed_full" in [e.event for e in slack.handoffs.audit(handoff.id)]


def test_rate_limited_delivery_is_retried_and_posted_once(slack: SlackEnv) -> None:
    slack.standin.fail_next("chat.postMessage", status=429, retry_after=1)
    handoff_id = _approval(slack)
    message = slack.posted(handoff_id, timeout=20)
    attempts = [
        c for c in slack.standin.calls("chat.postMessage") if c.params.get("channel") == CHANNEL
    ]
    assert [c.http_status for c in attempts] == [429, 200]
    assert [m.ts for m in slack.standin.messages(CHANNEL) if not m.thread_ts] == [message.ts]
    assert slack.handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED


def test_forged_and_stale_requests_get_401_and_change_nothing(slack: SlackEnv) -> None:
    handoff_id = _approval(slack)
    message = slack.posted(handoff_id)
    payload = {
        "type": "block_actions",
        "user": {"id": ADMIN},
        "actions": [{"action_id": ids.APPROVE, "value": handoff_id, "type": "button"}],
        "trigger_id": "1.2.3",
        "response_url": slack.standin.api_url,
        "container": {"type": "message", "message_ts": message.ts, "channel_id": CHANNEL},
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    content_type = "application/x-www-form-urlencoded"
    forged = slack.standin.send_signed(body, content_type=content_type, signature="v0=" + "0" * 64)
    stale = slack.standin.send_signed(
        body, content_type=content_type, timestamp=int(time.time()) - 600
    )
    assert (forged.status, stale.status) == (401, 401)
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert "decided" not in [e.event for e in slack.handoffs.audit(handoff_id)]
