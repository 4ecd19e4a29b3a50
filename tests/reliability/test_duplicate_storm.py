"""Duplicate storm: ten people decide each of 1,000 handoffs at the same moment, through all
three of Slack's surfaces (Approve clicks, modal submissions, thread replies), sent as
signed HTTP to two `handoff serve` processes behind Slack's one request URL.

Promise under test: exactly one decision per handoff, exactly one resume to completion
with that decision, and every loser is told who won (an ephemeral reply for clicks and
thread replies, the modal's inline error for submissions). ``--soak`` runs 5,000 handoffs
(RELIABILITY_STORM_HANDOFFS sets another number); RELIABILITY_SEED replays a run.

Each handoff gets eight Approve clicks (approvals) or thread replies (questions), some
by the same person twice, and two modal submissions: Reject with a reason, or Answer. A
person has one modal open at a time (``views.open`` replaces it), so the handoffs go in
waves of 150, in the order they are posted: 300 reviewers open the modal of one handoff
each, then the wave's 1,500 decisions (those 300 submissions among them) are sent at once,
32 requests in flight, each handoff's ten spread over both serve processes.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.standin import Ephemeral, Message, StandInUser, View, interaction_body
from handlers.actions import FORM_MAYBE_NOT_OPENED, FORM_NOT_OPENED
from store.models import Handoff, RequestType, Status
from tests.conftest import wait_until
from tests.support import resume_targets
from tests.support.runs import run_size, seeded
from tests.support.signed_http import FORM, JSON, Answer, SignedSender
from tests.support.slack_env import ADMIN, ALICE, BOB, SIGNING_SECRET, SlackEnv, running_slack

HANDOFFS = 1000
SOAK_HANDOFFS = 5000
CLICKS_OR_REPLIES = 8
"""Per handoff: Approve clicks (approvals) or thread replies (questions)..."""
MODALS = 2
"""...and modal submissions (Reject with a reason, or Answer): ten decisions in all."""
WAVE = 150
"""Handoffs decided at once; each of their modals is open for a reviewer of its own."""
TEAM = [StandInUser(f"U0R{number:03d}", f"reviewer{number:03d}") for number in range(MODALS * WAVE)]
"""The reviewers who submit modals (each with one open), in user group S0STORM."""
REVIEWERS = [ALICE, "S0FINANCE", "S0STORM"]
"""Who may decide each handoff: BOB through S0FINANCE, the team through S0STORM."""
CLICKERS = [ALICE, BOB, ADMIN, *(user.id for user in TEAM[:20])]
"""Who clicks Approve or replies in threads: reviewers, and ADMIN (an admin may decide
anything); the same person may click twice."""
OPENING_TRIES = 3
SERVES = 2
WORKERS = 3
SENDERS = 32
"""Requests "Slack" has in flight at once: about three handoffs' ten decisions."""

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


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(
        redis,
        redis_url,
        tmp_path,
        workers=WORKERS,
        serves=SERVES,
        extra_users=TEAM,
        extra_usergroups={"S0STORM": [user.id for user in TEAM]},
    )


