"""Lifecycle benchmark: create, decide and resume N handoffs through real workers.

Not a test: it measures and prints figures. It runs two phases, each in a fresh random
namespace (and RQ queue) of its own, and deletes only those keys at the end; it never
flushes the database, so it is safe to point at a Redis that holds other data.

1. ``create`` + ``decide`` alone, no workers running: ``--concurrency`` threads create and
   approve N handoffs. Alternating with it, a baseline of raw redis-py round trips (one
   SET and one GET of a value the size of a stored request, per handoff, from the same
   number of threads). The ratio of the two rates says how close a create or a decide
   comes to costing one round trip; the target is >= 0.5. Then the same at
   ``--other-concurrencies`` threads (default 1, 2, 4), for information: the client's
   threads share one GIL, so the ratio moves with their number (few threads leave the
   raw baseline's I/O waits to overlap, while create+decide is bound by its own Python).
   In each round too, next to them: create+decide of approvals that need two people
   (``approvals_required=2``: a create and two votes by distinct approvers, the second
   deciding), whose rate over the one-person rate is the cost of a quorum; the target is
   >= 0.5: one handoff needing two approvals costs no more than two needing one.
2. The full lifecycle: ``--workers`` ``handoff worker`` processes (an RQ worker plus a
   dispatcher each) deliver and resume N handoffs created and approved as above. Timed
   from the first create until every delivery and resume has finished, with the
   click-to-resume latency under that load and, afterwards, on idle workers.

Run from the repository root::

    .venv/bin/python -m bench.lifecycle                                  # embedded server
    .venv/bin/python -m bench.lifecycle --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import math
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from redis import Redis
from rq.registry import FailedJobRegistry, FinishedJobRegistry

from bench import common
from bench.common import Figure, RedisServer, Target
from bench.processes import Processes, subprocess_env, wait_for_workers
from bench.targets import METADATA_KEY, RESUME_TARGET, count_key, ids_key, latency_key
from store.keys import KeySpace
from store.models import Handoff, TaskState
from worker.client import Handoffs
from worker.queues import TaskQueues

RATIO_TARGET = 0.5
"""create+decide throughput over raw SET+GET throughput that the design aims for."""
QUORUM = 2
"""Approvals the quorum round's handoffs need."""
QUORUM_RATIO_TARGET = 0.5
"""create+decide throughput with ``QUORUM`` approvals over that with one: a handoff needing
two approvals costs no more than two needing one. It is one create and two approvals
against two creates and two approvals, each approval a read and a DECIDE either way, so
anything below 0.5x means a vote costs more than a plain decision."""

TASK_WAIT_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0
POLL_SECONDS = 0.05
PROGRESS_EVERY_SECONDS = 5.0


@dataclass(frozen=True)
class Options:
    """The sizes of a run (defaults: the issue's)."""

    count: int = 5000
    """Handoffs per phase."""
    concurrency: int = 8
    """Client threads creating and deciding."""
    other_concurrencies: tuple[int, ...] = (1, 2, 4)
    """Client-thread counts also measured (as many rounds), for information: the ratio
    depends on how many threads share the client's GIL."""
    workers: int = 2
    """``handoff worker`` processes of phase 2."""
    rounds: int = 2
    """Alternating rounds (raw baseline, create+decide) of phase 1."""
    warmup: int = 200
    """Untimed raw round trips and create+decide calls before phase 1's rounds."""
    latency_samples: int = 20
    """Handoffs decided one at a time at the end of phase 2."""
    timeout: float = 600.0
    """Seconds to wait for the deliveries and resumes."""
    phase: Literal["both", "1", "2"] = "both"
    profile: int = 0
    """Also profile this many create+decide calls in one thread (0: no profile)."""


QUICK = Options(
    count=10,
    concurrency=2,
    other_concurrencies=(1,),
    workers=1,
    rounds=1,
    warmup=10,
    latency_samples=2,
)
"""A smoke run: seconds, not figures."""


