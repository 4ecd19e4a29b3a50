"""HTTP API benchmark: create+decide over HTTP, and many long-poll waits on one process.

Not a test: it measures and prints figures. It starts ``handoff api`` (a subprocess,
``python -m bot.cli api``, served by uvicorn as deployed, access log included) on the
benchmark's Redis, with an agent key (creates; its per-minute limit set out of reach) and
an admin key (decides), and measures in one run:

1. **create+decide throughput**: ``--concurrency`` client threads, each with its own
   ``httpx.Client`` (a persistent connection), create an approval with the agent key
   (``POST /v1/handoffs``) and approve it with the admin key
   (``POST /v1/handoffs/{id}/decision``), ``--count`` times. Alternating with it, the same
   create and approval through the Python client (``Handoffs.request_approval`` and
   ``Handoffs.decide``, straight to Redis) from as many threads. Both rates are the best of
   ``--rounds`` rounds; their ratio says what the HTTP hop costs. No target: a comparison.
2. **held waits**: a fresh ``handoff api`` process gets ``--waiters`` handoffs (created
   over HTTP by the agent key) and as many concurrent ``GET /v1/handoffs/{id}?wait=S``
   requests of that key, one connection each (raw asyncio streams in a thread of this
   process, so the client adds little of its own). Once the process has read them all and
   gone quiet, it measures the process's memory (``VmRSS``, before the waits and while
   holding them: memory per waiter, reported without a target) and its CPU while idle
   holding them (``utime + stime`` of ``/proc/<pid>/stat`` over ``--idle-seconds``; target
   < 2 % of a core, shown as < 20 ms of CPU per second). Then every handoff is decided
   through the Python client in a tight loop, each decision's start noted, and each
   waiter's latency runs from its handoff's decision to its answer arriving (both on this
   process's clock). Target: p99 < 50 ms with 1,000 waiters. All the decisions come at
   once, so the figure includes the queue of answers the process works through. Then, for
   information, as many waits again, decided ``--paced-rate`` a second: the latency of a
   wake with that many held, without a burst to work off.

Before the memory baseline, a warm-up holds and wakes ``--warmup-waiters`` waits (more
than the 40 threads of the server's thread pool, so the pool is full before "before").

Everything goes into a fresh random namespace, deleted at the end (nothing is flushed);
every process started is stopped, also on Ctrl-C or an error. Run from the repository
root::

    .venv/bin/python -m bench.api                                  # embedded server
    .venv/bin/python -m bench.api --redis-url redis://127.0.0.1:6379
    bench/run_all --quick --only api                               # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from redis import Redis

from bench import common
from bench.common import Figure, RedisServer, Target
from bench.lifecycle import run_threads
from bench.processes import (
    CLI,
    HOST,
    Processes,
    free_port,
    subprocess_env,
    wait_until_answering,
)
from store.api_keys import ApiKeys
from store.keys import KeySpace
from worker.client import Handoffs

CHANNEL = "C0BENCHAPPROVALS"
REVIEWER = "U0BENCH"
WAKE_P99_TARGET_MS = 50.0
"""Decision -> waiter answered, p99, with 1,000 waits held (issue 19)."""
IDLE_CPU_TARGET_PERCENT = 2.0
"""The API process's CPU while idle holding the waits, percent of one core ("near zero")."""
UNLIMITED_CREATES = 1_000_000_000
"""The agent key's creates per minute: the rate limit stays out of the measurement."""

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""Units of ``utime`` and ``stime`` in ``/proc/<pid>/stat`` per second."""
SETTLE_TIMEOUT_SECONDS = 60.0
"""How long the process may take to read every held wait and go quiet."""
QUIET_SECONDS = 0.5
QUIET_TICKS = 1
"""Quiet: at most this many clock ticks of CPU in ``QUIET_SECONDS``."""
CONNECTS_AT_ONCE = 100
"""Wait connections being opened at the same time (the rest queue behind them)."""
HTTP_TIMEOUT_SECONDS = 30.0
ERRORS_KEPT = 5
"""Distinct failed requests quoted in the report (all are counted)."""


@dataclass(frozen=True)
class Options:
    """The sizes of a run (defaults: the issue's)."""

    count: int = 2000
    """create+decide pairs per round, over HTTP and through the Python client each."""
    concurrency: int = 4
    """Client threads of both (each HTTP thread has its own connection)."""
    rounds: int = 2
    """Alternating rounds (HTTP, Python client); the best of each is kept."""
    warmup: int = 100
    """Untimed create+decide pairs of each kind before the rounds."""
    waiters: int = 1000
    """``?wait=`` requests held at once by one ``handoff api`` process."""
    warmup_waiters: int = 50
    """Waits held and woken before the memory baseline."""
    wait: float = 60.0
    """``?wait=`` of each held request, seconds (the API allows 60 at most)."""
    idle_seconds: float = 5.0
    """Seconds over which the idle CPU of the process holding the waits is measured."""
    paced_rate: float = 200.0
    """Then as many waits again, decided this many a second (0: not measured), for
    information: the wake of one decision, not a burst's queue."""


QUICK = Options(
    count=200, rounds=1, warmup=20, waiters=50, warmup_waiters=10, wait=30.0, idle_seconds=1.0
)
"""A smoke run: seconds, not figures."""


# -- the process under test --------------------------------------------------------------


@dataclass(frozen=True)
class ApiProcess:
    """A running ``handoff api`` and the keys to call it with."""

    name: str
    pid: int
    port: int
    agent_key: str
    admin_key: str

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


def create_keys(redis: Redis, namespace: str, label: str) -> tuple[str, str]:
    """A new agent key and admin key in ``namespace`` (both unlimited creates)."""
    keys = ApiKeys(redis, KeySpace(namespace))
    agent = keys.create(f"bench-agent-{label}", creates_per_minute=UNLIMITED_CREATES)
    admin = keys.create(f"bench-admin-{label}", admin=True, creates_per_minute=UNLIMITED_CREATES)
    return agent.key, admin.key


def start_api(
    processes: Processes, name: str, redis: Redis, redis_url: str, namespace: str
) -> ApiProcess:
    """Start ``handoff api`` on a free port over ``namespace``; return once it answers."""
    port = free_port()
    env = subprocess_env(redis_url, HANDOFF_NAMESPACE=namespace)
    processes.spawn(name, [*CLI, "api", "--host", HOST, "--port", str(port)], env)
    wait_until_answering(processes, name, f"http://{HOST}:{port}/healthz")
    agent, admin = create_keys(redis, namespace, name)
    pid = processes.running[name].pid
    common.progress(f"{name}: handoff api (pid {pid}) on port {port}, logs in {processes.log_dir}")
    return ApiProcess(name, pid, port, agent, admin)


def interrupt_twice(processes: Processes) -> None:
    """Stop the ``handoff api`` processes still running at once, not after their held
    waits (a run that broke off): uvicorn's first SIGINT waits for every open request to
    end, the second exits. ``Processes.finish`` then reaps them (and kills what is left)."""
    for _ in range(2):
        for process in processes.running.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGINT)
        time.sleep(0.2)


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (``VmRSS`` of ``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_ticks(pid: int) -> int:
    """User + system CPU of ``pid``, all its threads, in clock ticks."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    # Fields after the command name (which may hold spaces), from field 3 (state) on.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # fields 14 (utime) and 15 (stime)


def open_files(pid: int) -> int:
    """File descriptors ``pid`` has open (its sockets among them)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def file_limit(needed: int) -> Iterator[None]:
    """Raise this process's soft limit of open files to ``needed`` (if below; processes
    started inside inherit it), and put it back on exit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise RuntimeError(
                f"{needed:,} open files are needed, the hard limit is {hard:,} (ulimit -Hn)"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- phase 1: create+decide over HTTP against the Python client -----------------------


def create_body(i: int) -> dict[str, Any]:
    """The approval both ways create (the Python client's arguments, as an API body)."""
    return {
        "request_type": "approval",
        "run_id": f"bench-run-{i}",
        "thread_id": f"bench-thread-{i}",
        "action": {
            "name": "issue_refund",
            "args": {"order_id": f"A-{i:06d}", "amount_usd": 30, "reason": "charged twice"},
            "description": "Refund one of two identical charges",
        },
        "context": "The customer was charged twice for the same order; refund one charge.",
        "channel": CHANNEL,
        "reviewers": [REVIEWER],
    }


@dataclass
class Failures:
    """Requests answered otherwise than expected: counted, the first few quoted."""

    count: int = 0
    examples: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str) -> None:
        with self.lock:
            self.count += 1
            if len(self.examples) < ERRORS_KEPT and what not in self.examples:
                self.examples.append(what)

    def problems(self, label: str) -> list[str]:
        if not self.count:
            return []
        return [f"{self.count} {label} failed, e.g. {'; '.join(self.examples)}"]


def _answer(response: httpx.Response) -> str:
    return f"{response.request.method} {response.request.url.path} -> {response.status_code} " + (
        response.text[:200].replace("\n", " ")
    )


def http_create(client: httpx.Client, api: ApiProcess, i: int, failures: Failures) -> str | None:
    """Create approval ``i`` with the agent key; its id, or None (counted) if refused."""
    response = client.post("/v1/handoffs", json=create_body(i), headers=api.headers(api.agent_key))
    if response.status_code != 201:
        failures.add(_answer(response))
        return None
    return str(response.json()["id"])


def http_decide(client: httpx.Client, api: ApiProcess, handoff_id: str, failures: Failures) -> None:
    """Approve ``handoff_id`` with the admin key."""
    response = client.post(
        f"/v1/handoffs/{handoff_id}/decision",
        json={"outcome": "approved", "by": REVIEWER},
        headers=api.headers(api.admin_key),
    )
    if response.status_code != 200:
        failures.add(_answer(response))


def http_clients(api: ApiProcess, count: int) -> list[httpx.Client]:
    """One client (one connection) per thread."""
    return [httpx.Client(base_url=api.base_url, timeout=HTTP_TIMEOUT_SECONDS) for _ in range(count)]


@contextlib.contextmanager
def http_work(
    api: ApiProcess, concurrency: int, failures: Failures
) -> Iterator[Callable[[int], None]]:
    """Work item ``i`` over HTTP: create approval ``i`` and approve it; thread ``k`` (of
    ``lifecycle.run_threads``, which gives it every ``i`` with ``i % concurrency == k``)
    uses connection ``k``."""
    clients = http_clients(api, concurrency)

    def create_and_decide(i: int) -> None:
        client = clients[i % concurrency]
        handoff_id = http_create(client, api, i, failures)
        if handoff_id is not None:
            http_decide(client, api, handoff_id, failures)

    try:
        yield create_and_decide
    finally:
        for client in clients:
            client.close()


def python_work(handoffs: Handoffs) -> Callable[[int], None]:
    """Work item ``i`` through the Python client: the same approval, created and approved."""

    def create_and_decide(i: int) -> None:
        body = create_body(i)
        action = body["action"]
        handoff = handoffs.request_approval(
            run_id=body["run_id"],
            thread_id=body["thread_id"],
            action=action["name"],
            args=action["args"],
            description=action["description"],
            context=body["context"],
            channel=CHANNEL,
            reviewers=[REVIEWER],
        )
        handoffs.decide(handoff.id, "approved", by=REVIEWER, via="bench")

    return create_and_decide


@dataclass
class Rate:
    """One kind of create+decide over the rounds: the best round's rate, and the least
    CPU per pair of this process and of the API process (CPU is what the work costs;
    wall time also counts waiting for the other processes on a busy machine)."""

    rate: float = 0.0
    client_cpu_ms: float = math.inf
    api_cpu_ms: float = math.inf
    api_busy: float = math.nan
    """The API process's CPU over the best round's wall time (1.0: one core, always)."""

    def run_round(
        self, work: Callable[[int], None], count: int, concurrency: int, pid: int
    ) -> float:
        """Time one round; keep its figures; return pairs/s."""
        ticks, cpu = cpu_ticks(pid), time.process_time()
        seconds = run_threads(work, count, concurrency)
        rate = count / seconds
        self.client_cpu_ms = min(self.client_cpu_ms, (time.process_time() - cpu) / count * 1000)
        api_seconds = (cpu_ticks(pid) - ticks) / CLOCK_TICKS
        self.api_cpu_ms = min(self.api_cpu_ms, api_seconds / count * 1000)
        if rate > self.rate:
            self.rate, self.api_busy = rate, api_seconds / seconds
        return rate


@dataclass
class Throughput:
    """Figures of phase 1."""

    http: Rate = field(default_factory=Rate)
    python: Rate = field(default_factory=Rate)
    failures: Failures = field(default_factory=Failures)

    @property
    def ratio(self) -> float:
        """HTTP pairs/s over Python-client pairs/s."""
        return self.http.rate / self.python.rate if self.python.rate else math.nan


def measure_throughput(
    api: ApiProcess, redis: Redis, namespace: str, options: Options
) -> Throughput:
    """Warm both up, then alternate ``options.rounds`` rounds of each; keep the best.

    The Python client writes to a namespace of its own, so the API process (whose
    subscription hears every decision of its namespace) stays idle during its rounds.
    """
    result = Throughput()
    handoffs = Handoffs(redis, namespace=namespace)
    concurrency = options.concurrency
    with http_work(api, concurrency, result.failures) as work:
        run_threads(work, options.warmup, concurrency)
    run_threads(python_work(handoffs), options.warmup, concurrency)
    for number in range(1, options.rounds + 1):
        with http_work(api, concurrency, result.failures) as work:
            rate = result.http.run_round(work, options.count, concurrency, api.pid)
        common.progress(f"round {number}: create+decide over HTTP {rate:,.0f}/s")
        rate = result.python.run_round(python_work(handoffs), options.count, concurrency, api.pid)
        common.progress(f"round {number}: create+decide, Python client {rate:,.0f}/s")
    return result


# -- phase 2: many waits held by one process ---------------------------------------------


@dataclass
class Waits:
    """Held ``?wait=`` requests: when each answer arrived (``time.perf_counter()``)."""

    arrived: dict[str, float] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    """Handoff id -> the status its answer showed."""
    failures: Failures = field(default_factory=Failures)
    sent: threading.Event = field(default_factory=threading.Event)
    """Set once every request was written (or failed to connect)."""
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answered(self) -> int:
        with self.lock:
            return len(self.arrived)


def wait_request(api: ApiProcess, handoff_id: str, wait: float) -> bytes:
    """The raw HTTP/1.1 request of one wait, with the agent key."""
    return (
        f"GET /v1/handoffs/{handoff_id}?wait={wait:g} HTTP/1.1\r\n"
        f"Host: {HOST}:{api.port}\r\n"
        f"Authorization: Bearer {api.agent_key}\r\n"
        "Accept: application/json\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


async def hold_waits(api: ApiProcess, ids: list[str], wait: float, waits: Waits) -> None:
    """Send one wait per handoff, each on its own connection, and note when each answer
    arrives. Sets ``waits.sent`` once all are written and ``waits.done`` at the end."""
    connects = asyncio.Semaphore(CONNECTS_AT_ONCE)
    pending_sends = len(ids)

    def one_sent() -> None:
        nonlocal pending_sends
        pending_sends -= 1
        if pending_sends == 0:
            waits.sent.set()

    async def hold(handoff_id: str) -> None:
        writer = None
        try:
            async with connects:
                try:
                    reader, writer = await asyncio.open_connection(HOST, api.port)
                    writer.write(wait_request(api, handoff_id, wait))
                    await writer.drain()
                finally:
                    one_sent()
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = next(
                int(line.partition(":")[2])
                for line in lines
                if line.lower().startswith("content-length:")
            )
            body = await reader.readexactly(length)
            arrived = time.perf_counter()
            code = lines[0].split(" ", 2)[1]
            if code != "200":
                waits.failures.add(f"wait for {handoff_id} -> {code} {body[:200]!r}")
                return
            status = json.loads(body)["status"]
            with waits.lock:
                waits.arrived[handoff_id] = arrived
                waits.statuses[handoff_id] = status
        except (OSError, asyncio.IncompleteReadError, StopIteration, ValueError) as exc:
            waits.failures.add(f"wait for {handoff_id}: {type(exc).__name__}: {exc}")
        finally:
            if writer is not None:
                writer.close()

    try:
        await asyncio.wait_for(
            asyncio.gather(*(hold(handoff_id) for handoff_id in ids)), timeout=wait + 30
        )
    except TimeoutError:
        waits.failures.add(f"waits still unanswered {wait + 30:g} s after they were sent")
    finally:
        waits.sent.set()
        waits.done.set()


def start_waits(api: ApiProcess, ids: list[str], wait: float) -> tuple[Waits, threading.Thread]:
    """Hold the waits from a thread of their own (its own event loop); return once every
    request was written."""
    waits = Waits()
    thread = threading.Thread(
        target=lambda: asyncio.run(hold_waits(api, ids, wait, waits)),
        name="held-waits",
        daemon=True,
    )
    thread.start()
    if not waits.sent.wait(timeout=SETTLE_TIMEOUT_SECONDS):
        raise RuntimeError(f"the {len(ids):,} waits were not sent in {SETTLE_TIMEOUT_SECONDS:g} s")
    return waits, thread


def wait_until_quiet(pid: int, *, open_at_least: int, timeout: float) -> bool:
    """Wait until ``pid`` has ``open_at_least`` files open and then spends at most
    ``QUIET_TICKS`` of CPU in ``QUIET_SECONDS``: it has read every held request and is
    just holding them. False on timeout."""
    deadline = time.monotonic() + timeout
    while open_files(pid) < open_at_least:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    while time.monotonic() < deadline:
        ticks = cpu_ticks(pid)
        time.sleep(QUIET_SECONDS)
        if cpu_ticks(pid) - ticks <= QUIET_TICKS:
            return True
    return False


def create_over_http(api: ApiProcess, count: int, concurrency: int, first: int) -> list[str]:
    """Create ``count`` approvals with the agent key; their ids (refusals raise)."""
    failures = Failures()
    ids: list[str | None] = [None] * count
    clients = http_clients(api, concurrency)
    try:

        def create(i: int) -> None:
            ids[i] = http_create(clients[i % concurrency], api, first + i, failures)

        run_threads(create, count, concurrency)
    finally:
        for client in clients:
            client.close()
    if failures.count:
        raise RuntimeError(failures.problems("creates")[0])
    return [handoff_id for handoff_id in ids if handoff_id is not None]


def decide_all(handoffs: Handoffs, ids: list[str], rate: float = 0.0) -> dict[str, float]:
    """Approve every handoff, in a tight loop (``rate`` 0) or ``rate`` a second; when each
    decision started (``time.perf_counter()``)."""
    decided = {}
    start = time.perf_counter()
    for number, handoff_id in enumerate(ids):
        if rate:
            time.sleep(max(0.0, start + number / rate - time.perf_counter()))
        decided[handoff_id] = time.perf_counter()
        handoffs.decide(handoff_id, "approved", by=REVIEWER, via="bench")
    return decided


@dataclass
class Wakes:
    """One batch of held waits, all decided: from each decision to its waiter's answer."""

    rate: float
    """Decisions a second (0: a tight loop)."""
    decide_seconds: float = math.nan
    answer_seconds: float = math.nan
    """From the first decision to the last answer."""
    api_busy: float = math.nan
    """The API process's CPU over ``answer_seconds`` (1.0: one core, always)."""
    wake_ms: list[float] = field(default_factory=list)

    def describe(self) -> str:
        """``p50 2.1 ms, p90 ..., max ... (n=1,000)``."""
        values = self.wake_ms
        shown = ", ".join(
            f"{label} {_ms(common.percentile(values, q))}"
            for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        )
        return f"{shown} (n={len(values):,})"

    def busy(self) -> str:
        """How busy the API process was while it answered them."""
        return (
            f"first decision to last answer {_ms(self.answer_seconds * 1000)}, the API "
            f"process busy {self.api_busy:.0%} of a core meanwhile"
        )


@dataclass
class Held:
    """Figures of phase 2."""

    waiters: int
    rss_before: int = 0
    rss_holding: int = 0
    rss_after: int = 0
    idle_ticks: int = 0
    idle_seconds: float = math.nan
    tight: Wakes = field(default_factory=lambda: Wakes(0.0))
    paced: Wakes | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def bytes_per_waiter(self) -> float:
        if not self.rss_holding:
            return math.nan
        return (self.rss_holding - self.rss_before) / self.waiters

    @property
    def idle_cpu_percent(self) -> float:
        """CPU of the process holding the waits, percent of one core."""
        return self.idle_ticks / CLOCK_TICKS / self.idle_seconds * 100


def warm_up_waits(api: ApiProcess, handoffs: Handoffs, options: Options) -> list[str]:
    """Hold and wake ``options.warmup_waiters`` waits (untimed); problems, if any."""
    ids = create_over_http(api, options.warmup_waiters, options.concurrency, first=0)
    waits, thread = start_waits(api, ids, options.wait)
    # Not waiting for the process to go quiet: some waits are woken mid-request too.
    time.sleep(0.5)
    decide_all(handoffs, ids)
    thread.join(timeout=options.wait + 40)
    if waits.answered() != len(ids):
        return [f"warm-up: {waits.answered()} of {len(ids)} waits answered"]
    return waits.failures.problems("warm-up waits")


def hold(
    api: ApiProcess, ids: list[str], options: Options, files_before: int, problems: list[str]
) -> tuple[Waits, threading.Thread]:
    """Send a wait per handoff; return once the process holds them all and is quiet."""
    common.progress(f"holding {len(ids):,} waits (?wait={options.wait:g})")
    waits, thread = start_waits(api, ids, options.wait)
    settled = wait_until_quiet(
        api.pid, open_at_least=files_before + len(ids), timeout=SETTLE_TIMEOUT_SECONDS
    )
    if not settled:
        problems.append(
            f"the API process did not hold {len(ids):,} waits quietly within "
            f"{SETTLE_TIMEOUT_SECONDS:g} s ({open_files(api.pid) - files_before:,} "
            "connections more than before)"
        )
    return waits, thread


def decide_held(
    api: ApiProcess,
    handoffs: Handoffs,
    ids: list[str],
    waits: Waits,
    thread: threading.Thread,
    options: Options,
    wakes: Wakes,
    problems: list[str],
) -> None:
    """Decide the held handoffs at ``wakes.rate``, wait for every answer, fill ``wakes``."""
    early = waits.answered()
    if early:
        problems.append(f"{early} waits were answered before any decision")
    how = f"{wakes.rate:g} a second" if wakes.rate else "in a tight loop"
    common.progress(f"deciding {len(ids):,} handoffs {how}")
    ticks, started = cpu_ticks(api.pid), time.perf_counter()
    decided = decide_all(handoffs, ids, wakes.rate)
    wakes.decide_seconds = time.perf_counter() - started
    thread.join(timeout=options.wait + 40)
    if thread.is_alive():
        problems.append("the waits' thread did not finish")
    api_seconds = (cpu_ticks(api.pid) - ticks) / CLOCK_TICKS
    with waits.lock:
        wakes.wake_ms = [(waits.arrived[i] - decided[i]) * 1000 for i in ids if i in waits.arrived]
        if waits.arrived:
            wakes.answer_seconds = max(waits.arrived.values()) - started
            wakes.api_busy = api_seconds / wakes.answer_seconds
        not_approved = sum(1 for i in ids if waits.statuses.get(i, "approved") != "approved")
    problems += waits.failures.problems("waits")
    if len(wakes.wake_ms) != len(ids):
        problems.append(f"{len(wakes.wake_ms):,} of {len(ids):,} waits got their decision")
    if not_approved:
        problems.append(f"{not_approved} waits answered with a handoff not approved")


def measure_waits(api: ApiProcess, handoffs: Handoffs, options: Options) -> Held:
    """Warm up; hold ``options.waiters`` waits, measure memory and idle CPU, decide them
    all in a tight loop; then (``options.paced_rate``) as many again, decided at a pace."""
    held = Held(options.waiters)
    held.problems += warm_up_waits(api, handoffs, options)
    first = options.warmup_waiters
    ids = create_over_http(api, options.waiters, options.concurrency, first=first)
    # The warm-up's connections are closed by now (Connection: close); let it settle.
    wait_until_quiet(api.pid, open_at_least=0, timeout=SETTLE_TIMEOUT_SECONDS)
    files_before = open_files(api.pid)
    held.rss_before = rss_bytes(api.pid)
    waits, thread = hold(api, ids, options, files_before, held.problems)
    held.rss_holding = rss_bytes(api.pid)
    ticks, started = cpu_ticks(api.pid), time.perf_counter()
    time.sleep(options.idle_seconds)
    held.idle_ticks = cpu_ticks(api.pid) - ticks
    held.idle_seconds = time.perf_counter() - started
    decide_held(api, handoffs, ids, waits, thread, options, held.tight, held.problems)
    held.rss_after = rss_bytes(api.pid)
    if options.paced_rate > 0:
        first += options.waiters
        ids = create_over_http(api, options.waiters, options.concurrency, first=first)
        wait_until_quiet(api.pid, open_at_least=0, timeout=SETTLE_TIMEOUT_SECONDS)
        waits, thread = hold(api, ids, options, open_files(api.pid), held.problems)
        held.paced = Wakes(options.paced_rate)
        decide_held(api, handoffs, ids, waits, thread, options, held.paced, held.problems)
    return held


# -- the report --------------------------------------------------------------------------


@dataclass
class ApiReport:
    """What one run measured."""

    server: str
    options: Options
    throughput: Throughput
    held: Held
    log_dir: str

    @property
    def problems(self) -> list[str]:
        """Failed requests and waits not answered with their decision (not missed targets)."""
        return self.throughput.failures.problems("create+decide requests") + self.held.problems

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table."""
        threads = self.options.concurrency
        n = self.held.waiters
        one, held = self.throughput, self.held
        figures = [
            Figure(f"create+decide over HTTP, {threads} threads", one.http.rate, "/s"),
            Figure(f"create+decide, Python client, {threads} threads", one.python.rate, "/s"),
            Figure("create+decide, HTTP / Python client", one.ratio, "x"),
            Figure(f"API memory per held wait, {n:,} held", held.bytes_per_waiter, "B"),
            Figure(
                f"API CPU per second idle, {n:,} waits held",
                held.idle_cpu_percent * 10,  # ms of CPU per s = percent of a core x 10
                "ms",
                Target("<", IDLE_CPU_TARGET_PERCENT * 10),
            ),
            *common.latency_figures(
                f"decision -> wait answered, {n:,} held, tight loop",
                held.tight.wake_ms,
                p99=Target("<", WAKE_P99_TARGET_MS),
            ),
        ]
        if held.paced is not None:
            figures += common.latency_figures(
                f"decision -> wait answered, {n:,} held, {held.paced.rate:g}/s",
                held.paced.wake_ms,
            )
        return figures

    def print_report(self) -> None:
        """Both phases, with what the figures are made of."""
        options, one, held = self.options, self.throughput, self.held
        print(f"\nslack-handoff HTTP API benchmark — {self.server}")
        print(
            f"  {os.cpu_count()} CPUs; load average at the end {common.load_average()}; "
            "`handoff api` (uvicorn, one process, access log on)"
        )
        print(
            f"\ncreate+decide: {options.count:,} pairs per round, {options.rounds} alternating "
            f"rounds, best kept; {options.concurrency} client threads each way"
        )
        print(f"  {'':<34}{'HTTP':>16}{'Python client':>16}")
        rows = (
            ("pairs/s, best round", f"{one.http.rate:,.0f}", f"{one.python.rate:,.0f}"),
            (
                "this process's CPU per pair",
                f"{one.http.client_cpu_ms:.2f} ms",
                f"{one.python.client_cpu_ms:.2f} ms",
            ),
            (
                "API process's CPU per pair",
                f"{one.http.api_cpu_ms:.2f} ms",
                f"{one.python.api_cpu_ms:.2f} ms",
            ),
            (
                "API process busy, best round",
                f"{one.http.api_busy:.0%} of a core",
                f"{one.python.api_busy:.0%}",
            ),
        )
        for label, http, python in rows:
            print(f"  {label:<34}{http:>16}{python:>16}")
        print(f"  HTTP / Python client: {one.ratio:.2f}x")
        mib = 1024 * 1024
        print(f"\n{held.waiters:,} concurrent ?wait={options.wait:g} requests, one process")
        print(
            f"  RSS before {held.rss_before / mib:.1f} MiB, holding {held.rss_holding / mib:.1f} "
            f"MiB, after the answers {held.rss_after / mib:.1f} MiB: "
            f"{_bytes(held.bytes_per_waiter)} per held wait (no target)"
        )
        verdict = "met" if held.idle_cpu_percent < IDLE_CPU_TARGET_PERCENT else "NOT met"
        print(
            f"  CPU idle holding them: {held.idle_cpu_percent:.2f} % of a core over "
            f"{held.idle_seconds:.1f} s (target < {IDLE_CPU_TARGET_PERCENT:g} %) {verdict}"
        )
        tight = held.tight
        p99 = common.percentile(tight.wake_ms, 0.99)
        verdict = "met" if p99 < WAKE_P99_TARGET_MS else "NOT met"
        print(
            f"  all decided in a tight loop, {_rate(held.waiters, tight.decide_seconds)}; "
            "decision -> wait answered:"
        )
        print(f"    {tight.describe()}; target p99 < {WAKE_P99_TARGET_MS:g} ms: {verdict}")
        print(f"    {tight.busy()}")
        paced = held.paced
        if paced is not None:
            print(
                f"  {held.waiters:,} more held, decided {paced.rate:g} a second "
                f"({_rate(held.waiters, paced.decide_seconds)}); decision -> wait answered:"
            )
            print(f"    {paced.describe()}; for information (one wake, no burst to work off)")
            print(f"    {paced.busy()}")
        for problem in self.problems:
            print(f"FAIL: {problem}")
        if self.problems:
            print(f"logs of the API processes: {self.log_dir}")


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def _rate(count: int, seconds: float) -> str:
    if math.isnan(seconds) or seconds <= 0:
        return "not measured"
    return f"{seconds:.2f} s, {count / seconds:,.0f}/s"


def _bytes(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f} B"


# -- entry point -------------------------------------------------------------------------


def run(server: RedisServer, options: Options) -> ApiReport:
    """Run both phases on ``server``; stop every process and delete the run's keys."""
    namespace = common.new_namespace("benchapi")
    python_namespace = f"{namespace}py"
    redis = server.client()
    processes = Processes("handoff-bench-api-")
    try:
        api = start_api(processes, "api-throughput", redis, server.url, namespace)
        throughput = measure_throughput(api, redis, python_namespace, options)
        processes.stop_all()
        # A fresh process holds the waits, so its memory before them is only a warm-up's.
        with file_limit(options.waiters + options.warmup_waiters + 256):
            api = start_api(processes, "api-waits", redis, server.url, namespace)
            held = measure_waits(api, Handoffs(redis, namespace=namespace), options)
            processes.stop_all()
        report = ApiReport(server.description, options, throughput, held, str(processes.log_dir))
        processes.keep_logs = bool(report.problems)
        return report
    finally:
        interrupt_twice(processes)
        processes.finish()
        for name in (namespace, python_namespace):
            common.delete_namespace(redis, name)
        redis.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = common.argument_parser(
        "bench.api",
        "create+decide over HTTP against the Python client; many ?wait= requests held by "
        "one `handoff api` process (memory, idle CPU, wake latency).",
    )
    defaults = Options()
    common.add_options(
        parser,
        defaults,
        {
            "count": "create+decide pairs per round and way",
            "concurrency": "client threads of both ways",
            "rounds": "alternating rounds",
            "warmup": "untimed pairs of each way first",
            "waiters": "?wait= requests held at once",
            "warmup_waiters": "waits held and woken before the memory baseline",
        },
    )
    common.add_options(
        parser,
        defaults,
        {
            "wait": "?wait= seconds of each held request (at most 60)",
            "idle_seconds": "seconds the idle CPU is measured over",
            "paced_rate": "decisions a second of a second batch of waits (0: none)",
        },
        kind=float,
    )
    common.add_redis_option(parser)
    args = parser.parse_args(argv)
    if min(args.count, args.concurrency, args.rounds, args.waiters, args.warmup_waiters) < 1:
        parser.error("sizes must be at least 1 (--warmup may be 0)")
    if args.warmup < 0 or args.paced_rate < 0 or args.idle_seconds <= 0:
        parser.error("--warmup and --paced-rate must be >= 0, --idle-seconds > 0")
    if not 0 < args.wait <= 60:
        parser.error("--wait must be more than 0 and at most 60 (the API's limit)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every request and wait was answered as expected, 1
    otherwise (130 when interrupted, after stopping the processes and deleting the keys)."""
    return common.measure_and_print(parse_args(argv), Options, run, interruptible=True)


if __name__ == "__main__":
    sys.exit(main())
