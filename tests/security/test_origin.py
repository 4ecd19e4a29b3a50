"""A click counts only from a place that shows the handoff: its message, its copies
(escalation, old messages after a reassignment) or the clicker's App Home. A validly signed
payload that pairs a handoff's id with another message, channel or view is refused with a
clear message, audited as denied, and changes nothing; a modal decides only the handoff
(and channel) it was opened for, for the person it was opened for.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from redis import Redis

from bot.blockkit import ids
from bot.blockkit.ids import home_actions_block_id
from bot.keys import BotKeys
from bot.standin import Message
from handlers import origin
from handlers.decisions import NOT_SHOWN_HERE
from handlers.deps import HandlerDeps
from handlers.modals import NOT_OPENED_FOR_YOU
from store.decoding import as_text
from store.keys import KeySpace
from store.models import Status
from tests.support.security_harness import (
    InProcessBot,
    assert_unchanged,
    click_payload,
    snapshot,
    wait_quiet,
)
from tests.support.slack_env import ADMIN, ALICE, BOB, CAROL, CHANNEL, SlackEnv, wait_for
from worker.client import Handoffs

ONCALL = "C0SECONCALL"
ELSEWHERE = "C0SECOTHER"
Mutation = Callable[[dict[str, Any]], None]


def _audit_events(slack: SlackEnv, handoff_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.event, e.detail) for e in slack.handoffs.audit(handoff_id)]


def _last_ephemeral(slack: SlackEnv, user: str) -> str:
    return slack.standin.ephemerals(user)[-1].text


def test_a_click_paired_with_another_place_is_refused_audited_and_changes_nothing(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    target = slack.refund_approval(reviewers=[ALICE])
    other = slack.refund_approval(reviewers=[ALICE])
    target_message, other_message = slack.posted(target), slack.posted(other)
    mine, _ = slack.standin.post_message(ALICE, CHANNEL, "a message of mine")

    def contain(**fields: Any) -> Mutation:
        return lambda payload: payload["container"].update(fields)

    def as_view(kind: str) -> Mutation:
        def mutate(payload: dict[str, Any]) -> None:
            payload["container"] = {"type": "view", "view_id": "V0FORGED"}
            payload["view"] = {"id": "V0FORGED", "type": kind, "blocks": []}
            payload.pop("message", None)
            # An admin may decide anything, but no Home of theirs ever showed this request.
            payload["user"]["id"] = ADMIN

        return mutate

    places: dict[str, tuple[Message, Mutation]] = {
        "another handoff's message": (other_message, lambda p: None),
        "a person's message": (target_message, contain(message_ts=mine.ts)),
        "the right ts in another channel": (target_message, contain(channel_id=ELSEWHERE)),
        "a made-up ts": (target_message, contain(message_ts="1700000000.000001")),
        "an ephemeral message": (target_message, contain(is_ephemeral=True)),
        "a modal": (target_message, as_view("modal")),
        "a Home it is not shown on": (target_message, as_view("home")),
        "no container": (target_message, lambda p: p.pop("container")),
    }
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)
    modals = len(slack.standin.calls("views.open"))
    for place, (clicked, mutate) in places.items():
        for action_id in (ids.APPROVE, ids.REJECT, ids.EDIT):
            payload = click_payload(slack.standin, ALICE, clicked, action_id)
            payload["actions"][0]["value"] = target
            mutate(payload)
            answer = bot.interaction(payload)
            assert answer.status == 200, place
            assert _last_ephemeral(slack, ALICE) == NOT_SHOWN_HERE, place

    assert slack.handoffs.get(target).status is Status.PENDING
    assert len(slack.standin.calls("views.open")) == modals  # no Reject/Edit modal opened
    denials = [d for e, d in _audit_events(slack, target) if e == "denied"]
    assert len(denials) == len(places) * 3
    assert {d["reason"] for d in denials} == {"not_shown_here"}
    assert_unchanged(before, snapshot(store_redis), store_redis)

    # From its own message, the same click decides.
    slack.standin.click(ALICE, target_message, ids.APPROVE)
    assert slack.handoffs.get(target).status is Status.APPROVED


def test_a_home_click_counts_only_for_a_handoff_on_that_persons_home(
    slack: SlackEnv, bot: InProcessBot
) -> None:
    handoff_id = slack.refund_approval(reviewers=[BOB])
    slack.posted(handoff_id)
    published = len(slack.standin.calls("views.publish"))
    slack.standin.send_app_home_opened(BOB)
    wait_for(lambda: len(slack.standin.calls("views.publish")) > published)
    home = slack.standin.home(BOB)
    assert home is not None
    block_id = home_actions_block_id(handoff_id)
    payload = click_payload(slack.standin, BOB, home, ids.APPROVE, block_id=block_id)

    # The same Home click by an admin, who may decide anything, for a handoff that their
    # Home never showed.
    shown = BotKeys(KeySpace()).home_shown(ADMIN)
    not_on_their_home = slack.refund_approval(reviewers=[ALICE])
    assert not slack.redis.sismember(shown, not_on_their_home)
    forged = copy.deepcopy(payload)
    forged["user"]["id"] = ADMIN
    forged["actions"][0]["value"] = not_on_their_home
    assert bot.interaction(forged).status == 200
    assert slack.handoffs.get(not_on_their_home).status is Status.PENDING
    assert ("denied", {"via": "slack_button", "reason": "not_shown_here"}) in _audit_events(
        slack, not_on_their_home
    )
    notice = json.dumps(wait_for(lambda: slack.standin.home(ADMIN)).blocks)
    assert "not on a message of that request" in notice

    # Bob's own click on his Home decides.
    assert bot.interaction(payload).status == 200
    assert slack.handoffs.get(handoff_id).resume_data.decided_by == BOB


def test_the_escalation_copy_counts_but_its_channel_cannot_be_borrowed(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE], escalate_after=0.2, escalate_to=ONCALL)
    primary = slack.posted(handoff_id)
    wait_for(lambda: slack.handoffs.get(handoff_id).escalated_at)
    [copy_ref] = slack.handoffs.get(handoff_id).message_refs["copies"]
    escalated = slack.standin.message(ONCALL, copy_ref["ts"])
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    # Carol clicks the primary message (not hers to decide), but the payload claims the
    # escalation channel, with the primary's ts, or with a ts of nothing.
    for ts in (primary.ts, "1700000000.000002"):
        payload = click_payload(slack.standin, CAROL, primary, ids.APPROVE)
        payload["container"].update(channel_id=ONCALL, message_ts=ts)
        payload["channel"] = {"id": ONCALL, "name": "oncall"}
        assert bot.interaction(payload).status == 200
        assert _last_ephemeral(slack, CAROL) == NOT_SHOWN_HERE
    # From the primary message itself she is simply not a reviewer.
    slack.standin.click(CAROL, primary, ids.APPROVE)
    assert f"Only <@{ALICE}>" in _last_ephemeral(slack, CAROL)
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert_unchanged(before, snapshot(store_redis), store_redis)

    # From the escalation copy, anyone in that channel may decide.
    slack.standin.click(CAROL, escalated, ids.APPROVE)
    assert slack.handoffs.get(handoff_id).resume_data.decided_by == CAROL


def test_the_old_message_of_a_reassigned_handoff_still_counts(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    old = slack.posted(handoff_id)
    slack.handoffs.store.reassign(handoff_id, by=ADMIN, channel=ELSEWHERE)
    wait_for(lambda: slack.handoffs.get(handoff_id).message_refs.get("channel") == ELSEWHERE)
    assert (CHANNEL, old.ts) in {
        (c["channel"], c["ts"]) for c in slack.handoffs.get(handoff_id).message_refs["copies"]
    }

    # Alice's screen still shows the old message with its buttons.
    slack.standin.click(ALICE, old, ids.APPROVE)
    assert slack.handoffs.get(handoff_id).resume_data.decided_by == ALICE


def test_a_modal_decides_only_what_it_was_opened_for_by_whom_it_was_opened_for(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    escalated_id = slack.refund_approval(reviewers=[ALICE], escalate_after=0.2, escalate_to=ONCALL)
    other_id = slack.refund_approval(reviewers=[ALICE])
    slack.posted(escalated_id)
    slack.posted(other_id)
    wait_for(lambda: slack.handoffs.get(escalated_id).escalated_at)
    [copy_ref] = slack.handoffs.get(escalated_id).message_refs["copies"]
    escalated = slack.standin.message(ONCALL, copy_ref["ts"])

    # Alice opens the Reject modal from the channel: a real, sealed modal for her.
    slack.standin.click(ALICE, slack.posted(escalated_id), ids.REJECT)
    alices_modal = wait_for(lambda: slack.standin.views(ALICE))[-1]
    sealed_for_alice = alices_modal.view["private_metadata"]
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    def submission(user: str, metadata: str) -> dict[str, Any]:
        view = {**copy.deepcopy(alices_modal.view), "private_metadata": metadata}
        view["state"] = {"values": {ids.REASON_BLOCK: {ids.VALUE: {"value": "no"}}}}
        return {"type": "view_submission", "user": {"id": user, "name": user}, "view": view}

    unsealed_escalation = json.dumps({"handoff_id": escalated_id, "channel": ONCALL})
    other_handoff = sealed_for_alice.replace(escalated_id, other_id)
    forgeries = {
        "Carol, naming the escalation channel": submission(CAROL, unsealed_escalation),
        "Carol, with Alice's sealed metadata": submission(CAROL, sealed_for_alice),
        "Alice, sealed metadata moved to another handoff": submission(ALICE, other_handoff),
        "Alice, unsealed metadata": submission(ALICE, json.dumps({"handoff_id": other_id})),
    }
    for forgery, payload in forgeries.items():
        answer = bot.interaction(payload)
        assert answer.status == 200, forgery
        body = json.loads(answer.body)
        assert body["response_action"] == "errors", forgery
        assert list(body["errors"].values()) == [NOT_OPENED_FOR_YOU], forgery
    for handoff_id in (escalated_id, other_id):
        assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert_unchanged(before, snapshot(store_redis), store_redis)
    reasons = [d.get("reason") for e, d in _audit_events(slack, escalated_id) if e == "denied"]
    assert reasons.count("unsealed_modal") == 2

    # Opened by Carol from the escalation copy, the modal is hers to submit.
    slack.standin.click(CAROL, escalated, ids.REJECT)
    carols_modal = wait_for(lambda: slack.standin.views(CAROL))[-1]
    slack.standin.submit_view(CAROL, carols_modal, {ids.REASON_BLOCK: {ids.VALUE: "no"}})
    handoff = slack.handoffs.get(escalated_id)
    assert (handoff.status, handoff.resume_data.decided_by) == (Status.REJECTED, CAROL)


def test_ephemeral_replies_remember_a_day_of_shown_handoffs_and_no_more(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the break-it review: every `/handoff show` added to a set whose expiry each
    # show renewed, so a person who looked at one handoff a day kept every id for good.
    store = Handoffs(redis).store
    deps = HandlerDeps(store=store, reviewers=None)  # type: ignore[arg-type]
    agent = Handoffs(redis)
    shown = [agent.ask(run_id="run-e", thread_id="t", question=f"q{n}?") for n in range(3)]
    day_ms = origin.EPHEMERAL_SHOWN_SECONDS * 1000
    start = origin._ms_now()
    for day, handoff in enumerate(shown):
        # Shown every 18 hours: by the third, the first is more than a day old.
        monkeypatch.setattr(origin, "_ms_now", lambda day=day: start + day * day_ms * 3 // 4)
        origin.remember_ephemeral(deps, ALICE, handoff.id)

    key = BotKeys(store.keys).ephemeral_shown(ALICE)
    assert [as_text(m) for m in redis.zrange(key, 0, -1)] == [shown[1].id, shown[2].id]
    here = origin.Origin("ephemeral")
    assert not origin.shows_handoff(deps, shown[0], here, ALICE)
    assert origin.shows_handoff(deps, shown[2], here, ALICE)
    assert 0 < redis.ttl(key) <= origin.EPHEMERAL_SHOWN_SECONDS