# -- running work from threads ----------------------------------------------------------


def run_threads(work: Callable[[int], None], count: int, concurrency: int) -> float:
    """Call ``work(i)`` for every ``i < count`` from ``concurrency`` threads; return seconds.

    Each thread loops over its own share of indexes (no executor queue in the measured
    path), and all start together at a barrier, so the figure is the work's own cost.
    """
    barrier = threading.Barrier(concurrency + 1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop(first: int) -> None:
        barrier.wait()
        try:
            for i in range(first, count, concurrency):
                if stop.is_set():
                    return
                work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(concurrency)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    try:
        for thread in threads:
            thread.join()
    finally:
        # On Ctrl-C, stop the threads before the caller deletes keys they would still write.
        stop.set()
        for thread in threads:
            thread.join(timeout=STOP_TIMEOUT_SECONDS)
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


# -- the handoffs the benchmark creates -------------------------------------------------


def reviewers(approvals_required: int) -> list[str]:
    """The reviewers of an approval needing ``approvals_required`` people: that many."""
    return ["U0BENCH", *(f"U0BENCH{n}" for n in range(2, approvals_required + 1))]


def create_handoff(
    handoffs: Handoffs, i: int, bench_key: str, *, approvals_required: int = 1
) -> Handoff:
    """Create a realistic approval: a channel, its reviewers (as many as it needs
    approvals), a resume target and context."""
    return handoffs.request_approval(
        run_id=f"bench-run-{i}",
        thread_id=f"bench-thread-{i}",
        action="issue_refund",
        args={"order_id": f"A-{i:06d}", "amount_usd": 30, "reason": "charged twice"},
        description="Refund one of two identical charges",
        context="The customer was charged twice for the same order; refund one charge.",
        channel="C0BENCHAPPROVALS",
        reviewers=reviewers(approvals_required),
        approvals_required=approvals_required,
        resume=RESUME_TARGET,
        agent_name="bench-agent",
        metadata={METADATA_KEY: bench_key},
    )


def approve(handoffs: Handoffs, handoff_id: str, *, approvals_required: int = 1) -> None:
    """Approve as reviewers clicking the button would: each of the ``approvals_required``
    reviewers in turn, the last one deciding."""
    for reviewer in reviewers(approvals_required):
        handoffs.decide(handoff_id, "approved", by=reviewer, via="bench")


# -- phase 1: create+decide against raw round trips ------------------------------------


@dataclass(frozen=True)
class ServerSnapshot:
    """The server's CPU seconds and per-command statistics (INFO cpu, commandstats)."""

    cpu_seconds: float
    commands: dict[str, Any]

    @classmethod
    def take(cls, redis: Redis) -> ServerSnapshot:
        """Read both now."""
        cpu = redis.info("cpu")
        return cls(cpu["used_cpu_user"] + cpu["used_cpu_sys"], redis.info("commandstats"))

    def usec_per_call(self, earlier: ServerSnapshot) -> dict[str, float]:
        """Server time per call of each command called since ``earlier``."""
        times = {}
        for name, stats in self.commands.items():
            calls = stats["calls"] - earlier.commands.get(name, {}).get("calls", 0)
            usec = stats["usec"] - earlier.commands.get(name, {}).get("usec", 0)
            if calls > 0:
                times[name.removeprefix("cmdstat_")] = usec / calls
        return times


@dataclass
class Measurement:
    """One kind of work, measured over several rounds.

    ``rate`` is the best round's items/s. The CPU figures are the least per item over the
    rounds: CPU time is what the work costs, while wall time also counts waiting for
    other processes, which swings widely on a busy two-core machine. Server figures
    include the server's network I/O, and any other client of a shared server.
    """

    rate: float = 0.0
    client_cpu_us: float = math.inf
    server_cpu_us: float = math.inf
    server_usec_per_call: dict[str, float] = field(default_factory=dict)

    def run_round(
        self, redis: Redis, work: Callable[[int], None], count: int, concurrency: int
    ) -> float:
        """Time one round of ``work`` over ``count`` items; keep its figures; return items/s."""
        before, cpu_before = ServerSnapshot.take(redis), time.process_time()
        rate = count / run_threads(work, count, concurrency)
        cpu_after, after = time.process_time(), ServerSnapshot.take(redis)
        self.client_cpu_us = min(self.client_cpu_us, (cpu_after - cpu_before) / count * 1e6)
        server_cpu_us = (after.cpu_seconds - before.cpu_seconds) / count * 1e6
        self.server_cpu_us = min(self.server_cpu_us, server_cpu_us)
        if rate > self.rate:
            self.rate, self.server_usec_per_call = rate, after.usec_per_call(before)
        return rate

    def describe_calls(self, *names: str) -> str:
        """``evalsha 41 µs`` for each named command that was called."""
        calls = self.server_usec_per_call
        return ", ".join(f"{n} {calls[n]:.0f} µs" for n in names if n in calls) or "-"


def create_decide_work(
    redis: Redis, namespace: str, *, approvals_required: int = 1
) -> Callable[[int], None]:
    """Work item ``i``: create handoff ``i``, needing ``approvals_required`` approvals, and
    approve it (a vote per approver)."""
    handoffs = Handoffs(redis, namespace=namespace)
    key = common.bench_key(namespace, "phase1")

    def create_and_decide(i: int) -> None:
        handoff = create_handoff(handoffs, i, key, approvals_required=approvals_required)
        approve(handoffs, handoff.id, approvals_required=approvals_required)

    return create_and_decide


def raw_work(redis: Redis, namespace: str, value: bytes) -> Callable[[int], None]:
    """Work item ``i``: one SET and one GET of ``value``, plain redis-py."""
    prefix = f"{KeySpace(namespace).prefix}raw:"

    def set_and_get(i: int) -> None:
        redis.set(f"{prefix}{i}", value)
        redis.get(f"{prefix}{i}")

    return set_and_get


def request_size(redis: Redis, namespace: str, *, approvals_required: int = 1) -> int:
    """Bytes of one stored request JSON (the size the raw baseline's values get, for one
    approval needed)."""
    handoffs = Handoffs(redis, namespace=namespace)
    key = common.bench_key(namespace, "size")
    handoff = create_handoff(handoffs, 0, key, approvals_required=approvals_required)
    (request,) = handoffs.store.stored_fields(handoff.id, "request")
    return len(request or b"")


@dataclass
class PhaseOne:
    """Figures of the create+decide phase."""

    value_bytes: int
    quorum_value_bytes: int
    """Bytes of one stored request needing ``QUORUM`` approvals (its reviewers, its quorum)."""
    handoffs: Measurement
    raw: Measurement
    quorum: Measurement = field(default_factory=Measurement)
    """create+decide of approvals needing ``QUORUM`` people, alternating with the others."""
    other_concurrencies: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Client threads -> (raw pairs/s, handoffs/s), each the best round at that concurrency."""

    @property
    def ratio(self) -> float:
        """create+decide handoffs/s over raw SET+GET pairs/s."""
        return self.handoffs.rate / self.raw.rate

    @property
    def quorum_ratio(self) -> float:
        """create+decide handoffs/s needing ``QUORUM`` approvals over those needing one."""
        return self.quorum.rate / self.handoffs.rate


def run_phase_one(redis: Redis, tag: str, options: Options) -> PhaseOne:
    """Alternate the raw baseline, create+decide and create+decide needing ``QUORUM``
    approvals ``options.rounds`` times; keep the best of each.

    Each round of handoffs gets a fresh namespace, deleted right after, so later rounds
    do not run against a growing audit stream and indexes.
    """
    warmup = f"{tag}warm"
    try:
        value_bytes = request_size(redis, warmup)
        quorum_bytes = request_size(redis, warmup, approvals_required=QUORUM)
        value = b"x" * value_bytes
        # Load the Lua scripts and fill the connection pool before anything is timed.
        run_threads(raw_work(redis, warmup, value), options.warmup, options.concurrency)
        run_threads(create_decide_work(redis, warmup), options.warmup, options.concurrency)
        work = create_decide_work(redis, warmup, approvals_required=QUORUM)
        run_threads(work, options.warmup, options.concurrency)
    finally:
        common.delete_namespace(redis, warmup)
    result = PhaseOne(value_bytes, quorum_bytes, Measurement(), Measurement())
    for number in range(1, options.rounds + 1):
        namespace = f"{tag}p1r{number}"
        try:
            work = raw_work(redis, namespace, value)
            rate = result.raw.run_round(redis, work, options.count, options.concurrency)
            common.progress(f"round {number}: raw SET+GET {rate:,.0f}/s")
            work = create_decide_work(redis, namespace)
            rate = result.handoffs.run_round(redis, work, options.count, options.concurrency)
            common.progress(f"round {number}: create+decide {rate:,.0f}/s")
        finally:
            common.delete_namespace(redis, namespace)
        namespace = f"{tag}p1q{number}"
        try:
            work = create_decide_work(redis, namespace, approvals_required=QUORUM)
            rate = result.quorum.run_round(redis, work, options.count, options.concurrency)
            common.progress(f"round {number}: create+decide, quorum {QUORUM}: {rate:,.0f}/s")
        finally:
            common.delete_namespace(redis, namespace)
    for threads in options.other_concurrencies:
        raw, made = Measurement(), Measurement()
        for number in range(1, options.rounds + 1):
            namespace = f"{tag}p1c{threads}r{number}"
            try:
                raw.run_round(redis, raw_work(redis, namespace, value), options.count, threads)
                work = create_decide_work(redis, namespace)
                made.run_round(redis, work, options.count, threads)
            finally:
                common.delete_namespace(redis, namespace)
        common.progress(
            f"{threads} threads: raw {raw.rate:,.0f}/s, create+decide {made.rate:,.0f}/s"
        )
        result.other_concurrencies[threads] = (raw.rate, made.rate)
    return result


def profile_create_decide(redis: Redis, namespace: str, count: int) -> None:
    """Print where one thread's time goes while creating and approving ``count`` handoffs."""
    handoffs = Handoffs(redis, namespace=namespace)
    key = common.bench_key(namespace, "profile")
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for i in range(count):
            approve(handoffs, create_handoff(handoffs, i, key).id)
        profiler.disable()
    finally:
        common.delete_namespace(redis, namespace)
    print(f"\nprofile of {count} create+decide calls in one thread (top 25 by own time):")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)


