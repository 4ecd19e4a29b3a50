"""Keep tokens and the signing secret out of every log line, whoever logs it.

slack_sdk redacts the ``Authorization`` header in its debug logs, and our own code never
logs a secret; this is the second line of defence, for a library that one day logs a
request body, an exception that quotes a URL with a token, or a setting printed by mistake.
Once installed (``handoff`` does it before any command runs), every log record of the
process, from any logger, has the configured secrets and anything shaped like a Slack token
(``xoxb-...``, ``xapp-...``) replaced by ``[redacted]``, in its message and its traceback.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Callable, Iterable
from typing import Any

REDACTED = "[redacted]"

SLACK_TOKEN = re.compile(r"\b(?:xox[abeoprs]|xapp)-[A-Za-z0-9][A-Za-z0-9-]*")
"""Slack bot, user, app-level and refresh tokens."""

MIN_SECRET_LENGTH = 8
"""Shorter values are not redacted by value (they would hide ordinary words)."""


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret and every Slack-token-shaped string replaced."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return SLACK_TOKEN.sub(REDACTED, text)


def install(secrets: Iterable[str | None]) -> Callable[[], None]:
    """Redact ``secrets`` (None and short values are skipped) and Slack tokens from every
    log record created in this process from now on; returns a function that undoes it."""
    values = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len)[::-1]
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        message = record.getMessage()
        cleaned = redact(message, values)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[0] is not None:
            # Rendered now, redacted, and kept: formatters use exc_text when it is set.
            rendered = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            record.exc_text = redact(rendered, values)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, values)
        return record

    logging.setLogRecordFactory(factory)
    return lambda: logging.setLogRecordFactory(previous)
