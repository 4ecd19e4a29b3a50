"""Our stack as the benchmarks start it on a fresh namespace: the Slack stand-in (in this
process), ``handoff worker`` and ``handoff serve`` processes (``bench.processes``).

Each piece is registered with the caller's ``contextlib.ExitStack``, which unwinds last in
first out: open the run's Redis first (``run_redis``), so that on the way out every process
stops before the run's keys are deleted, and no worker writes keys after that.
"""

from __future__ import annotations

import contextlib
from typing import Any

from redis import Redis

from bench import common
from bench.processes import CLI, HOST, Processes, free_port, subprocess_env, wait_until_answering
from bot.http.wsgi import HEALTH_PATH
from bot.standin import SlackStandIn

SIGNING_SECRET = "bench-signing-secret-0123456789abcdef"
BOT_TOKEN = "xoxb-bench-bot-token"
CHANNEL = "C0BENCHCLICKS"
"""The stack's default channel (``HANDOFF_CHANNEL``)."""


def server_env(redis_url: str, api_url: str, namespace: str, queue: str) -> dict[str, str]:
    """The environment of every subprocess: the stand-in as Slack, the run's namespace
    and queue, and nothing of this process's Slack or handoff settings."""
    return subprocess_env(
        redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=api_url,
        HANDOFF_CHANNEL=CHANNEL,
        HANDOFF_NAMESPACE=namespace,
        HANDOFF_QUEUE=queue,
    )


def run_redis(url: str, namespace: str, queue: str, cleanup: contextlib.ExitStack) -> Redis:
    """A client of ``url``; on the way out the run's keys (``namespace`` and the RQ keys of
    ``queue``) are deleted, then it is closed."""
    redis = Redis.from_url(url)
    cleanup.callback(redis.close)
    cleanup.callback(common.delete_queue, redis, queue)
    cleanup.callback(common.delete_namespace, redis, namespace)
    return redis


def start_standin(cleanup: contextlib.ExitStack, **settings: Any) -> SlackStandIn:
    """The stand-in, started with the stack's signing secret and bot token (``settings``:
    more of ``SlackStandIn``'s, such as its users); stopped on the way out."""
    standin = SlackStandIn(signing_secret=SIGNING_SECRET, bot_token=BOT_TOKEN, **settings)
    standin.start()
    cleanup.callback(standin.stop)
    return standin


def start_processes(prefix: str, cleanup: contextlib.ExitStack) -> Processes:
    """A run's ``Processes`` (logs in a new folder named ``prefix...``), all stopped on the
    way out; the logs go too unless the run keeps them (``keep_logs``)."""
    processes = Processes(prefix)
    cleanup.callback(processes.finish)
    return processes


def spawn_workers(processes: Processes, queue: str, count: int, env: dict[str, str]) -> list[str]:
    """Start ``count`` ``handoff worker`` processes and return their names, which carry the
    queue's so that ``common.delete_queue`` finds their RQ keys (wait for them with
    ``bench.processes.wait_for_workers``)."""
    names = [f"{queue}-worker{n}" for n in range(count)]
    processes.spawn_workers(names, env)
    return names


def spawn_serve(
    processes: Processes, name: str, env: dict[str, str], *, serve_workers: int, threads: int
) -> int:
    """Start ``handoff serve`` as ``name`` on a free loopback port, with ``serve_workers``
    gunicorn workers of ``threads`` threads; return the port (wait for it with
    ``wait_for_serve``)."""
    port = free_port()
    options = ["--host", HOST, "--port", str(port)]
    options += ["--workers", str(serve_workers), "--threads", str(threads)]
    processes.spawn(name, [*CLI, "serve", *options], env)
    return port


def wait_for_serve(processes: Processes, name: str, port: int) -> None:
    """Wait until ``handoff serve`` ``name`` answers its health check on ``port``."""
    wait_until_answering(processes, name, f"http://{HOST}:{port}{HEALTH_PATH}")
