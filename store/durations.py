"""The one grammar of relative times: ages such as ``90m``, ``12h``, ``7d`` or ``2w``.

``/handoff stats 7d`` and ``handoff audit export --since 7d`` read it alike, and a later
surface (key expiry, API filters) takes the same words.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from store.exceptions import HandoffError

_AGE = re.compile(r"^(\d{1,6})([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class InvalidDuration(HandoffError, ValueError):
    """A relative time or a date that could not be read; the message gives examples."""


def parse_age(text: str) -> timedelta:
    """An age such as ``90m``, ``12h``, ``7d`` or ``2w``; raises ``InvalidDuration``."""
    found = _AGE.match(text.strip().lower())
    if not found:
        raise InvalidDuration(f"{text!r} is not an age such as 90m, 12h, 7d or 2w")
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """A start time from an ISO 8601 date or time (UTC unless it says otherwise) or an age
    such as ``90m``, ``12h``, ``7d`` or ``2w`` before ``now``; raises ``InvalidDuration``."""
    text = value.strip()
    if _AGE.match(text.lower()):
        try:
            return (now or datetime.now(UTC)) - parse_age(text)
        except OverflowError:
            raise InvalidDuration(f"{value!r} reaches back before the year 1") from None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidDuration(
            f"{value!r} is neither an ISO date/time (2025-01-31, 2025-01-31T09:00:00Z) "
            "nor an age such as 7d, 12h or 90m"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