# -- phase 2: the full lifecycle through real workers -----------------------------------


def start_workers(
    processes: Processes, redis: Redis, options: Options, *, redis_url: str, namespace: str
) -> None:
    """Start ``options.workers`` ``handoff worker`` processes on ``namespace`` (whose name
    is also the RQ queue's) and wait until each has registered with RQ."""
    env = subprocess_env(
        redis_url,
        HANDOFF_NAMESPACE=namespace,
        HANDOFF_QUEUE=namespace,
        HANDOFF_SWEEP_INTERVAL_SECONDS="0.2",
    )
    # Worker names carry the queue's, so the cleanup finds their RQ keys.
    names = [f"{namespace}-w{number}" for number in range(options.workers)]
    processes.spawn_workers(names, env)
    wait_for_workers(redis, processes, names)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until true; raise ``TimeoutError`` naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(POLL_SECONDS / 5)


def idle_latencies(handoffs: Handoffs, key: str, samples: int) -> list[float]:
    """Click-to-resume latency (ms) of ``samples`` handoffs decided one at a time.

    Each is decided only after its delivery finished, as when a person clicks a posted
    message, so the figure is the path decision -> dispatcher -> RQ -> resume target.
    """
    latencies = []
    for i in range(samples):
        handoff = create_handoff(handoffs, i, key)
        wait_until(
            functools.partial(_delivered, handoffs, handoff.id),
            TASK_WAIT_TIMEOUT_SECONDS,
            f"delivery of {handoff.id}",
        )
        approve(handoffs, handoff.id)
        latencies.append(_next_latency(handoffs.redis, key, handoff.id))
    return latencies


