"""A storm of decisions as Slack sends them: many signed requests at once to several
`handoff serve` processes, and what the reliability storms read back (posted messages,
task states, the replies the bot made, the time each phase took).

Used by ``tests/reliability/test_duplicate_storm.py`` and
``tests/reliability/test_quorum_storm.py``.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from redis import Redis

from bot.standin import Ephemeral, Message, View, interaction_body
from handlers.actions import FORM_MAYBE_NOT_OPENED, FORM_NOT_OPENED
from store.models import Handoff
from tests.conftest import wait_until
from tests.support import resume_targets
from tests.support.signed_http import FORM, Answer, SignedSender
from tests.support.slack_env import SlackEnv

SENDERS = 32
"""Requests "Slack" has in flight at once."""
OPENING_TRIES = 3
"""Times a click that should open a modal is sent before the storm gives up on it."""

T = TypeVar("T")


@dataclass
class Decision:
    """One person's decision as Slack sends it, and the bot's answer."""

    handoff_id: str
    surface: str
    """ "button", "modal" or "thread"."""
    user: str
    body: bytes
    content_type: str
    url: str = ""
    answer: Answer | None = None

    def answer_json(self) -> dict[str, Any]:
        """The bot's answer as JSON (``{}`` for an empty answer: a plain ack)."""
        assert self.answer is not None
        body = self.answer.body.strip()
        return json.loads(body) if body else {}


@dataclass(frozen=True)
class Opening:
    """A click that opens a modal: ``user`` clicks ``action`` on the handoff's message,
    sent to the `handoff serve` at ``url``."""

    handoff_id: str
    user: str
    action: str
    url: str


def in_waves(
    slack: SlackEnv,
    redis: Redis,
    sender: SignedSender,
    order: list[str],
    size: int,
    prepare: Callable[[list[str], dict[str, Message]], list[Decision]],
) -> tuple[dict[str, Message], list[Decision]]:
    """Decide the handoffs of ``order`` (the order they were created in, which is the order
    they are posted in) in waves of ``size``: a wave starts once its handoffs are posted,
    while the worker posts the next ones; ``prepare(wave, messages)`` builds its decisions
    (opening modals first, if some need one), and they are sent at once. Returns the
    messages as posted, by handoff, and every decision sent, with its answer."""
    messages: dict[str, Message] = {}
    storm: list[Decision] = []
    for start in range(0, len(order), size):
        wave = order[start : start + size]
        messages.update(posted(slack, redis, wave))
        decisions = prepare(wave, messages)
        send_all(sender, decisions)
        storm.extend(decisions)
    return messages, storm


