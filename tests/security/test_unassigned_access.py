"""A handoff that names no reviewers is not the whole workspace's: with
``HANDOFF_ALLOW_ANY_CHANNEL_MEMBER`` (as the package's bot runs) only the members of its
channel may see or decide it, as Slack reports them (``conversations.members``). A non-member
never finds it on their App Home or in ``list mine``, ``show`` refuses them, and a click of
theirs (from the channel's message, a stale Home, or a forged payload) changes nothing but
the audit of the denial. (Without the setting only admins may: ``tests/test_reviewers.py``.)
"""

from __future__ import annotations

import copy
import json
from typing import Any

from redis import Redis
from slack_sdk import WebClient

from bot.access.reviewers import ReviewerPolicy
from bot.blockkit import ids
from bot.blockkit.ids import home_actions_block_id
from bot.keys import BotKeys
from bot.queries.listings import Listings
from bot.standin import View
from store.keys import KeySpace
from store.models import Status
from tests.support.security_harness import (
    InProcessBot,
    assert_unchanged,
    click_payload,
    snapshot,
    wait_quiet,
)
from tests.support.slack_env import ALICE, BOB, CHANNEL, SlackEnv, wait_for

BOT_USER = "U0BOT"


def _private(slack: SlackEnv, channel: str, *members: str) -> str:
    """A private channel of ``members`` (and the bot), with an unassigned handoff posted in it."""
    slack.standin.set_channel_members(channel, [BOT_USER, *members])
    slack.redis.delete(BotKeys(KeySpace()).channel_members(channel))
    handoff_id = slack.refund_approval(channel=channel)
    slack.posted(handoff_id)
    return handoff_id


def _set_members(slack: SlackEnv, channel: str, *members: str) -> None:
    """Make ``members`` (and the bot) the channel's members, and let the bot know at once
    (as it would once its cache of the members expires)."""
    slack.standin.set_channel_members(channel, [BOT_USER, *members])
    slack.redis.delete(BotKeys(KeySpace()).channel_members(channel))


def _open_home(slack: SlackEnv, user: str) -> View:
    published = len(slack.standin.calls("views.publish"))
    slack.standin.send_app_home_opened(user)
    wait_for(lambda: len(slack.standin.calls("views.publish")) > published)
    home = slack.standin.home(user)
    assert home is not None
    return home


def _listed(slack: SlackEnv, user: str) -> str:
    reply = slack.command(user, "list mine")
    return reply.text + json.dumps(reply.blocks)


def _queue(slack: SlackEnv, bot: InProcessBot, viewer: str) -> list[str]:
    """Every handoff id in ``viewer``'s queue, page after page."""
    settings = bot.settings
    client = WebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url)
    store = slack.handoffs.store
    listings = Listings(
        store, ReviewerPolicy.from_settings(settings, client, slack.redis, store.keys)
    )
    page = listings.queue(viewer)
    found = [h.id for h in page.items]
    while page.next_cursor:
        page = listings.page(page.filter, viewer=viewer, after=page.next_cursor)
        found.extend(h.id for h in page.items)
    return found


def _denials(slack: SlackEnv, handoff_id: str) -> list[tuple[str | None, dict[str, Any]]]:
    return [(e.actor, e.detail) for e in slack.handoffs.audit(handoff_id) if e.event == "denied"]


def test_a_private_channels_unassigned_handoff_is_listed_only_for_its_members(
    slack: SlackEnv, bot: InProcessBot
) -> None:
    handoff_id = _private(slack, "G0SECLIST", ALICE)

    # Every page of each queue ("list mine", and the App Home's first page), as the bot
    # builds them: other tests' handoffs fill the first pages.
    assert handoff_id in _queue(slack, bot, ALICE)
    assert handoff_id not in _queue(slack, bot, BOB)
    assert handoff_id not in json.dumps(_open_home(slack, BOB).blocks)
    assert not slack.redis.sismember(BotKeys(KeySpace()).home_shown(BOB), handoff_id)
    assert handoff_id not in _listed(slack, BOB)


def test_show_refuses_a_non_member_and_audits_it(slack: SlackEnv) -> None:
    handoff_id = _private(slack, "G0SECSHOW", ALICE)

    refused = slack.command(BOB, f"show {handoff_id}")
    text = refused.text + json.dumps(refused.blocks)
    assert "You can see only the handoffs you may decide" in text
    assert "A-1001" not in text and "charged twice" not in text
    assert (BOB, {"via": "slash_command", "reason": "may_not_see"}) in _denials(slack, handoff_id)

    shown = slack.command(ALICE, f"show {handoff_id}")
    assert "A-1001" in json.dumps(shown.blocks)