def _next_latency(redis: Redis, key: str, handoff_id: str) -> float:
    # Short BLPOPs: one longer than the client's socket timeout would fail as a timeout.
    deadline = time.monotonic() + TASK_WAIT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        item = redis.blpop([latency_key(key)], timeout=1)
        if item is not None:
            return float(item[1])
    raise TimeoutError(f"resume of {handoff_id} did not run within the timeout")


def _delivered(handoffs: Handoffs, handoff_id: str) -> bool:
    return handoffs.get(handoff_id).delivery.state is TaskState.COMPLETED


@dataclass
class PhaseTwo:
    """Figures and checks of the full-lifecycle phase."""

    create_seconds: float = 0.0
    decide_seconds: float = 0.0
    total_seconds: float = 0.0
    finished: bool = False
    resumes_run: int = 0
    distinct_resumed: int = 0
    deliveries_completed: int = 0
    resumes_completed: int = 0
    rq_jobs_finished: int = 0
    rq_jobs_failed: int = 0
    loaded_latencies: list[float] = field(default_factory=list)
    idle_latencies: list[float] = field(default_factory=list)
    idle_resumes_run: int = 0
    problems: list[str] = field(default_factory=list)


def run_phase_two(redis: Redis, redis_url: str, tag: str, options: Options) -> PhaseTwo:
    """Create, approve and resume ``options.count`` handoffs through real workers."""
    namespace = queue = f"{tag}life"
    handoffs = Handoffs(redis, namespace=namespace)
    keys = handoffs.store.keys
    bulk, idle, warm = (common.bench_key(namespace, label) for label in ("bulk", "idle", "warm"))
    result = PhaseTwo()
    processes = Processes("handoff-bench-")
    try:
        start_workers(processes, redis, options, redis_url=redis_url, namespace=namespace)
        # One handoff all the way through: the dispatcher and the target's import are
        # ready before the clock starts.
        idle_latencies(handoffs, warm, 1)
        common.progress(f"{options.workers} workers ready; logs in {processes.log_dir}")

        ids = [""] * options.count

        def create(i: int) -> None:
            ids[i] = create_handoff(handoffs, i, bulk).id

        started = time.perf_counter()
        result.create_seconds = run_threads(create, options.count, options.concurrency)
        result.decide_seconds = run_threads(
            lambda i: approve(handoffs, ids[i]), options.count, options.concurrency
        )
        result.finished = wait_for_lifecycle(redis, keys.outbox, count_key(bulk), options)
        result.total_seconds = time.perf_counter() - started
        if result.finished:
            measure_idle_latency(result, handoffs, queue, idle, options)
        # Checked with the workers stopped: a late duplicate resume would show by now.
        processes.stop_all()
        check_phase_two(result, handoffs, ids, queue, bulk, idle, options)
        processes.keep_logs = bool(result.problems)
    finally:
        processes.finish()
    return result


