"""Traffic for the failover tests: an agent creating handoffs and a person approving them,
each retrying a refused request as the same request, recording what was acknowledged."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from store.exceptions import AlreadyDecided, HandoffNotFound
from store.models import Status
from store.settings import StoreSettings
from tests.support.policies import task_policy
from worker.client import Handoffs

DECIDER = "U0DECIDER"
GIVE_UP_SECONDS = 25.0

"""A caller retries a refused request this long (the same request each time)."""
POLICY = task_policy(attempts=20, timeout=30, backoff=(0.2, 1.0), lease_grace=1.0)


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

    def start(self) -> list[threading.Thread]:
        self.running.set()
        threads = [
            threading.Thread(target=self._guard, args=(self._create,), daemon=True),
            threading.Thread(target=self._guard, args=(self._decide,), daemon=True),
        ]
        for thread in threads:
            thread.start()
        return threads

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