def test_ten_simultaneous_decisions_make_one_decision_one_resume_and_every_loser_told(
    slack: SlackEnv, redis: Redis, soak: bool
) -> None:
    count = run_size(
        "RELIABILITY_STORM_HANDOFFS", default=HANDOFFS, soak_size=SOAK_HANDOFFS, soak=soak
    )
    rng = seeded(f"duplicate storm: {count} handoffs")
    clock = _Clock()
    sender = SignedSender(SIGNING_SECRET)

    kinds = _create(slack, count)
    clock.lap(f"created {count}")

    # Waves in the order the handoffs were created, which is the order they are posted in:
    # a wave starts once its handoffs are posted, while the worker posts the next ones.
    order = list(kinds)
    messages: dict[str, Message] = {}
    storm: list[Decision] = []
    for start in range(0, count, WAVE):
        wave = order[start : start + WAVE]
        messages.update(_posted(slack, redis, wave))
        modals = _open_modals(slack, sender, wave, kinds, messages, rng)
        decisions = _storm(slack, wave, kinds, messages, modals, rng)
        _send_all(sender, decisions)
        storm.extend(decisions)
    clock.lap(f"posted {count}, opened {count * MODALS} modals and sent {len(storm)} decisions")

    wait_until(lambda: redis.llen(resume_targets.COMPLETED) >= count, timeout=120)
    wait_until(lambda: _tasks_in(redis, slack, kinds, "notify_state") == count, timeout=120)
    clock.lap("resumed and updated every message")
    sender.close()

    assert [d for d in storm if d.answer is None or d.answer.status != 200] == []
    resumed = Counter(entry["handoff_id"] for entry in _entries(redis))
    assert resumed == Counter(list(kinds)), "each handoff resumed exactly once"

    decided = {handoff_id: slack.handoffs.get(handoff_id) for handoff_id in kinds}
    by_surface = _group(storm)
    # Thread answers that lost are told privately once the event is answered (in the
    # background): wait until no more such replies come.
    _wait_until_settled(lambda: len(slack.standin.calls("chat.postEphemeral")))
    replies = _Replies(slack.standin.ephemerals())
    winners: Counter[str] = Counter()
    for handoff_id, handoff in decided.items():
        message = messages[handoff_id]
        _assert_decided_once(slack, handoff, kinds[handoff_id])
        winners[_assert_losers_told(handoff, by_surface[handoff_id], replies.to(message))] += 1
        _assert_message_shows_outcome(slack, handoff, message)
    _assert_resumed_with_decision(redis, decided)
    clock.lap("checked")
    print(f"winning surfaces: {dict(winners)}; {clock}")
    assert sum(winners.values()) == count


# -- the steps -------------------------------------------------------------------------


def _create(slack: SlackEnv, count: int) -> dict[str, RequestType]:
    """Half approvals, half questions; all decided by the same reviewers."""
    kinds: dict[str, RequestType] = {}
    for number in range(count):
        options: dict[str, Any] = {
            "run_id": f"storm-{number}",
            "thread_id": f"thread-{number}",
            "reviewers": REVIEWERS,
            "resume": "tests.support.resume_targets:record",
        }
        if number % 2 == 0:
            handoff = slack.handoffs.request_approval(
                action="issue_refund",
                args={"order_id": f"A-{number}", "amount": 30},
                context="Customer was charged twice.",
                **options,
            )
        else:
            handoff = slack.handoffs.ask(
                question=f"Which warehouse ships order A-{number}?", **options
            )
        kinds[handoff.id] = handoff.request_type
    return kinds


def _posted(slack: SlackEnv, redis: Redis, wave: list[str]) -> dict[str, Message]:
    """The channel messages of the wave's handoffs, once the worker has posted them all."""
    wait_until(lambda: _tasks_in(redis, slack, wave, "deliver_state") == len(wave), timeout=60)
    posted = {}
    for handoff_id in wave:
        refs = slack.handoffs.get(handoff_id).message_refs
        posted[handoff_id] = slack.standin.message(refs["channel"], refs["ts"])
    return posted


def _open_modals(
    slack: SlackEnv,
    sender: SignedSender,
    wave: list[str],
    kinds: dict[str, RequestType],
    messages: dict[str, Message],
    rng: random.Random,
) -> dict[str, list[View]]:
    """Two reviewers per handoff of the wave click Reject (approvals) or Answer (questions)
    and get the bot's modal. Each click is built just before it is sent, as its trigger_id
    lasts 3 s; one that still missed it (an overloaded machine) is told to click again,
    and does."""
    team = [user.id for user in rng.sample(TEAM, len(wave) * MODALS)]
    openings = []
    for number, handoff_id in enumerate(wave):
        kind = kinds[handoff_id]
        action = block_ids.REJECT if kind is RequestType.APPROVAL else block_ids.ANSWER
        for index in range(MODALS):
            user = team[number * MODALS + index]
            url = slack.bot_urls[(number + index) % SERVES]
            openings.append((handoff_id, user, action, url))

    def open_modal(opening: tuple[str, str, str, str]) -> Answer:
        handoff_id, user, action, url = opening
        payload = slack.standin.click_payload(user, messages[handoff_id], action)
        return sender.post(url, interaction_body(payload), FORM)

    opened: dict[tuple[str, str], View] = {}
    for _ in range(OPENING_TRIES):
        answers = _in_parallel(open_modal, openings)
        assert [a for a in answers if a.status != 200] == []
        for view in slack.standin.views():
            if (
                view.callback_id in (block_ids.REJECT_MODAL, block_ids.ANSWER_MODAL)
                and not view.closed
            ):
                opened[(json.loads(view.private_metadata)["handoff_id"], view.user)] = view
        openings = [o for o in openings if (o[0], o[1]) not in opened]
        if not openings:
            break
    assert openings == [], "Reject/Answer clicks that never opened their modal"
    modals: dict[str, list[View]] = defaultdict(list)
    for (handoff_id, _), view in opened.items():
        modals[handoff_id].append(view)
    return modals


