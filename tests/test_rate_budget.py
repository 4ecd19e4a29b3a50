"""RateBudget: calls to a rate-limited API shared by every process, by Redis's clock."""

from __future__ import annotations

import threading
import time

import pytest
from redis import Redis

from store.keys import KeySpace
from store.rate_budget import RateBudget

METHOD = "conversations.history"


def _budget(redis: Redis, per_minute: float, namespace: str = "ho") -> RateBudget:
    return RateBudget(redis, KeySpace(namespace), METHOD, calls_per_minute=per_minute)


def test_one_call_a_minute_is_taken_once_and_the_next_waits_the_rest_of_the_minute(
    redis: Redis,
) -> None:
    budget = _budget(redis, 1)

    assert budget.take() == 0
    wait = budget.take()

    assert 59 < wait <= 60


def test_many_processes_share_one_budget(redis: Redis, redis_url: str) -> None:
    """Twenty clients at once (as twenty workers would): one call goes through."""
    granted: list[float] = []
    start = threading.Barrier(20)

    def take() -> None:
        budget = _budget(Redis.from_url(redis_url), 1)
        start.wait()
        granted.append(budget.take())

    threads = [threading.Thread(target=take) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(granted)[0] == 0 and sum(1 for wait in granted if wait == 0) == 1


def test_calls_come_back_evenly_spaced(redis: Redis) -> None:
    budget = _budget(redis, 600)  # one call every 100 ms

    assert budget.take() == 0
    wait = budget.take()
    assert 0 < wait <= 0.1
    time.sleep(wait + 0.01)
    assert budget.take() == 0


def test_calls_are_spaced_however_late_their_holders_come_back(redis: Redis) -> None:
    budget = _budget(redis, 600)  # one call every 100 ms
    budget.take("a")
    budget.take("b")
    budget.take("c")
    time.sleep(0.35)  # both kept calls are due: their holders come back late, together

    assert budget.take("b") == 0
    assert 0 < budget.take("c") <= 0.1, "never two calls closer than the interval"


def test_a_hold_pushes_the_next_call_back_and_never_forward(redis: Redis) -> None:
    budget = _budget(redis, 600)
    budget.hold(30)  # Slack answered 429 all the same

    assert 29 < budget.take() <= 30
    budget.hold(5)
    assert 29 < budget.take() <= 30, "a shorter hold shortens nothing"


def test_budgets_of_other_namespaces_and_methods_are_apart(redis: Redis) -> None:
    assert _budget(redis, 1).take() == 0
    assert _budget(redis, 1, namespace="other").take() == 0
    replies = RateBudget(redis, KeySpace("ho"), "conversations.replies", calls_per_minute=1)
    assert replies.take() == 0


def test_the_budget_key_expires_with_its_interval(redis: Redis) -> None:
    budget = _budget(redis, 60)  # one call a second
    budget.take()

    ttl = redis.pttl(KeySpace("ho").budget(METHOD))

    assert 0 < ttl <= 3000, "gone a second after the last call's interval and the next's"


@pytest.mark.parametrize("per_minute", [0, -1])
def test_a_budget_must_allow_some_calls(redis: Redis, per_minute: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        _budget(redis, per_minute)


def test_callers_that_must_wait_are_served_in_turn(redis: Redis) -> None:
    """Calls kept for waiting holders: each comes back at its own time and gets it; a
    caller that did not wait its turn is not served before them."""
    budget = _budget(redis, 600)  # one call every 100 ms
    assert budget.take("first") == 0
    second = budget.take("second")
    third = budget.take("third")

    assert 0 < second <= 0.1 and 0.1 < third <= 0.2, "each gets its own later call"
    assert budget.take("second") > 0, "not before its time"
    time.sleep(second + 0.01)
    assert budget.take("late-comer") > 0, "the free call is kept for the second"
    assert budget.take("second") == 0
    time.sleep(max(0.0, third - second) + 0.01)
    assert budget.take("third") == 0


def test_a_hold_keeps_the_calls_kept_for_holders_in_their_order(redis: Redis) -> None:
    """Slack's long Retry-After pushes every call back; those who waited longest are still
    served first, each at its own time."""
    budget = _budget(redis, 1200)  # one call every 50 ms
    budget.take("first")
    waits = {holder: budget.take(holder) for holder in ("a", "b", "c")}
    assert waits["a"] < waits["b"] < waits["c"]

    budget.hold(0.3)
    after = {holder: budget.take(holder) for holder in ("a", "b", "c")}

    assert 0.25 < after["a"] < after["b"] < after["c"] <= 0.45
    assert budget.take("late-comer") > after["c"], "served after those who waited"
