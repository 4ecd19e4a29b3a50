"""Redis replies as text.

The store's clients are made without ``decode_responses`` (RQ needs bytes), so every reply
arrives as ``bytes``; this is the one place that turns one into ``str``.
"""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """A Redis reply (``bytes``, or a ``str`` from a decoding client) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)
