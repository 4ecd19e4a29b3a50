"""Handoff ids: prefixed ULIDs.

A ULID sorts by creation time, so the pending indexes can page by id (ZRANGE BYLEX) and
show the oldest first. The ``ho_`` prefix keeps ids from ever being 32 hex characters,
which LangGraph would mistake for an interrupt-id map, and every character is valid in an
RQ job id (``[A-Za-z0-9_-]``).
"""

from __future__ import annotations

import os
import re
import threading
import time

HANDOFF_ID_PREFIX = "ho_"

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DIGIT_PAIRS = [first + second for first in _CROCKFORD for second in _CROCKFORD]
_PAIR_SHIFTS = range(120, -10, -10)  # the 13 pairs of a 130-bit number, most significant first
HANDOFF_ID_PATTERN = re.compile(r"^ho_[0-9A-HJKMNP-TV-Z]{26}$")


_last_lock = threading.Lock()
_last = (0, 0)  # (timestamp ms, random part) of the id made last in this process


def new_handoff_id(now_ms: int | None = None) -> str:
    """Return a new handoff id such as ``ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC``.

    Ids made by one process in the same millisecond increase (the random part is
    incremented), so "oldest first" holds for them too.
    """
    global _last
    timestamp = int(time.time() * 1000) if now_ms is None else now_ms
    with _last_lock:
        random_part = int.from_bytes(os.urandom(10), "big")
        if timestamp == _last[0] and _last[1] < (1 << 80) - 1:
            random_part = _last[1] + 1
        _last = (timestamp, random_part)
    value = (timestamp << 80) | random_part
    # 26 base-32 digits, two at a time (10 bits per table lookup).
    return HANDOFF_ID_PREFIX + "".join([_DIGIT_PAIRS[(value >> s) & 0x3FF] for s in _PAIR_SHIFTS])


def is_handoff_id(value: str) -> bool:
    """True when ``value`` has the shape of a handoff id (it may still be unknown)."""
    return bool(HANDOFF_ID_PATTERN.match(value))


DIGEST_MARK = "@"
"""Between a handoff id and the digest of the arguments a view of it showed (ids never hold
it)."""


def decision_value(handoff_id: str, args_digest: str | None) -> str:
    """The value of a decision button: the handoff id, and for an approval the digest of the
    arguments the message shows, so a click on a message older than a voter's edit is not
    taken as an approval of arguments its clicker never saw."""
    return f"{handoff_id}{DIGEST_MARK}{args_digest}" if args_digest else handoff_id


def parse_decision_value(value: object) -> tuple[str | None, str | None]:
    """``(handoff id, digest shown)`` of a button's value (the digest None for a button
    that shows none: other types, messages posted before buttons carried it)."""
    if not isinstance(value, str) or not value:
        return None, None
    handoff_id, mark, digest = value.partition(DIGEST_MARK)
    return handoff_id or None, (digest or None) if mark else None
