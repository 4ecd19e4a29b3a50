"""Clock and expiry: a decision racing the expiry of its handoff. Exactly one of them wins.

Each handoff's decision is sent within a few milliseconds of its deadline (by the server's
clock, which the test shares), half through the agent API (``Handoffs.decide``) and half as
a signed Approve click to `handoff serve`, while three sweeper threads here and the
dispatchers of two `handoff worker` processes call ``expire_due`` all the time.

Promise under test: every handoff ends either decided by its reviewer or expired, never
both; its audit trail has one final event; its run is resumed once, with the status that
won, and an expired run is resumed as expired (fail closed, never approved): no decision
wins at or after the deadline, even one that arrives before any sweeper. The loser is told
what won. ``--soak`` races 1,000 handoffs (RELIABILITY_RACES sets another number); the
seed (RELIABILITY_SEED) is printed.
"""

from __future__ import annotations

import heapq
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from bot.blockkit import ids as block_ids
from bot.standin import interaction_body
from bot.standin.records import ElementNotFound
from store.exceptions import AlreadyDecided
from store.models import Handoff, Status
from tests.conftest import wait_until
from tests.support import resume_targets
from tests.support.runs import run_size, seeded
from tests.support.signed_http import FORM, Answer, SignedSender
from tests.support.slack_env import ALICE, BOB, SIGNING_SECRET, SlackEnv, running_slack

RACES = 200
SOAK_RACES = 1000
BATCH = 20
"""Handoffs created together; a batch starts every ``BATCH_EVERY`` seconds..."""
BATCH_EVERY = 0.3
EXPIRES_IN = 4.0
"""...and expires this long after it is created (time enough for it to be posted)."""
SKEW_MS = (-40, 10)
"""When a decision is sent, in milliseconds from its deadline (it takes a few to arrive,
a click more than a call)."""
SWEEPERS = 3
SWEEP_EVERY = 0.002


@dataclass(order=True)
class Race:
    """One handoff, and the decision sent at ``fire_at`` (monotonic seconds)."""

    fire_at: float
    handoff_id: str = field(compare=False)
    surface: str = field(compare=False)
    """ "api" or "click"."""
    skew_ms: float = field(compare=False)
    decided: bool | None = field(default=None, compare=False)
    """Whether the decision said it won."""
    told: str = field(default="", compare=False)
    """What the loser was told."""
    message_ts: str = field(default="", compare=False)
    """The message a click was on (its reply is read once the run is over)."""


@pytest.fixture
def slack(redis: Redis, redis_url: str, tmp_path: Path) -> Iterator[SlackEnv]:
    yield from running_slack(redis, redis_url, tmp_path, workers=2, serves=1)


def test_a_decision_racing_its_expiry_either_decides_or_expires_never_both(
    slack: SlackEnv, redis: Redis, soak: bool
) -> None:
    count = run_size("RELIABILITY_RACES", default=RACES, soak_size=SOAK_RACES, soak=soak)
    rng = seeded(f"expiry race: {count} handoffs")
    started = time.monotonic()
    sweeps = _Sweepers(slack)
    sender = SignedSender(SIGNING_SECRET)
    races: list[Race] = []
    with ThreadPoolExecutor(16) as pool:
        sweeps.start()
        firing = threading.Thread(target=_fire, args=(slack, sender, races, pool, count))
        for first in range(0, count, BATCH):
            races.extend(_create_batch(slack, min(BATCH, count - first), rng))
            if first == 0:
                firing.start()
            time.sleep(BATCH_EVERY)
        firing.join()
    sweeps.stop()
    sender.close()

    ids = [race.handoff_id for race in races]
    wait_until(lambda: redis.llen(resume_targets.COMPLETED) >= count, timeout=60)
    resumed = [json.loads(raw) for raw in redis.lrange(resume_targets.COMPLETED, 0, -1)]
    assert Counter(entry["handoff_id"] for entry in resumed) == Counter(ids), "one resume each"
    resumed_with = {entry["handoff_id"]: entry for entry in resumed}

    outcomes: Counter[str] = Counter()
    for race in races:
        handoff = slack.handoffs.get(race.handoff_id)
        if race.surface == "click":
            _read_click_reply(slack, race, expired=handoff.status is Status.EXPIRED)
        outcome = _assert_one_winner(slack, race, handoff, resumed_with[race.handoff_id])
        outcomes[f"{race.surface} {outcome}"] += 1
    expired = {race.handoff_id for race in races if "expired" in _final(slack, race)}
    assert sweeps.duplicates == [], "two sweepers expired the same handoff"
    assert sweeps.expired <= expired

    print(
        f"outcomes: {dict(outcomes)}; expired by the test's sweepers {len(sweeps.expired)}, "
        f"by the dispatchers or a late decision {len(expired - sweeps.expired)}; "
        f"{time.monotonic() - started:.1f} s"
    )
    won = sum(n for outcome, n in outcomes.items() if outcome.endswith("decided"))
    assert 0 < won < count, "the decisions and the expiries did not race"
    assert outcomes["click decided"] + outcomes["click expired"] > 0, "no click raced"


