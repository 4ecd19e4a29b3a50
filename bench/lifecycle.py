"""Lifecycle benchmark: create, decide and resume N handoffs through real workers.

Not a test: it measures and prints figures. It runs two phases, each in a fresh random
namespace (and RQ queue) of its own, and deletes only those keys at the end; it never
flushes the database, so it is safe to point at a Redis that holds other data.

1. ``create`` + ``decide`` alone, no workers running: ``--concurrency`` threads create and
   approve N handoffs. Alternating with it, a baseline of raw redis-py round trips (one
   SET and one GET of a value the size of a stored request, per handoff, from the same
   number of threads). The ratio of the two rates says how close a create or a decide
   comes to costing one round trip; the target is >= 0.5.
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
import contextlib
import cProfile
import functools
import math
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from redis import Redis
from rq import Worker
from rq.registry import FailedJobRegistry, FinishedJobRegistry

from bench.targets import METADATA_KEY, RESUME_TARGET, count_key, ids_key, latency_key
from bot.embedded import start_embedded_redis
from store.keys import KeySpace
from store.models import Handoff, TaskState
from worker.client import Handoffs
from worker.runner import make_queue

ROOT = Path(__file__).resolve().parent.parent
"""Repository root, put on the workers' PYTHONPATH so they can import ``bench.targets``."""

RATIO_TARGET = 0.5
"""create+decide throughput over raw SET+GET throughput that the design aims for."""

WORKER_START_TIMEOUT_SECONDS = 60.0
TASK_WAIT_TIMEOUT_SECONDS = 30.0
WORKER_STOP_TIMEOUT_SECONDS = 15.0
POLL_SECONDS = 0.05
PROGRESS_EVERY_SECONDS = 5.0
WARMUP_COUNT = 200
SCAN_BATCH = 1000


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
            thread.join(timeout=WORKER_STOP_TIMEOUT_SECONDS)
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


# -- the handoffs the benchmark creates -------------------------------------------------


def create_handoff(handoffs: Handoffs, i: int, bench_key: str) -> Handoff:
    """Create a realistic approval: a channel, a reviewer, a resume target and context."""
    return handoffs.request_approval(
        run_id=f"bench-run-{i}",
        thread_id=f"bench-thread-{i}",
        action="issue_refund",
        args={"order_id": f"A-{i:06d}", "amount_usd": 30, "reason": "charged twice"},
        description="Refund one of two identical charges",
        context="The customer was charged twice for the same order; refund one charge.",
        channel="#bench-approvals",
        reviewers=["U_BENCH"],
        resume=RESUME_TARGET,
        agent_name="bench-agent",
        metadata={METADATA_KEY: bench_key},
    )


def approve(handoffs: Handoffs, handoff_id: str) -> None:
    """Approve as a reviewer clicking the button would."""
    handoffs.decide(handoff_id, "approved", by="U_BENCH", via="bench")


def bench_key(namespace: str, label: str) -> str:
    """Base name of the keys the resume target records under; inside the namespace."""
    return f"{KeySpace(namespace).prefix}bench:{label}"


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


def create_decide_work(redis: Redis, namespace: str) -> Callable[[int], None]:
    """Work item ``i``: create handoff ``i`` and approve it."""
    handoffs = Handoffs(redis, namespace=namespace)
    key = bench_key(namespace, "phase1")

    def create_and_decide(i: int) -> None:
        approve(handoffs, create_handoff(handoffs, i, key).id)

    return create_and_decide


def raw_work(redis: Redis, namespace: str, value: bytes) -> Callable[[int], None]:
    """Work item ``i``: one SET and one GET of ``value``, plain redis-py."""
    prefix = f"{KeySpace(namespace).prefix}raw:"

    def set_and_get(i: int) -> None:
        redis.set(f"{prefix}{i}", value)
        redis.get(f"{prefix}{i}")

    return set_and_get


