"""How the ``handoff`` commands write log lines (``HANDOFF_LOG_FORMAT``): text, or one JSON
object a line for a log pipeline.

A JSON line holds ``time`` (UTC, ISO 8601), ``level``, ``logger`` and ``message``, then
``handoff_id``, ``run_id``, ``event`` and ``user`` when the record carries them (``extra=``),
then any other plain value it carries (``attempt``, ``actor``, ``channel``...), and
``exception`` with the traceback. What goes in has been through ``bot.log_redaction``
already (the message, string extras, the traceback): values that are not plain strings,
numbers or booleans are left out, as they were not redacted.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import UTC, datetime
from typing import Any

from worker.runner import LOG_FORMAT

CONTEXT_FIELDS = ("handoff_id", "run_id", "event", "user")
"""The record fields a JSON line names first, when the record has them."""

# What a LogRecord holds of its own; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's message again, with terminal colours
}


class JsonFormatter(logging.Formatter):
    """One JSON object a line (see the module text).

    Example line::

        {"time": "2025-01-01T12:00:00.123Z", "level": "INFO", "logger": "worker.jobs",
         "message": "deliver completed", "handoff_id": "h_...", "run_id": "run-7",
         "event": "deliver_completed", "attempt": 1}
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if _plain(value):
                entry[name] = value
        for name, value in vars(record).items():
            if name not in _RECORD_FIELDS and name not in entry and _plain(value):
                entry[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        line = json.dumps(entry, ensure_ascii=False, default=str)
        # JSON leaves these unescaped, and they end a line for str.splitlines and for
        # JavaScript: escaped, a message holding one stays one line for every reader.
        return line.translate(_LINE_BREAKS)


_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}
"""The characters besides ASCII's that end a line, as JSON escapes (only ever inside a
string of the line, where the escape stands for the same character)."""


def _plain(value: object) -> bool:
    if isinstance(value, float):
        # NaN and infinities are no JSON: json.dumps would write NaN, which strict readers
        # refuse, losing the whole line.
        return math.isfinite(value)
    return value is not None and isinstance(value, str | int | bool)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of ``log_format`` (``text`` or ``json``)."""
    if log_format == "json":
        return JsonFormatter()
    return logging.Formatter(LOG_FORMAT)


def configure_logging(level: int, log_format: str = "text") -> None:
    """Log to stderr at ``level`` in ``log_format``, from every logger of this process (and
    of the processes it forks), unless logging was set up already."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    root.addHandler(handler)
    root.setLevel(level)
