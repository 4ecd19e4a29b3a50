"""``handoff check``: the doctor. It reads the settings, asks Redis and Slack what they are,
and prints one line per finding with what to fix, so a deployment's mistakes show up
before its first handoff (not as a lost decision after a Redis restart)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import click
import yaml
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry
from slack_sdk.errors import SlackApiError

from bot import defaults
from bot.cli.app import main
from bot.cli.exit_codes import ExitCode
from bot.cli.output import echo_json, json_option
from bot.config import Settings
from store.connection import open_client
from store.exceptions import ConfigurationError
from store.settings import StoreSettings, redacted_url

REDIS_TIMEOUT_SECONDS = 2.0
"""A Redis the workers can use answers a PING in milliseconds; past this it is not answering."""
SLACK_TIMEOUT_SECONDS = 10.0


class Level(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Finding:
    level: Level
    topic: str
    message: str
    fix: str | None = None


def mask(secret: str) -> str:
    """A secret as it may be shown: its first 4 characters (the kind, ``xoxb``), no more."""
    return f"{secret[:4]}…" if len(secret) > 8 else "…"


def check_redis(settings: StoreSettings) -> list[Finding]:
    """Reachable, and configured so that nothing acknowledged is lost: AOF on, no eviction."""
    if not settings.redis_url:
        return [
            Finding(
                Level.FAIL,
                "redis",
                "REDIS_URL is not set",
                "set REDIS_URL=redis://host:6379/0 (or run `handoff dev` for an embedded one)",
            )
        ]
    where = redacted_url(settings.redis_url)
    try:
        # A cluster's client connects as it is made (to read the slot map).
        client = open_client(
            settings.redis_url,
            socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
            retry=Retry(NoBackoff(), 0),
        )
    except RedisError as exc:
        return [_not_answering(where, exc)]
    try:
        started = time.perf_counter()
        client.ping()
        took = (time.perf_counter() - started) * 1000
        server = client.info("server")
        findings = [
            Finding(
                Level.OK,
                "redis",
                f"{where} answers in {took:.1f} ms "
                f"({server.get('redis_version', '?')}, {server.get('redis_mode', 'standalone')})",
            )
        ]
        findings += _redis_config(client)
        findings += _queue_workers(client, settings)
        return findings
    except RedisError as exc:
        return [_not_answering(where, exc)]
    finally:
        client.close()


def _not_answering(where: str, exc: RedisError) -> Finding:
    return Finding(
        Level.FAIL,
        "redis",
        f"{where} is not answering ({' '.join(str(exc).split())})",
        "start Redis or fix REDIS_URL",
    )


def _config(client: Redis, name: str) -> str | None:
    """A Redis setting, or None where CONFIG is refused (managed services rename it)."""
    try:
        value = client.config_get(name).get(name)
    except ResponseError:
        return None
    return None if value is None else str(value)


def _redis_config(client: Redis) -> list[Finding]:
    findings = []
    appendonly = _config(client, "appendonly")
    if appendonly is None:
        findings.append(
            Finding(
                Level.WARN,
                "redis",
                "cannot read the persistence settings (CONFIG GET is refused)",
                "make sure the server runs with appendonly yes and appendfsync everysec",
            )
        )
    elif appendonly != "yes":
        findings.append(
            Finding(
                Level.FAIL,
                "redis",
                "persistence: appendonly is no: a restart loses every decision since the last "
                "snapshot",
                "set appendonly yes and appendfsync everysec (redis.conf, or CONFIG SET "
                "appendonly yes then CONFIG REWRITE)",
            )
        )
    else:
        fsync = _config(client, "appendfsync") or "?"
        level = Level.OK if fsync in ("always", "everysec") else Level.WARN
        findings.append(
            Finding(
                level,
                "redis",
                f"persistence: appendonly yes, appendfsync {fsync}",
                None if level is Level.OK else "set appendfsync everysec (or always)",
            )
        )
    policy = _config(client, "maxmemory-policy")
    if policy is None:
        findings.append(
            Finding(
                Level.WARN,
                "redis",
                "cannot read maxmemory-policy (CONFIG GET is refused)",
                "make sure the server runs with maxmemory-policy noeviction",
            )
        )
    elif policy != "noeviction":
        findings.append(
            Finding(
                Level.FAIL,
                "redis",
                f"maxmemory-policy is {policy}: a full Redis would delete pending handoffs",
                "set maxmemory-policy noeviction (a full Redis then refuses new handoffs instead)",
            )
        )
    elif policy == "noeviction":
        findings.append(Finding(Level.OK, "redis", "maxmemory-policy noeviction"))
    return findings


def _queue_workers(client: Redis, settings: StoreSettings) -> list[Finding]:
    """``_workers`` on the Redis of the queues (HANDOFF_QUEUE_REDIS_URL when set)."""
    try:
        queue_url = settings.require_queue_redis_url()
    except ConfigurationError as exc:
        return [Finding(Level.FAIL, "workers", str(exc), "set HANDOFF_QUEUE_REDIS_URL")]
    if queue_url == settings.redis_url:
        return _workers(client, settings)
    queues = open_client(
        queue_url,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        queues.ping()
        return _workers(queues, settings)
    except RedisError as exc:
        return [
            Finding(
                Level.FAIL,
                "workers",
                f"the queues' Redis is not answering ({' '.join(str(exc).split())})",
                "start it or fix HANDOFF_QUEUE_REDIS_URL",
            )
        ]
    finally:
        queues.close()


def _workers(client: Redis, settings: StoreSettings) -> list[Finding]:
    from rq import Worker

    from worker.queues import slack_queue_name

    queues = {settings.queue: 0, slack_queue_name(settings.queue): 0}
    try:
        workers = Worker.all(connection=client)
    except (RedisError, ValueError, TypeError) as exc:  # a malformed worker record
        return [
            Finding(
                Level.WARN,
                "workers",
                f"cannot read RQ's worker records ({type(exc).__name__}: {exc})",
                "look at `rq info`; a stale record expires by itself",
            )
        ]
    for worker in workers:
        for name in worker.queue_names():
            if name in queues:
                queues[name] += 1
    missing = [name for name, count in queues.items() if not count]
    counts = ", ".join(f"{count} on {name}" for name, count in queues.items())
    if missing:
        return [
            Finding(
                Level.WARN,
                "workers",
                f"RQ workers: {counts}",
                "start `handoff worker` (nothing is posted or resumed without one)",
            )
        ]
    return [Finding(Level.OK, "workers", f"RQ workers: {counts}")]


class ManifestProblem(ValueError):
    """The manifest file cannot be read as a Slack app manifest."""


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The app manifest at ``path``; None when there is none. Raises ``ManifestProblem``
    for a file that is not YAML, or whose scopes or slash commands are not lists."""
    if not path.is_file():
        return None
    try:
        loaded = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ManifestProblem(f"{path} is not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(loaded, dict):
        raise ManifestProblem(f"{path} is not a Slack app manifest (no mapping at its top)")
    scopes = _dig(loaded, "oauth_config", "scopes", "bot")
    if scopes is not None and not (
        isinstance(scopes, list) and all(isinstance(s, str) for s in scopes)
    ):
        raise ManifestProblem(f"{path}: oauth_config.scopes.bot must be a list of scopes")
    commands = _dig(loaded, "features", "slash_commands")
    if commands is not None and not (
        isinstance(commands, list) and all(isinstance(c, dict) for c in commands)
    ):
        raise ManifestProblem(
            f"{path}: features.slash_commands must be a list of {{command: /name, ...}}"
        )
    return loaded


def _dig(value: Any, *names: str) -> Any:
    for name in names:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


def manifest_scopes(manifest: dict[str, Any] | None) -> frozenset[str]:
    """The bot scopes the manifest asks for (built-in ones without a manifest)."""
    if manifest is None:
        return defaults.BOT_SCOPES
    return frozenset(_dig(manifest, "oauth_config", "scopes", "bot") or [])


def check_slack(settings: Settings, manifest: dict[str, Any] | None) -> list[Finding]:
    """The tokens and secrets are there (shown masked), the bot token works, and it has the
    scopes and slash command the app declares."""
    findings = _secrets(settings)
    findings += _slash_command(settings, manifest)
    token = settings.slack_bot_token
    if not token or not token.startswith("xoxb-"):
        return findings
    from bot.delivery.slack_errors import describe
    from bot.slack_client import make_web_client

    client = make_web_client(settings, timeout=SLACK_TIMEOUT_SECONDS)
    try:
        answer = client.auth_test()
    except SlackApiError as exc:
        return [
            *findings,
            Finding(
                Level.FAIL,
                "slack",
                f"auth.test with SLACK_BOT_TOKEN failed: {describe(exc)}",
                "copy the Bot User OAuth Token again (the app's OAuth & Permissions page) "
                "and reinstall the app if it was revoked",
            ),
        ]
    except OSError as exc:  # DNS, refused, timed out: Slack (or SLACK_API_URL) unreachable
        return [
            *findings,
            Finding(
                Level.FAIL,
                "slack",
                f"cannot reach the Slack Web API at {settings.slack_api_url} "
                f"({_masked(str(exc), token)})",
                "check the network (or SLACK_API_URL)",
            ),
        ]
    except Exception as exc:  # a token that cannot be sent (a newline in it), a bad URL
        return [
            *findings,
            Finding(
                Level.FAIL,
                "slack",
                f"auth.test could not be sent: {type(exc).__name__}: "
                f"{_masked(' '.join(str(exc).split()), token)}",
                "check SLACK_BOT_TOKEN (copied whole, on one line) and SLACK_API_URL",
            ),
        ]
    findings.append(
        Finding(
            Level.OK,
            "slack",
            f"auth.test: bot @{answer.get('user')} ({answer.get('user_id')}) in "
            f"{answer.get('team')} ({answer.get('team_id')})",
        )
    )
    findings.append(_scopes(answer.headers, manifest_scopes(manifest)))
    return findings


def _masked(text: str, secret: str) -> str:
    """``text`` with ``secret`` (and each line of it) shown masked."""
    for part in sorted({secret, *secret.splitlines()}, key=len, reverse=True):
        if len(part) >= 4:
            text = text.replace(part, mask(part)).replace(repr(part.encode())[2:-1], mask(part))
    return text


def _secrets(settings: Settings) -> list[Finding]:
    findings: list[Finding] = []
    token = settings.slack_bot_token
    if not token:
        findings.append(
            Finding(
                Level.WARN,
                "slack",
                "SLACK_BOT_TOKEN is not set: handoffs go to the log, not to Slack",
                "set SLACK_BOT_TOKEN (Bot User OAuth Token, xoxb-...)",
            )
        )
    elif not token.startswith("xoxb-"):
        findings.append(
            Finding(
                Level.FAIL,
                "slack",
                f"SLACK_BOT_TOKEN {mask(token)} is not a bot token (they start with xoxb-)",
                "use the Bot User OAuth Token of the app's OAuth & Permissions page",
            )
        )
    else:
        findings.append(Finding(Level.OK, "slack", f"SLACK_BOT_TOKEN {mask(token)} set"))
    app_token = settings.slack_app_token
    if app_token:
        if app_token.startswith("xapp-"):
            findings.append(
                Finding(Level.OK, "slack", f"SLACK_APP_TOKEN {mask(app_token)}: Socket Mode")
            )
        else:
            findings.append(
                Finding(
                    Level.FAIL,
                    "slack",
                    f"SLACK_APP_TOKEN {mask(app_token)} is not an app-level token (xapp-...)",
                    "create one with connections:write on the app's Basic Information page",
                )
            )
    elif settings.slack_signing_secret:
        findings.append(
            Finding(
                Level.OK,
                "slack",
                # Nothing of it is shown: unlike a token, it has no prefix that says its kind.
                f"SLACK_SIGNING_SECRET set ({len(settings.slack_signing_secret)} characters): "
                "HTTP mode",
            )
        )
    elif token:
        findings.append(
            Finding(
                Level.FAIL,
                "slack",
                "neither SLACK_SIGNING_SECRET (HTTP mode) nor SLACK_APP_TOKEN (Socket Mode) "
                "is set: `handoff serve` cannot verify Slack's requests",
                "set SLACK_SIGNING_SECRET from the app's Basic Information page",
            )
        )
    return findings


def _slash_command(settings: Settings, manifest: dict[str, Any] | None) -> list[Finding]:
    if manifest is None:
        return []
    declared = [
        str(command.get("command"))
        for command in _dig(manifest, "features", "slash_commands") or []
    ]
    if settings.slash_command in declared:
        return [Finding(Level.OK, "slack", f"slash command {settings.slash_command} declared")]
    return [
        Finding(
            Level.FAIL,
            "slack",
            f"HANDOFF_SLASH_COMMAND is {settings.slash_command} but the manifest declares "
            f"{', '.join(declared) or 'none'}",
            "make HANDOFF_SLASH_COMMAND and the manifest's slash command the same, and "
            "update the app",
        )
    ]


def _scopes(headers: Any, wanted: frozenset[str]) -> Finding:
    granted_header = (headers or {}).get("x-oauth-scopes")
    if granted_header is None:
        return Finding(
            Level.WARN,
            "slack",
            "Slack did not say which scopes the token has",
            f"check on the app's OAuth & Permissions page: {', '.join(sorted(wanted))}",
        )
    granted = {scope.strip() for scope in str(granted_header).split(",") if scope.strip()}
    missing = sorted(wanted - granted)
    if missing:
        return Finding(
            Level.FAIL,
            "slack",
            f"the bot token lacks {', '.join(missing)}",
            "update the app from the manifest (or add the scopes on OAuth & Permissions) "
            "and reinstall it",
        )
    return Finding(Level.OK, "slack", f"the bot token has the {len(wanted)} scopes it needs")


def run_checks(manifest_path: Path) -> list[Finding]:
    """Every finding, settings first (nothing else can be checked with bad settings)."""
    try:
        settings = Settings.from_env()
    except ConfigurationError as exc:
        return [Finding(Level.FAIL, "settings", str(exc), "fix the setting named above")]
    findings = [Finding(Level.OK, "settings", f"read (namespace {settings.namespace})")]
    findings += check_redis(settings)
    try:
        manifest = read_manifest(manifest_path)
    except ManifestProblem as exc:
        findings.append(
            Finding(Level.FAIL, "slack", str(exc), "fix the manifest or pass --manifest")
        )
        manifest = None
    findings += check_slack(settings, manifest)
    return findings


@main.command()
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default="manifest.yml",
    show_default=True,
    help="The Slack app manifest to compare scopes and the slash command with (skipped "
    "when the file does not exist).",
)
@json_option
def check(manifest_path: Path, as_json: bool) -> None:
    """Check the setup: Redis (reachable, AOF, no eviction), workers, Slack (token, scopes,
    secrets, slash command). Exits 1 when something must be fixed."""
    findings = run_checks(manifest_path)
    failed = any(finding.level is Level.FAIL for finding in findings)
    if as_json:
        echo_json({"ok": not failed, "checks": [asdict(finding) for finding in findings]})
    else:
        colors = {Level.OK: "green", Level.WARN: "yellow", Level.FAIL: "red"}
        for finding in findings:
            click.echo(
                click.style(f"{finding.level.value:<4}", fg=colors[finding.level])
                + f"  {finding.topic:<8}  {finding.message}"
            )
            if finding.fix:
                click.echo(f"{'':4}  {'':8}  fix: {finding.fix}")
        click.echo("nothing to fix" if not failed else "something to fix: see FAIL above")
    if failed:
        click.get_current_context().exit(ExitCode.ERROR)
