"""A running Slack setup for end-to-end tests: the local Slack stand-in, `handoff serve`
(gunicorn, real HTTP) and `handoff worker` processes, all on the test Redis."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

from redis import Redis

from bot.standin import Ephemeral, SlackStandIn, StandInUser
from store.models import Handoff, TaskState
from tests.conftest import ROOT, wait_until
from tests.support import resume_targets
from tests.support.manifest import bot_scopes
from worker.client import Handoffs

SIGNING_SECRET = "e2e-signing-secret-0123456789abcdef"
BOT_TOKEN = "xoxb-e2e-bot-token"
APP_TOKEN = "xapp-1-A0STANDIN-e2e-app-token"
CHANNEL = "C0APPROVALS"

ALICE, BOB, CAROL, ADMIN = "U0ALICE", "U0BOB", "U0CAROL", "U0ADMIN"
OWNER = "U0OWNER"
"""A workspace owner who is not in HANDOFF_ADMINS: an admin through users.info only."""
USERS = [
    StandInUser(ALICE, "alice"),
    StandInUser(BOB, "bob"),
    StandInUser(CAROL, "carol"),
    StandInUser(ADMIN, "ada", is_admin=True),
    StandInUser(OWNER, "olga", is_owner=True),
]
USERGROUPS = {"S0FINANCE": [BOB]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SlackEnv:
    """The stand-in plus the bot's processes; ``handoffs`` is the agent side.

    ``extra_env`` is added to the processes' environment (say, HANDOFF_* settings), and
    ``worker_args`` to every `handoff worker` command line; ``extra_users`` and
    ``extra_usergroups`` join the workspace's members and user groups. With
    ``socket_mode``, `handoff serve --socket-mode` connects to the stand-in's Socket Mode
    (SLACK_APP_TOKEN, no signing secret) and everyone's actions reach it over the WebSocket.
    """

    def __init__(
        self,
        redis: Redis,
        redis_url: str,
        log_dir: Path,
        *,
        extra_env: Mapping[str, str] | None = None,
        worker_args: Sequence[str] = (),
        extra_users: Sequence[StandInUser] = (),
        extra_usergroups: Mapping[str, Sequence[str]] | None = None,
        socket_mode: bool = False,
    ) -> None:
        self.redis = redis
        self.socket_mode = socket_mode
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.standin = SlackStandIn(
            signing_secret=SIGNING_SECRET,
            bot_token=BOT_TOKEN,
            users=[*USERS, *extra_users],
            usergroups={**USERGROUPS, **(extra_usergroups or {})},
            # What an installed app gets: no call may use a scope the manifest lacks.
            scopes=bot_scopes(),
            socket_mode=socket_mode,
            app_token=APP_TOKEN,
        )
        self.port = free_port()
        """The port of the first `handoff serve` (the stand-in's ``bot_url``)."""
        self.ports: list[int] = []
        """The ports of every `handoff serve` process started."""
        self.extra_env = dict(extra_env or {})
        self.worker_args = list(worker_args)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        """The `handoff worker` processes started, dead or alive."""
        self.handoffs = Handoffs(redis)

    @property
    def env(self) -> dict[str, str]:
        if self.socket_mode:
            # A Socket Mode app needs no signing secret: nothing reaches it over HTTP.
            env = {**self._env, "SLACK_APP_TOKEN": APP_TOKEN}
            del env["SLACK_SIGNING_SECRET"]
            return env
        return self._env

    @property
    def _env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("SLACK_CLIENT")},
            "REDIS_URL": self.redis_url,
            "PYTHONPATH": str(ROOT),
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.standin.api_url,
            "HANDOFF_CHANNEL": CHANNEL,
            "HANDOFF_ADMINS": ADMIN,
            # As in `handoff dev`: handoffs naming no reviewers are their channel's members'
            # (the stand-in puts everyone in every channel unless a test says otherwise).
            "HANDOFF_ALLOW_ANY_CHANNEL_MEMBER": "true",
            "HANDOFF_SWEEP_INTERVAL_SECONDS": "0.1",
            "HANDOFF_RETRY_BACKOFF_SECONDS": "0.2",
            # The stand-in limits no look-up unless a test makes it play Slack's limits
            # (limit_like_slack, with a budget to match): the default budget, one call a
            # minute, would only slow the tests of lost answers down.
            "HANDOFF_SLACK_HISTORY_CALLS_PER_MINUTE": "6000",
            **self.extra_env,
        }

    @property
    def bot_urls(self) -> list[str]:
        """The request URL of each `handoff serve` process (Slack's, behind a load balancer)."""
        return [f"http://127.0.0.1:{port}/slack/events" for port in self.ports]

    def start(self, *, workers: int = 1, serves: int = 1) -> None:
        """Start the stand-in, ``serves`` `handoff serve` processes (on ports of their own;
        the stand-in's ``bot_url`` is the first) and ``workers`` `handoff worker` processes."""
        self.standin.start()
        self.standin.bot_url = f"http://127.0.0.1:{self.port}/slack/events"
        for index in range(serves):
            self.start_serve(self.port if index == 0 else free_port())
        for _ in range(workers):
            self.start_worker()
        if self.socket_mode:
            self.wait_connected(serves)
        for port in self.ports:
            self._wait_healthy(port)

    def start_serve(self, port: int) -> subprocess.Popen[bytes]:
        """Start one more `handoff serve` process (one gunicorn worker, 8 threads) on ``port``;
        in Socket Mode, `handoff serve --socket-mode` (no port)."""
        if self.socket_mode:
            self._spawn("serve", "--socket-mode")
            return self.processes[-1]
        self.ports.append(port)
        self._spawn(
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--threads",
            "8",
        )
        return self.processes[-1]

    def start_worker(self, *args: str) -> subprocess.Popen[bytes]:
        """Start one more `handoff worker` process, with ``args`` (say, ``--fork``) after
        the ``worker_args`` every worker gets."""
        self._spawn("worker", "--name", f"e2e-{time.monotonic_ns()}", *self.worker_args, *args)
        self.workers.append(self.processes[-1])
        return self.processes[-1]

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL a process and everything it started."""
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def _spawn(self, *args: str) -> None:
        log = open(self.log_dir / f"{args[0]}-{len(self.processes)}.log", "wb")  # noqa: SIM115
        self.processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "bot.cli", *args],
                env=self.env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def _wait_healthy(self, port: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{port}/healthz"
        while time.monotonic() < deadline:
            with suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
            time.sleep(0.1)
        raise AssertionError("handoff serve did not become healthy:\n" + self.logs())

    def wait_connected(self, connections: int = 1, timeout: float = 30) -> None:
        """Wait until `handoff serve --socket-mode` has ``connections`` Socket Mode
        connections open (they reconnect by themselves after a drop)."""
        try:
            self.standin.wait_for(
                lambda: self.standin.socket_mode_connections() >= connections, timeout=timeout
            )
        except TimeoutError:
            raise AssertionError("handoff serve did not connect:\n" + self.logs()) from None

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))

    def stop(self) -> None:
        for process in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        self.standin.stop()

    def command(self, user: str, text: str, *, channel: str = CHANNEL) -> Ephemeral:
        """``user`` runs ``/handoff <text>``; returns the ephemeral reply they see."""
        shown = len(self.standin.ephemerals(user))
        response = self.standin.send_command(user, "/handoff", text, channel_id=channel)
        assert response.status == 200, response.text
        replies = self.standin.ephemerals(user)
        assert len(replies) == shown + 1, f"no reply to /handoff {text}: {response.text}"
        return replies[-1]

    def current(self, reply: Ephemeral) -> Ephemeral:
        """The ephemeral ``reply`` as its user sees it now (buttons may have replaced it)."""
        [now] = [e for e in self.standin.ephemerals(reply.user) if e.ts == reply.ts]
        return now

    def refund_approval(self, *, run_id: str = "run-refund", **options: Any) -> str:
        """Create a pending approval of a refund, resumed by
        ``tests.support.resume_targets:record``; ``options`` are ``request_approval``'s
        (reviewers, channel, requester...)."""
        return self.handoffs.request_approval(
            run_id=run_id,
            thread_id="thread-1",
            action="issue_refund",
            args={"order_id": "A-1001", "amount": 30},
            context="Customer was charged twice.",
            resume="tests.support.resume_targets:record",
            **options,
        ).id

    def region_question(self, *, run_id: str, **options: Any) -> Handoff:
        """Ask "Which region?" (``options`` are ``ask``'s: reviewers...)."""
        return self.handoffs.ask(run_id=run_id, thread_id="t", question="Which region?", **options)

    def resumed(self, handoff_id: str) -> dict[str, Any]:
        """What ``tests.support.resume_targets:record`` was called with for the handoff,
        once its resume completed."""
        wait_for(lambda: self.handoffs.get(handoff_id).resume.state is TaskState.COMPLETED)
        entries = [json.loads(raw) for raw in self.redis.lrange(resume_targets.COMPLETED, 0, -1)]
        [entry] = [e for e in entries if e["handoff_id"] == handoff_id]
        return dict(entry)

    def posted(self, handoff_id: str, timeout: float = 15):
        """The channel message of a handoff, once the worker has posted it."""
        wait_for(lambda: self.handoffs.get(handoff_id).message_refs.get("ts"), timeout=timeout)
        refs = self.handoffs.get(handoff_id).message_refs
        return self.standin.message(refs["channel"], refs["ts"])


EnvT = TypeVar("EnvT", bound=SlackEnv)


def started(
    env: EnvT,
    *,
    workers: int = 1,
    serves: int = 1,
    before_stop: Callable[[EnvT], object] | None = None,
) -> Iterator[EnvT]:
    """Body of a ``slack`` fixture: ``env`` started (``SlackEnv.start``), yielded, then
    ``before_stop(env)`` if given and stopped, whatever the test did."""
    env.start(workers=workers, serves=serves)
    try:
        yield env
    finally:
        try:
            if before_stop is not None:
                before_stop(env)
        finally:
            env.stop()


def running_slack(
    redis: Redis,
    redis_url: str,
    log_dir: Path,
    *,
    workers: int = 1,
    serves: int = 1,
    **options: Any,
) -> Iterator[SlackEnv]:
    """Body of a ``slack`` fixture: a started ``SlackEnv`` (``options`` are its keyword
    arguments: extra_env, extra_users...), stopped afterwards."""
    env = SlackEnv(redis, redis_url, log_dir, **options)
    yield from started(env, workers=workers, serves=serves)


def wait_for(
    condition: Callable[[], object], *, timeout: float = 15, interval: float = 0.05
) -> object:
    """``wait_until`` with a shorter default timeout: the truthy ``condition()``."""
    return wait_until(condition, timeout=timeout, interval=interval)
