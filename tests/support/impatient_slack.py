"""A Slack stand-in with one member and a Web API client that gives up quickly, so that
the stand-in can answer after the client stopped waiting (a lost answer)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from slack_sdk import WebClient

from bot.delivery.posting import Poster
from bot.standin import SlackStandIn, StandInUser
from store.models import PostWindow
from worker.notifier import Attempt

CLIENT_TIMEOUT = 0.25
LATE = 0.45
"""How late a 'timeout' answer comes: after the client gave up, before the poster looks."""
SETTLE_SECONDS = 0.4


def running_standin() -> Iterator[SlackStandIn]:
    """Body of a ``slack`` fixture: a running stand-in whose one member is Alice."""
    with SlackStandIn(signing_secret="s", users=[StandInUser("U0ALICE", "alice")]) as running:
        yield running


def impatient_client(slack: SlackStandIn) -> WebClient:
    """A client of ``slack`` that waits ``CLIENT_TIMEOUT`` seconds for an answer."""
    # slack_sdk annotates timeout as int but passes it to urllib, which takes float seconds.
    return WebClient(token=slack.bot_token, base_url=slack.api_url, timeout=CLIENT_TIMEOUT)  # type: ignore[arg-type]


def settling_poster(client: WebClient) -> Poster:
    """A ``Poster`` on ``client`` that looks for a lost post after ``SETTLE_SECONDS``."""
    return Poster(client, settle_seconds=SETTLE_SECONDS)


def looking_back(seconds: float = 60.0, *, number: int = 2) -> Attempt:
    """A later attempt told that an earlier one's post may have landed unanswered in the
    last ``seconds`` (as the store tells a job after a worker was lost)."""
    now = time.time()
    return Attempt(number, now, PostWindow(now - seconds, now))