def _storm(
    slack: SlackEnv,
    wave: list[str],
    kinds: dict[str, RequestType],
    messages: dict[str, Message],
    modals: dict[str, list[View]],
    rng: random.Random,
) -> list[Decision]:
    """Ten decisions per handoff of the wave, as Slack would send them, grouped by handoff,
    each group in a random order and spread over the serve processes."""
    standin = slack.standin
    storm: list[Decision] = []
    for handoff_id in wave:
        message = messages[handoff_id]
        group: list[Decision] = []
        if kinds[handoff_id] is RequestType.APPROVAL:
            for user in rng.choices(CLICKERS, k=CLICKS_OR_REPLIES):  # double clicks included
                payload = standin.click_payload(user, message, block_ids.APPROVE)
                group.append(Decision(handoff_id, "button", user, interaction_body(payload), FORM))
            block = block_ids.REASON_BLOCK
        else:
            for user in rng.choices(CLICKERS, k=CLICKS_OR_REPLIES):
                _, event = standin.message_event(
                    user, message.channel, f"Dock 4, says {user}", thread_ts=message.ts
                )
                group.append(Decision(handoff_id, "thread", user, standin.event_body(event), JSON))
            block = block_ids.ANSWER_BLOCK
        for view in modals[handoff_id]:
            values = {block: {block_ids.VALUE: f"From {view.user}: dock 7 / too much"}}
            payload = standin.submission_payload(view.user, view, values)
            group.append(Decision(handoff_id, "modal", view.user, interaction_body(payload), FORM))
        rng.shuffle(group)
        first = rng.randrange(SERVES)
        for index, decision in enumerate(group):
            decision.url = slack.bot_urls[(first + index) % SERVES]
        storm.extend(group)
    return storm


def _send_all(sender: SignedSender, storm: list[Decision]) -> None:
    def send(decision: Decision) -> None:
        decision.answer = sender.post(decision.url, decision.body, decision.content_type)

    _in_parallel(send, storm)


# -- the checks ------------------------------------------------------------------------

_OUTCOMES = {
    (RequestType.APPROVAL, "slack_button"): Status.APPROVED,
    (RequestType.APPROVAL, "slack_modal"): Status.REJECTED,
    (RequestType.QUESTION, "slack_modal"): Status.ANSWERED,
    (RequestType.QUESTION, "slack_thread"): Status.ANSWERED,
}
_SURFACE_OF_VIA = {"slack_button": "button", "slack_modal": "modal", "slack_thread": "thread"}
_FINAL_EVENTS = ("decided", "expired", "cancelled")
_CLICK_AGAIN = (FORM_NOT_OPENED, FORM_MAYBE_NOT_OPENED)
"""What a click that should have opened a modal is told when Slack did not open it in time
(refused, or not answered within the request's 2 s): the click is tried again."""


def _assert_decided_once(slack: SlackEnv, handoff: Handoff, kind: RequestType) -> None:
    decision = handoff.resume_data
    assert decision is not None, f"{handoff.id} was never decided"
    assert handoff.status is _OUTCOMES[(kind, decision.via)]
    events = [event.event for event in slack.handoffs.audit(handoff.id)]
    assert [e for e in events if e in _FINAL_EVENTS] == ["decided"], (handoff.id, events)
    assert events.count("resumed") == 1, (handoff.id, events)


