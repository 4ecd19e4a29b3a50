"""The ``handoff`` group: global options, settings, and expected failures as one line on
stderr with an exit code a script can test (``bot.cli.exit_codes``), never a traceback."""

from __future__ import annotations

import logging
import os
from importlib.metadata import PackageNotFoundError, version

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import ResponseError as RedisResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bot.cli.exit_codes import exit_code_of
from bot.config import Settings
from store.exceptions import HandoffError, ReplicasNotConfirmed


def settings() -> Settings:
    """The settings of the environment; a bad or missing one is a ``ConfigurationError``
    with a one-line message (shown by the group, exit code 2)."""
    return Settings.from_env()


class Failure(click.ClickException):
    """An expected failure: one line (``Error: ...``) and its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click reads the code from the instance; its class attribute is only the default.
        self.exit_code = exit_code  # type: ignore[misc]


def _message(exc: HandoffError | RedisError) -> str:
    if isinstance(exc, ReplicasNotConfirmed):
        # Redis answered; its replicas did not confirm (its message says what to do).
        return str(exc)
    if isinstance(exc, RedisResponseError):
        # Redis itself refused (a database number it does not have, a bad client name).
        return f"Redis refused: {exc}; check REDIS_URL"
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        # Not the URL: it may carry a password.
        return (
            f"cannot reach Redis ({exc}); check that it is running and that REDIS_URL points at it"
        )
    if isinstance(exc, RedisError):
        return f"Redis failed: {exc}"
    return str(exc)


class HandoffGroup(click.Group):
    """Shows the store's errors, bad settings and an unreachable Redis as one-line
    messages with their exit codes instead of tracebacks."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (HandoffError, RedisError) as exc:
            raise Failure(" ".join(_message(exc).split()), exit_code_of(exc)) from exc


def _package_version() -> str:
    try:
        return version("slack-handoff")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@click.group(cls=HandoffGroup)
@click.version_option(_package_version(), "--version", prog_name="handoff")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """slack-handoff: AI agents hand work to people in Slack and get it back.

    Exit codes: 0 ok, 1 error (or `check` found a problem), 2 usage or bad setting,
    3 not found, 4 conflict (already decided, claimed by another, nothing to retry),
    5 Redis unavailable. NO_COLOR turns colors off.
    """
    if os.environ.get("NO_COLOR"):  # https://no-color.org: set and not empty
        ctx.color = False
    _set_up_logs(logging.DEBUG if verbose else logging.INFO)


def _set_up_logs(level: int) -> None:
    """Log at ``level`` in ``HANDOFF_LOG_FORMAT``, and keep the tokens and the signing secret
    out of every log line of this process and of the processes it forks (gunicorn workers,
    RQ work horses)."""
    from pydantic import ValidationError

    from bot.log_format import configure_logging
    from bot.log_redaction import install

    try:
        current = Settings()
    except ValidationError:  # the command itself reports what is wrong with the settings
        configure_logging(level)
        install([])
        return
    configure_logging(level, current.log_format)
    install([current.slack_bot_token, current.slack_signing_secret, current.slack_app_token])
