"""Click benchmark: signed approve clicks against ``handoff serve`` and a bare Bolt app.

Not a test: it measures and prints figures. In one run it starts the local Slack stand-in
(in this process), ``handoff serve``, a second ``handoff serve`` with its metrics off
(``HANDOFF_METRICS=false``), a bare Bolt app whose only listener acks
(``bench.bare_bolt_app``, under gunicorn with the same workers and threads) and one
``handoff worker`` (subprocesses). It creates approval handoffs, waits until the worker has
posted each one, and records the signed ``block_actions`` body of the click that approves
it. After a warm-up of the servers it sends those bodies, one click per handoff, from
``--concurrency`` threads with persistent HTTP connections: in ``--rounds`` rounds, each
a share to the bare app, the same share to ``handoff serve`` and as many clicks on other
handoffs to the one without metrics (rotating which goes first, so all see the same
background load on a shared machine). Then a few clicks go one at a time to idle workers.

It prints req/s, p50 and p99 of the servers, the ratio to bare Bolt, the CPU time each
process spent per click, and how long after a click's response its resume target started,
under load and idle (with where the idle time goes, from the audit trail). Targets: ratio
>= 0.6, ``handoff serve`` p99 < 100 ms, median click -> resume start < 50 ms, and the
metrics add less than 5% to ``handoff serve``'s CPU per click.

Everything goes into a fresh random namespace and RQ queue, deleted at the end (only
those keys: it never flushes, so it is safe on a Redis that holds other data). It exits
non-zero, after printing FAIL lines, unless every click was answered 200 and every
handoff was decided exactly once and resumed exactly once.

Run from the repository root::

    .venv/bin/python -m bench.clicks                                  # embedded server
    .venv/bin/python -m bench.clicks --redis-url redis://127.0.0.1:6379
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import itertools
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis
from rq import Worker
from rq.registry import StartedJobRegistry
from slack_sdk.signature import SignatureVerifier

from bench import common
from bench.click_targets import RESUME_TARGET, started_key
from bench.common import Figure, RedisServer, Target
from bench.our_stack import (
    CHANNEL,
    SIGNING_SECRET,
    run_redis,
    server_env,
    spawn_serve,
    spawn_workers,
    start_processes,
    start_standin,
    wait_for_serve,
)
from bench.processes import (
    HOST,
    Processes,
    free_port,
    wait_for_workers,
    wait_until_answering,
)
from bench.targets import METADATA_KEY, count_key, ids_key
from bot.blockkit import ids as block_ids
from bot.http.wsgi import EVENTS_PATH
from bot.standin import SlackStandIn, StandInUser
from store.models import Handoff, Status, TaskState
from worker.client import Handoffs
from worker.queues import TaskQueues

REVIEWER = "U0BENCHREVIEWER"
"""The one reviewer of every handoff: the user who clicks."""

RATIO_TARGET = 0.6
"""``handoff serve`` req/s over bare Bolt req/s, at least."""
P99_TARGET_MS = 100.0
"""99th percentile of a click's response time on ``handoff serve``, below."""
RESUME_P50_TARGET_MS = 50.0
"""Median time from a click's response to its resume target starting, below."""
METRICS_CPU_TARGET = 1.05
"""``handoff serve``'s CPU per click with metrics on over with them off, below."""

