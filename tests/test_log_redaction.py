"""The second line of defence against secrets in logs (bot.log_redaction): what it covers
besides a record's message and traceback, and that it leaves logging's own behaviour alone."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
from redis import Redis

from bot.log_redaction import install
from store.api_keys import ApiKeys
from store.keys import KeySpace
from tests.conftest import ROOT

SECRET = "signing-secret-0123456789"
RESPONSE_URL = "https://hooks.slack.com/actions/T0TEAM/123456/abcDEFsecretpart"
REDIS_URL = "redis://default:s3cr3t-pass@redis.internal:6379/0"


class JsonFormatter(logging.Formatter):
    """A formatter as JSON logging libraries write them: it renders exc_info itself."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"message": record.getMessage(), "user": getattr(record, "user", None)}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO, io.StringIO]]:
    """A logger writing plain lines and JSON lines, with redaction installed."""
    logger = logging.getLogger("tests.log_redaction")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    plain, as_json = io.StringIO(), io.StringIO()
    handlers = [logging.StreamHandler(plain), logging.StreamHandler(as_json)]
    handlers[1].setFormatter(JsonFormatter())
    for handler in handlers:
        logger.addHandler(handler)
    undo = install([SECRET])
    try:
        yield logger, plain, as_json
    finally:
        undo()
        for handler in handlers:
            logger.removeHandler(handler)


def test_api_keys_and_webhook_secrets_of_any_key_are_redacted(
    logged: tuple[logging.Logger, io.StringIO, io.StringIO], redis: Redis
) -> None:
    """Keys and secrets as ``store.api_keys`` makes them, none of them configured here."""
    created = ApiKeys(redis, KeySpace()).create("leaky")
    logger, plain, as_json = logged
    logger.info("calling with Authorization: Bearer %s", created.key)
    logger.warning("bad signature", extra={"user": f"signed with {created.record.webhook_secret}"})

    for text in (plain.getvalue(), as_json.getvalue()):
        assert created.key not in text and created.record.webhook_secret not in text, text
        assert "Bearer [redacted]" in text, text
    assert "signed with [redacted]" in as_json.getvalue()  # the plain lines leave extra= out


def test_response_urls_and_url_passwords_are_redacted(
    logged: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    logger, plain, _ = logged
    logger.info("answering through %s", RESPONSE_URL)
    logger.info("connecting to %s", REDIS_URL)

    text = plain.getvalue()
    assert "abcDEFsecretpart" not in text and "s3cr3t-pass" not in text
    assert "https://hooks.slack.com/[redacted]" in text
    assert "redis://default:[redacted]@redis.internal:6379/0" in text


def test_a_url_password_holding_an_at_sign_is_redacted_whole(
    logged: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    # redis-py (urlparse) reads the password up to the last "@": "p@ss-w0rd" here.
    logger, plain, _ = logged
    logger.info("connecting to %s", "redis://:p@ss-w0rd@redis.internal:6379/0")
    logger.info("and %s", "rediss://default:a@b@c@redis.internal")

    text = plain.getvalue()
    assert "ss-w0rd" not in text and "b@c" not in text
    assert "redis://:[redacted]@redis.internal:6379/0" in text
    assert "rediss://default:[redacted]@redis.internal" in text


def test_extra_fields_are_redacted(logged: tuple[logging.Logger, io.StringIO, io.StringIO]) -> None:
    logger, _, as_json = logged
    logger.warning("denied", extra={"user": f"U0BOB via {RESPONSE_URL} with {SECRET}"})

    [line] = [json.loads(text) for text in as_json.getvalue().splitlines()]
    assert line["user"] == "U0BOB via https://hooks.slack.com/[redacted] with [redacted]"


def test_an_exception_rendered_by_a_json_formatter_is_redacted(
    logged: tuple[logging.Logger, io.StringIO, io.StringIO],
) -> None:
    logger, plain, as_json = logged
    try:
        raise ConnectionError(f"cannot reach {REDIS_URL} signed with {SECRET}")
    except ConnectionError:
        logger.exception("store unavailable")

    [line] = [json.loads(text) for text in as_json.getvalue().splitlines()]
    for text in (line["exception"], plain.getvalue()):
        assert SECRET not in text and "s3cr3t-pass" not in text
        assert "ConnectionError: cannot reach redis://default:[redacted]@" in text


def test_a_malformed_log_call_is_reported_by_logging_not_raised_into_the_caller() -> None:
    # In a process of its own: pytest's capturing handlers raise on logging errors.
    script = (
        "import logging, sys\n"
        "from bot.log_redaction import install\n"
        "install(['signing-secret-0123456789'])\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "logging.getLogger('x').warning('two placeholders %s %s', 'one argument')\n"
        "print('the caller went on')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the caller went on"
    assert "--- Logging error ---" in done.stderr  # logging's own report of the bad call


def test_undo_restores_logging() -> None:
    factory = logging.getLogRecordFactory()
    make_record = logging.Logger.makeRecord
    format_exception = logging.Formatter.formatException

    install([SECRET])()

    assert logging.getLogRecordFactory() is factory
    assert logging.Logger.makeRecord is make_record
    assert logging.Formatter.formatException is format_exception