def request_size(redis: Redis, namespace: str) -> int:
    """Bytes of one stored request JSON, the size the raw baseline's values get."""
    handoffs = Handoffs(redis, namespace=namespace)
    handoff = create_handoff(handoffs, 0, bench_key(namespace, "size"))
    return int(redis.hstrlen(handoffs.store.keys.handoff(handoff.id), "request"))


@dataclass
class PhaseOne:
    """Figures of the create+decide phase."""

    value_bytes: int
    handoffs: Measurement
    raw: Measurement

    @property
    def ratio(self) -> float:
        """create+decide handoffs/s over raw SET+GET pairs/s."""
        return self.handoffs.rate / self.raw.rate


def run_phase_one(redis: Redis, tag: str, args: argparse.Namespace) -> PhaseOne:
    """Alternate the raw baseline and create+decide ``args.rounds`` times; keep the best.

    Each round of handoffs gets a fresh namespace, deleted right after, so later rounds
    do not run against a growing audit stream and indexes.
    """
    warmup = f"{tag}warm"
    try:
        value_bytes = request_size(redis, warmup)
        value = b"x" * value_bytes
        # Load the Lua scripts and fill the connection pool before anything is timed.
        run_threads(raw_work(redis, warmup, value), WARMUP_COUNT, args.concurrency)
        run_threads(create_decide_work(redis, warmup), WARMUP_COUNT, args.concurrency)
    finally:
        delete_namespace(redis, warmup)
    result = PhaseOne(value_bytes, Measurement(), Measurement())
    for number in range(1, args.rounds + 1):
        namespace = f"{tag}p1r{number}"
        try:
            work = raw_work(redis, namespace, value)
            rate = result.raw.run_round(redis, work, args.count, args.concurrency)
            progress(f"round {number}: raw SET+GET {rate:,.0f}/s")
            work = create_decide_work(redis, namespace)
            rate = result.handoffs.run_round(redis, work, args.count, args.concurrency)
            progress(f"round {number}: create+decide {rate:,.0f}/s")
        finally:
            delete_namespace(redis, namespace)
    return result


def profile_create_decide(redis: Redis, namespace: str, count: int) -> None:
    """Print where one thread's time goes while creating and approving ``count`` handoffs."""
    handoffs = Handoffs(redis, namespace=namespace)
    key = bench_key(namespace, "profile")
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for i in range(count):
            approve(handoffs, create_handoff(handoffs, i, key).id)
        profiler.disable()
    finally:
        delete_namespace(redis, namespace)
    print(f"\nprofile of {count} create+decide calls in one thread (top 25 by own time):")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)


# -- phase 2: the full lifecycle through real workers -----------------------------------


