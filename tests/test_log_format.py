"""Log lines as JSON (``HANDOFF_LOG_FORMAT=json``): one object a line, the handoff's context
named first, other plain values after, nothing that was not redacted (values that are not
plain strings, numbers or booleans are left out). Secrets in them:
tests/security/test_secrets_in_logs.py."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from bot.log_format import JsonFormatter, formatter


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("worker.jobs")
    return logger.makeRecord(
        "worker.jobs", logging.INFO, __file__, 1, message, args, None, extra=extra
    )


def test_a_json_line_names_the_handoff_run_event_and_user_first() -> None:
    record = _record(
        "%s %s",
        "deliver",
        "completed",
        attempt=2,
        run_id="run-7",
        handoff_id="h_1",
        event="deliver_completed",
        user="U0ALICE",
        done=True,
    )
    line = JsonFormatter().format(record)

    entry = json.loads(line)
    assert "\n" not in line
    assert list(entry)[:8] == [
        "time",
        "level",
        "logger",
        "message",
        "handoff_id",
        "run_id",
        "event",
        "user",
    ]
    assert entry["message"] == "deliver completed" and entry["level"] == "INFO"
    assert entry["logger"] == "worker.jobs" and entry["time"].endswith("Z")
    assert (entry["attempt"], entry["done"]) == (2, True)


def test_values_that_are_not_plain_are_left_out_and_a_traceback_is_kept() -> None:
    try:
        raise ValueError("bad\nline")
    except ValueError:
        record = logging.getLogger("x").makeRecord(
            "x",
            logging.ERROR,
            __file__,
            1,
            "failed",
            (),
            sys.exc_info(),
            extra={"detail": {"nested": "value"}, "ids": ["a"], "handoff_id": None},
        )
    entry = json.loads(JsonFormatter().format(record))

    assert "detail" not in entry and "ids" not in entry and "handoff_id" not in entry
    assert "ValueError: bad\nline" in entry["exception"]


def test_text_stays_the_default_format() -> None:
    line = formatter("text").format(_record("handoff created", handoff_id="h_1"))
    assert line.endswith(" INFO worker.jobs: handoff created")


def test_a_message_with_unicode_line_breaks_stays_one_strict_json_line() -> None:
    # U+2028/U+2029/U+0085 are left as they are by json.dumps(ensure_ascii=False), and
    # str.splitlines (or JavaScript) ends a line at each: the rest could pass for a line
    # of its own. A float that is not finite would be written NaN/Infinity: no JSON.
    forged = '{"level": "CRITICAL", "message": "forged"}'
    record = _record(
        "reason: %s", f"ok\u2028{forged}\x85{forged}\u2029", wait=float("inf"), ratio=0.5
    )
    line = JsonFormatter().format(record)

    assert line.splitlines() == [line]
    entry = json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in {line}"))
    assert entry["message"] == f"reason: ok\u2028{forged}\x85{forged}\u2029"
    assert "wait" not in entry and entry["ratio"] == 0.5
