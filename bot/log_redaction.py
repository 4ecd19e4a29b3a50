"""Keep tokens and the signing secret out of every log line, whoever logs it.

slack_sdk redacts the ``Authorization`` header in its debug logs, and our own code never
logs a secret; this is the second line of defence, for a library that one day logs a
request body, an exception that quotes a URL with a token, or a setting printed by mistake.
Once installed (``handoff`` does it before any command runs), every log record of the
process, from any logger, has the configured secrets, anything shaped like a Slack token
(``xoxb-...``, ``xapp-...``), our API keys and webhook secrets (``hk_...``, ``whsec_...``),
Slack response URLs and the password of any URL
(``redis://:password@host``) replaced by ``[redacted]``: in its message, in its ``extra=``
fields, in its traceback and stack, and in the exception text of any formatter that renders
the exception itself (a JSON formatter, for instance).
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

HANDOFF_SECRET = re.compile(r"\b(?:hk_[A-Za-z0-9_-]{16,}|whsec_[A-Za-z0-9+/=]{16,})")
"""Our own secrets: HTTP API keys (``hk_``, ``store.api_keys``) and the webhook signing
secrets made with them (``whsec_``), whoever's key it is (not only this process's)."""

RESPONSE_URL = re.compile(r"(https://hooks\.slack\.com/)[^\s\"'<>]+")
"""Slack's response URLs and webhooks: whoever has one can post as the app for a while."""

URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^/\s]*@")
"""The password of a URL with credentials (``redis://user:password@host``): up to the last
``@`` before the path, as URL parsers (and redis-py) read it, so a password holding an ``@``
is redacted whole."""

MIN_SECRET_LENGTH = 8
"""Shorter values are not redacted by value (they would hide ordinary words)."""

# What a LogRecord holds of its own; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret, Slack token, API key, webhook secret, response URL and URL
    password replaced."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    text = SLACK_TOKEN.sub(REDACTED, text)
    text = HANDOFF_SECRET.sub(REDACTED, text)
    text = RESPONSE_URL.sub(rf"\g<1>{REDACTED}", text)
    return URL_PASSWORD.sub(rf"\g<1>{REDACTED}@", text)


def _forms(secret: str) -> set[str]:
    """``secret`` as a log line may hold it: as it is, escaped (``repr`` of a header holding
    a token with a newline shows ``\\n``), and each of its lines."""
    escaped = secret.encode("unicode_escape").decode("ascii", "replace")
    return {secret, escaped, *secret.splitlines()}


def install(secrets: Iterable[str | None]) -> Callable[[], None]:
    """Redact ``secrets`` (None and short values are skipped), Slack tokens, response URLs
    and URL passwords from every log record created in this process from now on; returns a
    function that undoes it.

    Three hooks, because no single one of logging's sees everything: the record factory
    (message, traceback, stack), ``Logger.makeRecord`` (``extra=`` fields are set on the
    record after the factory made it) and ``Formatter.formatException`` (formatters that
    render ``exc_info`` themselves rather than using the redacted ``exc_text``).
    """
    values = sorted(
        {v for s in secrets if s for v in _forms(s) if len(v) >= MIN_SECRET_LENGTH}, key=len
    )[::-1]
    previous_factory = logging.getLogRecordFactory()
    previous_make_record = logging.Logger.makeRecord
    previous_format_exception = logging.Formatter.formatException

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous_factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:
            # A malformed call (arguments that do not fit the format): left as it is, so
            # logging reports it when the record is emitted, as it would without us.
            return record
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

    def make_record(self: logging.Logger, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous_make_record(self, *args, **kwargs)
        for name, value in list(vars(record).items()):
            if name not in _RECORD_FIELDS and isinstance(value, str):
                setattr(record, name, redact(value, values))
        return record

    def format_exception(self: logging.Formatter, ei: Any) -> str:
        return redact(previous_format_exception(self, ei), values)

    logging.setLogRecordFactory(factory)
    logging.Logger.makeRecord = make_record  # type: ignore[method-assign]
    logging.Formatter.formatException = format_exception  # type: ignore[method-assign]

    def undo() -> None:
        logging.setLogRecordFactory(previous_factory)
        logging.Logger.makeRecord = previous_make_record  # type: ignore[method-assign]
        logging.Formatter.formatException = previous_format_exception  # type: ignore[method-assign]

    return undo
