"""Peer benchmark: slack-handoff next to awaithumans, in one run on this machine.

Not a test: it measures and prints figures. Both products get the same work: ``--agents``
agents create ``--requests`` refund approvals through the product's own client, each
agent waiting for each of its requests with the product's recommended wait, and
``--reviewers`` people decide them at ``--decision-rate`` decisions a second through the
product's own completion path:

- **slack-handoff**, our stack: ``handoff serve`` (gunicorn), ``--workers`` ``handoff
  worker`` processes, the Slack stand-in (in this process, playing Slack), the machine's
  Redis (``--redis-url``), and ``handoff api`` for the HTTP run. Twice: agents on the
  Python client (``Handoffs.request_approval``, ``Handoffs.wait``), then on the HTTP API
  (``POST /v1/handoffs``, ``GET /v1/handoffs/{id}?wait=60``). Reviewers click Approve on
  the posted messages: signed ``block_actions`` requests to ``handoff serve``, built by
  the stand-in as Slack builds them.
- **awaithumans** (Apache-2.0; the peer), installed by this benchmark in a virtualenv of
  its own under a temporary folder (``pip install 'awaithumans[server]==<version>'``: its
  dependencies never meet ours), started with its dev defaults (``awaithumans dev``:
  FastAPI under uvicorn, SQLite in ``.awaithumans/dev.db`` of its working folder) on a
  free loopback port, stopped at the end and the folder deleted. Agents call its client's
  ``await_human`` (create, then long-poll ``/api/tasks/{id}/poll``); reviewers complete
  with ``POST /api/tasks/{id}/complete``, the route its dashboard posts to, with its admin
  token (the agents' too) where the dashboard sends an operator's session cookie: the
  same route, one lookup fewer. It sends no notification (no Slack configured; ours posts
  every request to the stand-in and updates it once decided).

The agents run in a process of their own per product and run, each by its product's
Python (``bench/peer_agents.py``); the reviewers are threads of this process, one
persistent connection each, sending decision ``k`` at ``k / --decision-rate`` seconds.

Figures, side by side and as ratios:

- **requests created per second**: ``--requests`` over the time from the first create's
  start to the last create's return, in the agents' process;
- **decision -> agent running again**: from a reviewer sending the decision to the
  agent's wait returning it (both this machine's wall clock), p50 and p99; next to them
  HumanLayer's fixed 3-second poll, computed: a decision at a random moment of a 3 s
  period waits U(0, 3 s) for the next poll;
- **storage per pending request**: ours, the sum of ``MEMORY USAGE`` of the run's
  namespace keys without a TTL once every request is created and posted, minus before, over
  the requests (``bench.memory``; what expires within minutes on its own, operation
  replies and job markers, is shown apart: a request waiting for days does not keep it);
  the peer's, the size of its SQLite files (database plus any
  ``-wal`` or ``-journal``) once every request is created, minus before, over the
  requests: its database runs in rollback-journal mode (``journal_mode=delete``), so a
  committed row is in the main file, and nothing is checkpointed or vacuumed;
- **CPU seconds per request**, all of each product's processes (their process groups'
  utime + stime + children's, from /proc; Redis's INFO cpu less what the shared server
  spent for other clients over 2 s just before, an estimate), agents included, this
  process (the stand-in playing Slack, the reviewers playing people) not; from the first
  create until every agent ran again and every product's own follow-up work was done
  (our message updates).

Targets (issue 25): decision -> agent running p99 at least 100x lower than the peer's;
requests created per second at least 5x the peer's at the same client concurrency;
storage per pending request lower than the peer's. A missed target is a note saying by
how much; the report says where the peer wins and why.

``--quick`` (what ``bench/run_all --quick`` and the tests run) measures our side only at
smoke sizes, and never installs or starts the peer. Everything runs in a fresh random
namespace and RQ queue, deleted at the end; every process is stopped and the peer's
folder deleted, also on Ctrl-C. Run from the repository root::

    .venv/bin/python -m bench.peers --redis-url redis://127.0.0.1:6379/1
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import itertools
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol

from redis import Redis
from rq.registry import StartedJobRegistry
from slack_sdk.signature import SignatureVerifier

from bench import common
from bench.api import Failures, create_keys
from bench.clicks import (
    CpuMeter,
    get_all,
    group_cpu_seconds,
    redis_cpu_seconds,
    wait_until_posted,
)
from bench.common import Figure, RedisServer, Target
from bench.memory import lasting_and_expiring
from bench.our_stack import (
    SIGNING_SECRET,
    run_redis,
    server_env,
    spawn_serve,
    spawn_workers,
    start_standin,
    wait_for_serve,
)
from bench.peer_agents import REVIEWER
from bench.processes import (
    CLI,
    HOST,
    Processes,
    free_port,
    subprocess_env,
    wait_for_workers,
    wait_until_answering,
)
from bot.blockkit import ids as block_ids
from bot.http.wsgi import EVENTS_PATH
from bot.standin import StandInUser
from bot.standin.server import interaction_body
from worker.client import Handoffs
from worker.queues import TaskQueues

PEER = "awaithumans"
PEER_SPEC = "awaithumans[server]==0.1.12"
"""What ``pip install`` installs in the peer's virtualenv: a fixed release, so runs compare."""
OURS_PYTHON = "slack-handoff (Python client)"
OURS_HTTP = "slack-handoff (HTTP API)"

CREATE_RATIO_TARGET = 5.0
"""Our requests created per second over the peer's, at least."""
WAKE_P99_RATIO_TARGET = 100.0
"""The peer's decision -> agent running p99 over ours, at least."""
STORAGE_RATIO_TARGET = 1.0
"""Our storage per pending request over the peer's, below."""
POLL_BASELINE_SECONDS = 3.0
"""HumanLayer's fixed poll period: the computed baseline's."""

AGENTS_SCRIPT = common.ROOT / "bench" / "peer_agents.py"
START_TIMEOUT_SECONDS = 180.0
"""The peer runs its database migrations before it answers."""
INSTALL_TIMEOUT_SECONDS = 900.0
POLL_SECONDS = 0.05
REQUEST_TIMEOUT_SECONDS = 30.0
PEER_REVIEWER_EMAIL = "reviewer@example.com"
REDIS_BACKGROUND_SECONDS = 2.0
"""How long the shared Redis's CPU is read, our stack idle, before each of our runs."""