@contextlib.contextmanager
def running_workers(
    count: int, *, redis_url: str, namespace: str, queue: str, log_dir: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run ``count`` ``handoff worker`` processes; stop them on exit, however it happens.

    Each runs in a session of its own, so a Ctrl-C at the terminal does not reach it and
    stopping its process group also stops the dispatcher and work horse it started.
    """
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "HANDOFF_NAMESPACE": namespace,
        "HANDOFF_QUEUE": queue,
        "HANDOFF_SWEEP_INTERVAL_SECONDS": "0.2",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for number in range(count):
            name = f"{queue}-w{number}"
            with open(log_dir / f"{name}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "bot.cli", "worker", "--name", name],
                        env=env,
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield processes
    finally:
        stop_workers(processes)


def stop_workers(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker's process group (a warm shutdown), then SIGKILL what remains."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + WORKER_STOP_TIMEOUT_SECONDS
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        # The group outlives its leader while the dispatcher or a horse is still exiting.
        while time.monotonic() < deadline and _group_alive(process.pid):
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for_workers(
    redis: Redis, queue: str, processes: list[subprocess.Popen[bytes]], log_dir: Path
) -> None:
    """Block until every worker has registered with RQ; raise if one exits first."""
    rq_queue = make_queue(redis, queue)
    deadline = time.monotonic() + WORKER_START_TIMEOUT_SECONDS
    while Worker.count(connection=redis, queue=rq_queue) < len(processes):
        exited = [p.pid for p in processes if p.poll() is not None]
        if exited:
            raise RuntimeError(f"worker(s) {exited} exited at start; see logs in {log_dir}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers did not register within the timeout; see {log_dir}")
        time.sleep(POLL_SECONDS)


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


def run_phase_two(redis: Redis, redis_url: str, tag: str, args: argparse.Namespace) -> PhaseTwo:
    """Create, approve and resume ``args.count`` handoffs through real workers."""
    namespace = queue = f"{tag}life"
    handoffs = Handoffs(redis, namespace=namespace)
    keys = handoffs.store.keys
    bulk, idle, warm = (bench_key(namespace, label) for label in ("bulk", "idle", "warm"))
    result = PhaseTwo()
    log_dir = Path(tempfile.mkdtemp(prefix="handoff-bench-"))
    try:
        with running_workers(
            args.workers, redis_url=redis_url, namespace=namespace, queue=queue, log_dir=log_dir
        ) as processes:
            wait_for_workers(redis, queue, processes, log_dir)
            # One handoff all the way through: the dispatcher and the target's import are
            # ready before the clock starts.
            idle_latencies(handoffs, warm, 1)
            progress(f"{args.workers} workers ready; logs in {log_dir}")

            ids = [""] * args.count

            def create(i: int) -> None:
                ids[i] = create_handoff(handoffs, i, bulk).id

            started = time.perf_counter()
            result.create_seconds = run_threads(create, args.count, args.concurrency)
            result.decide_seconds = run_threads(
                lambda i: approve(handoffs, ids[i]), args.count, args.concurrency
            )
            result.finished = wait_for_lifecycle(redis, keys.outbox, count_key(bulk), args)
            result.total_seconds = time.perf_counter() - started
            if result.finished:
                measure_idle_latency(result, handoffs, queue, idle, args)
        # Checked with the workers stopped: a late duplicate resume would show by now.
        check_phase_two(result, handoffs, ids, queue, bulk, idle, args)
    except BaseException:
        print(f"worker logs kept in {log_dir}", file=sys.stderr)
        raise
    if result.problems:
        print(f"worker logs kept in {log_dir}", file=sys.stderr)
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return result


def measure_idle_latency(
    result: PhaseTwo, handoffs: Handoffs, queue: str, key: str, args: argparse.Namespace
) -> None:
    """Sample click-to-resume latency once the workers have nothing left to do.

    A backlog longer than the dispatch timeout makes the dispatcher enqueue tasks again;
    those duplicate jobs (which the store then skips) may still be queued in RQ after
    the last resume, so wait for RQ's queue to drain first.
    """
    rq_queue = make_queue(handoffs.redis, queue)
    try:
        wait_until(lambda: rq_queue.count == 0, args.timeout, "draining the RQ queue")
        result.idle_latencies = idle_latencies(handoffs, key, args.latency_samples)
    except TimeoutError as exc:
        result.problems.append(f"idle latency samples: {exc}")


def wait_for_lifecycle(redis: Redis, outbox: str, counter: str, args: argparse.Namespace) -> bool:
    """Wait until all resumes ran and the outbox is empty (every delivery and resume
    finished); False on timeout."""
    deadline = time.monotonic() + args.timeout
    next_report = time.monotonic() + PROGRESS_EVERY_SECONDS
    while time.monotonic() < deadline:
        with redis.pipeline(transaction=False) as pipe:
            pipe.get(counter)
            pipe.zcard(outbox)
            resumed, outstanding = pipe.execute()
        resumed = int(resumed or 0)
        if resumed >= args.count and outstanding == 0:
            return True
        if time.monotonic() >= next_report:
            progress(f"resumed {resumed:,}/{args.count:,}, {outstanding:,} tasks outstanding")
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
    args: argparse.Namespace,
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
    rq_queue = make_queue(redis, queue)
    result.rq_jobs_finished = FinishedJobRegistry(queue=rq_queue).count
    result.rq_jobs_failed = FailedJobRegistry(queue=rq_queue).count

    n = args.count
    if not result.finished:
        result.problems.append(f"not every handoff was delivered and resumed in {args.timeout} s")
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


# -- cleaning up only what the benchmark wrote ------------------------------------------


def delete_namespace(redis: Redis, namespace: str) -> None:
    """Delete every key of ``namespace`` (``{ns}:*``), and nothing else."""
    # Braces are literal in Redis glob patterns; the random namespace has no * ? [ or \.
    _unlink_matching(redis, f"{KeySpace(namespace).prefix}*")


def delete_queue(redis: Redis, queue: str) -> None:
    """Delete the RQ keys of ``queue``: its jobs, registries, workers and scheduler."""
    job_keys = [
        key
        for key in redis.scan_iter(match="rq:job:*", count=SCAN_BATCH)
        if key.count(b":") == 2  # rq:job:<id>, not rq:job:<id>:dependents
    ]
    ours: list[bytes] = []
    for first in range(0, len(job_keys), SCAN_BATCH):
        batch = job_keys[first : first + SCAN_BATCH]
        with redis.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.hget(key, "origin")
            origins = pipe.execute()
        ours.extend(
            key for key, origin in zip(batch, origins, strict=True) if origin == queue.encode()
        )
    for first in range(0, len(ours), SCAN_BATCH):
        batch = ours[first : first + SCAN_BATCH]
        job_ids = [key.split(b":", 2)[2] for key in batch]
        related = [
            b"rq:%s:%s" % (kind, job_id)
            for job_id in job_ids
            for kind in (b"results", b"executions")
        ]
        redis.unlink(*batch, *related)
    # Queue, registries, scheduler lock and worker keys all carry the (random) queue name.
    _unlink_matching(redis, f"rq:*{queue}*")
    redis.srem("rq:queues", f"rq:queue:{queue}")
    workers = [m for m in redis.smembers("rq:workers") if queue.encode() in m]
    if workers:
        redis.srem("rq:workers", *workers)
    for key in redis.scan_iter(match="rq:scheduler:*", count=SCAN_BATCH):
        if redis.type(key) == b"hash" and redis.hget(key, "queues") == queue.encode():
            redis.unlink(key)


def _unlink_matching(redis: Redis, pattern: str) -> None:
    batch: list[bytes] = []
    for key in redis.scan_iter(match=pattern, count=SCAN_BATCH):
        batch.append(key)
        if len(batch) >= SCAN_BATCH:
            redis.unlink(*batch)
            batch.clear()
    if batch:
        redis.unlink(*batch)


# -- reporting --------------------------------------------------------------------------


def progress(message: str) -> None:
    """A progress line on stderr, so stdout keeps only the report."""
    print(f"  .. {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def describe_latency(values: list[float]) -> str:
    """``p50 12 ms, p99 40 ms, max 55 ms (n=5000)``."""
    if not values:
        return "-"
    p50, p99, top = percentile(values, 0.5), percentile(values, 0.99), max(values)
    return f"p50 {_ms(p50)}, p99 {_ms(p99)}, max {_ms(top)} (n={len(values)})"


def _timed(count: int, seconds: float) -> str:
    return f"{count:,} in {seconds:6.2f} s  ({count / seconds:,.0f}/s)"


def _ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def print_report(
    server: str, args: argparse.Namespace, one: PhaseOne | None, two: PhaseTwo | None
) -> None:
    """The figures, as a short table."""
    n = args.count
    print(f"\nslack-handoff lifecycle benchmark — {server}")
    print(f"  {n:,} handoffs, {args.concurrency} client threads, {args.workers} workers")
    # Other processes on the machine skew wall-clock rates; say how busy it was.
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"  {os.cpu_count()} CPUs; load average (1, 5, 15 min) at the end: {load}")
    if one is not None:
        met = "met" if one.ratio >= RATIO_TARGET else "NOT met"
        raw, made = one.raw, one.handoffs
        print(f"\ncreate+decide alone, no workers ({args.rounds} alternating rounds)")
        rows = [
            ("", "raw SET+GET", "create+decide"),
            ("value / request size", f"{one.value_bytes} B", f"{one.value_bytes} B"),
            ("throughput, best round", f"{raw.rate:,.0f} pairs/s", f"{made.rate:,.0f} handoffs/s"),
            (
                "client CPU per item",
                f"{raw.client_cpu_us:,.0f} µs",
                f"{made.client_cpu_us:,.0f} µs",
            ),
            (
                "server CPU per item",
                f"{raw.server_cpu_us:,.0f} µs",
                f"{made.server_cpu_us:,.0f} µs",
            ),
            (
                "server time per call",
                raw.describe_calls("set", "get"),
                made.describe_calls("evalsha"),
            ),
        ]
        for label, baseline, measured in rows:
            print(f"  {label:<24}{baseline:>22}{measured:>22}")
        print(
            f"  create+decide / raw SET+GET ratio: {one.ratio:.2f} (target >= {RATIO_TARGET}) {met}"
        )
    if two is not None:
        print(f"\nfull lifecycle through {args.workers} `handoff worker` processes")
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.lifecycle",
        description="Create, decide and resume handoffs through real workers; print rates.",
    )
    parser.add_argument("--count", type=int, default=5000, help="handoffs per phase")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads")
    parser.add_argument("--workers", type=int, default=2, help="`handoff worker` processes")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis to use (default: env REDIS_URL, else an embedded server)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of phase 1")
    parser.add_argument(
        "--latency-samples", type=int, default=20, help="handoffs decided one by one at the end"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for resumes")
    parser.add_argument(
        "--phase", choices=["both", "1", "2"], default="both", help="which phases to run"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="also profile N create+decide calls"
    )
    args = parser.parse_args(argv)
    if min(args.count, args.concurrency, args.workers, args.rounds) < 1:
        parser.error("--count, --concurrency, --workers and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every resume ran exactly once, 1 otherwise (130 when
    interrupted, after stopping the workers and deleting the run's keys)."""
    args = parse_args(argv)
    # Turn a SIGTERM into the same unwinding as Ctrl-C, so workers and keys are cleaned up.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("interrupted; workers stopped and the run's keys deleted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    tag = f"bench{uuid.uuid4().hex[:12]}"
    with contextlib.ExitStack() as cleanup:
        url = args.redis_url
        if url:
            description = url
        else:
            embedded = start_embedded_redis()
            cleanup.callback(embedded.stop)
            url = embedded.connection_url
            description = f"embedded server at {url}"
        redis = Redis.from_url(url)
        cleanup.callback(redis.close)
        info = redis.info("server")
        version = info.get("valkey_version") or info.get("redis_version")
        name = "valkey" if "valkey_version" in info else "redis"
        server = f"{description} ({name} {version})"
        cleanup.callback(_delete_run_keys, redis, tag)

        one = run_phase_one(redis, tag, args) if args.phase in ("both", "1") else None
        if args.profile:
            profile_create_decide(redis, f"{tag}prof", args.profile)
        two = run_phase_two(redis, url, tag, args) if args.phase in ("both", "2") else None
        print_report(server, args, one, two)
        failed = two is not None and bool(two.problems)
    return 1 if failed else 0


def _delete_run_keys(redis: Redis, tag: str) -> None:
    for namespace in (f"{tag}warm", f"{tag}prof", f"{tag}life"):
        delete_namespace(redis, namespace)
    # Round namespaces are deleted as each round ends; this catches an interrupted one.
    _unlink_matching(redis, "{" + tag + "p1r*")
    delete_queue(redis, f"{tag}life")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
