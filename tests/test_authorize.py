"""BotIdentity: Bolt's authorization asks Slack who the bot is once, and a slow Slack never
fails the request that asks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slack_bolt import BoltContext
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.access.authorize import BotIdentity
from bot.standin import SlackStandIn


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    with SlackStandIn(signing_secret="s") as running:
        yield running


def _context(slack: SlackStandIn) -> BoltContext:
    # slack_sdk annotates timeout as int but passes it to urllib, which takes float seconds.
    client = WebClient(base_url=slack.api_url, timeout=0.2)  # type: ignore[arg-type]
    return BoltContext({"client": client})


def _authorize(identity: BotIdentity, slack: SlackStandIn):
    return identity(context=_context(slack), enterprise_id=None, team_id="T1", user_id="U0ALICE")


def test_the_bot_is_known_after_one_auth_test_and_each_request_keeps_its_user(
    slack: SlackStandIn,
) -> None:
    identity = BotIdentity(slack.bot_token)

    first = _authorize(identity, slack)
    second = _authorize(identity, slack)

    assert (first.bot_user_id, first.bot_id, first.bot_token) == ("U0BOT", "B0BOT", slack.bot_token)
    assert second.user_id == "U0ALICE" and second.bot_user_id == "U0BOT"
    assert len(slack.calls("auth.test")) == 1


def test_an_unanswered_auth_test_lets_the_request_go_on_and_is_asked_again(
    slack: SlackStandIn,
) -> None:
    identity = BotIdentity(slack.bot_token)
    slack.fail_next("auth.test", status=200, delay=0.5)

    without_ids = _authorize(identity, slack)
    later = _authorize(identity, slack)

    assert (without_ids.bot_token, without_ids.bot_user_id) == (slack.bot_token, None)
    assert later.bot_user_id == "U0BOT"


def test_a_token_slack_refuses_is_an_error_not_ignored(slack: SlackStandIn) -> None:
    with pytest.raises(SlackApiError, match="invalid_auth"):
        _authorize(BotIdentity("xoxb-revoked"), slack)
