"""``handoff policy check`` and ``handoff policy explain``: validate a routing policy file,
and show which rule a request would meet and what it would set (docs/policies.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from bot.cli.app import Failure, main
from bot.cli.exit_codes import ExitCode
from bot.cli.output import echo_json, json_option
from store.exceptions import ConditionTooCostly
from store.models import ApprovalPayload, HandoffRequest
from store.policies import CONDITION_BUDGET, PolicyError, RoutingPolicy, apply_rule, load_policy

_EXPLAIN_IDS = {"run_id": "explain", "thread_id": "explain"}
"""What an explained request may leave out: no handoff is created from it."""


@main.group()
def policy() -> None:
    """Check a routing policy file, or explain what it does with a request."""


def _loaded(path: str) -> RoutingPolicy:
    try:
        return load_policy(path)
    except PolicyError as exc:
        for problem in exc.problems:
            click.echo(f"{exc.source}: {problem}", err=True)
        raise Failure(
            f"{len(exc.problems)} problem(s) in {exc.source}; fix them and check again",
            ExitCode.USAGE,
        ) from None


@policy.command()
@click.argument("file", type=click.Path(dir_okay=False))
def check(file: str) -> None:
    """Validate FILE (TOML or YAML): exit 0 when it is valid, 2 naming each bad rule and
    field."""
    loaded = _loaded(file)
    click.echo(f"{file}: {len(loaded.rules)} rule(s), valid")


@policy.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--request",
    "request_file",
    required=True,
    type=click.Path(dir_okay=False, exists=True),
    help="A handoff request as JSON (the fields of HandoffRequest; run_id and thread_id "
    "may be left out).",
)
@json_option
def explain(file: str, request_file: str, as_json: bool) -> None:
    """Show which rule of FILE matches the request in --request, and what it sets."""
    loaded = _loaded(file)
    request = _read_request(request_file)
    verdicts = loaded.verdicts(request)
    last = verdicts[-1] if verdicts else None
    refused = None
    if last is not None and last.too_costly:
        when = loaded.rule(last.rule).match.when
        refused = str(ConditionTooCostly(last.rule, when.text if when else "", CONDITION_BUDGET))
    matched = loaded.rule(last.rule) if last is not None and last.matched else None
    routing = None if matched is None else apply_rule(matched, request)
    routed = routing.request.payload if routing else request.payload
    quorum = (
        {"approvals": routed.approvals_required, "rejections": routed.rejections_required}
        if isinstance(routed, ApprovalPayload)
        else None
    )
    result: dict[str, Any] = {
        "matched": routing.rule if routing else None,
        "tried": [
            {"rule": v.rule, "matched": v.matched, "reason": v.reason or None} for v in verdicts
        ],
        "sets": _jsonable(routing.changes) if routing else {},
        "auto": routing.auto.value if routing and routing.auto else None,
        "quorum": quorum,
        "refused": refused,
    }
    if as_json:
        echo_json(result)
        return
    for verdict in verdicts:
        mark = "matches" if verdict.matched else f"no: {verdict.reason}"
        click.echo(f"rule {verdict.rule}: {mark}")
    if refused is not None:
        click.echo(f"refused: {refused}")
        return
    if routing is None:
        click.echo("no rule matches: the request is stored as sent, with the defaults")
        return
    click.echo(f"applies rule {routing.rule}")
    for name, value in result["sets"].items():
        click.echo(f"  sets {name} = {json.dumps(value)}")
    if not routing.changes:
        click.echo("  sets nothing the request did not already have")
    if quorum is not None and routing.auto is None:
        click.echo(
            f"  decided by {quorum['approvals']} approval(s), or rejected by "
            f"{quorum['rejections']} rejection(s)"
        )
    if routing.auto is not None:
        click.echo(f"  decides it at once: {routing.auto.value} by {routing.decided_by}")


def _read_request(path: str) -> HandoffRequest:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Failure(f"{path}: not readable JSON ({exc})", ExitCode.USAGE) from None
    except RecursionError:
        raise Failure(f"{path}: nested too deeply to be a request", ExitCode.USAGE) from None
    if not isinstance(data, dict):
        raise Failure(f"{path}: a request is a JSON object", ExitCode.USAGE)
    try:
        return HandoffRequest.model_validate({**_EXPLAIN_IDS, **data})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()
        )
        raise Failure(f"{path}: not a handoff request: {problems}", ExitCode.USAGE) from None


def _jsonable(changes: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(changes, default=str))