def measure_idle_latency(
    result: PhaseTwo, handoffs: Handoffs, queue: str, key: str, options: Options
) -> None:
    """Sample click-to-resume latency once the workers have nothing left to do.

    A backlog longer than the dispatch timeout makes the dispatcher enqueue tasks again;
    those duplicate jobs (which the store then skips) may still be queued in RQ after
    the last resume, so wait for RQ's queue to drain first.
    """
    queues = TaskQueues.named(handoffs.redis, queue).distinct
    try:
        wait_until(
            lambda: sum(q.count for q in queues) == 0, options.timeout, "draining the RQ queues"
        )
        result.idle_latencies = idle_latencies(handoffs, key, options.latency_samples)
    except TimeoutError as exc:
        result.problems.append(f"idle latency samples: {exc}")


def wait_for_lifecycle(redis: Redis, outbox: str, counter: str, options: Options) -> bool:
    """Wait until all resumes ran and the outbox is empty (every delivery and resume
    finished); False on timeout."""
    deadline = time.monotonic() + options.timeout
    next_report = time.monotonic() + PROGRESS_EVERY_SECONDS
    while time.monotonic() < deadline:
        with redis.pipeline(transaction=False) as pipe:
            pipe.get(counter)
            pipe.zcard(outbox)
            resumed, outstanding = pipe.execute()
        resumed = int(resumed or 0)
        if resumed >= options.count and outstanding == 0:
            return True
        if time.monotonic() >= next_report:
            common.progress(
                f"resumed {resumed:,}/{options.count:,}, {outstanding:,} tasks outstanding"
            )
            next_report += PROGRESS_EVERY_SECONDS
        time.sleep(POLL_SECONDS)
    return False


