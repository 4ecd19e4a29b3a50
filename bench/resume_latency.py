"""Resume latency benchmark: from a click to the agent running again, push against polling.

Not a test: it measures and prints figures. The figure users care about is how long an
agent stays stopped after a person decided. Two agents wait for each of ``--decisions``
handoffs, in the same run:

- **push**: blocked in ``Handoffs.wait()``, which subscribes to the handoff's pub/sub
  channel and returns when the decision is published (what slack-handoff does);
- **polling**: calling ``Handoffs.get()`` every ``--poll-interval`` seconds (3 s, the kind
  of loop hosted human-in-the-loop services have agents run), each agent starting at a
  random moment, so a click falls anywhere in its polling period.

The clicks come at random moments spread over ``--window`` seconds, one per handoff;
each is the decision's Redis write (``HandoffStore.decide``, the Lua script the click's
listener in ``handoff serve`` runs). The latency of an agent is from the moment its click
started to the moment its wait or poll returned the decision, both read on this machine's
clock. ``handoff serve``'s own time to answer a click (``bench.clicks``) comes on top of
both equally, and so does nothing else: the agents run in this process, as threads.

Resuming a run that stopped (an RQ worker calls the resume target) is the third way an
agent runs again; ``bench.clicks`` measures that one (click -> resume started).

Everything goes into a fresh random namespace, deleted at the end. Run from the
repository root::

    .venv/bin/python -m bench.resume_latency                                  # embedded server
    .venv/bin/python -m bench.resume_latency --redis-url redis://127.0.0.1:6379/10
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from dataclasses import dataclass, field

from redis import Redis

from bench import common
from bench.common import Figure, RedisServer
from worker.client import Handoffs

REVIEWER = "U0BENCHREVIEWER"
SUBSCRIBE_TIMEOUT_SECONDS = 30.0
"""How long the push agents may take to subscribe before the clicks start."""
CLICKS_AFTER_SECONDS = 0.2
"""The first click may come this long after the agents were started."""


@dataclass(frozen=True)
class Options:
    """The sizes of a run (defaults: the issue's)."""

    decisions: int = 50
    """Handoffs, each decided once and waited for by one push and one polling agent."""
    window: float = 30.0
    """Seconds over which the clicks are spread (uniformly at random)."""
    poll_interval: float = 3.0
    """Seconds between two ``get()`` calls of a polling agent."""
    seed: int | None = None
    """Seed of the click times and polling phases (default: a fresh one each run)."""


QUICK = Options(decisions=4, window=0.3, poll_interval=0.5)
"""A smoke run: seconds, not figures."""


@dataclass
class Agents:
    """When each agent ran again, by handoff id (wall clock, ``time.time()``)."""

    pushed: dict[str, float] = field(default_factory=dict)
    polled: dict[str, float] = field(default_factory=dict)
    polls: int = 0
    """``get()`` calls the polling agents made in all."""
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def push_agent(handoffs: Handoffs, handoff_id: str, agents: Agents, timeout: float) -> None:
    """Wait the slack-handoff way, then note the time the agent got its decision."""
    try:
        handoffs.wait(handoff_id, timeout=timeout)
    except Exception as exc:  # reported, not raised: a thread's exception would be lost
        with agents.lock:
            agents.errors.append(f"push agent of {handoff_id}: {exc!r}")
        return
    ran_again = time.time()
    with agents.lock:
        agents.pushed[handoff_id] = ran_again


def polling_agent(
    handoffs: Handoffs,
    handoff_id: str,
    agents: Agents,
    *,
    first_poll: float,
    interval: float,
    deadline: float,
) -> None:
    """Poll ``get()`` every ``interval`` seconds from ``first_poll`` (``time.monotonic()``)
    until the handoff is decided, then note the time."""
    next_poll = first_poll
    while next_poll < deadline:
        time.sleep(max(0.0, next_poll - time.monotonic()))
        handoff = handoffs.get(handoff_id)
        with agents.lock:
            agents.polls += 1
        if not handoff.is_pending:
            ran_again = time.time()
            with agents.lock:
                agents.polled[handoff_id] = ran_again
            return
        next_poll += interval
    with agents.lock:
        agents.errors.append(f"polling agent of {handoff_id}: no decision seen")


def first_poll(moment: float, offset: float, options: Options, start: float) -> float:
    """When to poll first, for an agent that polls every ``options.poll_interval``
    seconds, its last poll before the click at ``moment`` falling ``offset`` seconds
    before it. Its polls before ``start`` are left out: they could only have seen
    "pending" (the one poll that falls before ``start`` anyway runs at once)."""
    poll = moment - offset
    while poll - options.poll_interval >= start:
        poll -= options.poll_interval
    return poll


def start_push_agents(
    handoffs: Handoffs, ids: list[str], agents: Agents, timeout: float
) -> list[threading.Thread]:
    """Start a push agent per handoff; return once every one of them listens."""
    threads = [
        threading.Thread(
            target=push_agent, args=(handoffs, handoff_id, agents, timeout), daemon=True
        )
        for handoff_id in ids
    ]
    for thread in threads:
        thread.start()
    wait_for_subscribers(handoffs.redis, [handoffs.store.keys.decided_channel(i) for i in ids])
    return threads


def start_polling_agents(
    handoffs: Handoffs,
    ids: list[str],
    agents: Agents,
    first_polls: list[float],
    options: Options,
    deadline: float,
) -> list[threading.Thread]:
    """Start a polling agent per handoff, polling first at ``first_polls[i]``."""
    threads = [
        threading.Thread(
            target=polling_agent,
            args=(handoffs, handoff_id, agents),
            kwargs={"first_poll": poll, "interval": options.poll_interval, "deadline": deadline},
            daemon=True,
        )
        for handoff_id, poll in zip(ids, first_polls, strict=True)
    ]
    for thread in threads:
        thread.start()
    return threads


def wait_for_subscribers(redis: Redis, channels: list[str]) -> None:
    """Block until every channel has a subscriber (each push agent is listening)."""
    deadline = time.monotonic() + SUBSCRIBE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        counts = redis.pubsub_numsub(*channels)
        if all(int(count) >= 1 for _, count in counts):
            return
        time.sleep(0.01)
    raise RuntimeError("the push agents did not subscribe in time")


def click_at_random_moments(
    handoffs: Handoffs, ids: list[str], moments: list[float]
) -> dict[str, float]:
    """Decide ``ids[i]`` at ``moments[i]`` (``time.monotonic()``), in time order; return
    when each click started (wall clock)."""
    clicked: dict[str, float] = {}
    for moment, handoff_id in sorted(zip(moments, ids, strict=True)):
        time.sleep(max(0.0, moment - time.monotonic()))
        clicked[handoff_id] = time.time()
        handoffs.decide(handoff_id, "approved", by=REVIEWER, via="bench")
    return clicked


# -- the report --------------------------------------------------------------------------


@dataclass
class ResumeLatencyReport:
    """Click -> agent running again, per handoff, both ways."""

    server: str
    options: Options
    seed: int
    push_ms: list[float]
    poll_ms: list[float]
    polls: int
    problems: list[str] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table (no targets: a comparison)."""
        interval = f"{self.options.poll_interval:g} s"
        return [
            *common.latency_figures("click -> agent running, push (Handoffs.wait)", self.push_ms),
            *common.latency_figures(
                f"click -> agent running, polling get() every {interval}", self.poll_ms
            ),
        ]

    def print_report(self) -> None:
        """p50, p90, p99 and max of both, and how many reads each way cost."""
        options = self.options
        print(f"\nslack-handoff resume latency — {self.server}")
        print(
            f"  {options.decisions} handoffs, one click each at a random moment within "
            f"{options.window:g} s (seed {self.seed}); load average {common.load_average()}"
        )
        print("  from the click to the agent running again (its wait or poll returned):")
        print(f"  {'':<38}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}")
        rows = (
            ("push: Handoffs.wait() (pub/sub)", self.push_ms),
            (f"polling: get() every {options.poll_interval:g} s", self.poll_ms),
        )
        for label, values in rows:
            shown = "".join(
                f"{_ms(common.percentile(values, q)):>10}" for q in (0.5, 0.9, 0.99, 1.0)
            )
            print(f"    {label:<36}{shown}")
        push_p50, poll_p50 = (
            common.percentile(self.push_ms, 0.5),
            common.percentile(self.poll_ms, 0.5),
        )
        if push_p50 > 0:
            print(f"  the median agent runs again {poll_p50 / push_p50:,.0f}x sooner with push")
        print(
            f"  reads: push {options.decisions} subscriptions and {2 * options.decisions} "
            f"get() (one before waiting, one after the message); polling {self.polls:,} get()"
        )
        for problem in self.problems:
            print(f"FAIL: {problem}")


def _ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


# -- entry point -------------------------------------------------------------------------


def run(server: RedisServer, options: Options) -> ResumeLatencyReport:
    """Create the handoffs, start both agents of each, click, collect; delete the keys."""
    seed = options.seed if options.seed is not None else random.randrange(2**32)
    chance = random.Random(seed)
    with common.namespaced_client(server, "benchresume") as (redis, namespace):
        handoffs = Handoffs(redis, namespace=namespace)
        ids = [
            handoffs.request_approval(
                run_id=f"bench-run-{i}",
                thread_id=f"bench-thread-{i}",
                action="issue_refund",
                args={"order_id": f"A-{i:06d}", "amount_usd": 30},
                context="The customer was charged twice; refund one charge.",
                reviewers=[REVIEWER],
            ).id
            for i in range(options.decisions)
        ]
        agents = Agents()
        # Long enough for every click, the last poll after it, and a loaded machine.
        timeout = options.window + 2 * options.poll_interval + SUBSCRIBE_TIMEOUT_SECONDS
        threads = start_push_agents(handoffs, ids, agents, timeout)
        start = time.monotonic()
        moments = [start + CLICKS_AFTER_SECONDS + chance.uniform(0, options.window) for _ in ids]
        offsets = [chance.uniform(0, options.poll_interval) for _ in ids]
        polls = [first_poll(m, o, options, start) for m, o in zip(moments, offsets, strict=True)]
        threads += start_polling_agents(handoffs, ids, agents, polls, options, start + timeout)
        common.progress(f"{len(ids)} push and {len(ids)} polling agents waiting; clicking")
        clicked = click_at_random_moments(handoffs, ids, moments)
        for thread in threads:
            thread.join(timeout=max(0.1, start + timeout - time.monotonic()))
        with agents.lock:
            push_ms = [(agents.pushed[i] - clicked[i]) * 1000 for i in ids if i in agents.pushed]
            poll_ms = [(agents.polled[i] - clicked[i]) * 1000 for i in ids if i in agents.polled]
            problems = list(agents.errors)
            reads = agents.polls
        if len(push_ms) != len(ids) or len(poll_ms) != len(ids):
            problems.append(
                f"{len(push_ms)} push and {len(poll_ms)} polling agents of {len(ids)} "
                "saw their decision"
            )
        return ResumeLatencyReport(
            server.description, options, seed, push_ms, poll_ms, reads, problems
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = common.argument_parser(
        "bench.resume_latency",
        "Click -> agent running again: Handoffs.wait() against polling get().",
    )
    defaults = Options()
    common.add_options(parser, defaults, {"decisions": "handoffs decided"})
    common.add_options(
        parser,
        defaults,
        {
            "window": "seconds the clicks spread over",
            "poll_interval": "seconds between a polling agent's get() calls",
        },
        kind=float,
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: fresh)")
    common.add_redis_option(parser)
    args = parser.parse_args(argv)
    if args.decisions < 1 or args.window <= 0 or args.poll_interval <= 0:
        parser.error("--decisions, --window and --poll-interval must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every agent saw its decision, 1 otherwise."""
    return common.measure_and_print(parse_args(argv), Options, run)


if __name__ == "__main__":
    sys.exit(main())