@dataclass(frozen=True)
class Options:
    """The sizes of a run (defaults: the issue's)."""

    requests: int = 1000
    """Requests created, waited for and decided per product and client."""
    agents: int = 8
    """Agents creating them (the client concurrency), per product."""
    reviewers: int = 4
    """Reviewers deciding them (one connection each), per product."""
    decision_rate: float = 50.0
    """Decisions a second, all reviewers together (0: as fast as they can)."""
    warmup: int = 20
    """Requests through the whole path, untimed, before each product's measured run."""
    workers: int = 2
    """``handoff worker`` processes."""
    serve_workers: int = 2
    """gunicorn worker processes of ``handoff serve``."""
    threads: int = 8
    """Threads per gunicorn worker."""
    peer: bool = True
    """Install, start and measure the peer (``--quick`` never does)."""
    peer_spec: str = PEER_SPEC
    """The pip requirement of the peer."""
    timeout: float = 600.0
    """Seconds any one phase may take."""


QUICK = Options(
    requests=10,
    agents=2,
    reviewers=2,
    decision_rate=100.0,
    warmup=2,
    workers=1,
    serve_workers=1,
    threads=2,
    peer=False,
)
"""A smoke run of our side only: seconds, not figures; the peer is not installed."""


class PeerUnavailable(Exception):
    """The peer could not be installed or started: it is skipped, with this reason."""


# -- the agents' process -----------------------------------------------------------------


@dataclass
class AgentEvents:
    """What an agents' process reported (``bench/peer_agents.py``)."""

    ready: bool = False
    created: dict[int, str] = field(default_factory=dict)
    """Request number -> id."""
    ran: dict[str, float] = field(default_factory=dict)
    """Id -> wall-clock time its agent's wait returned."""
    statuses: dict[str, str] = field(default_factory=dict)
    creates: tuple[float, float] | None = None
    """(first create started, last create returned), wall clock."""
    errors: list[str] = field(default_factory=list)
    done: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    def take(self, line: bytes) -> None:
        """Record one line of the process's output."""
        try:
            event = json.loads(line)
        except ValueError:
            event = {"error": f"not an event: {line[:200]!r}"}
        with self.changed:
            if "ready" in event:
                self.ready = True
            elif "created" in event:
                self.created[int(event["created"])] = str(event["id"])
            elif "ran" in event:
                self.ran[str(event["ran"])] = float(event["at"])
                self.statuses[str(event["ran"])] = str(event["status"])
            elif "creates" in event:
                self.creates = (event["creates"]["started"], event["creates"]["finished"])
            elif "done" in event:
                self.done = True
            else:
                self.errors.append(str(event.get("error", event)))
            self.changed.notify_all()


class AgentProcess:
    """One agents' process: started, told to go, read."""

    def __init__(
        self,
        processes: Processes,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: Path,
    ) -> None:
        self.name = name
        self.processes = processes
        self.events = AgentEvents()
        with open(processes.log_dir / f"{name}.log", "wb") as log:
            self.process = subprocess.Popen(
                list(argv),
                env=env,
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        processes.running[name] = self.process
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        for line in stdout:
            self.events.take(line)

    def wait_for(self, condition: Callable[[AgentEvents], bool], what: str, timeout: float) -> None:
        """Wait until ``condition(events)``; raise, with the end of the process's log, if
        it exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            with self.events.changed:
                if condition(self.events) or self.events.changed.wait_for(
                    lambda: condition(self.events), timeout=0.2
                ):
                    return
            if self.process.poll() is not None:
                self._reader.join(timeout=5)  # what it printed last, read outside the lock
                with self.events.changed:
                    if condition(self.events):
                        return
                raise RuntimeError(
                    f"{self.name} exited ({self.process.returncode}) before {what}:\n"
                    f"{self.processes.log_tail(self.name)}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: {what} did not happen within {timeout:g} s")

    def go(self) -> None:
        """Let the agents start creating."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(b"go\n")
        stdin.flush()

    def finish(self) -> None:
        """Let the process exit (it waits to be told, after its last wait) and reap it."""
        stdin = self.process.stdin
        assert stdin is not None
        with contextlib.suppress(OSError):
            stdin.write(b"exit\n")
            stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)
        # Gone, so no longer one of the processes that must stay up.
        self.processes.running.pop(self.name, None)


# -- reviewers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One reviewer request: where to POST what, with headers made when it is sent (a
    Slack signature carries the time)."""

    request_id: str
    path: str
    body: bytes
    headers: Callable[[bytes], dict[str, str]]


def decide_paced(
    port: int, decisions: Sequence[Decision], reviewers: int, rate: float, failures: Failures
) -> dict[str, float]:
    """Send every decision from ``reviewers`` threads (a persistent connection each),
    decision ``k`` not before ``k / rate`` seconds from the start; return when each was
    sent (wall clock), by request id. Answers other than 200 are counted in ``failures``."""
    sent: dict[str, float] = {}
    lock = threading.Lock()
    order = itertools.count()  # next() on it is atomic under the GIL
    start = time.monotonic() + 0.1

    def review() -> None:
        connection = http.client.HTTPConnection(HOST, port, timeout=REQUEST_TIMEOUT_SECONDS)
        try:
            while (k := next(order)) < len(decisions):
                if rate > 0:
                    time.sleep(max(0.0, start + k / rate - time.monotonic()))
                decision = decisions[k]
                headers = decision.headers(decision.body)
                at = time.time()
                try:
                    connection.request("POST", decision.path, body=decision.body, headers=headers)
                    with connection.getresponse() as response:
                        answer = response.read()
                        status = response.status
                except (OSError, http.client.HTTPException) as exc:
                    connection.close()
                    failures.add(f"{decision.path}: {type(exc).__name__}: {exc}")
                    continue
                if status != 200:
                    failures.add(f"{decision.path} -> {status} {answer[:200]!r}")
                    continue
                with lock:
                    sent[decision.request_id] = at
        finally:
            connection.close()

    threads = [threading.Thread(target=review, daemon=True) for _ in range(reviewers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sent


# -- one product, one client ----------------------------------------------------------


class Stack(Protocol):
    """What ``measure_side`` needs of a running product."""

    def clocks(self) -> dict[str, Callable[[], float]]:
        """CPU clocks of the product's processes (the agents' are added)."""
        ...

    def storage_bytes(self) -> tuple[int, int]:
        """Bytes the product's storage holds now: what it keeps while requests wait, and what
        it drops within minutes on its own."""
        ...

    def ready_for_decisions(self, ids: Sequence[str]) -> None:
        """Wait until people can decide ``ids`` (ours: their messages are posted)."""
        ...

    def decisions(self, ids: Sequence[str]) -> list[Decision]:
        """The reviewer request that approves each of ``ids``."""
        ...

    @property
    def decision_port(self) -> int:
        """Where reviewers send them."""
        ...

    def settle(self) -> None:
        """Wait until the product's follow-up work is done (ours: message updates)."""
        ...

    def decided_at(self, ids: Sequence[str]) -> dict[str, float]:
        """When each decision was committed, as the product recorded it (wall clock)."""
        ...


