"""Traffic for the failover tests and what it must leave behind: an agent creating
handoffs and a person approving them, each retrying a refused request as the same request,
recording what was acknowledged (``Traffic``); and the checks after people clicked through
a failover in Slack (``check_clicks_kept``)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from redis import Redis
from redis.exceptions import RedisError

from store.exceptions import AlreadyDecided, HandoffNotFound
from store.models import Handoff, Status, TaskState
from store.settings import StoreSettings
from tests.conftest import wait_until
from tests.support import ha_targets, resume_targets
from tests.support.policies import task_policy
from tests.support.redis_ha import wait_for
from tests.support.slack_env import SlackEnv
from worker.client import Handoffs

DECIDER = "U0DECIDER"
GIVE_UP_SECONDS = 25.0

"""A caller retries a refused request this long (the same request each time)."""
POLICY = task_policy(attempts=20, timeout=30, backoff=(0.2, 1.0), lease_grace=1.0)


def worker_env(witness_url: str, acks: int) -> dict[str, str]:
    """The settings of a `handoff worker` under test: waiting for ``acks`` replicas,
    resuming through ``ha_targets.record`` into the witness at ``witness_url``."""
    return {
        "HANDOFF_MIN_REPLICA_ACKS": str(acks),
        "HANDOFF_RESUME_MODULES": "tests.support.ha_targets",
        "HA_WITNESS_URL": witness_url,
        "HANDOFF_DISPATCH_TIMEOUT_SECONDS": "3",
    }


def resumes(witness: Redis) -> Counter[str]:
    """How many times each handoff was resumed (``ha_targets.record``'s witness)."""
    return Counter(json.loads(raw)["id"] for raw in witness.lrange(ha_targets.RESUMED, 0, -1))


def decided_by_the_decider(handoff: Handoff) -> bool:
    """Whether ``handoff`` holds the traffic's decision: approved by ``DECIDER``."""
    return (
        handoff.status is Status.APPROVED
        and handoff.resume_data is not None
        and handoff.resume_data.decided_by == DECIDER
    )


def decided_twice(handoffs: Handoffs, ids: Iterable[str]) -> list[str]:
    """Those of ``ids`` whose audit trail has other than one decision."""
    return [i for i in ids if [e.event for e in handoffs.audit(i)].count("decided") != 1]


def agent(url: str, acks: int, *, namespace: str = "ho") -> Handoffs:
    """An agent's client on ``url`` waiting for ``acks`` replicas."""
    settings = StoreSettings.from_env(
        redis_url=url, min_replica_acks=acks, replica_ack_timeout_seconds=1.0, namespace=namespace
    )
    return Handoffs.from_settings(settings, tasks=POLICY)


@dataclass
class Traffic:
    """An agent creating handoffs and a person approving them, each in a thread, retrying a
    refused request as the same request, and recording what was acknowledged."""

    handoffs: Handoffs
    created: list[str] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)
    try_again: Counter[str] = field(default_factory=Counter)
    last_refusal: dict[str, str] = field(default_factory=dict)
    acknowledged: list[tuple[float, float]] = field(default_factory=list)
    """(sent, answered) of each acknowledged attempt."""
    vanished: list[str] = field(default_factory=list)
    """Acknowledged creations the decider found gone."""
    failures: list[BaseException] = field(default_factory=list)
    running: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.running.set()
        self.threads = [
            threading.Thread(target=self._guard, args=(self._create,), daemon=True),
            threading.Thread(target=self._guard, args=(self._decide,), daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def stop_after_failover(self, killed_at: float, settle_seconds: float = 2.0) -> None:
        """Once a request sent after the kill at ``killed_at`` was acknowledged, and
        ``settle_seconds`` more: stop creating, let the decider finish, and fail the test
        on what went wrong in either thread."""
        wait_for(
            lambda: self.failover_seconds(killed_at) < float("inf"),
            timeout=30,
            what="a request acknowledged after the failover",
        )
        time.sleep(settle_seconds)
        self.running.clear()
        for thread in self.threads:
            thread.join(timeout=GIVE_UP_SECONDS + 10)
        assert not self.failures, self.failures

    def _guard(self, loop) -> None:  # type: ignore[no-untyped-def]
        try:
            loop()
        except BaseException as exc:  # a bug: report it, not a hang
            self.failures.append(exc)

    def _retrying(self, kind: str, call):  # type: ignore[no-untyped-def]
        """``call()`` until it is acknowledged; None if it never was within the bound."""
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                result = call()
            except RedisError as exc:  # ReplicasNotConfirmed among them: "try again"
                self.try_again[kind] += 1
                self.last_refusal[kind] = f"{type(exc).__name__}: {exc}"
                time.sleep(0.1)
                continue
            self.acknowledged.append((sent, time.monotonic()))
            return result
        return None

    def _create(self) -> None:
        n = 0
        while self.running.is_set():
            handoff = self._retrying(
                "create",
                lambda n=n: self.handoffs.request_approval(
                    run_id=f"run-{n}",
                    thread_id="t",
                    action="deploy",
                    args={"n": n},
                    channel="C0HA",
                    resume="tests.support.ha_targets:record",
                    idempotency_key=f"create-{n}",
                ),
            )
            if handoff is not None:
                self.created.append(handoff.id)
            n += 1
            time.sleep(0.02)

    def _decide(self) -> None:
        done = 0
        while self.running.is_set() or done < len(self.created):
            if done >= len(self.created):
                time.sleep(0.02)
                continue
            handoff_id = self.created[done]
            done += 1

            def approve(handoff_id: str = handoff_id) -> str:
                try:
                    self.handoffs.decide(handoff_id, Status.APPROVED, by=DECIDER)
                except AlreadyDecided as exc:
                    # A retry of a decision whose answer was lost: the same decision.
                    if exc.decided_by != DECIDER:
                        raise
                return handoff_id

            try:
                if self._retrying("decide", approve) is not None:
                    self.decided.append(handoff_id)
            except HandoffNotFound:
                # Its creation was acknowledged, then lost in a failover (acks 0).
                self.vanished.append(handoff_id)

    def failover_seconds(self, killed_at: float) -> float:
        """From the kill to the first acknowledgement of a request sent after it."""
        after = [answered for sent, answered in self.acknowledged if sent > killed_at]
        return (min(after) - killed_at) if after else float("inf")


# -- people clicking in Slack through a failover -------------------------------------------


class Clicking(Protocol):
    """An agent creating handoffs and people clicking Approve in Slack, each in threads of
    their own (``tests.reliability.test_redis_restart.Traffic``)."""

    created: list[str]
    acknowledged: dict[str, str]
    """handoff id -> the person whose click the bot acknowledged."""
    clicks: Counter[str]
    creating: threading.Event
    failures: list[BaseException]

    def stop(self) -> None: ...


def check_clicks_kept(
    clicking: Clicking, slack: SlackEnv, witness: Redis, *, decide_timeout: float = 45
) -> Sequence[str]:
    """Stop creating, let the people decide what was created (``decide_timeout`` seconds
    at most), stop them; then fail the test unless every handoff was decided, every
    acknowledged click by its person, each decided once and resumed once to completion
    (``resume_targets`` report to ``witness``), and every bot process is still alive.
    Returns the handoffs created."""
    clicking.creating.clear()
    created = list(clicking.created)
    with contextlib.suppress(AssertionError):  # the assertions below say what is missing
        wait_until(
            lambda: clicking.failures or all(not slack.handoffs.get(i).is_pending for i in created),
            timeout=decide_timeout,
        )
    clicking.stop()  # raises what went wrong in the agent's or the people's threads
    pending = [h for h in slack.handoffs.store.get_many(created) if h.is_pending]
    assert not pending, _what_happened(slack, clicking, pending)
    # No acknowledged decision lost: decided, by the person the bot acknowledged.
    for handoff_id, user in clicking.acknowledged.items():
        decided = slack.handoffs.get(handoff_id)
        assert decided.status is Status.APPROVED, handoff_id
        assert decided.resume_data is not None and decided.resume_data.decided_by == user
    try:
        wait_until(
            lambda: all(slack.handoffs.get(i).resume.state is TaskState.COMPLETED for i in created),
            timeout=60,
        )
    except AssertionError:
        stuck = slack.handoffs.store.get_many(created)
        stuck = [h for h in stuck if h.resume.state is not TaskState.COMPLETED]
        raise AssertionError(_what_happened(slack, clicking, stuck)) from None
    completed = [json.loads(raw) for raw in witness.lrange(resume_targets.COMPLETED, 0, -1)]
    ran = Counter(entry["handoff_id"] for entry in completed)
    assert {i: ran[i] for i in created} == {i: 1 for i in created}
    for handoff_id in created:
        audit = [e.event for e in slack.handoffs.audit(handoff_id)]
        assert audit.count("decided") == 1, audit
    assert all(p.poll() is None for p in slack.processes), slack.logs()[-5000:]
    return created


def _what_happened(slack: SlackEnv, clicking: Clicking, handoffs: Sequence[Handoff]) -> str:
    """For a failure's message: each handoff's state and trail, whose click the bot
    acknowledged, what the people were told, and the end of the processes' logs."""
    lines = [f"{len(handoffs)} handoffs not done; clicks: {dict(clicking.clicks)}"]
    for handoff in handoffs:
        trail = [(e.event, e.at.isoformat(), e.actor) for e in slack.handoffs.audit(handoff.id)]
        lines.append(
            f"{handoff.id} {handoff.status.value} delivery={handoff.delivery.state.value} "
            f"resume={handoff.resume.state.value}/{handoff.resume.attempt} "
            f"refs={handoff.message_refs} acknowledged={clicking.acknowledged.get(handoff.id)} "
            f"trail={trail}"
        )
    for user in {*clicking.acknowledged.values(), "U0ALICE", "U0BOB"}:
        told = [(e.message_ts, e.text) for e in slack.standin.ephemerals(user)]
        lines.append(f"{user} was told: {told}")
    return "\n".join(lines) + "\n" + slack.logs()[-15000:]


def click_figures(clicking: Clicking, created: Sequence[str]) -> dict[str, object]:
    """What the people's clicks came to, for the test's printed figures."""
    return {
        "created": len(created),
        "acknowledged_clicks": len(clicking.acknowledged),
        "clicks": dict(clicking.clicks),
    }