def _create_batch(slack: SlackEnv, size: int, rng: random.Random) -> list[Race]:
    """Approvals expiring together; each gets a decision time within SKEW_MS of its
    deadline (the server's clock, converted to this process's monotonic clock)."""
    races = []
    for _ in range(size):
        handoff = slack.handoffs.request_approval(
            run_id="race",
            thread_id="t",
            action="issue_refund",
            args={"amount": 30},
            reviewers=[ALICE],
            resume="tests.support.resume_targets:record",
            expires_in=timedelta(seconds=EXPIRES_IN),
        )
        assert handoff.expires_at is not None
        skew_ms = rng.uniform(*SKEW_MS)
        deadline = handoff.expires_at.timestamp() - time.time() + time.monotonic()
        surface = rng.choice(["api", "click"])
        races.append(Race(deadline + skew_ms / 1000, handoff.id, surface, skew_ms))
    return races


def _fire(
    slack: SlackEnv,
    sender: SignedSender,
    races: list[Race],
    pool: ThreadPoolExecutor,
    count: int,
) -> None:
    """Send each decision at its time, from a pool (a late one would race nothing)."""
    fired: list[Future[None]] = []
    queue: list[Race] = []
    taken = 0
    while len(fired) < count:
        while taken < len(races):  # races is appended to by the creating thread
            heapq.heappush(queue, races[taken])
            taken += 1
        if not queue or queue[0].fire_at - time.monotonic() > 0.001:
            time.sleep(0.0005)
            continue
        race = heapq.heappop(queue)
        fired.append(pool.submit(_decide, slack, sender, race))
    for future in fired:
        future.result()


def _decide(slack: SlackEnv, sender: SignedSender, race: Race) -> None:
    refs = slack.handoffs.get(race.handoff_id).message_refs
    if race.surface == "click" and not refs.get("ts"):
        race.surface = "api (not posted in time)"  # a slow machine: the agent decides it
    if race.surface != "click":
        try:
            slack.handoffs.decide(race.handoff_id, "approved", by=BOB)
            race.decided = True
        except AlreadyDecided as exc:
            race.decided, race.told = False, str(exc)
        return
    message = slack.standin.message(refs["channel"], refs["ts"])
    try:
        payload = slack.standin.click_payload(ALICE, message, block_ids.APPROVE)
    except ElementNotFound:
        # The expiry closed the message first: a person would see no button to click.
        race.surface = "api (message closed in time)"
        _decide(slack, sender, race)
        return
    answer: Answer = sender.post(slack.bot_urls[0], interaction_body(payload), FORM)
    assert answer.status == 200, answer
    race.message_ts = message.ts


def _read_click_reply(slack: SlackEnv, race: Race, expired: bool) -> None:
    """What the click was told: nothing when it won, else an ephemeral reply naming the
    expiry. A loaded process may post that reply just after answering the click (it has no
    time left before Slack's answer is due), so a lost click's reply is waited for."""

    def replies() -> list[Any]:
        return [
            e
            for e in slack.standin.ephemerals(ALICE)
            if e.source == "response_url" and e.message_ts == race.message_ts
        ]

    deadline = time.monotonic() + (10 if expired else 0)
    while not replies() and time.monotonic() < deadline:
        time.sleep(0.05)
    found = replies()
    race.decided = not found
    race.told = found[0].text if found else ""


def _assert_one_winner(
    slack: SlackEnv, race: Race, handoff: Handoff, resumed: dict[str, Any]
) -> str:
    final = _final(slack, race)
    assert len(final) == 1, (race, final)
    decision = handoff.resume_data
    assert decision is not None
    assert resumed["status"] == handoff.status.value
    assert resumed["resume_data"]["outcome"] == handoff.status.value
    if handoff.status is Status.EXPIRED:
        assert final == ["expired"] and decision.decided_by == "system", race
        assert race.decided is False, f"{race} was told it decided, yet the handoff expired"
        assert "expired" in race.told, race.told
        return "expired"
    assert final == ["decided"] and handoff.status is Status.APPROVED, (race, final)
    assert handoff.decided_at is not None and handoff.expires_at is not None
    assert handoff.decided_at < handoff.expires_at, f"{race} won after the deadline"
    assert decision.decided_by == (ALICE if race.surface == "click" else BOB)
    assert race.decided is True, f"{race} was told it lost, yet its decision stands"
    return "decided"


def _final(slack: SlackEnv, race: Race) -> list[str]:
    """The handoff's final events (decided, expired, cancelled) in its audit trail."""
    events = [event.event for event in slack.handoffs.audit(race.handoff_id)]
    return [event for event in events if event in ("decided", "expired", "cancelled")]


class _Sweepers:
    """Threads calling ``expire_due`` without pause, as several sweepers at once would."""

    def __init__(self, slack: SlackEnv) -> None:
        self.store = slack.handoffs.store
        self.expired: set[str] = set()
        self.duplicates: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._sweep) for _ in range(SWEEPERS)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _sweep(self) -> None:
        while not self._stop.wait(SWEEP_EVERY):
            for handoff_id in self.store.expire_due():
                with self._lock:
                    if handoff_id in self.expired:
                        self.duplicates.append(handoff_id)
                    self.expired.add(handoff_id)
