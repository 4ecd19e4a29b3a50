"""The App Home end to end: published on app_home_opened through `handoff serve`, clicked
in the stand-in, decided by the same listeners as the channel message, resumed by a worker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from slack_sdk import WebClient

from bot.access.reviewers import ReviewerPolicy
from bot.blockkit import ids
from bot.blockkit.home import HOME_QUEUE_SHOWN
from bot.blockkit.ids import home_actions_block_id
from bot.delivery.home_publisher import Homes, refresh_homes
from bot.keys import BotKeys
from bot.standin import View
from store.models import Status, TaskState
from tests.support import resume_targets
from tests.support.slack_env import (
    ADMIN,
    ALICE,
    BOB,
    BOT_TOKEN,
    CAROL,
    SlackEnv,
    running_slack,
    wait_for,
)


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def _open_home(slack: SlackEnv, user: str) -> View:
    published = len(slack.standin.calls("views.publish"))
    assert slack.standin.send_app_home_opened(user).status == 200
    wait_for(lambda: len(slack.standin.calls("views.publish")) > published)
    home = slack.standin.home(user)
    assert home is not None
    return home


def _queue(home: View) -> list[str]:
    """Ids of the handoffs waiting on the Home, top to bottom."""
    prefix = home_actions_block_id("")
    return [
        block["block_id"].removeprefix(prefix)
        for block in home.blocks
        if block.get("block_id", "").startswith(prefix)
    ]


def _resumes(slack: SlackEnv, handoff_id: str) -> list[dict]:
    entries = [json.loads(raw) for raw in slack.redis.lrange(resume_targets.COMPLETED, 0, -1)]
    return [e for e in entries if e["handoff_id"] == handoff_id]


def _settled(slack: SlackEnv, *handoff_ids: str) -> None:
    """Wait until the worker has delivered these handoffs and finished its own refreshes
    of the Homes after each: one still in flight could publish a Home built before a later
    change over the one this test checks."""
    for handoff_id in handoff_ids:
        wait_for(
            lambda handoff_id=handoff_id: (
                slack.handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED
            )
        )


def test_home_shows_the_viewers_queue_oldest_first_and_their_recent_decisions(
    slack: SlackEnv,
) -> None:
    older = slack.refund_approval(reviewers=[ALICE])
    for_bob = slack.refund_approval(reviewers=[BOB])
    own_request = slack.refund_approval(requester=ALICE)
    anyone = slack.refund_approval()
    decided = slack.refund_approval(reviewers=[ALICE])
    slack.handoffs.decide(decided, "rejected", by=ALICE, comment="wrong customer")

    home = _open_home(slack, ALICE)
    assert _queue(home) == [older, anyone]
    assert for_bob not in json.dumps(home.blocks)
    assert own_request not in _queue(home)
    text = json.dumps(home.blocks)
    assert "Recently decided by you" in text
    assert decided in text and "wrong customer" in text
    # The same buttons as the channel message: same action ids, same values.
    message = slack.posted(older)
    [in_channel] = [b for b in message.blocks if b["type"] == "actions"]
    [on_home] = [b for b in home.blocks if b.get("block_id") == home_actions_block_id(older)]
    assert on_home["elements"] == in_channel["elements"]

    assert _queue(_open_home(slack, BOB)) == [for_bob, own_request, anyone]


def test_a_decision_clicked_on_the_home_decides_once_and_resumes(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE, BOB])
    message = slack.posted(handoff_id)
    home = _open_home(slack, ALICE)

    response = slack.standin.click(
        ALICE, home, ids.APPROVE, block_id=home_actions_block_id(handoff_id)
    )
    assert response.status == 200
    slack.standin.click(BOB, message, ids.APPROVE)  # too late, from the channel

    handoff = slack.handoffs.get(handoff_id)
    assert handoff.status is Status.APPROVED
    assert handoff.resume_data.decided_by == ALICE
    wait_for(lambda: slack.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
    assert len(_resumes(slack, handoff_id)) == 1
    assert any("Already approved" in e.text for e in slack.standin.ephemerals(BOB))
    assert [e.event for e in slack.handoffs.audit(handoff_id)].count("decided") == 1

    home = _open_home(slack, ALICE)
    assert _queue(home) == []
    assert handoff_id in json.dumps(home.blocks)  # now under "Recently decided by you"


def test_a_refused_click_on_the_home_shows_why_on_the_home(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE, BOB])
    stale = _open_home(slack, ALICE)
    slack.handoffs.decide(handoff_id, "approved", by=BOB)
    # Let the worker's own refresh of Alice's Home (after Bob's decision) land first, so it
    # cannot replace the notice this test looks for; Alice clicks the Home she had open.
    wait_for(lambda: slack.handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)

    block_id = home_actions_block_id(handoff_id)
    assert slack.standin.click(ALICE, stale, ids.APPROVE, block_id=block_id).status == 200
    home = wait_for(lambda: (h := slack.standin.home(ALICE)) and "notice" in json.dumps(h.blocks))
    assert home
    [notice] = [b for b in slack.standin.home(ALICE).blocks if b.get("block_id") == "notice"]
    assert f"Already approved by <@{BOB}>" in notice["text"]["text"]
    assert slack.handoffs.get(handoff_id).resume_data.decided_by == BOB


def test_the_home_opens_modals_from_its_buttons(slack: SlackEnv) -> None:
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    home = _open_home(slack, ALICE)
    slack.standin.click(ALICE, home, ids.REJECT, block_id=home_actions_block_id(handoff_id))
    [modal] = wait_for(lambda: slack.standin.views(ALICE))
    slack.standin.submit_view(ALICE, modal, {ids.REASON_BLOCK: {ids.VALUE: "not ours"}})
    handoff = slack.handoffs.get(handoff_id)
    assert handoff.status is Status.REJECTED
    assert handoff.resume_data.comment == "not ours"


def test_refresh_homes_republishes_the_homes_of_viewers_who_may_decide(slack: SlackEnv) -> None:
    for user in (ALICE, CAROL, ADMIN):
        _open_home(slack, user)
    store = slack.handoffs.store
    client = WebClient(token=BOT_TOKEN, base_url=slack.standin.api_url)
    policy = ReviewerPolicy(client, slack.redis, store.keys, admins={ADMIN})
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    _settled(slack, handoff_id)

    def publishes(user: str) -> int:
        return sum(1 for c in slack.standin.calls("views.publish") if c.params["user_id"] == user)

    before = {user: publishes(user) for user in (ALICE, CAROL, ADMIN)}
    assert refresh_homes(client, store, policy, store.get(handoff_id)) == 2
    assert publishes(CAROL) == before[CAROL]  # may not decide it: left alone
    assert _queue(slack.standin.home(ALICE)) == [handoff_id]
    assert _queue(slack.standin.home(ADMIN)) == [handoff_id]

    # Reassigned away from ALICE: her Home still shows it, so it is refreshed too.
    moved = store.reassign(handoff_id, by=ADMIN, reviewers=[BOB])
    assert refresh_homes(client, store, policy, moved) == 2
    assert _queue(slack.standin.home(ALICE)) == []


def test_refresh_skips_homes_whose_full_queue_would_not_show_the_change(
    slack: SlackEnv,
) -> None:
    oldest = [slack.refund_approval(reviewers=[ALICE]) for _ in range(HOME_QUEUE_SHOWN + 1)]
    _open_home(slack, ALICE)
    store = slack.handoffs.store
    client = WebClient(token=BOT_TOKEN, base_url=slack.standin.api_url)
    policy = ReviewerPolicy(client, slack.redis, store.keys, admins={ADMIN})

    newest = slack.refund_approval(reviewers=[ALICE])
    _settled(slack, *oldest, newest)
    assert refresh_homes(client, store, policy, store.get(newest)) == 0  # below the fold
    decided = store.decide(min(oldest), "approved", decided_by=BOB)
    assert refresh_homes(client, store, policy, decided) == 1  # it was on her Home
    assert min(oldest) not in _queue(slack.standin.home(ALICE))


def test_a_long_queue_shows_the_oldest_within_slacks_limits(slack: SlackEnv) -> None:
    created = sorted(slack.refund_approval(reviewers=[ALICE]) for _ in range(HOME_QUEUE_SHOWN + 5))
    home = _open_home(slack, ALICE)
    assert _queue(home) == created[:HOME_QUEUE_SHOWN]
    assert len(home.blocks) <= 100
    assert "/handoff list mine" in json.dumps(home.blocks)


def test_the_worker_refreshes_an_open_home_when_a_handoff_arrives_and_is_decided(
    slack: SlackEnv,
) -> None:
    assert _queue(_open_home(slack, ALICE)) == []

    handoff = slack.handoffs.request_approval(
        run_id="run-home", thread_id="t", action="deploy", args={}, reviewers=[ALICE]
    )
    # No reopening: the worker republishes Alice's Home after posting the handoff.
    wait_for(lambda: _queue(slack.standin.home(ALICE)) == [handoff.id], timeout=20)

    slack.handoffs.decide(handoff.id, "approved", by=BOB)
    wait_for(lambda: _queue(slack.standin.home(ALICE)) == [], timeout=20)


class _RacedClient(WebClient):
    """A client whose next ``views.publish`` lets ``rival`` run first: a refresh rendered
    from older state reaches Slack after a newer one."""

    rival: Callable[[], None] | None = None

    def views_publish(self, **kwargs: Any) -> Any:  # type: ignore[override]
        rival, self.rival = self.rival, None
        if rival is not None:
            rival()
        return super().views_publish(**kwargs)


def test_a_refresh_rendered_from_older_state_never_overwrites_a_newer_home(
    slack: SlackEnv,
) -> None:
    first = slack.refund_approval(reviewers=[ALICE])
    _settled(slack, first)
    _open_home(slack, ALICE)
    store = slack.handoffs.store
    plain = WebClient(token=BOT_TOKEN, base_url=slack.standin.api_url)
    policy = ReviewerPolicy(plain, slack.redis, store.keys, admins={ADMIN})
    raced = _RacedClient(token=BOT_TOKEN, base_url=slack.standin.api_url)
    newer: list[str] = []

    def rival() -> None:
        # Between the older refresh's rendering and its publish: a new handoff, and the
        # Home published with it (by the worker, and once more here to be sure).
        newer.append(slack.refund_approval(reviewers=[ALICE]))
        _settled(slack, newer[0])
        Homes(store, policy).publish(plain, ALICE)
        assert _queue(slack.standin.home(ALICE)) == [first, newer[0]]

    raced.rival = rival
    Homes(store, policy).publish(raced, ALICE)

    assert _queue(slack.standin.home(ALICE)) == [first, newer[0]], "the newest state is shown"
    errors = [c.response.get("error") for c in slack.standin.calls("views.publish")]
    assert "hash_conflict" in errors, "the older rendering was refused, then redone"


def test_a_home_whose_hash_was_lost_is_still_refreshed(slack: SlackEnv) -> None:
    _open_home(slack, ALICE)
    store = slack.handoffs.store
    client = WebClient(token=BOT_TOKEN, base_url=slack.standin.api_url)
    policy = ReviewerPolicy(client, slack.redis, store.keys, admins={ADMIN})
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    _settled(slack, handoff_id)
    # Published, but the answer with the new hash never came back: the stored one is stale.
    slack.redis.set(BotKeys(store.keys).home_hash(ALICE), "1.stale")

    Homes(store, policy).publish(client, ALICE)

    assert _queue(slack.standin.home(ALICE)) == [handoff_id]


def test_a_home_opened_while_slack_resets_the_connection_gets_a_200_and_a_notice(
    slack: SlackEnv,
) -> None:
    _open_home(slack, ALICE)
    # The publish is reset (the request client repeats nothing).
    slack.standin.fail_next("views.publish", reset_connection=True, times=1)

    assert slack.standin.send_app_home_opened(ALICE).status == 200

    wait_for(lambda: "open the Home tab again" in json.dumps(slack.standin.home(ALICE).blocks))
    assert "Traceback" not in slack.logs()
