"""bot.delivery.conversations against the stand-in and the test Redis: routing ids become
conversations the bot is in, with Slack asked as little as it can be."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.delivery.conversations import Conversations, forget_joined
from bot.standin import SlackStandIn, StandInUser
from store.keys import KeySpace

KEYS = KeySpace()


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    users = [StandInUser("U0ALICE", "alice")]
    with SlackStandIn(signing_secret="s", users=users) as running:
        yield running


def _conversations(slack: SlackStandIn, redis: Redis) -> Conversations:
    client = WebClient(token=slack.bot_token, base_url=slack.api_url, timeout=5)
    return Conversations(client, redis, KEYS)


def test_a_join_is_shared_by_every_worker_and_forgotten_when_the_bot_leaves(
    slack: SlackStandIn, redis: Redis
) -> None:
    # Found by the break-it review: kept per process, a forking worker joined for each post.
    for _ in range(5):  # five work horses, each a fresh process
        assert _conversations(slack, redis).ready_to_post("C0OPS") == "C0OPS"
    assert len(slack.calls("conversations.join")) == 1
    assert "C0OPS" in slack.bot_channels()

    slack.remove_bot("C0OPS")
    forget_joined(redis, KEYS, "C0OPS")  # what the channel_left listener does
    _conversations(slack, redis).ready_to_post("C0OPS")

    assert len(slack.calls("conversations.join")) == 2
    assert "C0OPS" in slack.bot_channels()


def test_a_person_is_reached_in_their_dm_opened_once(slack: SlackStandIn, redis: Redis) -> None:
    first = _conversations(slack, redis).ready_to_post("U0ALICE")
    again = _conversations(slack, redis).conversation_of("U0ALICE")

    assert first == again == "D0ALICE"
    assert len(slack.calls("conversations.open")) == 1
    assert slack.calls("conversations.join") == []  # a DM is not joined


def test_private_channels_and_dms_are_returned_as_they_are(
    slack: SlackStandIn, redis: Redis
) -> None:
    conversations = _conversations(slack, redis)

    assert conversations.ready_to_post("G0PRIVATE") == "G0PRIVATE"
    assert conversations.ready_to_post("D0ALICE") == "D0ALICE"
    assert slack.calls("conversations.join") == []


def test_a_channel_slack_refuses_to_join_is_slacks_error(slack: SlackStandIn, redis: Redis) -> None:
    slack.fail_next("conversations.join", error="is_archived")

    with pytest.raises(SlackApiError) as refused:
        _conversations(slack, redis).ready_to_post("C0OLD")

    assert refused.value.response["error"] == "is_archived"
    assert not redis.exists(f"{KEYS.prefix}bot:joined:C0OLD")


def test_a_token_without_the_new_scopes_posts_where_it_is_told(redis: Redis) -> None:
    with SlackStandIn(
        signing_secret="s", users=[StandInUser("U0ALICE", "alice")], scopes={"chat:write"}
    ) as slack:
        conversations = _conversations(slack, redis)

        assert conversations.ready_to_post("C0OPS") == "C0OPS"
        assert conversations.ready_to_post("U0ALICE") == "U0ALICE"