def _assert_losers_told(
    handoff: Handoff, sent: dict[str, list[Decision]], told: dict[str, list[Ephemeral]]
) -> str:
    """Each decision that lost got an answer naming the winner (``told``: the ephemeral
    replies by surface); returns the winning surface."""
    assert handoff.resume_data is not None
    winner = handoff.resume_data.decided_by
    won_by_surface: dict[str, Counter[str]] = {}
    for surface in ("button", "thread"):
        senders = Counter(d.user for d in sent.get(surface, []))
        answered = Counter(e.user for e in told[surface])
        assert answered <= senders, (handoff.id, surface, answered, senders)
        won_by_surface[surface] = senders - answered
        for ephemeral in told[surface]:
            assert f"by <@{winner}>" in ephemeral.text, (handoff.id, ephemeral.text)

    submitted = sent.get("modal", [])
    accepted = [d for d in submitted if _answer_of(d) == {}]
    for refused in (d for d in submitted if d not in accepted):
        answer = _answer_of(refused)
        assert answer["response_action"] == "errors", answer
        [error] = answer["errors"].values()
        assert error.startswith("Already ") and f"by @{winner} " in error, (handoff.id, error)
    won_by_surface["modal"] = Counter(d.user for d in accepted)

    winning = {surface: won for surface, won in won_by_surface.items() if won}
    surface = _SURFACE_OF_VIA[handoff.resume_data.via]
    assert winning == {surface: Counter({winner: 1})}, (handoff.id, winning)
    return surface


def _assert_message_shows_outcome(slack: SlackEnv, handoff: Handoff, posted: Message) -> None:
    assert handoff.resume_data is not None
    now = slack.standin.message(posted.channel, posted.ts)
    assert not [b for b in now.blocks if b.get("type") == "actions"], "buttons left live"
    assert f"by <@{handoff.resume_data.decided_by}>" in json.dumps(now.blocks)


def _assert_resumed_with_decision(redis: Redis, decided: dict[str, Handoff]) -> None:
    for entry in _entries(redis):
        handoff = decided[entry["handoff_id"]]
        assert handoff.resume_data is not None
        assert entry["status"] == handoff.status.value
        assert entry["resume_data"]["decided_by"] == handoff.resume_data.decided_by
        assert entry["resume_data"]["via"] == handoff.resume_data.via
        assert entry["idempotency_key"] == handoff.id


# -- helpers ---------------------------------------------------------------------------


class _Replies:
    """The ephemeral replies the bot made, found by the message they answer."""

    def __init__(self, ephemerals: list[Ephemeral]) -> None:
        self.clicks: dict[str, list[Ephemeral]] = defaultdict(list)
        self.thread: dict[str, list[Ephemeral]] = defaultdict(list)
        for ephemeral in ephemerals:
            if ephemeral.text.startswith(_CLICK_AGAIN):
                continue  # a modal that did not open in time (see _open_modals)
            if ephemeral.source == "response_url" and ephemeral.message_ts:
                self.clicks[ephemeral.message_ts].append(ephemeral)
            elif ephemeral.source == "chat.postEphemeral" and ephemeral.thread_ts:
                self.thread[ephemeral.thread_ts].append(ephemeral)

    def to(self, message: Message) -> dict[str, list[Ephemeral]]:
        """Replies to clicks on ``message`` ("button") and to replies in its thread."""
        return {"button": self.clicks[message.ts], "thread": self.thread[message.ts]}


def _wait_until_settled(
    count: Callable[[], int], *, quiet: float = 2.0, timeout: float = 60
) -> None:
    """Wait until ``count()`` has not changed for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise AssertionError(f"still changing after {timeout} s")


def _answer_of(decision: Decision) -> dict[str, Any]:
    assert decision.answer is not None
    body = decision.answer.body.strip()
    return json.loads(body) if body else {}


def _group(storm: Iterable[Decision]) -> dict[str, dict[str, list[Decision]]]:
    grouped: dict[str, dict[str, list[Decision]]] = defaultdict(lambda: defaultdict(list))
    for decision in storm:
        grouped[decision.handoff_id][decision.surface].append(decision)
    return grouped


def _entries(redis: Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)]


def _tasks_in(redis: Redis, slack: SlackEnv, ids: Iterable[str], state_field: str) -> int:
    """How many of the handoffs have the task ``state_field`` completed (one round trip)."""
    pipe = redis.pipeline(transaction=False)
    for handoff_id in ids:
        pipe.hget(slack.handoffs.store.keys.handoff(handoff_id), state_field)
    return sum(state == b"completed" for state in pipe.execute())


def _in_parallel(work: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    with ThreadPoolExecutor(SENDERS) as pool:
        return list(pool.map(work, items))


class _Clock:
    """Times the test's phases, for the report printed at the end."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.laps: list[str] = []

    def lap(self, what: str) -> None:
        now = time.monotonic()
        self.laps.append(f"{what}: {now - self.last:.1f} s")
        print(self.laps[-1], flush=True)
        self.last = now

    def __str__(self) -> str:
        return f"total {time.monotonic() - self.start:.1f} s ({'; '.join(self.laps)})"
