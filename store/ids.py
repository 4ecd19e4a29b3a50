"""Handoff ids: prefixed ULIDs.

A ULID sorts by creation time, so the pending indexes can page by id (ZRANGE BYLEX) and
show the oldest first. The ``ho_`` prefix keeps ids from ever being 32 hex characters,
which LangGraph would mistake for an interrupt-id map, and every character is valid in an
RQ job id (``[A-Za-z0-9_-]``).
"""

from __future__ import annotations

import os
import re
import time

HANDOFF_ID_PREFIX = "ho_"

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
HANDOFF_ID_PATTERN = re.compile(r"^ho_[0-9A-HJKMNP-TV-Z]{26}$")


def new_handoff_id(now_ms: int | None = None) -> str:
    """Return a new handoff id such as ``ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC``."""
    timestamp = int(time.time() * 1000) if now_ms is None else now_ms
    value = (timestamp << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 0x1F])
        value >>= 5
    return HANDOFF_ID_PREFIX + "".join(reversed(chars))


def is_handoff_id(value: str) -> bool:
    """True when ``value`` has the shape of a handoff id (it may still be unknown)."""
    return bool(HANDOFF_ID_PATTERN.match(value))
