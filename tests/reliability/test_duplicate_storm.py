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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.standin import Ephemeral, Message, StandInUser, View, interaction_body
from store.models import Handoff, RequestType, Status
from tests.support.runs import run_size, seeded
from tests.support.signed_http import FORM, JSON, SignedSender
from tests.support.slack_env import ADMIN, ALICE, BOB, SIGNING_SECRET, SlackEnv, running_slack
from tests.support.storm import (
    Clock,
    Decision,
    Opening,
    Replies,
    assert_answered_and_resumed_once,
    assert_resumed_with_decisions,
    by_handoff,
    in_waves,
    open_modals,
    spread,
    wait_for_outcomes,
)

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
SERVES = 2
WORKERS = 3


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
    clock = Clock()
    sender = SignedSender(SIGNING_SECRET)

    kinds = _create(slack, count)
    clock.lap(f"created {count}")

    def prepare(wave: list[str], messages: dict[str, Message]) -> list[Decision]:
        modals = _open_modals(slack, sender, wave, kinds, messages, rng)
        return _storm(slack, wave, kinds, messages, modals, rng)

    order = list(kinds)
    messages, storm = in_waves(slack, redis, sender, order, WAVE, prepare)
    clock.lap(f"posted {count}, opened {count * MODALS} modals and sent {len(storm)} decisions")

    wait_for_outcomes(slack, redis, order)
    clock.lap("resumed and updated every message")
    sender.close()

    assert_answered_and_resumed_once(storm, redis, order)

    decided = {handoff_id: slack.handoffs.get(handoff_id) for handoff_id in kinds}
    by_surface = by_handoff(storm)
    # Thread answers that lost are told privately once the event is answered (in the
    # background): wait until no more such replies come.
    _wait_until_settled(lambda: len(slack.standin.calls("chat.postEphemeral")))
    replies = Replies(slack.standin.ephemerals())
    winners: Counter[str] = Counter()
    for handoff_id, handoff in decided.items():
        message = messages[handoff_id]
        _assert_decided_once(slack, handoff, kinds[handoff_id])
        winners[_assert_losers_told(handoff, by_surface[handoff_id], replies.to(message))] += 1
        _assert_message_shows_outcome(slack, handoff, message)
    assert_resumed_with_decisions(redis, decided)
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


def _open_modals(
    slack: SlackEnv,
    sender: SignedSender,
    wave: list[str],
    kinds: dict[str, RequestType],
    messages: dict[str, Message],
    rng: random.Random,
) -> dict[str, list[View]]:
    """Two reviewers per handoff of the wave click Reject (approvals) or Answer (questions)
    and get the bot's modal."""
    team = [user.id for user in rng.sample(TEAM, len(wave) * MODALS)]
    openings = []
    for number, handoff_id in enumerate(wave):
        kind = kinds[handoff_id]
        action = block_ids.REJECT if kind is RequestType.APPROVAL else block_ids.ANSWER
        for index in range(MODALS):
            user = team[number * MODALS + index]
            url = slack.bot_urls[(number + index) % SERVES]
            openings.append(Opening(handoff_id, user, action, url))
    callbacks = (block_ids.REJECT_MODAL, block_ids.ANSWER_MODAL)
    opened = open_modals(slack, sender, openings, messages, callbacks)
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
        spread(group, slack.bot_urls, rng)
        storm.extend(group)
    return storm


# -- the checks ------------------------------------------------------------------------

_OUTCOMES = {
    (RequestType.APPROVAL, "slack_button"): Status.APPROVED,
    (RequestType.APPROVAL, "slack_modal"): Status.REJECTED,
    (RequestType.QUESTION, "slack_modal"): Status.ANSWERED,
    (RequestType.QUESTION, "slack_thread"): Status.ANSWERED,
}
_SURFACE_OF_VIA = {"slack_button": "button", "slack_modal": "modal", "slack_thread": "thread"}
_FINAL_EVENTS = ("decided", "expired", "cancelled")


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
    accepted = [d for d in submitted if d.answer_json() == {}]
    for refused in (d for d in submitted if d not in accepted):
        answer = refused.answer_json()
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


# -- helpers ---------------------------------------------------------------------------


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