@dataclass
class Side:
    """What one product and client measured."""

    label: str
    wait: str
    """How its agents wait, for the table."""
    requests: int = 0
    create_seconds: float = math.nan
    wake_ms: list[float] = field(default_factory=list)
    """Decision sent by the reviewer -> the agent's wait returned it."""
    commit_wake_ms: list[float] = field(default_factory=list)
    """Decision committed (the product's own record) -> the agent's wait returned it."""
    storage_bytes: float = math.nan
    """Per pending request, what stays while it waits."""
    expiring_bytes: float = 0.0
    """Per pending request, what the product drops within minutes on its own (our operation
    replies and job markers: a request waiting for days does not keep them)."""
    create_cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds of each process from the first create until all were ready for people."""
    decide_cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds from the first decision until every agent ran and the product settled."""
    others_busy: float = 0.0
    """CPUs kept busy by unrelated processes on average."""
    held_seconds: float = math.nan
    """From the last create to the first decision: the waits held meanwhile."""
    decide_seconds: float = math.nan
    problems: list[str] = field(default_factory=list)

    @property
    def creates_per_second(self) -> float:
        return self.requests / self.create_seconds if self.create_seconds > 0 else math.nan

    def cpu_ms_per_request(self, phase: dict[str, float] | None = None) -> float:
        """CPU ms per request of the product's processes (one phase, or both)."""
        if not self.requests:
            return math.nan
        phases = [phase] if phase is not None else [self.create_cpu, self.decide_cpu]
        return sum(sum(p.values()) for p in phases) * 1000 / self.requests

    def p(self, fraction: float) -> float:
        """A percentile of decision sent -> agent running (ms)."""
        return common.percentile(self.wake_ms, fraction)

    def committed_p(self, fraction: float) -> float:
        """A percentile of decision committed -> agent running (ms)."""
        return common.percentile(self.commit_wake_ms, fraction)


def product_cpu(meter: CpuMeter, names: Sequence[str]) -> dict[str, float]:
    """The CPU seconds a meter counted for the product's processes ``names``."""
    return {name: meter.used.get(name, 0.0) for name in names}


def measure_side(
    stack: Stack,
    agents: AgentProcess,
    side: Side,
    count: int,
    options: Options,
) -> Side:
    """Run ``count`` requests through ``stack`` with the started ``agents``; fill ``side``."""
    agents.wait_for(lambda e: e.ready, "the agents were ready", START_TIMEOUT_SECONDS)
    clocks = stack.clocks() | {"agents": functools.partial(group_cpu_seconds, agents.pid)}
    create_meter, decide_meter = CpuMeter(clocks), CpuMeter(clocks)
    before, expiring_before = stack.storage_bytes()
    with create_meter.measure():
        agents.go()
        agents.wait_for(lambda e: e.creates is not None, "every create returned", options.timeout)
        ids = [agents.events.created[i] for i in sorted(agents.events.created)]
        stack.ready_for_decisions(ids)
    created_at = time.monotonic()
    lasting, expiring = stack.storage_bytes()
    side.storage_bytes = (lasting - before) / max(1, len(ids))
    side.expiring_bytes = (expiring - expiring_before) / max(1, len(ids))
    decisions = stack.decisions(ids)
    failures = Failures()
    side.held_seconds = time.monotonic() - created_at
    with decide_meter.measure():
        started = time.monotonic()
        sent = decide_paced(
            stack.decision_port, decisions, options.reviewers, options.decision_rate, failures
        )
        agents.wait_for(
            lambda e: e.done or len(e.ran) >= len(sent), "every agent ran again", options.timeout
        )
        stack.settle()
        side.decide_seconds = time.monotonic() - started
    agents.finish()
    events = agents.events
    assert events.creates is not None
    side.requests = len(ids)
    side.create_seconds = events.creates[1] - events.creates[0]
    side.wake_ms = [(events.ran[i] - sent[i]) * 1000 for i in ids if i in sent and i in events.ran]
    committed = stack.decided_at([i for i in ids if i in events.ran])
    side.commit_wake_ms = [(events.ran[i] - at) * 1000 for i, at in committed.items()]
    side.create_cpu = product_cpu(create_meter, list(clocks))
    side.decide_cpu = product_cpu(decide_meter, list(clocks))
    seconds = create_meter.seconds + decide_meter.seconds
    others = create_meter.used.get("others", 0.0) + decide_meter.used.get("others", 0.0)
    side.others_busy = others / seconds if seconds else 0.0
    side.problems += failures.problems("decisions")
    side.problems += [f"agents: {error}" for error in events.errors[:5]]
    if len(events.errors) > 5:
        side.problems.append(f"agents: {len(events.errors) - 5} more errors")
    if len(ids) != count:
        side.problems.append(f"{len(ids)} of {count} requests were created")
    if len(side.wake_ms) != len(ids):
        side.problems.append(f"{len(side.wake_ms)} of {len(ids)} agents saw their decision")
    not_approved = [i for i in ids if events.statuses.get(i, "approved") != "approved"]
    if not_approved:
        side.problems.append(f"{len(not_approved)} agents got another outcome than approved")
    return side