def check_phase_two(
    result: PhaseTwo,
    handoffs: Handoffs,
    ids: list[str],
    queue: str,
    bulk: str,
    idle: str,
    options: Options,
) -> None:
    """Fill in the counts and note every way the run broke "each resume runs exactly once"."""
    redis = handoffs.redis
    result.resumes_run = int(redis.get(count_key(bulk)) or 0)
    result.distinct_resumed = int(redis.scard(ids_key(bulk)))
    result.idle_resumes_run = int(redis.get(count_key(idle)) or 0)
    result.loaded_latencies = [float(v) for v in redis.lrange(latency_key(bulk), 0, -1)]
    created = [i for i in ids if i]
    for first in range(0, len(created), 500):
        for handoff in handoffs.store.get_many(created[first : first + 500]):
            result.deliveries_completed += handoff.delivery.state is TaskState.COMPLETED
            result.resumes_completed += handoff.resume.state is TaskState.COMPLETED
    queues = TaskQueues.named(redis, queue).distinct
    result.rq_jobs_finished = sum(FinishedJobRegistry(queue=q).count for q in queues)
    result.rq_jobs_failed = sum(FailedJobRegistry(queue=q).count for q in queues)

    n = options.count
    if not result.finished:
        result.problems.append(
            f"not every handoff was delivered and resumed in {options.timeout} s"
        )
    if result.resumes_run > result.distinct_resumed:
        duplicates = result.resumes_run - result.distinct_resumed
        result.problems.append(f"{duplicates} resume(s) ran more than once")
    if result.distinct_resumed != n:
        result.problems.append(f"{result.distinct_resumed} of {n} handoffs were resumed")
    if result.resumes_completed != n or result.deliveries_completed != n:
        result.problems.append(
            f"the store shows {result.deliveries_completed} deliveries and "
            f"{result.resumes_completed} resumes completed, of {n}"
        )
    if result.idle_resumes_run != len(result.idle_latencies):
        result.problems.append(
            f"idle samples: {result.idle_resumes_run} resumes for "
            f"{len(result.idle_latencies)} decisions"
        )


# -- reporting --------------------------------------------------------------------------


def describe_latency(values: list[float]) -> str:
    """``p50 12 ms, p99 40 ms, max 55 ms (n=5000)``."""
    if not values:
        return "-"
    p50, p99, top = common.percentile(values, 0.5), common.percentile(values, 0.99), max(values)
    return f"p50 {_ms(p50)}, p99 {_ms(p99)}, max {_ms(top)} (n={len(values)})"


def _timed(count: int, seconds: float) -> str:
    return f"{count:,} in {seconds:6.2f} s  ({count / seconds:,.0f}/s)"


def _threads(count: int) -> str:
    return f"{count} client thread" if count == 1 else f"{count} client threads"


def _ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


