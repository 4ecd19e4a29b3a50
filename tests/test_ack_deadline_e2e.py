"""Slack's 3 seconds, end to end (real `handoff serve` and worker processes, the stand-in):
the Web API calls made while Slack waits for the bot's answer get a short budget and are never
repeated, so a slow or rate-limiting Slack never holds a click or a command past the deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from bot import defaults
from bot.blockkit import ids
from store.models import Status
from tests.support.slack_env import ALICE, BOB, CAROL, OWNER, SlackEnv, running_slack

SLACK_DEADLINE = 3.0


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path)


def test_a_views_open_that_takes_4_s_does_not_delay_the_clicks_200_past_3_s(
    slack: SlackEnv,
) -> None:
    handoff_id = slack.refund_approval()
    message = slack.posted(handoff_id)
    slack.standin.fail_next("views.open", status=200, delay=4.0)

    response = slack.standin.click(ALICE, message, ids.REJECT)

    assert not response.timed_out and response.status == 200, response.text
    print(f"answered in {response.elapsed:.2f} s (Slack waits {SLACK_DEADLINE:.0f} s)")
    assert response.elapsed < SLACK_DEADLINE
    assert response.elapsed >= defaults.SLACK_REQUEST_TIMEOUT_SECONDS * 0.9  # it did wait
    # The person is told to click again, and the call is not made again after its timeout.
    told = slack.standin.wait_for(
        lambda: [e for e in slack.standin.ephemerals(ALICE) if "click again" in e.text]
    )
    assert told
    slack.standin.wait_for(lambda: slack.standin.calls("views.open"), timeout=5)
    assert len(slack.standin.calls("views.open")) == 1
    assert slack.handoffs.get(handoff_id).status is Status.PENDING


def test_a_rate_limited_look_up_in_a_command_is_not_slept_out(slack: SlackEnv) -> None:
    # An owner is an admin through users.info only: with Slack answering 429 and a long
    # Retry-After, the command is answered at once, as a refusal to try again.
    slack.standin.fail_next("users.info", status=429, retry_after=30, times=3)

    response = slack.standin.send_command(OWNER, "/handoff", "stats", channel_id="C0APPROVALS")

    assert not response.timed_out and response.status == 200, response.text
    print(f"answered in {response.elapsed:.2f} s (Slack waits {SLACK_DEADLINE:.0f} s)")
    assert response.elapsed < SLACK_DEADLINE
    # No call waited out the Retry-After to try again.
    asked = slack.standin.calls("users.info")
    assert asked and asked[-1].at - asked[0].at < SLACK_DEADLINE


def test_calls_in_a_row_share_one_budget_so_the_click_is_answered_in_time(
    slack: SlackEnv,
) -> None:
    # Found by the break-it review: 2 s a call, but a cold user-group cache and then
    # views.open took 1.6 s each, and the click was answered too late.
    handoff_id = slack.refund_approval(reviewers=["S0FINANCE"])
    message = slack.posted(handoff_id)
    slack.standin.fail_next("usergroups.list", status=200, delay=1.6)
    slack.standin.fail_next("views.open", status=200, delay=1.6)

    response = slack.standin.click(BOB, message, ids.REJECT)

    assert not response.timed_out and response.status == 200, response.text
    print(f"answered in {response.elapsed:.2f} s (Slack waits {SLACK_DEADLINE:.0f} s)")
    assert response.elapsed < SLACK_DEADLINE
    assert slack.handoffs.get(handoff_id).status is Status.PENDING


def test_a_slow_response_url_does_not_hold_the_clicks_answer(slack: SlackEnv) -> None:
    # Found by the break-it review: Bolt's respond() waits up to 30 s for the response_url.
    handoff_id = slack.refund_approval(reviewers=[ALICE])
    message = slack.posted(handoff_id)
    slack.standin.fail_next("response_url", delay=3.5)

    response = slack.standin.click(CAROL, message, ids.APPROVE)  # refused: not a reviewer

    assert not response.timed_out and response.status == 200, response.text
    print(f"answered in {response.elapsed:.2f} s (Slack waits {SLACK_DEADLINE:.0f} s)")
    assert response.elapsed < SLACK_DEADLINE
    assert slack.handoffs.get(handoff_id).status is Status.PENDING
