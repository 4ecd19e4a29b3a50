"""Quorum storm: 500 approvals that each need two people, and all three of their reviewers
clicking Approve several times at once, some rejecting too, as signed HTTP to two
`handoff serve` processes behind Slack's one request URL.

Promise under test: each approval is decided exactly once, by exactly two distinct
approvers or by the first rejection; it is resumed once with those votes; every click is
answered (the first approver told their vote is recorded, a second click told they
already voted, a late one who decided); and every message ends showing the final votes,
with no buttons, its versions never showing fewer approvals than an earlier one.
``--soak`` runs 5,000 handoffs (RELIABILITY_QUORUM_HANDOFFS sets another number);
RELIABILITY_SEED replays a run.

Each reviewer clicks Approve on each handoff one to three times. A person has one modal
open at a time (``views.open`` replaces it), so the handoffs go in waves of 20, in the
order they are posted: in each wave, each reviewer opens the Reject modal of a handoff of
their own, then the wave's clicks and those three submissions are sent at once, 32
requests in flight, each handoff's spread over both serve processes. A rejecter clicks
Approve on the handoff they reject now and then too (one vote per person, whichever
counts first). On some handoffs only one reviewer clicks at once, and the two others with
the next wave, so that their messages show one approval for a while before the outcome.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.standin import Ephemeral, Message, View, interaction_body
from store.models import Handoff, Status
from tests.support.runs import run_size, seeded
from tests.support.signed_http import FORM, SignedSender
from tests.support.slack_env import ALICE, BOB, CAROL, SIGNING_SECRET, SlackEnv, running_slack
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
    send_all,
    spread,
    wait_for_outcomes,
)

HANDOFFS = 500
SOAK_HANDOFFS = 5000
REVIEWERS = [ALICE, BOB, CAROL]
"""The three people who may decide each handoff; two approvals decide it."""
CLICKS = (1, 3)
"""Approve clicks per reviewer per handoff: at least one, at most three."""
WAVE = 20
"""Handoffs decided at once; each reviewer rejects one of them, in a modal of their own."""
REJECTER_APPROVES_TOO = 0.3
"""How often a rejecter also clicks Approve on the handoff they reject."""
LATE = 0.2
"""How often only one reviewer clicks Approve with the wave, the two others with the next."""
SERVES = 2
WORKERS = 3

RECORDED = "is recorded: 1 of 2 approvals"
ALREADY_VOTED = "You already voted on this request"
VOTE_MARKS = {"approved": ":white_check_mark:", "rejected": ":no_entry_sign:"}
APPROVALS_SHOWN = re.compile(r"Approvals (\d) of 2")


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path, workers=WORKERS, serves=SERVES)


def test_clicks_at_once_on_two_person_approvals_decide_each_once_with_two_approvers_or_a_veto(
    slack: SlackEnv, redis: Redis, soak: bool
) -> None:
    count = run_size(
        "RELIABILITY_QUORUM_HANDOFFS", default=HANDOFFS, soak_size=SOAK_HANDOFFS, soak=soak
    )
    rng = seeded(f"quorum storm: {count} handoffs")
    clock = Clock()
    sender = SignedSender(SIGNING_SECRET)

    order = [_create(slack, number).id for number in range(count)]
    clock.lap(f"created {count}")

    late: list[Decision] = []

    def prepare(wave: list[str], messages: dict[str, Message]) -> list[Decision]:
        nonlocal late
        modals = _open_reject_modals(slack, sender, wave, messages, rng)
        now, later = _storm(slack, wave, messages, modals, rng)
        sending, late = [*now, *late], later
        return sending

    messages, storm = in_waves(slack, redis, sender, order, WAVE, prepare)
    send_all(sender, late)  # the last wave's late approvers
    storm.extend(late)
    clock.lap(f"posted {count} and sent {len(storm)} clicks and rejections")

    wait_for_outcomes(slack, redis, order)
    clock.lap("resumed and updated every message")
    sender.close()

    assert_answered_and_resumed_once(storm, redis, order)

    decided = {handoff.id: handoff for handoff in slack.handoffs.store.get_many(order)}
    sent = by_handoff(storm)
    replies = Replies(slack.standin.ephemerals())
    outcomes: Counter[str] = Counter()
    versions: Counter[int] = Counter()
    for handoff_id, handoff in decided.items():
        _assert_decided_once_by_two_or_a_veto(slack, handoff, sent[handoff_id])
        _assert_every_click_answered(handoff, sent[handoff_id], replies.to(messages[handoff_id]))
        versions[_assert_message_ends_with_the_votes(slack, handoff, messages[handoff_id])] += 1
        outcomes[handoff.status.value] += 1
    assert_resumed_with_decisions(redis, decided)
    clock.lap("checked")
    print(f"outcomes: {dict(outcomes)}; messages by versions: {dict(versions)}; {clock}")
    assert sum(outcomes.values()) == count
    assert outcomes["approved"] and outcomes["rejected"], "the storm tried both outcomes"


# -- the steps -------------------------------------------------------------------------


def _create(slack: SlackEnv, number: int) -> Handoff:
    return slack.handoffs.request_approval(
        run_id=f"quorum-{number}",
        thread_id=f"thread-{number}",
        action="issue_refund",
        args={"order_id": f"A-{number}", "amount": 30},
        context="Customer was charged twice.",
        reviewers=REVIEWERS,
        approvals_required=2,
        resume="tests.support.resume_targets:record",
    )


def _open_reject_modals(
    slack: SlackEnv,
    sender: SignedSender,
    wave: list[str],
    messages: dict[str, Message],
    rng: random.Random,
) -> dict[str, View]:
    """Each reviewer clicks Reject on a handoff of the wave of their own and gets the
    modal; returns the modals by handoff."""
    rejected = rng.sample(wave, min(len(REVIEWERS), len(wave)))
    openings = [
        Opening(handoff_id, user, block_ids.REJECT, slack.bot_urls[index % SERVES])
        for index, (handoff_id, user) in enumerate(zip(rejected, REVIEWERS, strict=False))
    ]
    opened = open_modals(slack, sender, openings, messages, [block_ids.REJECT_MODAL])
    return {handoff_id: view for (handoff_id, _), view in opened.items()}


def _storm(
    slack: SlackEnv,
    wave: list[str],
    messages: dict[str, Message],
    modals: dict[str, View],
    rng: random.Random,
) -> tuple[list[Decision], list[Decision]]:
    """Every reviewer's Approve clicks on every handoff of the wave (but a rejecter's,
    now and then), and the Reject submissions, grouped by handoff, each group in a random
    order and spread over the serve processes: those to send now, and the late approvers'
    (``LATE``) to send with the next wave."""
    standin = slack.standin
    storm: list[Decision] = []
    late: list[Decision] = []
    for handoff_id in wave:
        message = messages[handoff_id]
        group: list[Decision] = []
        later: list[Decision] = []
        first = rng.choice(REVIEWERS) if rng.random() < LATE else None
        modal = modals.get(handoff_id)
        if modal is not None:
            values = {block_ids.REASON_BLOCK: {block_ids.VALUE: f"Not {handoff_id}, says me"}}
            payload = standin.submission_payload(modal.user, modal, values)
            group.append(Decision(handoff_id, "modal", modal.user, interaction_body(payload), FORM))
        for user in REVIEWERS:
            if modal is not None and user == modal.user and rng.random() > REJECTER_APPROVES_TOO:
                continue
            sent_with = group if first in (None, user) else later
            for _ in range(rng.randint(*CLICKS)):
                payload = standin.click_payload(user, message, block_ids.APPROVE)
                sent_with.append(
                    Decision(handoff_id, "button", user, interaction_body(payload), FORM)
                )
        spread(group, slack.bot_urls, rng)
        spread(later, slack.bot_urls, rng)
        storm.extend(group)
        late.extend(later)
    return storm, late


# -- the checks ------------------------------------------------------------------------


def _assert_decided_once_by_two_or_a_veto(
    slack: SlackEnv, handoff: Handoff, sent: dict[str, list[Decision]]
) -> None:
    """Two distinct approvers who clicked Approve, or the first rejection (by the one who
    submitted Reject, before a second approval); one decision, one resume, a vote audited
    for every vote before the deciding one."""
    decision = handoff.resume_data
    assert decision is not None and decision.votes is not None, f"{handoff.id} never decided"
    votes = [(vote.by, vote.outcome) for vote in decision.votes]
    voters = [by for by, _ in votes]
    assert len(set(voters)) == len(voters), (handoff.id, votes)
    assert decision.decided_by == voters[-1], (handoff.id, decision.decided_by, votes)
    clicked = {d.user for d in sent.get("button", [])}
    rejecter = {d.user for d in sent.get("modal", [])}
    if handoff.status is Status.APPROVED:
        assert [outcome for _, outcome in votes] == ["approved", "approved"], (handoff.id, votes)
        assert decision.approvers == voters, (handoff.id, decision.approvers, votes)
        assert set(voters) <= clicked and decision.via == "slack_button", handoff.id
    else:
        assert handoff.status is Status.REJECTED, (handoff.id, handoff.status)
        *before, last = votes
        assert last == (decision.decided_by, "rejected"), (handoff.id, votes)
        assert [outcome for _, outcome in before] in ([], ["approved"]), (handoff.id, votes)
        assert {decision.decided_by} == rejecter and decision.via == "slack_modal", handoff.id
        assert {by for by, _ in before} <= clicked, (handoff.id, votes)
    events = Counter(event.event for event in slack.handoffs.audit(handoff.id))
    assert (events["voted"], events["decided"], events["resumed"]) == (len(votes) - 1, 1, 1), (
        handoff.id,
        events,
    )
    assert not events["expired"] and not events["cancelled"], (handoff.id, events)


def _assert_every_click_answered(
    handoff: Handoff, sent: dict[str, list[Decision]], told: dict[str, list[Ephemeral]]
) -> None:
    """Every Approve click but the deciding one is answered: an approval that counted
    without deciding is told it is recorded, every other click that its clicker already
    voted, or who decided. A Reject submission is taken if it decided, else refused in the
    modal for one of those reasons (its errors show mentions as @id)."""
    assert handoff.resume_data is not None and handoff.resume_data.votes is not None
    decider = handoff.resume_data.decided_by
    voted = {vote.by for vote in handoff.resume_data.votes}
    approved_first = {
        vote.by for vote in handoff.resume_data.votes if vote.outcome == "approved"
    } - {decider}
    already = f"Already {handoff.status.value} by <@{decider}>"
    already_in_modal = f"Already {handoff.status.value} by @{decider}"
    clicks = Counter(d.user for d in sent.get("button", []))
    answered: dict[str, list[str]] = defaultdict(list)
    for ephemeral in told["button"]:
        answered[ephemeral.user].append(ephemeral.text)
    assert set(answered) <= set(clicks), (handoff.id, answered)
    for user, clicked in clicks.items():
        decided_by_click = user == decider and handoff.resume_data.via == "slack_button"
        texts = answered[user]
        assert len(texts) == clicked - decided_by_click, (handoff.id, user, clicked, texts)
        recorded = [text for text in texts if RECORDED in text]
        assert len(recorded) == (user in approved_first), (handoff.id, user, texts)
        for text in texts:
            if text in recorded:
                continue
            refused_as_voter = text.startswith(ALREADY_VOTED) and user in voted
            assert refused_as_voter or text.startswith(already), (handoff.id, user, text)

    for submission in sent.get("modal", []):
        answer = submission.answer_json()
        if handoff.status is Status.REJECTED:  # this rejection decided
            assert answer == {} and submission.user == decider, (handoff.id, answer)
            continue
        assert answer["response_action"] == "errors", (handoff.id, answer)
        [error] = answer["errors"].values()
        refused_as_voter = error.startswith(ALREADY_VOTED) and submission.user in voted
        assert refused_as_voter or error.startswith(already_in_modal), (handoff.id, error)


def _assert_message_ends_with_the_votes(
    slack: SlackEnv, handoff: Handoff, posted_message: Message
) -> int:
    """The last version has no buttons and names the approvers, or the rejecter, with
    every vote; no version shows fewer approvals than one before it, and none after the
    outcome shows anything else. Returns how many versions the message had."""
    decision = handoff.resume_data
    assert decision is not None and decision.votes is not None
    now = slack.standin.message(posted_message.channel, posted_message.ts)
    shown = json.dumps(now.blocks, ensure_ascii=False)
    assert not [b for b in now.blocks if b.get("type") == "actions"], (handoff.id, "buttons")
    if handoff.status is Status.APPROVED:
        who = ", ".join(f"<@{approver}>" for approver in decision.approvers or [])
        assert f"*Approved* by {who} " in shown, (handoff.id, shown)
    else:
        assert f"*Rejected* by <@{decision.decided_by}> " in shown, (handoff.id, shown)
    votes = " · ".join(f"<@{vote.by}> {VOTE_MARKS[vote.outcome]}" for vote in decision.votes)
    assert f"*Votes:* {votes}" in shown, (handoff.id, votes, shown)

    texts = [json.dumps(version.blocks, ensure_ascii=False) for version in now.updates] + [shown]
    counts = [int(found[1]) for text in texts if (found := APPROVALS_SHOWN.search(text))]
    assert counts == sorted(counts), (handoff.id, "an update showed fewer approvals", counts)
    outcome = next(index for index, text in enumerate(texts) if f"*Votes:* {votes}" in text)
    assert all(f"*Votes:* {votes}" in text for text in texts[outcome:]), (
        handoff.id,
        "a pending version after the outcome",
        texts[outcome:],
    )
    return len(texts)
