"""Listings as an admin sees them, for tests: the bot's ``Listings`` over a store, its
reviewer policy asking a Slack stand-in in which ``admin`` is an admin."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis import Redis
from slack_sdk import WebClient

from bot.access.reviewers import ReviewerPolicy
from bot.queries.listings import Listings
from bot.standin import SlackStandIn, StandInUser
from worker.client import Handoffs


@contextmanager
def admin_listings(
    redis: Redis, handoffs: Handoffs, *, admin: str, channel: str
) -> Iterator[Listings]:
    """``Listings`` of ``handoffs``' store for ``admin``, ``channel`` the default channel."""
    with SlackStandIn(signing_secret="s", users=[StandInUser(admin, "admin")]) as slack:
        client = WebClient(token=slack.bot_token, base_url=slack.api_url)
        policy = ReviewerPolicy(
            client, redis, handoffs.store.keys, admins={admin}, default_channel=channel
        )
        yield Listings(handoffs.store, policy)