def test_a_non_member_clicking_the_channel_message_changes_nothing(
    slack: SlackEnv, store_redis: Redis
) -> None:
    handoff_id = _private(slack, "G0SECCLICK", ALICE)
    message = slack.posted(handoff_id)
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    slack.standin.click(BOB, message, ids.APPROVE)

    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    told = slack.standin.ephemerals(BOB)[-1].text
    assert told == "Only members of <#G0SECCLICK> can decide this request."
    assert (BOB, {"via": "slack_button"}) in _denials(slack, handoff_id)
    assert_unchanged(before, snapshot(store_redis), store_redis)

    slack.standin.click(ALICE, message, ids.APPROVE)
    assert slack.handoffs.get(handoff_id).status is Status.APPROVED


def test_a_home_click_of_someone_who_left_the_channel_stays_pending_and_is_audited(
    slack: SlackEnv, store_redis: Redis
) -> None:
    handoff_id = _private(slack, "G0SECHOME", ALICE, BOB)
    stale = _open_home(slack, BOB)
    assert handoff_id in json.dumps(stale.blocks)
    _set_members(slack, "G0SECHOME", ALICE)
    wait_quiet(store_redis, slack)

    block_id = home_actions_block_id(handoff_id)
    assert slack.standin.click(BOB, stale, ids.APPROVE, block_id=block_id).status == 200

    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert (BOB, {"via": "slack_button"}) in _denials(slack, handoff_id)
    notice = json.dumps(wait_for(lambda: slack.standin.home(BOB)).blocks)
    assert "Only members of" in notice


def test_a_forged_home_click_for_a_private_channels_handoff_stays_pending(
    slack: SlackEnv, bot: InProcessBot, store_redis: Redis
) -> None:
    handoff_id = _private(slack, "G0SECFORGE", ALICE)
    visible = slack.refund_approval(reviewers=[BOB], channel=CHANNEL)
    slack.posted(visible)
    home = _open_home(slack, BOB)
    payload = click_payload(
        slack.standin, BOB, home, ids.APPROVE, block_id=home_actions_block_id(visible)
    )
    wait_quiet(store_redis, slack)
    before = snapshot(store_redis)

    forged = copy.deepcopy(payload)
    forged["actions"][0]["value"] = handoff_id
    forged["actions"][0]["block_id"] = home_actions_block_id(handoff_id)
    assert bot.interaction(forged).status == 200

    assert slack.handoffs.get(handoff_id).status is Status.PENDING
    assert (BOB, {"via": "slack_button", "reason": "not_shown_here"}) in _denials(slack, handoff_id)
    assert_unchanged(before, snapshot(store_redis), store_redis)


def test_view_full_is_refused_to_someone_who_left_the_channel_from_a_show_reply_or_home(
    slack: SlackEnv,
) -> None:
    _set_members(slack, "G0SECVIEW", ALICE, BOB)
    # Long enough that its message and Home entry are cut short, with a View full button.
    handoff_id = slack.handoffs.request_approval(
        run_id="run-view",
        thread_id="t",
        action="wire_money",
        args={"iban": "SECRET-IBAN", "memo": "x" * 3000},
        context="Secret context. " * 60,
        channel="G0SECVIEW",
    ).id
    slack.posted(handoff_id)
    reply = slack.command(BOB, f"show {handoff_id}")
    home = _open_home(slack, BOB)
    assert handoff_id in json.dumps(home.blocks)
    _set_members(slack, "G0SECVIEW", ALICE)
    opened = len(slack.standin.calls("views.open"))

    slack.standin.click(BOB, slack.current(reply), ids.VIEW_FULL)
    slack.standin.click(BOB, home, ids.VIEW_FULL, block_id=home_actions_block_id(handoff_id))

    assert len(slack.standin.calls("views.open")) == opened  # no modal with the content
    refusals = [d for actor, d in _denials(slack, handoff_id) if actor == BOB]
    assert refusals.count({"via": "slack_button", "reason": "may_not_see"}) == 2
    assert "viewed_full" not in [e.event for e in slack.handoffs.audit(handoff_id)]
