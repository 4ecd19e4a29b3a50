"""One user-group cache (bot.access.usergroups) for the permission check, the viewer's queue
and the App Home: whatever the cache holds, they agree on who is in a group, before and
after its membership changes in Slack (the stand-in)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from slack_sdk import WebClient

from bot.access.reviewers import ReviewerPolicy
from bot.access.usergroups import UserGroups
from bot.config import Settings
from bot.defaults import USERGROUP_CACHE_SECONDS
from bot.delivery.home_publisher import Homes
from bot.keys import BotKeys
from bot.queries.listings import Listings
from bot.standin import SlackStandIn, StandInUser
from store.models import Handoff
from worker.client import Handoffs

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"
TEAM, OPS = "S0TEAM", "S0OPS"


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    users = [StandInUser(u, u.lower()) for u in (ALICE, BOB, CAROL)]
    groups = {TEAM: [BOB], OPS: [BOB, ALICE]}
    with SlackStandIn(signing_secret="s", users=users, usergroups=groups) as standin:
        yield standin


def _client(slack: SlackStandIn) -> WebClient:
    return WebClient(token=slack.bot_token, base_url=slack.api_url)


def _policy(
    slack: SlackStandIn, redis: Redis, handoffs: Handoffs, **settings: Any
) -> ReviewerPolicy:
    return ReviewerPolicy.from_settings(
        Settings(**settings), _client(slack), redis, handoffs.store.keys
    )


def _sees(
    policy: ReviewerPolicy, handoffs: Handoffs, user: str, handoff: Handoff
) -> tuple[bool, bool, bool]:
    """(may decide it, it is in their "mine" queue, it is on their App Home)."""
    store = handoffs.store
    queue = Listings(store, policy).queue(user)
    home = Homes(store, policy).build(user)
    return (
        policy.denial(user, handoff) is None,
        handoff.id in [h.id for h in queue.items],
        handoff.id in home.shown,
    )


ALL = (True, True, True)
NONE = (False, False, False)


def test_the_permission_check_and_the_queue_agree_on_a_group_before_and_after_it_changes(
    redis: Redis, handoffs: Handoffs, slack: SlackStandIn
) -> None:
    policy = _policy(slack, redis, handoffs, usergroup_cache_seconds=60)
    handoff = handoffs.request_approval(
        run_id="run-g", thread_id="t", action="ship", reviewers=[TEAM]
    )
    assert _sees(policy, handoffs, BOB, handoff) == ALL
    assert _sees(policy, handoffs, CAROL, handoff) == NONE

    slack.set_usergroup(TEAM, [CAROL])  # Bob leaves the group, Carol joins it, in Slack

    # Until the cache expires, everyone still sees the old members, consistently: the
    # check, the queue and the Home, in this process and in another (a new policy).
    for viewer in (policy, _policy(slack, redis, handoffs, usergroup_cache_seconds=60)):
        assert _sees(viewer, handoffs, BOB, handoff) == ALL
        assert _sees(viewer, handoffs, CAROL, handoff) == NONE
    assert len(slack.calls("usergroups.list")) == 1  # one snapshot answered every lookup
    assert slack.calls("usergroups.users.list") == []

    key = BotKeys(handoffs.store.keys).usergroups
    redis.pexpire(key, 1)  # the cache time runs out
    time.sleep(0.01)

    # Refreshed: everyone sees the new members, consistently.
    assert _sees(policy, handoffs, BOB, handoff) == NONE
    assert _sees(policy, handoffs, CAROL, handoff) == ALL
    assert len(slack.calls("usergroups.list")) == 2


def test_a_user_in_no_group_is_in_nobodys_group_queue(
    redis: Redis, handoffs: Handoffs, slack: SlackStandIn
) -> None:
    groups = UserGroups(_client(slack), redis, BotKeys(handoffs.store.keys))
    assert groups.groups_of(BOB) == [OPS, TEAM]
    assert groups.groups_of(ALICE) == [OPS]
    assert groups.groups_of(CAROL) == []
    assert groups.members(OPS) == {ALICE, BOB}
    assert groups.members("S0UNKNOWN") == frozenset()
    assert len(slack.calls("usergroups.list")) == 1


def test_the_cache_time_is_the_setting(
    redis: Redis, handoffs: Handoffs, slack: SlackStandIn
) -> None:
    key = BotKeys(handoffs.store.keys).usergroups
    assert USERGROUP_CACHE_SECONDS == 300  # HANDOFF_USERGROUP_CACHE_SECONDS's default

    _policy(slack, redis, handoffs, usergroup_cache_seconds=42).usergroups.groups_of(BOB)
    assert 40 <= redis.ttl(key) <= 42

    redis.delete(key)
    ReviewerPolicy(_client(slack), redis, handoffs.store.keys).usergroups.members(TEAM)
    assert USERGROUP_CACHE_SECONDS - 2 <= redis.ttl(key) <= USERGROUP_CACHE_SECONDS


def test_without_a_cache_time_every_lookup_asks_slack(
    redis: Redis, handoffs: Handoffs, slack: SlackStandIn
) -> None:
    groups = UserGroups(_client(slack), redis, BotKeys(handoffs.store.keys), cache_seconds=0)
    assert groups.members(TEAM) == {BOB}
    slack.set_usergroup(TEAM, [CAROL])
    assert groups.members(TEAM) == {CAROL}
    assert groups.groups_of(CAROL) == [TEAM]
    assert len(slack.calls("usergroups.list")) == 3
    assert not redis.exists(BotKeys(handoffs.store.keys).usergroups)
