"""The reports: ``stats`` (what waits now and how decisions went) and ``audit export``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TextIO

import click

from bot.cli.app import main, settings
from bot.cli.output import echo_json, json_option
from store.durations import parse_age


@main.command()
@click.option(
    "--window",
    default="7d",
    show_default=True,
    help="How far back decisions are counted: an age such as 7d, 12h or 30m.",
)
@json_option
def stats(window: str, as_json: bool) -> None:
    """What is pending (by type and channel) and how decisions went in the window."""
    from bot.queries.stats import compute_stats

    try:
        span = parse_age(window)
        datetime.now(UTC) - span  # an age that reaches before the year 1 overflows
    except (ValueError, OverflowError) as exc:
        raise click.BadParameter(str(exc), param_hint="--window") from exc
    if span <= timedelta(0):
        raise click.BadParameter("must be longer than 0, e.g. 7d", param_hint="--window")
    figures = compute_stats(settings().open_store(), window=span)
    if as_json:
        echo_json(
            {
                "since": figures.since.isoformat(),
                "window_seconds": figures.window.total_seconds(),
                "pending": figures.pending,
                "pending_by_type": figures.pending_by_type,
                "pending_by_channel": figures.pending_by_channel,
                "decided": figures.decided,
                "expired": figures.expired,
                "cancelled": figures.cancelled,
                "undeliverable": figures.undeliverable,
                "closed": figures.closed,
                "expiry_rate": figures.expiry_rate,
                "median_decision_seconds": figures.median_decision_seconds,
                "p90_decision_seconds": figures.p90_decision_seconds,
                "failed_resumes": figures.failed_resumes,
                "failing_resumes": figures.failing_resumes,
                "failed_deliveries": list(figures.failed_deliveries),
                "failed_deliveries_total": figures.failed_deliveries_total,
            }
        )
        return
    by_type = ", ".join(f"{n} {t}" for t, n in figures.pending_by_type.items()) or "none"
    by_channel = ", ".join(f"{c}: {n}" for c, n in figures.pending_by_channel.items())
    rate = f"{figures.expiry_rate:.0%}" if figures.expiry_rate is not None else "n/a"
    click.echo(f"since {figures.since:%Y-%m-%d %H:%M:%S} UTC ({window})")
    click.echo(f"pending now        {figures.pending} ({by_type})")
    click.echo(f"pending by channel {by_channel or 'none named'}")
    click.echo(
        f"closed             {figures.decided} decided by people, {figures.expired} expired, "
        f"{figures.cancelled} cancelled, {figures.undeliverable} undeliverable"
    )
    click.echo(
        f"time to decision   median {_seconds(figures.median_decision_seconds)}, "
        f"p90 {_seconds(figures.p90_decision_seconds)}"
    )
    click.echo(f"expiry rate        {rate} of {figures.closed} closed")
    click.echo(
        f"failed resumes     {figures.failed_resumes} in the window, "
        f"{figures.failing_resumes} failed now"
    )
    failed_ids = ", ".join(figures.failed_deliveries)
    click.echo(
        f"failed deliveries  {figures.failed_deliveries_total} now"
        + (f": {failed_ids}" if failed_ids else "")
    )


def _seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


@main.group()
def audit() -> None:
    """Read the audit trail."""


@audit.command(name="export")
@click.option("--since", default=None, help="ISO date/time (UTC unless given) or an age: 7d, 12h.")
@click.option("--run", "run_id", default=None, help="Only the events of this run's handoffs.")
@click.option(
    "--output", type=click.File("w"), default="-", show_default=True, help="File to write."
)
def audit_export(since: str | None, run_id: str | None, output: TextIO) -> None:
    """Write every audit event as JSON Lines (time, event, actor, handoff_id, detail, id)."""
    from bot.queries.audit_export import export_audit
    from store.durations import parse_since

    try:
        start = parse_since(since) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    written = export_audit(settings().open_store(), output, since=start, run_id=run_id)
    click.echo(f"{written} events exported", err=True)
