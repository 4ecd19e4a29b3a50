"""One admin policy (bot.access.admins) for deciding, listing and admin commands:
``HANDOFF_ADMINS`` may decide anything and run admin commands; workspace admins and owners
(``users.info``, through the stand-in) may run admin commands only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis
from slack_sdk import WebClient

from bot.access.admins import AdminPolicy
from bot.access.reviewers import ReviewerPolicy
from bot.config import Settings
from bot.keys import BotKeys
from bot.queries.listings import Listings
from bot.standin import SlackStandIn, StandInUser
from handlers.deps import HandlerDeps
from worker.client import Handoffs

ALICE, BOB, OPS, OWNER = "U0ALICE", "U0BOB", "U0OPS", "U0OWNER"


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    users = [
        StandInUser(ALICE, "alice"),
        StandInUser(BOB, "bob"),
        StandInUser(OPS, "ops"),
        StandInUser(OWNER, "olga", is_owner=True),
    ]
    with SlackStandIn(signing_secret="s", users=users) as standin:
        yield standin


@pytest.fixture
def policy(redis: Redis, handoffs: Handoffs, slack: SlackStandIn) -> ReviewerPolicy:
    client = WebClient(token=slack.bot_token, base_url=slack.api_url)
    settings = Settings(admins=f"{OPS}, ")
    return ReviewerPolicy.from_settings(settings, client, redis, handoffs.store.keys)


def test_handoff_admins_decide_anything_and_workspace_owners_only_administer(
    handoffs: Handoffs, policy: ReviewerPolicy, slack: SlackStandIn
) -> None:
    deps = HandlerDeps(store=handoffs.store, reviewers=policy)
    handoff = handoffs.request_approval(run_id="r", thread_id="t", action="x", reviewers=[ALICE])

    assert policy.admins.admins == {OPS}  # HANDOFF_ADMINS, read once, by the one policy
    assert deps.is_admin(OPS) and policy.denial(OPS, handoff) is None
    assert slack.calls("users.info") == []  # HANDOFF_ADMINS need no Slack call

    assert deps.is_admin(OWNER)  # a workspace owner, through users.info
    assert policy.denial(OWNER, handoff) is not None  # ...who decides only as a reviewer
    assert not deps.is_admin(BOB)
    assert deps.is_admin(OWNER) and not deps.is_admin(BOB)  # cached: no more calls
    assert len(slack.calls("users.info")) == 2

    listings = Listings(handoffs.store, policy)
    assert [h.id for h in listings.queue(OPS).items] == [handoff.id]
    assert listings.queue(OWNER).items == []


def test_an_unreachable_slack_makes_nobody_a_workspace_admin(
    redis: Redis, handoffs: Handoffs
) -> None:
    client = WebClient(token="xoxb-unused", base_url="http://127.0.0.1:9/api/", timeout=2)
    admins = AdminPolicy(client, redis, BotKeys(handoffs.store.keys), admins={OPS})

    assert admins.is_admin(OPS)
    assert not admins.is_admin(OWNER)
    assert not redis.exists(BotKeys(handoffs.store.keys).admin(OWNER))  # asked again later