@dataclass
class LifecycleReport:
    """What one run measured: phase 1 and/or phase 2 (``Options.phase``)."""

    server: str
    options: Options
    one: PhaseOne | None
    two: PhaseTwo | None

    @property
    def problems(self) -> list[str]:
        """Broken "each resume runs exactly once" checks of phase 2."""
        return self.two.problems if self.two is not None else []

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table."""
        figures = []
        if self.one is not None:
            figures += [
                Figure(
                    "create+decide / raw SET+GET round trips",
                    self.one.ratio,
                    "x",
                    Target(">=", RATIO_TARGET),
                ),
                Figure("create+decide, no workers", self.one.handoffs.rate, "/s"),
                Figure(f"create+decide, quorum {QUORUM}, no workers", self.one.quorum.rate, "/s"),
                Figure(
                    f"create+decide, quorum {QUORUM} / quorum 1",
                    self.one.quorum_ratio,
                    "x",
                    Target(">=", QUORUM_RATIO_TARGET),
                ),
            ]
            figures += [
                Figure(f"create+decide / raw SET+GET, {_threads(threads)}", made / raw, "x")
                for threads, (raw, made) in self.one.other_concurrencies.items()
            ]
        if self.two is not None:
            two, workers = self.two, self.options.workers
            rate = self.options.count / two.total_seconds if two.finished else math.nan
            figures += [
                Figure(f"create -> delivered + resumed, {workers} workers", rate, "/s"),
                *common.latency_figures(
                    "decided -> resume started, idle workers", two.idle_latencies
                ),
            ]
        return figures

    def print_report(self) -> None:
        """The figures, as a short table."""
        print_report(self.server, self.options, self.one, self.two)


def print_report(server: str, options: Options, one: PhaseOne | None, two: PhaseTwo | None) -> None:
    """The figures, as a short table."""
    n = options.count
    print(f"\nslack-handoff lifecycle benchmark — {server}")
    print(f"  {n:,} handoffs, {options.concurrency} client threads, {options.workers} workers")
    # Other processes on the machine skew wall-clock rates; say how busy it was.
    print(
        f"  {os.cpu_count()} CPUs; load average (1, 5, 15 min) at the end: {common.load_average()}"
    )
    if one is not None:
        met = "met" if one.ratio >= RATIO_TARGET else "NOT met"
        quorum_met = "met" if one.quorum_ratio >= QUORUM_RATIO_TARGET else "NOT met"
        raw, made, quorum = one.raw, one.handoffs, one.quorum
        print(f"\ncreate+decide alone, no workers ({options.rounds} alternating rounds)")
        rows = [
            ("", "raw SET+GET", "create+decide", f"quorum {QUORUM}"),
            (
                "value / request size",
                f"{one.value_bytes} B",
                f"{one.value_bytes} B",
                f"{one.quorum_value_bytes} B",
            ),
            (
                "throughput, best round",
                f"{raw.rate:,.0f} pairs/s",
                f"{made.rate:,.0f} handoffs/s",
                f"{quorum.rate:,.0f} handoffs/s",
            ),
            ("client CPU per item", *(f"{m.client_cpu_us:,.0f} µs" for m in (raw, made, quorum))),
            ("server CPU per item", *(f"{m.server_cpu_us:,.0f} µs" for m in (raw, made, quorum))),
            (
                "server time per call",
                raw.describe_calls("set", "get"),
                made.describe_calls("evalsha"),
                quorum.describe_calls("evalsha"),
            ),
        ]
        for label, baseline, measured, needing_two in rows:
            print(f"  {label:<24}{baseline:>22}{measured:>22}{needing_two:>22}")
        print(
            f"  create+decide / raw SET+GET ratio: {one.ratio:.2f} (target >= {RATIO_TARGET}) {met}"
        )
        print(
            f"  create+decide, quorum {QUORUM} / quorum 1 ratio: {one.quorum_ratio:.2f} "
            f"(target >= {QUORUM_RATIO_TARGET}) {quorum_met}"
        )
        for threads, (raw_rate, made_rate) in one.other_concurrencies.items():
            print(
                f"  at {_threads(threads)}: raw {raw_rate:,.0f} pairs/s, "
                f"create+decide {made_rate:,.0f}/s, ratio {made_rate / raw_rate:.2f}"
            )
    if two is not None:
        print(f"\nfull lifecycle through {options.workers} `handoff worker` processes")
        print(f"  create        {_timed(n, two.create_seconds)}")
        print(f"  decide        {_timed(n, two.decide_seconds)}")
        if two.finished:
            print(
                f"  create -> delivered + resumed, all: {two.total_seconds:.2f} s "
                f"= {n / two.total_seconds:,.1f} handoffs/s"
            )
        print(f"  deliveries completed   {two.deliveries_completed:,} / {n:,}")
        print(
            f"  resumes completed      {two.resumes_completed:,} / {n:,} "
            f"(target ran {two.resumes_run:,} times for {two.distinct_resumed:,} handoffs)"
        )
        print(f"  RQ jobs finished       {two.rq_jobs_finished:,} ({two.rq_jobs_failed} failed)")
        print(f"  click->resume, all decided at once: {describe_latency(two.loaded_latencies)}")
        print(f"  click->resume, idle workers:        {describe_latency(two.idle_latencies)}")
        for problem in two.problems:
            print(f"FAIL: {problem}")
        if not two.problems:
            print("OK: every handoff delivered, and its resume ran exactly once")


# -- entry point -------------------------------------------------------------------------


def run(server: RedisServer, options: Options) -> LifecycleReport:
    """Run the phases ``options`` asks for on ``server``; delete the run's keys after."""
    tag = common.new_namespace("bench")
    redis = server.client()
    try:
        one = run_phase_one(redis, tag, options) if options.phase in ("both", "1") else None
        if options.profile:
            profile_create_decide(redis, f"{tag}prof", options.profile)
        two = None
        if options.phase in ("both", "2"):
            two = run_phase_two(redis, server.url, tag, options)
        return LifecycleReport(server.description, options, one, two)
    finally:
        _delete_run_keys(redis, tag)
        redis.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = common.argument_parser(
        "bench.lifecycle",
        "Create, decide and resume handoffs through real workers; print rates.",
    )
    defaults = Options()
    common.add_options(
        parser, defaults, {"count": "handoffs per phase", "concurrency": "client threads"}
    )
    parser.add_argument(
        "--other-concurrencies",
        type=_thread_counts,
        default=defaults.other_concurrencies,
        metavar="N,N,...",
        help="client-thread counts also measured, for information ('' for none)",
    )
    common.add_options(parser, defaults, {"workers": "`handoff worker` processes"})
    common.add_redis_option(parser)
    sizes = {
        "rounds": "alternating rounds of phase 1",
        "warmup": "untimed calls before phase 1",
        "latency_samples": "handoffs decided one by one at the end",
    }
    common.add_options(parser, defaults, sizes)
    common.add_options(parser, defaults, {"timeout": "seconds to wait for resumes"}, kind=float)
    parser.add_argument(
        "--phase", choices=["both", "1", "2"], default=defaults.phase, help="which phases to run"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="also profile N create+decide calls"
    )
    args = parser.parse_args(argv)
    if min(args.count, args.concurrency, args.workers, args.rounds) < 1:
        parser.error("--count, --concurrency, --workers and --rounds must be at least 1")
    return args


def _thread_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of thread counts: {text!r}") from None
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError("thread counts must be at least 1")
    return counts


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every resume ran exactly once, 1 otherwise (130 when
    interrupted, after stopping the workers and deleting the run's keys)."""
    return common.measure_and_print(parse_args(argv), Options, run, interruptible=True)


def _delete_run_keys(redis: Redis, tag: str) -> None:
    for namespace in (f"{tag}warm", f"{tag}prof", f"{tag}life"):
        common.delete_namespace(redis, namespace)
    # Round namespaces are deleted as each round ends; this catches an interrupted one.
    common.unlink_matching(redis, "{" + tag + "p1*")
    common.delete_queue(redis, f"{tag}life")


if __name__ == "__main__":
    sys.exit(main())