REQUEST_TIMEOUT_SECONDS = 10.0
POLL_SECONDS = 0.02
PROGRESS_EVERY_SECONDS = 5.0
SETUP_THREADS = 8
"""Threads that create handoffs and record click bodies (setup only, not measured)."""
GET_BATCH = 500
"""Handoffs read per round trip when checking on many of them."""
OTHER_LOAD_WARNING_CPUS = 0.2
"""Average CPUs used by unrelated processes during a run above which a warning is printed."""
BARE_APP = "bench.bare_bolt_app:application"
"""The baseline's WSGI callable, as gunicorn names it."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Options:
    """The sizes of a run (defaults: the issue's)."""

    clicks: int = 3000
    """Measured clicks per server."""
    concurrency: int = 16
    """Client threads, each with one persistent HTTP connection."""
    rounds: int = 3
    """Alternating rounds (bare Bolt, ``handoff serve``) the clicks are split into."""
    warmup: int = 300
    """Warm-up clicks per server."""
    idle_samples: int = 20
    """Clicks sent one at a time at the end, each once the previous one resumed."""
    serve_workers: int = 2
    """gunicorn worker processes of both servers."""
    threads: int = 8
    """Threads per gunicorn worker."""
    workers: int = 1
    """``handoff worker`` processes."""
    timeout: float = 600.0
    """Seconds to wait for deliveries and resumes."""
    keep_logs: bool = False
    """Keep the servers' and workers' logs even when every check passed."""


QUICK = Options(
    clicks=24, concurrency=2, rounds=1, warmup=2, idle_samples=2, serve_workers=1, threads=2
)
"""A smoke run: seconds, not figures. Enough clicks that each server's CPU reads above the
kernel's 10 ms clock tick: with 6, the metrics-off server once read 0 (no ratio at all)."""


# -- the processes under test -----------------------------------------------------------


def gunicorn_options(options: Options, port: int) -> list[str]:
    """The bare app's gunicorn options: those ``bot.serve.serve_http`` sets."""
    return [
        "--bind",
        f"{HOST}:{port}",
        "--workers",
        str(options.serve_workers),
        "--threads",
        str(options.threads),
        "--worker-class",
        "gthread",
        "--timeout",
        "30",
        "--graceful-timeout",
        "10",
        "--keep-alive",
        "5",
        "--log-level",
        "info",
    ]


# -- handoffs and the clicks that approve them ------------------------------------------


def create_handoffs(handoffs: Handoffs, count: int, record_key: str) -> list[str]:
    """Create ``count`` realistic approvals whose resume records its start under
    ``record_key``; return their ids in creation order."""

    def create(i: int) -> str:
        return handoffs.request_approval(
            run_id=f"bench-run-{i}",
            thread_id=f"bench-thread-{i}",
            action="issue_refund",
            args={"order_id": f"A-{i:06d}", "amount_usd": 30, "reason": "charged twice"},
            description="Refund one of two identical charges",
            context="The customer was charged twice for the same order; refund one charge.",
            channel=CHANNEL,
            reviewers=[REVIEWER],
            resume=RESUME_TARGET,
            agent_name="bench-agent",
            metadata={METADATA_KEY: record_key},
        ).id

    with ThreadPoolExecutor(SETUP_THREADS) as pool:
        return list(pool.map(create, range(count)))


def get_all(handoffs: Handoffs, ids: Sequence[str]) -> list[Handoff]:
    """The stored handoffs, in the order of ``ids``."""
    found: list[Handoff] = []
    for first in range(0, len(ids), GET_BATCH):
        found.extend(handoffs.store.get_many(ids[first : first + GET_BATCH]))
    return found


def wait_until_posted(
    handoffs: Handoffs, ids: Sequence[str], processes: Processes, timeout: float
) -> list[Handoff]:
    """Wait until the worker has posted every handoff (its message ts is stored)."""
    deadline = time.monotonic() + timeout
    next_report = time.monotonic() + PROGRESS_EVERY_SECONDS
    while True:
        processes.check_alive()
        stored = get_all(handoffs, ids)
        posted = sum(1 for h in stored if h.message_refs.get("ts"))
        if posted == len(ids):
            return stored
        if time.monotonic() >= deadline:
            raise RuntimeError(f"only {posted} of {len(ids)} handoffs were posted in {timeout} s")
        if time.monotonic() >= next_report:
            common.progress(f"posted {posted:,}/{len(ids):,}")
            next_report += PROGRESS_EVERY_SECONDS
        time.sleep(0.2)


def record_click_bodies(
    standin: SlackStandIn, posted: Sequence[Handoff], sink_url: str
) -> list[bytes]:
    """The ``block_actions`` body of ``REVIEWER`` clicking Approve on each posted message.

    The stand-in builds each payload from the message as posted (blocks, ids, a response
    URL), exactly as Slack would, and sends it signed to ``sink_url``; the body it sent is
    kept. The sink is the bare Bolt app, which only acks, so nothing is decided yet.
    """
    standin.bot_url = sink_url

    def click(handoff: Handoff) -> bytes:
        message = standin.message(handoff.message_refs["channel"], handoff.message_refs["ts"])
        response = standin.click(REVIEWER, message, block_ids.APPROVE)
        if response.status != 200:
            raise RuntimeError(f"the bare app answered {response.status} while recording")
        return response.request_body

    with ThreadPoolExecutor(SETUP_THREADS) as pool:
        return list(pool.map(click, posted))


# -- sending clicks ----------------------------------------------------------------------


@dataclass
class ClickRun:
    """What the client saw of one batch of clicks, indexed like the bodies sent."""

    seconds: float
    latencies_ms: list[float]
    answered_at: list[float]
    """Wall-clock time (``time.time()``) each response arrived."""
    statuses: list[int]
    """HTTP status of each click; 0 when the connection failed."""

    @property
    def rate(self) -> float:
        """Clicks answered per second."""
        return len(self.statuses) / self.seconds

    @property
    def failures(self) -> Counter[int]:
        """How many clicks got each status other than 200."""
        return Counter(s for s in self.statuses if s != 200)

    @classmethod
    def combine(cls, runs: Sequence[ClickRun]) -> ClickRun:
        """Several runs as one: their clicks in order, their sending times added up."""
        return cls(
            seconds=sum(run.seconds for run in runs),
            latencies_ms=[v for run in runs for v in run.latencies_ms],
            answered_at=[v for run in runs for v in run.answered_at],
            statuses=[v for run in runs for v in run.statuses],
        )


def signed_headers(bodies: Sequence[bytes]) -> list[dict[str, str]]:
    """Slack's request headers for each body, signed with the current time.

    Signed just before sending, because Bolt rejects timestamps more than five minutes
    old; signing up front keeps the HMAC off the client's measured path.
    """
    verifier = SignatureVerifier(SIGNING_SECRET)
    timestamp = str(int(time.time()))
    return [
        {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": str(verifier.generate_signature(timestamp=timestamp, body=body)),
        }
        for body in bodies
    ]


def send_clicks(port: int, bodies: Sequence[bytes], concurrency: int) -> ClickRun:
    """POST every body to ``/slack/events`` from ``concurrency`` threads; time each one.

    Each thread keeps one HTTP/1.1 connection, opened before the clock starts, and takes
    the next unsent body as soon as it has an answer, so the server always has
    ``concurrency`` clicks in hand.
    """
    count = len(bodies)
    headers = signed_headers(bodies)
    latencies = [0.0] * count
    answered_at = [0.0] * count
    statuses = [0] * count
    next_index = itertools.count()  # next() on it is atomic under the GIL
    connections = [
        http.client.HTTPConnection(HOST, port, timeout=REQUEST_TIMEOUT_SECONDS)
        for _ in range(min(concurrency, count))
    ]
    for connection in connections:
        connection.connect()
    barrier = threading.Barrier(len(connections) + 1)

    def send(connection: http.client.HTTPConnection) -> None:
        barrier.wait()
        while (i := next(next_index)) < count:
            started = time.perf_counter()
            try:
                connection.request("POST", EVENTS_PATH, body=bodies[i], headers=headers[i])
                with connection.getresponse() as response:
                    response.read()
                    statuses[i] = response.status
            except (OSError, http.client.HTTPException):
                # Counted as a failure (status 0); a retry could decide twice.
                connection.close()
            latencies[i] = (time.perf_counter() - started) * 1000
            answered_at[i] = time.time()

    threads = [threading.Thread(target=send, args=(c,), daemon=True) for c in connections]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return ClickRun(seconds, latencies, answered_at, statuses)


# -- resumes -----------------------------------------------------------------------------


@dataclass
class Recorder:
    """The keys ``bench.click_targets`` records resumes under, for one set of handoffs."""

    redis: Redis
    base: str

    def started(self) -> dict[str, float]:
        """Handoff id -> when its resume target started (wall clock)."""
        recorded = self.redis.hgetall(started_key(self.base))
        return {
            key.decode() if isinstance(key, bytes) else key: float(value)
            for key, value in recorded.items()
        }

    def runs(self) -> int:
        """Resume target runs, duplicates included."""
        return int(self.redis.get(count_key(self.base)) or 0)

    def distinct(self) -> int:
        """Handoffs whose resume target ran."""
        return int(self.redis.scard(ids_key(self.base)))


def wait_until_quiet(rig: Rig, expected: int) -> bool:
    """Wait until ``expected`` resumes ran, the outbox is empty (every resume and message
    update finished) and RQ holds no job (a duplicate the dispatcher re-enqueued would
    hold up the next click's jobs); False after ``--timeout`` seconds."""
    outbox = rig.handoffs.store.keys.outbox
    queues = rig.queues.distinct
    started = [StartedJobRegistry(queue=queue) for queue in queues]
    deadline = time.monotonic() + rig.options.timeout
    next_report = time.monotonic() + PROGRESS_EVERY_SECONDS
    while time.monotonic() < deadline:
        rig.processes.check_alive()
        resumed, outstanding = rig.recorder.runs(), int(rig.redis.zcard(outbox))
        jobs = sum(q.count for q in queues) + sum(r.count for r in started)
        if resumed >= expected and outstanding == 0 and jobs == 0:
            return True
        if time.monotonic() >= next_report:
            common.progress(
                f"resumed {resumed:,}/{expected:,}, {outstanding:,} tasks outstanding, "
                f"{jobs:,} RQ jobs queued or running"
            )
            next_report += PROGRESS_EVERY_SECONDS
        time.sleep(POLL_SECONDS)
    return False


def click_to_resume_ms(ids: Sequence[str], run: ClickRun, started: dict[str, float]) -> list[float]:
    """For each click of ``run`` (on ``ids[i]``), ms from its response reaching the client
    to its resume target starting; clicks whose resume never ran are left out.

    Both times are wall-clock readings on this machine. A resume may start before the
    response arrives (the decision commits before Bolt writes the response), so small
    negative values are real.
    """
    return [
        (started[handoff_id] - answered) * 1000
        for handoff_id, answered in zip(ids, run.answered_at, strict=True)
        if handoff_id in started
    ]


def idle_clicks(
    rig: Rig, ids: Sequence[str], bodies: Sequence[bytes]
) -> tuple[list[float], list[ClickRun]]:
    """Send clicks one at a time, each once the previous resume and message update are
    done; return the click -> resume latencies and the runs."""
    latencies: list[float] = []
    runs: list[ClickRun] = []
    for handoff_id, body in zip(ids, bodies, strict=True):
        done = rig.recorder.runs()
        run = send_clicks(rig.serve_port, [body], 1)
        runs.append(run)
        if not wait_until_quiet(rig, done + 1):
            break
        latencies += click_to_resume_ms([handoff_id], run, rig.recorder.started())
    return latencies, runs


@dataclass
class IdleStages:
    """Where an idle click's time to resume goes, per sample, in ms. Audit times are the
    Redis server's clock in whole ms; the target's start is this machine's clock."""

    to_update_job: list[float] = field(default_factory=list)
    """Decision committed -> message update job started (its lease taken)."""
    to_resume_job: list[float] = field(default_factory=list)
    """Decision committed -> resume job started (its lease taken, in the work horse)."""
    job_to_target: list[float] = field(default_factory=list)
    """Resume job started -> resume target called."""
    update_first: int = 0
    """Samples whose message update job started before their resume job."""

    @classmethod
    def read(cls, rig: Rig, ids: Sequence[str], started: dict[str, float]) -> IdleStages:
        """The stages of the handoffs ``ids`` from their audit trails."""
        stages = cls()
        for handoff_id in ids:
            first: dict[str, float] = {}
            for event in rig.handoffs.store.audit_trail(handoff_id):
                first.setdefault(event.event, event.at.timestamp())
            if not {"decided", "resume_started"} <= first.keys() or handoff_id not in started:
                continue
            stages.to_resume_job.append((first["resume_started"] - first["decided"]) * 1000)
            stages.job_to_target.append((started[handoff_id] - first["resume_started"]) * 1000)
            update = first.get("update_started")
            if update is not None:
                stages.to_update_job.append((update - first["decided"]) * 1000)
                stages.update_first += update < first["resume_started"]
        return stages


# -- CPU accounting ----------------------------------------------------------------------


def group_cpu_seconds(process_group: int) -> float:
    """CPU seconds used by the processes of a group, including their reaped children
    (RQ's work horses), read from Linux's /proc."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The fields after the ")" that closes the command name, from "state" on.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process exited meanwhile
        if int(fields[2]) == process_group:  # pgrp
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / _CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used since boot (/proc/stat)."""
    cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = cpu[3] + cpu[4]  # idle, iowait
    return (sum(cpu) - idle) / _CLOCK_TICKS


def redis_cpu_seconds(redis: Redis) -> float:
    """CPU seconds the Redis server has used (INFO cpu); on a shared server this includes
    the work of its other clients."""
    cpu = redis.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


@dataclass
class CpuMeter:
    """CPU seconds spent during a phase by each of ``clocks`` (name -> a reading of CPU
    seconds used so far), by this process, and by everything else on the machine (other
    work skews the figures, so it is shown)."""

    clocks: dict[str, Callable[[], float]]
    used: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        """Add the CPU used over the ``with`` block (this process is "client + stand-in")."""
        before = {name: clock() for name, clock in self.clocks.items()}
        own, machine, started = time.process_time(), machine_busy_seconds(), time.monotonic()
        yield
        used = {name: clock() - before[name] for name, clock in self.clocks.items()}
        used["client + stand-in"] = time.process_time() - own
        used["others"] = max(0.0, machine_busy_seconds() - machine - sum(used.values()))
        self.seconds += time.monotonic() - started
        for name, seconds in used.items():
            self.used[name] = self.used.get(name, 0.0) + seconds

    def describe(self, clicks: int) -> str:
        """``serve 1.20 ms, worker0 3.10 ms, ...`` of CPU per click."""
        return ", ".join(
            f"{name} {seconds * 1000 / clicks:.2f} ms" for name, seconds in self.used.items()
        )

    def own_ms_per_click(self, clicks: int) -> float:
        """CPU ms per click of the run's own processes (everything but "others").

        On a machine the run has to itself and keeps busy, req/s is about the number of
        CPUs over this, so the ratio of two servers' figures estimates their req/s ratio
        without the noise of other work on a shared machine.
        """
        own = sum(seconds for name, seconds in self.used.items() if name != "others")
        return own * 1000 / clicks

    @property
    def others_busy(self) -> float:
        """CPUs kept busy by unrelated processes on average (0.5: half a core)."""
        return self.used.get("others", 0.0) / self.seconds if self.seconds else 0.0


# -- checks ------------------------------------------------------------------------------


def check_run(name: str, run: ClickRun) -> list[str]:
    """Problems with the answers a server gave."""
    if run.failures:
        described = ", ".join(
            f"{count} x {status or 'no answer'}" for status, count in sorted(run.failures.items())
        )
        return [f"{name}: {described} of {len(run.statuses)} clicks"]
    return []


def check_handoffs(rig: Rig, ids: Sequence[str]) -> list[str]:
    """Problems with "every handoff decided exactly once, by the click, and resumed
    exactly once"."""
    handoffs, recorder = rig.handoffs, rig.recorder
    problems: list[str] = []
    stored = get_all(handoffs, ids)
    wrong = [
        h.id
        for h in stored
        if h.status is not Status.APPROVED
        or h.resume_data is None
        or h.resume_data.decided_by != REVIEWER
    ]
    if wrong:
        problems.append(f"{len(wrong)} handoffs not approved by {REVIEWER} (e.g. {wrong[0]})")
    unfinished = sum(1 for h in stored if h.resume.state is not TaskState.COMPLETED)
    if unfinished:
        problems.append(f"{unfinished} resumes not completed in the store")
    events = Counter((e.event, e.handoff_id) for e in handoffs.store.global_audit())
    not_once = [i for i in ids if events["decided", i] != 1]
    if not_once:
        problems.append(f"{len(not_once)} handoffs without exactly one decision in the audit")
    denied = sum(events["denied", i] for i in ids)
    if denied:
        problems.append(f"{denied} clicks were denied")
    runs, distinct = recorder.runs(), recorder.distinct()
    if runs != distinct:
        problems.append(f"{runs - distinct} resume(s) ran more than once")
    if distinct != len(ids):
        problems.append(f"{distinct} of {len(ids)} handoffs were resumed")
    refusals = rig.standin.calls("response_url")
    if refusals:
        problems.append(f"the bot answered {len(refusals)} clicks with a refusal")
    return problems


# -- reporting ---------------------------------------------------------------------------


@dataclass
class Results:
    """Everything the report shows."""

    server: str
    options: Options
    bare: ClickRun
    serve: ClickRun
    round_ratios: list[float]
    """``handoff serve`` req/s over bare Bolt req/s in each round."""
    bare_cpu: CpuMeter
    serve_cpu: CpuMeter
    off: ClickRun
    """``handoff serve`` with its metrics off (``HANDOFF_METRICS=false``)."""
    off_cpu: CpuMeter
    loaded_resume_ms: list[float]
    drain_seconds: float
    """From the first measured click on ``handoff serve`` until every resume and message
    update it caused had finished."""
    jobs_run: int
    """RQ jobs the workers ran in the whole run, duplicates included."""
    tasks: int
    """Deliveries, resumes and message updates the run needed."""
    idle_resume_ms: list[float]
    idle_response_ms: list[float]
    idle_stages: IdleStages
    problems: list[str]

    @property
    def ratio(self) -> float:
        """``handoff serve`` req/s over bare Bolt req/s, all rounds together."""
        return self.serve.rate / self.bare.rate

    def serve_cpu_ms(self) -> tuple[float, float]:
        """CPU ms per click of the ``handoff serve`` process itself (its gunicorn workers),
        with metrics on and with them off."""
        on = self.serve_cpu.used.get("serve", math.nan) * 1000 / len(self.serve.statuses)
        off = self.off_cpu.used.get("serve-off", math.nan) * 1000 / len(self.off.statuses)
        return on, off

    @property
    def metrics_cpu_ratio(self) -> float:
        """``handoff serve``'s CPU per click with metrics on over with them off."""
        on, off = self.serve_cpu_ms()
        return on / off if off else math.nan

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table."""
        serve_ms = self.serve.latencies_ms
        return [
            Figure("bare Bolt app", self.bare.rate, "/s"),
            Figure("handoff serve", self.serve.rate, "/s"),
            Figure("handoff serve / bare Bolt", self.ratio, "x", Target(">=", RATIO_TARGET)),
            Figure("handoff serve, metrics off", self.off.rate, "/s"),
            Figure(
                "handoff serve CPU per click, metrics on / off",
                self.metrics_cpu_ratio,
                "x",
                Target("<", METRICS_CPU_TARGET),
            ),
            Figure("click response p50, handoff serve", common.percentile(serve_ms, 0.5), "ms"),
            Figure(
                "click response p99, handoff serve",
                common.percentile(serve_ms, 0.99),
                "ms",
                Target("<", P99_TARGET_MS),
            ),
            *common.latency_figures(
                "click -> resume started, idle",
                self.idle_resume_ms,
                p50=Target("<", RESUME_P50_TARGET_MS),
            ),
            *common.latency_figures(
                "click -> resume started, under load",
                self.loaded_resume_ms,
                p50=Target("<", RESUME_P50_TARGET_MS),
            ),
        ]

    def print_report(self) -> None:
        """The figures, each next to its target, then the checks' verdict."""
        options = self.options
        print(f"\nslack-handoff click benchmark — {self.server}")
        print(
            f"  {len(self.serve.statuses):,} approve clicks per server in {options.rounds} "
            f"alternating rounds from {options.concurrency} client threads (persistent "
            f"connections); gunicorn gthread {options.serve_workers} workers x "
            f"{options.threads} threads; {options.workers} `handoff worker`; "
            f"{os.cpu_count()} CPUs"
        )
        _print_servers(self)
        _print_targets(self)
        _print_resumes(self)
        for problem in self.problems:
            print(f"FAIL: {problem}")
        if not self.problems:
            print("\nOK: every click answered 200; every handoff decided once and resumed once")


def _latency(values: Sequence[float]) -> str:
    if not values:
        return "-"
    p50, p99 = common.percentile(list(values), 0.5), common.percentile(list(values), 0.99)
    return f"p50 {p50:7.1f} ms   p99 {p99:7.1f} ms"


def _print_servers(results: Results) -> None:
    print(f"\n  {'server':<16}{'req/s':>9}{'p50':>11}{'p99':>11}{'max':>11}")
    for name, run in (
        ("bare Bolt", results.bare),
        ("handoff serve", results.serve),
        ("  metrics off", results.off),
    ):
        p50, p99 = (
            common.percentile(run.latencies_ms, 0.5),
            common.percentile(run.latencies_ms, 0.99),
        )
        print(
            f"  {name:<16}{run.rate:>9,.0f}{p50:>8.1f} ms{p99:>8.1f} ms"
            f"{max(run.latencies_ms):>8.1f} ms"
        )
    shown = "  ".join(f"{r:.2f}" for r in results.round_ratios)
    print(f"  ratio handoff serve / bare Bolt per round: {shown}")
    print("\n  CPU time per click")
    for name, meter, run in (
        ("bare Bolt", results.bare_cpu, results.bare),
        ("handoff serve", results.serve_cpu, results.serve),
        ("metrics off", results.off_cpu, results.off),
    ):
        print(f"    {name + ' rounds:':<22}{meter.describe(len(run.statuses))}")
    bare_ms = results.bare_cpu.own_ms_per_click(len(results.bare.statuses))
    serve_ms = results.serve_cpu.own_ms_per_click(len(results.serve.statuses))
    print(
        f"    all of the run's processes: bare Bolt {bare_ms:.2f} ms, handoff serve "
        f"{serve_ms:.2f} ms; ratio if CPU-bound: {bare_ms / serve_ms:.2f}"
    )
    busiest = max(results.bare_cpu.others_busy, results.serve_cpu.others_busy)
    if busiest >= OTHER_LOAD_WARNING_CPUS:
        print(
            f"  WARNING: unrelated processes kept {busiest:.1f} CPUs busy while measuring; "
            "the rates are skewed (the CPU times per click much less)"
        )


def _print_targets(results: Results) -> None:
    ratio = results.ratio
    p99 = common.percentile(results.serve.latencies_ms, 0.99)
    print("\n  targets")
    _print_target(
        "ratio handoff serve / bare Bolt",
        f"{ratio:.2f}",
        f">= {RATIO_TARGET}",
        ratio >= RATIO_TARGET,
    )
    _print_target(
        "handoff serve p99", f"{p99:.1f} ms", f"< {P99_TARGET_MS:.0f} ms", p99 < P99_TARGET_MS
    )
    on, off = results.serve_cpu_ms()
    cost = results.metrics_cpu_ratio
    _print_target(
        "serve CPU/click, metrics on / off",
        f"{cost:.3f}",
        f"< {METRICS_CPU_TARGET}",
        None if math.isnan(cost) else cost < METRICS_CPU_TARGET,
    )
    print(f"      (handoff serve {on:.3f} ms with metrics, {off:.3f} ms without; {cost - 1:+.1%})")
    for label, values in (
        ("click -> resume p50, under load", results.loaded_resume_ms),
        ("click -> resume p50, idle", results.idle_resume_ms),
    ):
        if not values:
            _print_target(label, "-", f"< {RESUME_P50_TARGET_MS:.0f} ms", None)
            continue
        p50 = common.percentile(values, 0.5)
        _print_target(
            label, f"{p50:.1f} ms", f"< {RESUME_P50_TARGET_MS:.0f} ms", p50 < RESUME_P50_TARGET_MS
        )


def _print_target(label: str, shown: str, target: str, met: bool | None) -> None:
    verdict = "not measured" if met is None else "met" if met else "NOT met"
    print(f"    {label:<34}{shown:>12}   ({target:<9}) {verdict}")


def _print_resumes(results: Results) -> None:
    options = results.options
    clicks = len(results.serve.statuses)
    print(
        f"\n  {options.workers} worker(s) finished the measured clicks' resumes and message "
        f"updates in {results.drain_seconds:.1f} s ({clicks / results.drain_seconds:,.1f} clicks/s)"
    )
    print(
        f"  RQ jobs run: {results.jobs_run:,} for {results.tasks:,} tasks "
        f"({results.jobs_run - results.tasks:,} more: duplicates the dispatcher re-enqueued)"
    )
    burst = math.ceil(clicks / options.rounds)
    print("\n  click -> resume start")
    rows = (
        (f"under load ({burst:,}-click bursts)", results.loaded_resume_ms),
        (f"idle, one by one ({len(results.idle_resume_ms)})", results.idle_resume_ms),
        ("idle click's own response", results.idle_response_ms),
    )
    for label, values in rows:
        print(f"    {label:<32}{_latency(values)}")
    stages = results.idle_stages
    if stages.to_resume_job:
        print("  where an idle click's time goes")
        for label, values in (
            ("decided -> update job started", stages.to_update_job),
            ("decided -> resume job started", stages.to_resume_job),
            ("resume job -> target started", stages.job_to_target),
        ):
            print(f"    {label:<32}{_latency(values)}")
        print(
            f"    the message update job started first in {stages.update_first} "
            f"of {len(stages.to_resume_job)} samples"
        )


# -- one run ---------------------------------------------------------------------------


@dataclass
class Rig:
    """What one run works with: Redis, the stand-in, and the processes under test."""

    options: Options
    redis: Redis
    handoffs: Handoffs
    recorder: Recorder
    standin: SlackStandIn
    processes: Processes
    queues: TaskQueues
    serve_port: int
    bare_port: int
    worker_names: list[str]
    off_port: int
    """The port of ``handoff serve`` with its metrics off."""

    def jobs_run(self) -> int:
        """RQ jobs the workers have run so far (finished or failed), on both queues."""
        total = 0
        for name in [*self.worker_names, *(f"{name}-slack" for name in self.worker_names)]:
            worker = Worker.find_by_key(
                Worker.redis_worker_namespace_prefix + name, connection=self.redis
            )
            if worker is not None:
                total += worker.successful_job_count + worker.failed_job_count
        return total

    def cpu_clocks(self, *names: str) -> dict[str, Callable[[], float]]:
        """CPU clocks of the processes ``names``, of every worker and of Redis."""
        running = self.processes.running
        groups = {name: running[name].pid for name in names}
        groups |= {f"worker{n}": running[name].pid for n, name in enumerate(self.worker_names)}
        clocks: dict[str, Callable[[], float]] = {
            name: functools.partial(group_cpu_seconds, pgid) for name, pgid in groups.items()
        }
        clocks["redis"] = functools.partial(redis_cpu_seconds, self.redis)
        return clocks


def start_rig(options: Options, url: str, namespace: str, cleanup: contextlib.ExitStack) -> Rig:
    """Start the stand-in, ``handoff serve``, the bare app and the workers; wait for all.

    ``cleanup`` stops them all and deletes the run's keys; the logs are removed then
    unless the run asks to keep them (``rig.processes.keep_logs``)."""
    queue = namespace
    redis = run_redis(url, namespace, queue, cleanup)
    standin = start_standin(
        cleanup, users=[StandInUser(REVIEWER, "reviewer")], ack_timeout=REQUEST_TIMEOUT_SECONDS
    )
    processes = start_processes("handoff-clicks-", cleanup)

    env = server_env(url, standin.api_url, namespace, queue)
    sizes = {"serve_workers": options.serve_workers, "threads": options.threads}
    serve_port = spawn_serve(processes, "serve", env, **sizes)
    off_env = {**env, "HANDOFF_METRICS": "false"}
    off_port = spawn_serve(processes, "serve-off", off_env, **sizes)
    bare_port = free_port()
    processes.spawn(
        "bare",
        [sys.executable, "-m", "gunicorn", *gunicorn_options(options, bare_port), BARE_APP],
        env,
    )
    worker_names = spawn_workers(processes, queue, options.workers, env)
    wait_for_serve(processes, "serve", serve_port)
    wait_for_serve(processes, "serve-off", off_port)
    wait_until_answering(processes, "bare", f"http://{HOST}:{bare_port}{EVENTS_PATH}")
    wait_for_workers(redis, processes, worker_names)
    common.progress(f"servers and workers up; logs in {processes.log_dir}")
    return Rig(
        options=options,
        redis=redis,
        handoffs=Handoffs(redis, namespace=namespace),
        recorder=Recorder(redis, common.bench_key(namespace, "clicks")),
        standin=standin,
        processes=processes,
        queues=TaskQueues.named(redis, queue),
        serve_port=serve_port,
        bare_port=bare_port,
        worker_names=worker_names,
        off_port=off_port,
    )


def prepare_clicks(rig: Rig) -> tuple[list[str], list[bytes]]:
    """Create the handoffs (warm-up, measured, idle samples, in that order; then warm-up and
    measured ones for the server without metrics, ``Layout``), wait until they are posted,
    and record the click that approves each one."""
    options = rig.options
    total = 2 * (options.warmup + options.clicks) + options.idle_samples
    ids = create_handoffs(rig.handoffs, total, rig.recorder.base)
    common.progress(f"created {total:,} handoffs; waiting for the workers to post them")
    posted = wait_until_posted(rig.handoffs, ids, rig.processes, options.timeout)
    sink_url = f"http://{HOST}:{rig.bare_port}{EVENTS_PATH}"
    bodies = record_click_bodies(rig.standin, posted, sink_url)
    common.progress(f"recorded {len(bodies):,} click bodies")
    return ids, bodies


@dataclass
class Rounds:
    """The measured clicks of both servers, round by round."""

    bare: list[ClickRun] = field(default_factory=list)
    serve: list[ClickRun] = field(default_factory=list)
    off: list[ClickRun] = field(default_factory=list)
    """``handoff serve`` with its metrics off."""
    bare_cpu: CpuMeter = field(default_factory=lambda: CpuMeter({}))
    serve_cpu: CpuMeter = field(default_factory=lambda: CpuMeter({}))
    off_cpu: CpuMeter = field(default_factory=lambda: CpuMeter({}))
    loaded_resume_ms: list[float] = field(default_factory=list)
    drain_seconds: float = 0.0
    finished: bool = True


@dataclass(frozen=True)
class Layout:
    """Which handoffs (and click bodies) each part of a run uses, by index: in creation
    order, the warm-up, the measured clicks and the idle samples of ``handoff serve``, then
    the warm-up and the measured clicks of ``handoff serve`` without metrics (the bare app
    gets the measured clicks of ``handoff serve``: it decides nothing)."""

    warm: slice
    measured: slice
    idle: slice
    off_warm: slice
    off_measured: slice

    @classmethod
    def of(cls, options: Options) -> Layout:
        """The layout of a run of ``options``."""
        w, c, i = options.warmup, options.clicks, options.idle_samples
        return cls(
            warm=slice(0, w),
            measured=slice(w, w + c),
            idle=slice(w + c, w + c + i),
            off_warm=slice(w + c + i, 2 * w + c + i),
            off_measured=slice(2 * w + c + i, 2 * (w + c) + i),
        )


SERVERS = ("bare", "serve", "off")
"""The servers of each round, in the order of the first round; each round starts one later."""


def run_rounds(
    rig: Rig,
    ids: Sequence[str],
    bodies: Sequence[bytes],
    off_bodies: Sequence[bytes],
    resumed: int,
) -> Rounds:
    """Send the measured clicks in ``options.rounds`` rounds, each a share to the bare app,
    the same share to ``handoff serve`` and as many of ``off_bodies`` to ``handoff serve``
    without metrics, rotating which goes first.

    Rotating short rounds expose every server to the same background load (this machine is
    shared), where one long run each would not. Every round starts with idle workers: after
    a ``handoff serve``'s share it waits until all its resumes and message updates are done.
    ``resumed`` is how many resumes ran before.
    """
    options = rig.options
    rounds = Rounds(
        bare_cpu=CpuMeter(rig.cpu_clocks("bare", "serve")),
        serve_cpu=CpuMeter(rig.cpu_clocks("serve")),
        off_cpu=CpuMeter(rig.cpu_clocks("serve-off")),
    )
    size = math.ceil(len(ids) / options.rounds)
    for number, first in enumerate(range(0, len(ids), size)):
        share = slice(first, first + size)
        turn = number % len(SERVERS)
        for name in SERVERS[turn:] + SERVERS[:turn]:
            if name == "bare":
                with rounds.bare_cpu.measure():
                    run = send_clicks(rig.bare_port, bodies[share], options.concurrency)
                rounds.bare.append(run)
                common.progress(f"round {number + 1}: bare Bolt {run.rate:,.0f} req/s")
                continue
            started = time.monotonic()
            on = name == "serve"
            meter = rounds.serve_cpu if on else rounds.off_cpu
            port, sent = (rig.serve_port, bodies) if on else (rig.off_port, off_bodies)
            with meter.measure():
                run = send_clicks(port, sent[share], options.concurrency)
            (rounds.serve if on else rounds.off).append(run)
            label = "handoff serve" if on else "handoff serve, metrics off"
            common.progress(f"round {number + 1}: {label} {run.rate:,.0f} req/s; resuming")
            resumed += len(run.statuses)
            if not wait_until_quiet(rig, resumed):
                rounds.finished = False
                return rounds
            if on:
                rounds.drain_seconds += time.monotonic() - started
                started_at = rig.recorder.started()
                rounds.loaded_resume_ms += click_to_resume_ms(ids[share], run, started_at)
    return rounds


def measure(rig: Rig, ids: list[str], bodies: list[bytes], server: str) -> Results:
    """Warm the servers up, run the measured rounds, then the idle samples; check."""
    options = rig.options
    layout = Layout.of(options)
    warm, measured, idle = layout.warm, layout.measured, layout.idle

    # Measure with idle workers: no delivery (or duplicate job) left in RQ.
    if not wait_until_quiet(rig, 0):
        raise RuntimeError("the workers did not finish the deliveries")
    send_clicks(rig.bare_port, bodies[warm], options.concurrency)
    warm_run = send_clicks(rig.serve_port, bodies[warm], options.concurrency)
    off_warm_run = send_clicks(rig.off_port, bodies[layout.off_warm], options.concurrency)
    if not wait_until_quiet(rig, 2 * options.warmup):
        raise RuntimeError("the warm-up clicks were not all resumed")
    rounds = run_rounds(
        rig, ids[measured], bodies[measured], bodies[layout.off_measured], 2 * options.warmup
    )
    idle_ms: list[float] = []
    idle_runs: list[ClickRun] = []
    if rounds.finished:
        idle_ms, idle_runs = idle_clicks(rig, ids[idle], bodies[idle])

    jobs_run = rig.jobs_run()
    # Checked with every process stopped: a late duplicate resume would show by now.
    rig.processes.stop_all()
    bare, serve = ClickRun.combine(rounds.bare), ClickRun.combine(rounds.serve)
    off = ClickRun.combine(rounds.off)
    problems = [
        *check_run("bare Bolt", bare),
        *check_run("handoff serve warm-up", warm_run),
        *check_run("handoff serve, metrics off, warm-up", off_warm_run),
        *check_run("handoff serve", serve),
        *check_run("handoff serve, metrics off", off),
        *(p for run in idle_runs for p in check_run("handoff serve idle", run)),
    ]
    if not rounds.finished:
        problems.append(f"not every click was resumed within {options.timeout} s")
    problems += check_handoffs(rig, ids)
    return Results(
        server=server,
        options=options,
        bare=bare,
        serve=serve,
        round_ratios=[s.rate / b.rate for s, b in zip(rounds.serve, rounds.bare, strict=False)],
        bare_cpu=rounds.bare_cpu,
        serve_cpu=rounds.serve_cpu,
        off=off,
        off_cpu=rounds.off_cpu,
        loaded_resume_ms=rounds.loaded_resume_ms,
        drain_seconds=rounds.drain_seconds if rounds.finished else math.nan,
        jobs_run=jobs_run,
        tasks=3 * len(ids),  # one delivery, then one resume and one message update each
        idle_resume_ms=idle_ms,
        idle_response_ms=[run.latencies_ms[0] for run in idle_runs],
        idle_stages=IdleStages.read(rig, ids[idle], rig.recorder.started()),
        problems=problems,
    )


# -- entry point -------------------------------------------------------------------------


def run(server: RedisServer, options: Options) -> Results:
    """Run the benchmark on ``server``; stop every process and delete the run's keys."""
    namespace = common.new_namespace("benchclicks")  # also the RQ queue's name
    with contextlib.ExitStack() as cleanup:
        rig = start_rig(options, server.url, namespace, cleanup)
        ids, bodies = prepare_clicks(rig)
        results = measure(rig, ids, bodies, server.description)
        rig.processes.keep_logs = bool(results.problems) or options.keep_logs
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = common.argument_parser(
        "bench.clicks", "Approve clicks against `handoff serve` and a bare Bolt app; print rates."
    )
    defaults = Options()
    sizes = {
        "clicks": "measured clicks per server",
        "concurrency": "client threads",
        "rounds": "alternating rounds the clicks are split into",
        "warmup": "warm-up clicks per server",
        "idle_samples": "clicks sent one by one at the end",
        "serve_workers": "gunicorn workers of both servers",
        "threads": "threads per gunicorn worker",
        "workers": "`handoff worker` processes",
    }
    common.add_options(parser, defaults, sizes)
    common.add_redis_option(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        default=defaults.timeout,
        help="seconds to wait for deliveries, resumes",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the servers' and worker's logs"
    )
    args = parser.parse_args(argv)
    sizes.pop("idle_samples")
    if min(getattr(args, name) for name in sizes) < 1:
        parser.error(f"{', '.join('--' + n.replace('_', '-') for n in sizes)} must be >= 1")
    if args.idle_samples < 0:
        parser.error("--idle-samples must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every check passed, 1 otherwise (130 when interrupted,
    after stopping the processes and deleting the run's keys)."""
    return common.measure_and_print(parse_args(argv), Options, run, interruptible=True)


if __name__ == "__main__":
    sys.exit(main())
