"""One Slack setup for the whole security package: the stand-in, `handoff -v serve` and a
`handoff -v worker` (debug logging, read by the secrets test), and the same bot in process.

The database is flushed once, when the package starts; each test makes its own handoffs.
No test here uses the function-scoped ``redis`` fixture, which would flush under the
running processes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from redis import Redis

from tests.conftest import ROOT
from tests.support.security_harness import InProcessBot
from tests.support.slack_env import SlackEnv


class VerboseSlackEnv(SlackEnv):
    """A ``SlackEnv`` whose processes log at debug level (``handoff -v ...``): the bot in
    text, the worker in JSON (``HANDOFF_LOG_FORMAT``), so that both formats are read."""

    def _spawn(self, *args: str) -> None:
        log = open(self.log_dir / f"{args[0]}-{len(self.processes)}.log", "wb")  # noqa: SIM115
        log_format = "json" if args[0] == "worker" else "text"
        self.processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "bot.cli", "-v", *args],
                env={**self.env, "HANDOFF_LOG_FORMAT": log_format},
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )


@pytest.fixture(scope="package")
def store_redis(redis_url: str) -> Iterator[Redis]:
    """A client on the test database, flushed once for the package."""
    client = Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="package")
def slack(
    store_redis: Redis, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlackEnv]:
    env = VerboseSlackEnv(store_redis, redis_url, tmp_path_factory.mktemp("security-logs"))
    env.start()
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="package")
def bot(slack: SlackEnv) -> InProcessBot:
    return InProcessBot(slack)