def in_parallel(work: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """``work`` of every item, ``SENDERS`` at a time, in the items' order."""
    with ThreadPoolExecutor(SENDERS) as pool:
        return list(pool.map(work, items))


def spread(group: list[Decision], urls: Sequence[str], rng: random.Random) -> None:
    """Put one handoff's decisions in a random order and send them to each `handoff serve`
    in turn (``urls``), from a random one on."""
    rng.shuffle(group)
    first = rng.randrange(len(urls))
    for index, decision in enumerate(group):
        decision.url = urls[(first + index) % len(urls)]


def send_all(sender: SignedSender, storm: list[Decision]) -> None:
    """Send every decision to its ``url`` at once (``SENDERS`` in flight); each keeps its
    answer."""

    def send(decision: Decision) -> None:
        decision.answer = sender.post(decision.url, decision.body, decision.content_type)

    in_parallel(send, storm)


def open_modals(
    slack: SlackEnv,
    sender: SignedSender,
    openings: list[Opening],
    messages: dict[str, Message],
    callback_ids: Iterable[str],
) -> dict[tuple[str, str], View]:
    """Send the ``openings`` at once; returns the modal each opened (one of
    ``callback_ids``), by (handoff id, user).

    Each click is built just before it is sent, as its trigger_id lasts 3 s; one that still
    missed it (an overloaded machine) is told to click again, and does. A person has one
    modal open at a time (``views.open`` replaces it), so give each person one opening.
    """
    wanted = set(callback_ids)
    asked = {(o.handoff_id, o.user) for o in openings}

    def open_modal(opening: Opening) -> Answer:
        message = messages[opening.handoff_id]
        payload = slack.standin.click_payload(opening.user, message, opening.action)
        return sender.post(opening.url, interaction_body(payload), FORM)

    opened: dict[tuple[str, str], View] = {}
    for _ in range(OPENING_TRIES):
        answers = in_parallel(open_modal, openings)
        assert [a for a in answers if a.status != 200] == []
        for view in slack.standin.views():
            if view.callback_id in wanted and not view.closed:
                key = (json.loads(view.private_metadata)["handoff_id"], view.user)
                if key in asked:
                    opened[key] = view
        openings = [o for o in openings if (o.handoff_id, o.user) not in opened]
        if not openings:
            break
    assert openings == [], "clicks that never opened their modal"
    return opened


def by_handoff(storm: Iterable[Decision]) -> dict[str, dict[str, list[Decision]]]:
    """The decisions sent, by handoff and then by surface."""
    grouped: dict[str, dict[str, list[Decision]]] = defaultdict(lambda: defaultdict(list))
    for decision in storm:
        grouped[decision.handoff_id][decision.surface].append(decision)
    return grouped


def posted(slack: SlackEnv, redis: Redis, wave: list[str]) -> dict[str, Message]:
    """The channel messages of the ``wave``'s handoffs, once the worker has posted them all."""
    wait_until(lambda: tasks_in(redis, slack, wave, "deliver_state") == len(wave), timeout=60)
    found = {}
    for handoff_id in wave:
        refs = slack.handoffs.get(handoff_id).message_refs
        found[handoff_id] = slack.standin.message(refs["channel"], refs["ts"])
    return found


def wait_for_outcomes(slack: SlackEnv, redis: Redis, ids: Sequence[str]) -> None:
    """Wait until every handoff of ``ids`` has been resumed (by
    ``tests.support.resume_targets:record``) and its message updated."""
    wait_until(lambda: redis.llen(resume_targets.COMPLETED) >= len(ids), timeout=120)
    wait_until(lambda: tasks_in(redis, slack, ids, "notify_state") == len(ids), timeout=120)


def assert_answered_and_resumed_once(
    storm: list[Decision], redis: Redis, ids: Sequence[str]
) -> None:
    """Every request of the storm was answered 200, and each handoff resumed exactly once."""
    assert [d for d in storm if d.answer is None or d.answer.status != 200] == []
    resumed = Counter(entry["handoff_id"] for entry in resume_targets.recorded(redis))
    assert resumed == Counter(ids), "each handoff resumed exactly once"


def assert_resumed_with_decisions(redis: Redis, decided: dict[str, Handoff]) -> None:
    """Each resume was given its handoff's decision: outcome, decider, surface, the votes
    of a quorum and its approvers, and the handoff id as its idempotency key."""
    for entry in resume_targets.recorded(redis):
        handoff = decided[entry["handoff_id"]]
        decision = handoff.resume_data
        assert decision is not None
        resumed_with = entry["resume_data"]
        assert entry["status"] == handoff.status.value
        assert resumed_with["decided_by"] == decision.decided_by
        assert resumed_with["via"] == decision.via
        assert resumed_with.get("approvers") == decision.approvers
        voters = [vote["by"] for vote in resumed_with.get("votes") or []]
        assert voters == [vote.by for vote in decision.votes or []]
        assert entry["idempotency_key"] == handoff.id


def tasks_in(redis: Redis, slack: SlackEnv, ids: Iterable[str], state_field: str) -> int:
    """How many of the handoffs have the task ``state_field`` completed (one round trip)."""
    pipe = redis.pipeline(transaction=False)
    for handoff_id in ids:
        pipe.hget(slack.handoffs.store.keys.handoff(handoff_id), state_field)
    return sum(state == b"completed" for state in pipe.execute())


CLICK_AGAIN = (FORM_NOT_OPENED, FORM_MAYBE_NOT_OPENED)
"""What a click that should have opened a modal is told when Slack did not open it in time
(refused, or not answered within the request's 2 s): the click is tried again."""


class Replies:
    """The ephemeral replies the bot made, found by the message they answer (replies to a
    click that did not open its modal in time left out: ``open_modals`` clicks again)."""

    def __init__(self, ephemerals: list[Ephemeral]) -> None:
        self.clicks: dict[str, list[Ephemeral]] = defaultdict(list)
        self.thread: dict[str, list[Ephemeral]] = defaultdict(list)
        for ephemeral in ephemerals:
            if ephemeral.text.startswith(CLICK_AGAIN):
                continue
            if ephemeral.source == "response_url" and ephemeral.message_ts:
                self.clicks[ephemeral.message_ts].append(ephemeral)
            elif ephemeral.source == "chat.postEphemeral" and ephemeral.thread_ts:
                self.thread[ephemeral.thread_ts].append(ephemeral)

    def to(self, message: Message) -> dict[str, list[Ephemeral]]:
        """Replies to clicks on ``message`` ("button") and to replies in its thread."""
        return {"button": self.clicks[message.ts], "thread": self.thread[message.ts]}


class Clock:
    """Times a test's phases, for the report printed at the end."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.laps: list[str] = []

    def lap(self, what: str) -> None:
        """End a phase: print and keep how long it took."""
        now = time.monotonic()
        self.laps.append(f"{what}: {now - self.last:.1f} s")
        print(self.laps[-1], flush=True)
        self.last = now

    def __str__(self) -> str:
        return f"total {time.monotonic() - self.start:.1f} s ({'; '.join(self.laps)})"
