"""Thread answers end to end (handlers/messages.py): Slack's wire text reaches the agent as
the person typed it, and broadcast and file-share replies answer too. The stand-in sends
signed events to a real `handoff serve`; a real worker resumes the run and updates Slack."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from handlers.messages import FILE_ALONE
from store.models import Status, TaskState
from tests.support import slack_env
from tests.support.slack_env import ALICE, BOB, CHANNEL, SlackEnv, wait_for

WIRE = "Tom &amp; Jerry &lt;3 <@U0BOB>"
"""What Slack sends when alice types "Tom & Jerry <3 @bob"."""
TYPED = "Tom & Jerry <3 @bob (U0BOB)"
"""What the agent receives for it: the mention readable, the id kept."""


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    for env in slack_env.running_slack(redis, redis_url, tmp_path):
        env.standin.invite_bot(CHANNEL)  # Slack sends events only where the bot is a member
        yield env


def _ask(slack: SlackEnv, run_id: str):
    handoff = slack.handoffs.ask(
        run_id=run_id,
        thread_id="t",
        question="Which region?",
        reviewers=[ALICE],
        resume="tests.support.resume_targets:record",
    )
    return handoff, slack.posted(handoff.id)


def _resumed_answer(slack: SlackEnv, handoff_id: str) -> str:
    return str(slack.resumed(handoff_id)["resume_data"]["answer"])


def _shown_after_decision(slack: SlackEnv, handoff_id: str) -> str:
    wait_for(lambda: slack.handoffs.get(handoff_id).notify.state is TaskState.COMPLETED)
    message = slack.posted(handoff_id)
    return json.dumps([message.text, message.blocks], ensure_ascii=False)


def test_an_escaped_answer_with_a_mention_reaches_the_agent_as_typed(slack: SlackEnv) -> None:
    handoff, message = _ask(slack, "run-escaped")

    _, response = slack.standin.post_message(ALICE, CHANNEL, WIRE, thread_ts=message.ts, raw=True)

    assert response is not None and response.status == 200
    assert _resumed_answer(slack, handoff.id) == TYPED
    assert slack.handoffs.get(handoff.id).resume_data.answer == TYPED
    shown = _shown_after_decision(slack, handoff.id)
    # Escaped once for Slack, which shows "Tom & Jerry <3 @bob (U0BOB)".
    assert "Tom &amp; Jerry &lt;3 @bob (U0BOB)" in shown
    assert "&amp;amp;" not in shown and "&amp;lt;" not in shown


def test_a_mentioned_name_slack_is_slow_or_failing_to_tell_leaves_the_id(
    slack: SlackEnv,
) -> None:
    slow, slow_message = _ask(slack, "run-slow-names")
    slack.standin.fail_next("users.info", status=200, delay=3.0)

    started = time.monotonic()
    _, response = slack.standin.post_message(
        ALICE, CHANNEL, WIRE, thread_ts=slow_message.ts, raw=True
    )

    assert response is not None and response.status == 200
    assert time.monotonic() - started < 2.0, "the look-up is not waited for past its budget"
    assert _resumed_answer(slack, slow.id) == "Tom & Jerry <3 @U0BOB"

    failing, failing_message = _ask(slack, "run-failing-names")
    slack.standin.fail_next("users.info", error="user_not_found")
    slack.standin.post_message(ALICE, CHANNEL, WIRE, thread_ts=failing_message.ts, raw=True)
    assert _resumed_answer(slack, failing.id) == "Tom & Jerry <3 @U0BOB"


def test_what_a_person_types_in_the_stand_in_reaches_the_agent_unchanged(
    slack: SlackEnv,
) -> None:
    handoff, message = _ask(slack, "run-typed")

    reply, _ = slack.standin.post_message(
        ALICE, CHANNEL, "Tom & Jerry <3 @bob, see https://x.y/?a=1&b=2", thread_ts=message.ts
    )

    assert reply.text == "Tom &amp; Jerry &lt;3 <@U0BOB>, see <https://x.y/?a=1&amp;b=2>"
    assert _resumed_answer(slack, handoff.id) == (
        "Tom & Jerry <3 @bob (U0BOB), see https://x.y/?a=1&b=2"
    )


def test_a_reply_also_sent_to_the_channel_answers(slack: SlackEnv) -> None:
    handoff, message = _ask(slack, "run-broadcast")

    _, response = slack.standin.post_message(
        ALICE, CHANNEL, "eu-west-1", thread_ts=message.ts, subtype="thread_broadcast"
    )

    assert response is not None and response.status == 200
    assert _resumed_answer(slack, handoff.id) == "eu-west-1"


def test_a_reply_with_files_answers_with_their_names(slack: SlackEnv) -> None:
    handoff, message = _ask(slack, "run-files")

    slack.standin.post_message(
        ALICE, CHANNEL, "eu-west-1, see the map", thread_ts=message.ts, files=["map.png"]
    )

    assert _resumed_answer(slack, handoff.id) == (
        "eu-west-1, see the map\n\n(attached in Slack: map.png)"
    )


def test_a_file_alone_answers_nothing_and_the_person_is_told_why(slack: SlackEnv) -> None:
    handoff, message = _ask(slack, "run-file-alone")

    _, response = slack.standin.post_message(
        ALICE, CHANNEL, "", thread_ts=message.ts, files=["map.png"]
    )

    assert response is not None and response.status == 200
    [told] = wait_for(lambda: slack.standin.ephemerals(ALICE))
    assert told.text == FILE_ALONE and told.thread_ts == message.ts
    assert slack.handoffs.get(handoff.id).status is Status.PENDING
    # Someone who may not answer is told that instead, as for a reply in words.
    slack.standin.post_message(BOB, CHANNEL, "", thread_ts=message.ts, files=["x.png"])
    [refused] = wait_for(lambda: slack.standin.ephemerals(BOB))
    assert refused.text != FILE_ALONE
