"""The one grammar of relative times (store.durations), read by ``/handoff stats`` and
``handoff audit export --since`` alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from handlers.commands import UsageError, parse_command
from store.durations import InvalidDuration, parse_age, parse_since
from store.exceptions import HandoffError


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("90m", timedelta(minutes=90)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("2W", timedelta(weeks=2)),
        (" 24h ", timedelta(hours=24)),
    ],
)
def test_ages_are_minutes_hours_days_or_weeks(text: str, age: timedelta) -> None:
    assert parse_age(text) == age


@pytest.mark.parametrize("text", ["", "7", "d7", "7 d", "7y", "-1d", "1.5h", "1234567d"])
def test_anything_else_is_an_invalid_duration_with_examples(text: str) -> None:
    with pytest.raises(InvalidDuration, match="such as 90m, 12h, 7d or 2w") as raised:
        parse_age(text)
    assert isinstance(raised.value, HandoffError) and isinstance(raised.value, ValueError)


def test_since_reads_ages_and_iso_times() -> None:
    now = datetime(2025, 1, 31, 12, 0, tzinfo=UTC)
    assert parse_since("7d", now=now) == now - timedelta(days=7)
    assert parse_since("90m", now=now) == now - timedelta(minutes=90)
    assert parse_since("2025-01-30") == datetime(2025, 1, 30, tzinfo=UTC)
    assert parse_since("2025-01-30T08:00:00+02:00") == datetime(2025, 1, 30, 6, tzinfo=UTC)
    with pytest.raises(ValueError, match="neither an ISO date"):
        parse_since("last tuesday")


def test_the_stats_window_reads_the_same_grammar() -> None:
    assert parse_command("stats 90m").window == parse_age("90m")
    assert parse_command("stats 2w").window == timedelta(weeks=2)
    with pytest.raises(UsageError, match="between 1 hour and a year"):
        parse_command("stats 30m")
    with pytest.raises(UsageError, match="such as `7d`"):
        parse_command("stats soon")


def test_an_age_reaching_before_the_year_1_is_an_invalid_duration() -> None:
    with pytest.raises(InvalidDuration, match="before the year 1"):
        parse_since("999999w")