# -- our stack ---------------------------------------------------------------------------


class OurStack:
    """``handoff serve``, the workers, the stand-in and Redis, on a fresh namespace; and
    ``handoff api`` once ``start_api`` is called."""

    def __init__(
        self, server: RedisServer, options: Options, processes: Processes, cleanup: Any
    ) -> None:
        self.options = options
        self.processes = processes
        self.redis_url = server.url
        self.namespace = common.new_namespace("benchpeers")  # also the RQ queue's name
        self.redis: Redis = run_redis(server.url, self.namespace, self.namespace, cleanup)
        # Run first on the way out: no worker may write keys once they are deleted.
        cleanup.callback(processes.stop_all)
        self.handoffs = Handoffs(self.redis, namespace=self.namespace)
        self.standin = start_standin(
            cleanup, users=[StandInUser(REVIEWER, "reviewer")], ack_timeout=REQUEST_TIMEOUT_SECONDS
        )
        self.env = server_env(server.url, self.standin.api_url, self.namespace, self.namespace)
        self.serve_port = spawn_serve(
            processes,
            "serve",
            self.env,
            serve_workers=options.serve_workers,
            threads=options.threads,
        )
        self.worker_names = spawn_workers(processes, self.namespace, options.workers, self.env)
        wait_for_serve(processes, "serve", self.serve_port)
        wait_for_workers(self.redis, processes, self.worker_names)
        self.api_port: int | None = None
        self.api_key = ""
        self.redis_background = 0.0
        """CPUs the shared Redis spends on other clients (``measure_redis_background``)."""
        self.verifier = SignatureVerifier(SIGNING_SECRET)

    def start_api(self) -> None:
        """Start ``handoff api`` on the namespace, with an agent key."""
        self.api_port = free_port()
        argv = [*CLI, "api", "--host", HOST, "--port", str(self.api_port)]
        self.processes.spawn("api", argv, self.env)
        wait_until_answering(self.processes, "api", f"http://{HOST}:{self.api_port}/healthz")
        self.api_key, _ = create_keys(self.redis, self.namespace, "peers")

    def agents(self, mode: str, count: int, options: Options, tag: str) -> AgentProcess:
        """Start the agents' process of ``mode`` (``handoffs`` or ``http``)."""
        env = subprocess_env(self.redis_url, HANDOFF_NAMESPACE=self.namespace)
        if mode == "http":
            env |= {
                "BENCH_API_URL": f"http://{HOST}:{self.api_port}",
                "BENCH_API_KEY": self.api_key,
            }
        argv = [
            sys.executable,
            "-m",
            "bench.peer_agents",
            mode,
            *_agent_options(count, options, tag),
        ]
        return AgentProcess(self.processes, f"agents-{tag}", argv, env, common.ROOT)

    def clocks(self) -> dict[str, Callable[[], float]]:
        running = self.processes.running
        names = ["serve", *self.worker_names, *(["api"] if "api" in running else [])]
        clocks: dict[str, Callable[[], float]] = {
            name: functools.partial(group_cpu_seconds, running[name].pid) for name in names
        }
        background = self.redis_background
        clocks["redis"] = lambda: redis_cpu_seconds(self.redis) - background * time.monotonic()
        return clocks

    def measure_redis_background(self) -> None:
        """How many CPUs the shared Redis spends for its other clients, over
        ``REDIS_BACKGROUND_SECONDS`` with our stack idle: the Redis clock of the next run
        subtracts that much, so our figure is what our run added (an estimate: other
        clients' load varies)."""
        before, started = redis_cpu_seconds(self.redis), time.monotonic()
        time.sleep(REDIS_BACKGROUND_SECONDS)
        seconds = time.monotonic() - started
        self.redis_background = max(0.0, (redis_cpu_seconds(self.redis) - before) / seconds)

    def storage_bytes(self) -> tuple[int, int]:
        return lasting_and_expiring(self.redis, self.namespace)

    def ready_for_decisions(self, ids: Sequence[str]) -> None:
        wait_until_posted(self.handoffs, ids, self.processes, self.options.timeout)

    @property
    def decision_port(self) -> int:
        return self.serve_port

    def decisions(self, ids: Sequence[str]) -> list[Decision]:
        """The signed Approve click on each posted message, as the stand-in makes it."""
        decisions = []
        for handoff in get_all(self.handoffs, ids):
            refs = handoff.message_refs
            message = self.standin.message(refs["channel"], refs["ts"])
            payload = self.standin.click_payload(REVIEWER, message, block_ids.APPROVE)
            decisions.append(
                Decision(handoff.id, EVENTS_PATH, interaction_body(payload), self._signed)
            )
        return decisions

    def _signed(self, body: bytes) -> dict[str, str]:
        timestamp = str(int(time.time()))
        return {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": str(
                self.verifier.generate_signature(timestamp=timestamp, body=body)
            ),
        }

    def decided_at(self, ids: Sequence[str]) -> dict[str, float]:
        """``decided_at`` of each handoff: the DECIDE script's time (Redis's clock, ms)."""
        return {
            handoff.id: handoff.decided_at.timestamp()
            for handoff in get_all(self.handoffs, ids)
            if handoff.decided_at is not None
        }

    def settle(self) -> None:
        """Wait until the outbox is empty and RQ holds no job: every message update done."""
        outbox = self.handoffs.store.keys.outbox
        queues = TaskQueues.named(self.redis, self.namespace).distinct
        started = [StartedJobRegistry(queue=queue) for queue in queues]
        deadline = time.monotonic() + self.options.timeout
        while time.monotonic() < deadline:
            self.processes.check_alive()
            jobs = sum(q.count for q in queues) + sum(r.count for r in started)
            if int(self.redis.zcard(outbox)) == 0 and jobs == 0:
                return
            time.sleep(POLL_SECONDS)
        raise TimeoutError(f"the workers did not finish within {self.options.timeout:g} s")


def _agent_options(count: int, options: Options, tag: str) -> list[str]:
    return [
        "--count",
        str(count),
        "--agents",
        str(options.agents),
        "--tag",
        tag,
        "--timeout",
        str(options.timeout),
    ]


# -- the peer ----------------------------------------------------------------------------


class PeerStack:
    """awaithumans in a virtualenv under ``folder``, its server started with its dev
    defaults in ``folder/run`` (so its database is ``folder/run/.awaithumans/dev.db``)."""

    def __init__(self, folder: Path, options: Options, processes: Processes) -> None:
        self.folder = folder
        self.options = options
        self.processes = processes
        self.venv = folder / "venv"
        self.home = folder / "home"
        """HOME of the peer's processes: its dev server writes a discovery file there."""
        self.run_dir = folder / "run"
        self.database = self.run_dir / ".awaithumans" / "dev.db"
        self.port = 0
        self.token = ""
        self.version = ""

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment: nothing of ours (no PYTHONPATH, virtualenv, Slack or
        handoff settings), its own HOME."""
        kept = ("PATH", "LANG", "LC_ALL", "TMPDIR")
        env = {name: os.environ[name] for name in kept if name in os.environ}
        return {**env, "HOME": str(self.home), **extra}

    def install(self) -> None:
        """Create the virtualenv and pip install the peer into it; PeerUnavailable if not."""
        self.home.mkdir(parents=True)
        self.run_dir.mkdir(parents=True)
        log = self.processes.log_dir / "peer-install.log"
        pip_env = self.env(PIP_DISABLE_PIP_VERSION_CHECK="1")
        pip_env |= {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
        steps = [
            [sys.executable, "-m", "venv", str(self.venv)],
            [str(self.python), "-m", "pip", "install", "--quiet", self.options.peer_spec],
        ]
        for argv in steps:
            with open(log, "ab") as output:
                try:
                    finished = subprocess.run(
                        argv,
                        env=pip_env,
                        cwd=self.folder,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        timeout=INSTALL_TIMEOUT_SECONDS,
                        check=False,
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise PeerUnavailable(f"{' '.join(argv[1:4])}: {exc}") from exc
            if finished.returncode != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise PeerUnavailable(
                    f"`{' '.join(argv[2:])}` exited with {finished.returncode}: " + " / ".join(tail)
                )
        version = subprocess.run(
            [
                str(self.python),
                "-I",
                "-c",
                "import importlib.metadata as m; print(m.version('awaithumans'))",
            ],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        self.version = version.stdout.strip() or "?"

    def start(self) -> None:
        """Start ``awaithumans dev`` on a free loopback port; PeerUnavailable if it does
        not answer."""
        self.port = free_port()
        argv = [
            str(self.venv / "bin" / "awaithumans"),
            "dev",
            "--host",
            HOST,
            "--port",
            str(self.port),
        ]
        with open(self.processes.log_dir / "peer.log", "wb") as log:
            self.processes.running["peer"] = subprocess.Popen(
                argv,
                env=self.env(),
                cwd=self.run_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        url = f"http://{HOST}:{self.port}/api/health"
        while True:
            try:
                wait_until_answering(self.processes, "peer", url)
                break
            except RuntimeError as exc:
                if time.monotonic() > deadline or self.processes.running["peer"].poll() is not None:
                    raise PeerUnavailable(f"awaithumans dev did not start: {exc}") from exc
        token = self.run_dir / ".awaithumans" / "admin.token"
        if not token.exists():
            raise PeerUnavailable(f"awaithumans dev wrote no admin token at {token}")
        self.token = token.read_text().strip()

    def agents(self, count: int, options: Options, tag: str) -> AgentProcess:
        """Start the peer's agents' process, on its own Python (isolated: nothing of ours
        on its path)."""
        env = self.env(
            AWAITHUMANS_URL=f"http://{HOST}:{self.port}", AWAITHUMANS_ADMIN_API_TOKEN=self.token
        )
        argv = [str(self.python), "-I", str(AGENTS_SCRIPT), "awaithumans"]
        argv += _agent_options(count, options, tag)
        return AgentProcess(self.processes, f"agents-{tag}", argv, env, self.run_dir)

    def clocks(self) -> dict[str, Callable[[], float]]:
        return {"peer": functools.partial(group_cpu_seconds, self.processes.running["peer"].pid)}

    def storage_bytes(self) -> tuple[int, int]:
        """The SQLite files' sizes: the database, and its -wal or -journal if present
        (nothing in it expires on its own)."""
        files = [self.database, *(Path(f"{self.database}{s}") for s in ("-wal", "-journal"))]
        return sum(path.stat().st_size for path in files if path.exists()), 0

    def database_settings(self) -> str:
        """``journal_mode=delete, 4096-byte pages, ...`` read from the database file."""
        try:
            connection = sqlite3.connect(f"file:{self.database}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            return f"not read: {exc}"
        try:
            mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
            page = connection.execute("PRAGMA page_size").fetchone()[0]
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            free = connection.execute("PRAGMA freelist_count").fetchone()[0]
        except sqlite3.Error as exc:
            return f"not read: {exc}"
        finally:
            connection.close()
        return f"journal_mode={mode}, {page}-byte pages, {pages:,} pages ({free} free)"

    def ready_for_decisions(self, ids: Sequence[str]) -> None:
        """Nothing to wait for: a created task can be completed at once."""

    @property
    def decision_port(self) -> int:
        return self.port

    def decisions(self, ids: Sequence[str]) -> list[Decision]:
        """``POST /api/tasks/{id}/complete`` approving each task, with the admin token."""
        body = json.dumps(
            {"response": {"approved": True}, "completed_by_email": PEER_REVIEWER_EMAIL}
        ).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}
        return [
            Decision(task_id, f"/api/tasks/{task_id}/complete", body, lambda _: headers)
            for task_id in ids
        ]

    def settle(self) -> None:
        """Nothing follows a completion here (no notification configured)."""

    def decided_at(self, ids: Sequence[str]) -> dict[str, float]:
        """``completed_at`` of each task (``GET /api/tasks/{id}``: the server's clock)."""
        connection = http.client.HTTPConnection(HOST, self.port, timeout=REQUEST_TIMEOUT_SECONDS)
        headers = {"Authorization": f"Bearer {self.token}"}
        found = {}
        try:
            for task_id in ids:
                connection.request("GET", f"/api/tasks/{task_id}", headers=headers)
                with connection.getresponse() as response:
                    task = json.loads(response.read())
                if response.status == 200 and task.get("completed_at"):
                    found[task_id] = datetime.fromisoformat(task["completed_at"]).timestamp()
        finally:
            connection.close()
        return found


# -- the report --------------------------------------------------------------------------


def _ratio(numerator: float, denominator: float) -> float:
    if math.isnan(numerator) or math.isnan(denominator) or denominator <= 0:
        return math.nan
    return numerator / denominator


def polling_baseline_ms(fraction: float) -> float:
    """Decision -> agent running with a fixed poll every ``POLL_BASELINE_SECONDS``: the
    decision falls at a uniformly random moment of the period, so the wait is
    U(0, period); its ``fraction`` quantile."""
    return fraction * POLL_BASELINE_SECONDS * 1000


@dataclass
class PeersReport:
    """Both products' figures."""

    server: str
    options: Options
    python: Side
    http: Side
    peer: Side | None
    peer_version: str = ""
    peer_database: str = ""
    redis_config: str = ""
    notes: list[str] = field(default_factory=list)
    """Why the peer was skipped, targets missed by how much, where the peer wins."""
    problems: list[str] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        """The rows for ``bench/run_all``'s table: ours, the peer's next to them, ratios."""
        agents = self.options.agents
        sides = [self.python, self.http, *([self.peer] if self.peer else [])]
        figures = [
            Figure(f"created/s, {agents} agents, {side.label}", side.creates_per_second, "/s")
            for side in sides
        ]
        if self.peer is not None:
            for ours in (self.python, self.http):
                figures.append(
                    Figure(
                        f"created/s, {ours.label} / {PEER}",
                        _ratio(ours.creates_per_second, self.peer.creates_per_second),
                        "x",
                        Target(">=", CREATE_RATIO_TARGET),
                    )
                )
        for side in sides:
            figures += common.latency_figures(
                f"decision -> agent running, {side.wait}", side.wake_ms
            )
        figures += [
            Figure(
                f"decision -> agent running, {POLL_BASELINE_SECONDS:g} s polling (computed) p50",
                polling_baseline_ms(0.5),
                "ms",
            ),
            Figure(
                f"decision -> agent running, {POLL_BASELINE_SECONDS:g} s polling (computed) p99",
                polling_baseline_ms(0.99),
                "ms",
            ),
        ]
        for side in sides:
            figures += common.latency_figures(
                f"decision committed -> agent running, {side.wait}", side.commit_wake_ms
            )
        if self.peer is not None:
            for ours in (self.python, self.http):
                figures += [
                    Figure(
                        f"decision -> agent running p99, {PEER} / {ours.wait}",
                        _ratio(self.peer.p(0.99), ours.p(0.99)),
                        "x",
                        Target(">=", WAKE_P99_RATIO_TARGET),
                    ),
                    Figure(
                        f"decision committed -> agent running p99, {PEER} / {ours.wait}",
                        _ratio(self.peer.committed_p(0.99), ours.committed_p(0.99)),
                        "x",
                        Target(">=", WAKE_P99_RATIO_TARGET),
                    ),
                ]
        figures.append(
            Figure(
                "storage per pending request, slack-handoff (Redis)", self.python.storage_bytes, "B"
            )
        )
        if self.peer is not None:
            figures += [
                Figure(
                    f"storage per pending request, {PEER} (SQLite)", self.peer.storage_bytes, "B"
                ),
                Figure(
                    f"storage per pending request, slack-handoff / {PEER}",
                    _ratio(self.python.storage_bytes, self.peer.storage_bytes),
                    "x",
                    Target("<", STORAGE_RATIO_TARGET),
                ),
            ]
        for side in sides:
            figures.append(
                Figure(
                    f"CPU per request, all processes, {side.label}", side.cpu_ms_per_request(), "ms"
                )
            )
        if self.peer is not None:
            for ours in (self.python, self.http):
                figures.append(
                    Figure(
                        f"CPU per request, {PEER} / {ours.label}",
                        _ratio(self.peer.cpu_ms_per_request(), ours.cpu_ms_per_request()),
                        "x",
                    )
                )
        return figures

    def print_report(self) -> None:
        """Side by side, then the ratios, the CPU by process and the notes."""
        options = self.options
        print(f"\nslack-handoff against {PEER} — {self.server}")
        print(
            f"  {options.requests:,} requests per product and client, {options.agents} agents, "
            f"{options.reviewers} reviewers, decisions at {_rate_text(options.decision_rate)}; "
            f"{os.cpu_count()} CPUs; load average at the end {common.load_average()}"
        )
        print(
            f"  ours: handoff serve (gunicorn {options.serve_workers} x {options.threads} "
            f"threads), {options.workers} handoff worker, handoff api for the HTTP run, the "
            f"stand-in as Slack; Redis {self.redis_config}"
        )
        if self.peer is not None:
            print(
                f"  {PEER} {self.peer_version}: awaithumans dev (uvicorn, one process), SQLite "
                f"{self.peer_database}"
            )
        sides = [self.python, self.http, *([self.peer] if self.peer else [])]
        header = "".join(f"{side.label.replace('slack-handoff ', 'ours '):>24}" for side in sides)
        print(f"\n  {'':<34}{header}{'3 s polling':>16}")
        rows: list[tuple[str, list[str], str]] = [
            ("created/s", [f"{s.creates_per_second:,.0f}" for s in sides], "-"),
            ("wait", [s.wait.split(" (")[-1].rstrip(")") for s in sides], "get() every 3 s"),
            *(
                (
                    f"decision -> running {label}",
                    [_ms(s.p(q)) for s in sides],
                    _ms(polling_baseline_ms(q)) if q < 1 else "3000 ms",
                )
                for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
            ),
            *(
                (
                    f"committed -> running {label}",
                    [_ms(s.committed_p(q)) for s in sides],
                    _ms(polling_baseline_ms(q)),
                )
                for label, q in (("p50", 0.5), ("p99", 0.99))
            ),
            ("storage per pending request", [f"{s.storage_bytes:,.0f} B" for s in sides], "-"),
            (
                "  besides, gone within minutes",
                [f"{s.expiring_bytes:,.0f} B" for s in sides],
                "-",
            ),
            (
                "CPU per request: creating",
                [f"{s.cpu_ms_per_request(s.create_cpu):.2f} ms" for s in sides],
                "-",
            ),
            (
                "CPU per request: deciding",
                [f"{s.cpu_ms_per_request(s.decide_cpu):.2f} ms" for s in sides],
                "-",
            ),
            ("CPU per request: all", [f"{s.cpu_ms_per_request():.2f} ms" for s in sides], "-"),
            ("waits held before decisions", [f"{s.held_seconds:.1f} s" for s in sides], "-"),
            ("other processes' load", [f"{s.others_busy:.2f} CPUs" for s in sides], "-"),
        ]
        for label, values, baseline in rows:
            shown = "".join(f"{value:>24}" for value in values)
            print(f"  {label:<34}{shown}{baseline:>16}")
        print("\n  CPU seconds by process (creating + deciding)")
        for side in sides:
            names = list(side.create_cpu)
            shown = ", ".join(
                f"{name} {side.create_cpu[name] + side.decide_cpu.get(name, 0.0):.2f}"
                for name in names
            )
            print(f"    {side.label}: {shown}")
        print()
        for figure in self.figures():
            if figure.unit == "x":
                print(
                    f"  {figure.name:<72}{figure.shown_value():>10}  "
                    f"{figure.shown_target():>10}  {figure.verdict()}"
                )
        for note in self.notes:
            print(f"NOTE: {note}")
        for problem in self.problems:
            print(f"FAIL: {problem}")


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def _rate_text(rate: float) -> str:
    return f"{rate:g}/s" if rate > 0 else "full speed"


def judge(report: PeersReport) -> None:
    """Notes: each missed target by how much and why, and where the peer wins."""
    peer = report.peer
    if peer is None:
        return
    notes = report.notes
    for ours in (report.python, report.http):
        ratio = _ratio(ours.creates_per_second, peer.creates_per_second)
        if not ratio >= CREATE_RATIO_TARGET:
            ours_cpu = ours.cpu_ms_per_request(ours.create_cpu)
            peer_cpu = peer.cpu_ms_per_request(peer.create_cpu)
            notes.append(
                f"created/s, {ours.label}: {ratio:.2f}x the peer's, target "
                f"{CREATE_RATIO_TARGET:g}x (missed by a factor "
                f"{CREATE_RATIO_TARGET / ratio:.2f}); CPU per create across "
                f"all processes {ours_cpu:.2f} ms (ours, message post included: "
                f"{_breakdown(ours.create_cpu, ours.requests)}) against {peer_cpu:.2f} ms "
                f"({_breakdown(peer.create_cpu, peer.requests)})"
            )
        for what, ours_p99, peer_p99, path in (
            (
                "decision -> agent running",
                ours.p(0.99),
                peer.p(0.99),
                "the signed Slack click through handoff serve (Bolt, the DECIDE script) "
                "and the push to the agent",
            ),
            (
                "decision committed -> agent running",
                ours.committed_p(0.99),
                peer.committed_p(0.99),
                "the push from the DECIDE script to the agent's wait (pub/sub, one read)",
            ),
        ):
            ratio = _ratio(peer_p99, ours_p99)
            if not ratio >= WAKE_P99_RATIO_TARGET:
                notes.append(
                    f"{what} p99, {ours.wait}: {_ms(ours_p99)} against the peer's "
                    f"{_ms(peer_p99)}, {ratio:.0f}x, target {WAKE_P99_RATIO_TARGET:g}x (would "
                    f"need <= {_ms(peer_p99 / WAKE_P99_RATIO_TARGET)}); the peer's is bounded "
                    f"by its once-a-second database re-read, ours is {path}, with "
                    f"{_rate_text(report.options.decision_rate)} decisions and other "
                    f"processes keeping {ours.others_busy:.1f} of {os.cpu_count()} CPUs busy"
                )
        if peer.cpu_ms_per_request() < ours.cpu_ms_per_request():
            notes.append(
                f"the peer wins on CPU per request against {ours.label}: "
                f"{peer.cpu_ms_per_request():.2f} ms against {ours.cpu_ms_per_request():.2f} ms; "
                f"ours posts every request to Slack and updates it once decided, through a "
                f"Slack click via handoff serve (the peer's completion is one API call, and it "
                f"notifies nobody): {_breakdown(_sum(ours), ours.requests)}"
            )
        if peer.creates_per_second > ours.creates_per_second:
            notes.append(
                f"the peer wins on created/s against {ours.label}: "
                f"{peer.creates_per_second:,.0f}/s against {ours.creates_per_second:,.0f}/s"
            )
    ratio = _ratio(report.python.storage_bytes, peer.storage_bytes)
    if not ratio < STORAGE_RATIO_TARGET:
        notes.append(
            f"storage per pending request: ours {report.python.storage_bytes:,.0f} B (Redis "
            f"memory) against the peer's {peer.storage_bytes:,.0f} B (SQLite file), "
            f"{ratio:.2f}x, target < {STORAGE_RATIO_TARGET:g}x: missed by "
            f"{report.python.storage_bytes - peer.storage_bytes:,.0f} B"
        )


def _sum(side: Side) -> dict[str, float]:
    names = set(side.create_cpu) | set(side.decide_cpu)
    return {n: side.create_cpu.get(n, 0.0) + side.decide_cpu.get(n, 0.0) for n in names}


def _breakdown(cpu: dict[str, float], requests: int) -> str:
    if not requests:
        return "-"
    ordered = sorted(cpu.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {seconds * 1000 / requests:.2f} ms" for name, seconds in ordered)


# -- entry point -------------------------------------------------------------------------


def run_ours(stack: OurStack, options: Options, tag: str) -> tuple[Side, Side]:
    """Our side: the Python client, then the HTTP API (each after an untimed warm-up)."""
    sides = []
    for mode, label, wait in (
        ("handoffs", OURS_PYTHON, "slack-handoff (Handoffs.wait)"),
        ("http", OURS_HTTP, "slack-handoff (HTTP ?wait=)"),
    ):
        if mode == "http":
            stack.start_api()
        common.progress(f"{label}: warming up")
        warm = stack.agents(mode, options.warmup, options, f"{tag}{mode}w")
        warmed = measure_side(stack, warm, Side(label, wait), options.warmup, options)
        common.progress(f"{label}: {options.requests:,} requests")
        agents = stack.agents(mode, options.requests, options, f"{tag}{mode}")
        stack.measure_redis_background()
        side = measure_side(stack, agents, Side(label, wait), options.requests, options)
        side.problems = [f"warm-up: {p}" for p in warmed.problems] + side.problems
        common.progress(_summary(side))
        sides.append(side)
    return sides[0], sides[1]


def run_peer(peer: PeerStack, options: Options, tag: str) -> Side:
    """The peer's side, after an untimed warm-up."""
    label, wait = PEER, f"{PEER} (long-poll)"
    common.progress(f"{PEER}: warming up")
    warm = peer.agents(options.warmup, options, f"{tag}peerw")
    warmed = measure_side(peer, warm, Side(label, wait), options.warmup, options)
    common.progress(f"{PEER}: {options.requests:,} requests")
    agents = peer.agents(options.requests, options, f"{tag}peer")
    side = measure_side(peer, agents, Side(label, wait), options.requests, options)
    side.problems = [f"warm-up: {p}" for p in warmed.problems] + side.problems
    common.progress(_summary(side))
    return side


def _summary(side: Side) -> str:
    return (
        f"{side.label}: {side.creates_per_second:,.0f} created/s, decision -> running "
        f"p50 {_ms(side.p(0.5))} p99 {_ms(side.p(0.99))}, {side.storage_bytes:,.0f} B per "
        f"pending request, {side.cpu_ms_per_request():.2f} ms CPU per request"
    )


def redis_config(redis: Redis) -> str:
    """``7.0.15, appendonly no``: how durable its writes are, for the report."""
    info = redis.info("server")
    version = info.get("valkey_version") or info.get("redis_version")
    try:
        appendonly = redis.config_get("appendonly").get("appendonly", "?")
        fsync = redis.config_get("appendfsync").get("appendfsync", "?")
    except Exception:
        return str(version)
    return f"{version}, appendonly {appendonly} (appendfsync {fsync})"


def run(server: RedisServer, options: Options) -> PeersReport:
    """Measure our side, then (unless ``options.peer`` is off) install, start and measure
    the peer; stop every process, delete the run's keys and the peer's folder (also when
    interrupted; the logs are kept only when a check failed)."""
    processes = Processes("handoff-bench-peers-")
    peer_folder = Path(tempfile.mkdtemp(prefix="handoff-bench-peer-"))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, peer_folder, ignore_errors=True)
        cleanup.callback(processes.finish)
        try:
            report = measure_both(server, options, processes, peer_folder, cleanup)
        except KeyboardInterrupt:
            processes.keep_logs = False  # stopped on purpose: no failure to read about
            raise
        processes.keep_logs = bool(report.problems)
    return report


def measure_both(
    server: RedisServer,
    options: Options,
    processes: Processes,
    peer_folder: Path,
    cleanup: contextlib.ExitStack,
) -> PeersReport:
    """The peer installed first (so a failed install is known early), our side measured,
    then the peer started and measured; each stopped after its measurement."""
    tag = common.new_namespace("p", 6)
    notes: list[str] = []
    peer: PeerStack | None = None
    if options.peer:
        peer = PeerStack(peer_folder, options, processes)
        common.progress(f"installing {options.peer_spec} in {peer.venv}")
        try:
            peer.install()
        except PeerUnavailable as exc:
            notes.append(f"{PEER} skipped: it could not be installed: {exc}")
            peer = None
    else:
        notes.append(
            f"{PEER} not measured: --quick never installs or starts the peer "
            "(a smoke run of our side only)"
        )
    stack = OurStack(server, options, processes, cleanup)
    python, http_side = run_ours(stack, options, tag)
    report = PeersReport(
        server.description,
        options,
        python,
        http_side,
        None,
        notes=notes,
        redis_config=redis_config(stack.redis),
    )
    processes.stop_all()
    if peer is not None:
        try:
            peer.start()
        except PeerUnavailable as exc:
            notes.append(f"{PEER} skipped: it could not be started: {exc}")
        else:
            common.progress(f"{PEER} {peer.version} listening on port {peer.port}")
            report.peer_version = peer.version
            report.peer = run_peer(peer, options, tag)
            report.peer_database = peer.database_settings()
        processes.stop_all()
    sides = [python, http_side, *([report.peer] if report.peer else [])]
    report.problems = [f"{side.label}: {problem}" for side in sides for problem in side.problems]
    judge(report)
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = common.argument_parser(
        "bench.peers",
        f"slack-handoff against {PEER}: creates/s, decision -> agent running, storage and "
        "CPU per request, in one run.",
    )
    defaults = Options()
    common.add_options(
        parser,
        defaults,
        {
            "requests": "requests per product and client",
            "agents": "agents creating them (client concurrency)",
            "reviewers": "reviewers deciding them",
            "warmup": "untimed requests first",
            "workers": "`handoff worker` processes",
            "serve_workers": "gunicorn workers of handoff serve",
            "threads": "threads per gunicorn worker",
        },
    )
    common.add_options(
        parser,
        defaults,
        {
            "decision_rate": "decisions a second (0: as fast as the reviewers can)",
            "timeout": "seconds any one phase may take",
        },
        kind=float,
    )
    parser.add_argument(
        "--no-peer", dest="peer", action="store_false", help="measure our side only"
    )
    parser.add_argument(
        "--peer-spec", default=defaults.peer_spec, help="pip requirement of the peer"
    )
    common.add_redis_option(parser)
    args = parser.parse_args(argv)
    if min(args.requests, args.agents, args.reviewers, args.workers, args.warmup) < 1:
        parser.error("--requests, --agents, --reviewers, --workers and --warmup must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every request was created, decided once and seen by its
    agent, 1 otherwise (130 when interrupted, after stopping every process, deleting the
    run's keys and the peer's folder)."""
    return common.measure_and_print(parse_args(argv), Options, run, interruptible=True)


if __name__ == "__main__":
    sys.exit(main())
