"""`handoff check`, the doctor: against Redis servers of the test's own (with and without
the recommended persistence) and the Slack stand-in with the manifest's scopes or fewer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bot.cli.exit_codes import ExitCode
from bot.standin import SlackStandIn
from tests.conftest import ROOT
from tests.support.manifest import bot_scopes
from tests.support.redis_server import RedisServer


def _server(data: Path, *settings: str) -> Iterator[RedisServer]:
    server = RedisServer(data, extra=settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """appendonly yes, appendfsync always, noeviction: as docs/deployment.md says."""
    yield from _server(tmp_path / "durable")


@pytest.fixture
def forgetful_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """No append-only file, and eviction on: what Debian's default config and caches run."""
    yield from _server(
        tmp_path / "forgetful", "--appendonly", "no", "--maxmemory-policy", "allkeys-lru"
    )


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    standin = SlackStandIn(signing_secret="s3cr3t-signing-secret", scopes=bot_scopes())
    standin.start()
    try:
        yield standin
    finally:
        standin.stop()


def _check(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "HANDOFF_", "REDIS_URL"))
    }
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "check", *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _slack_env(standin: SlackStandIn, **extra: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": standin.bot_token,
        "SLACK_SIGNING_SECRET": standin.signing_secret,
        "SLACK_API_URL": standin.api_url,
        **extra,
    }


def test_a_redis_without_aof_and_with_eviction_is_reported(
    forgetful_redis: RedisServer, slack: SlackStandIn
) -> None:
    done = _check(REDIS_URL=forgetful_redis.url, **_slack_env(slack))

    assert done.returncode == ExitCode.ERROR, done.stdout + done.stderr
    fails = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert any("appendonly is no" in line for line in fails), done.stdout
    assert any("maxmemory-policy is allkeys-lru" in line for line in fails), done.stdout
    assert "fix: set appendonly yes" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_sound_setup_passes_and_shows_secrets_masked(
    durable_redis: RedisServer, slack: SlackStandIn
) -> None:
    done = _check("--json", REDIS_URL=durable_redis.url, **_slack_env(slack))

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    messages = [(c["level"], c["message"]) for c in report["checks"]]
    assert ("ok", "persistence: appendonly yes, appendfsync always") in messages
    assert ("ok", "maxmemory-policy noeviction") in messages
    assert any(m.startswith("auth.test: bot @handoff") for _, m in messages), messages
    assert ("ok", f"the bot token has the {len(bot_scopes())} scopes it needs") in messages
    # No worker runs: a warning, not a failure.
    assert any(level == "warn" and "RQ workers" in m for level, m in messages)
    assert slack.bot_token not in done.stdout and slack.signing_secret not in done.stdout
    assert "SLACK_BOT_TOKEN xoxb… set" in [m for _, m in messages]


def test_missing_scopes_a_bad_token_and_a_renamed_command_are_failures(
    durable_redis: RedisServer, tmp_path: Path
) -> None:
    fewer = SlackStandIn(signing_secret="s", scopes=bot_scopes() - {"channels:join"})
    fewer.start()
    try:
        missing = _check(REDIS_URL=durable_redis.url, **_slack_env(fewer))
        revoked = _check(
            REDIS_URL=durable_redis.url, **_slack_env(fewer, SLACK_BOT_TOKEN="xoxb-not-this-one")
        )
    finally:
        fewer.stop()
    manifest = yaml.safe_load((ROOT / "manifest.yml").read_text())
    (tmp_path / "manifest.yml").write_text(yaml.safe_dump(manifest))
    renamed = _check(cwd=tmp_path, REDIS_URL=durable_redis.url, HANDOFF_SLASH_COMMAND="/approvals")

    assert missing.returncode == ExitCode.ERROR
    assert "FAIL  slack     the bot token lacks channels:join" in missing.stdout
    assert revoked.returncode == ExitCode.ERROR
    assert "auth.test with SLACK_BOT_TOKEN failed" in revoked.stdout
    assert "invalid_auth" in revoked.stdout
    assert renamed.returncode == ExitCode.ERROR
    assert "HANDOFF_SLASH_COMMAND is /approvals but the manifest declares /handoff" in (
        renamed.stdout
    )
    # Without a token Slack is only a warning: handoffs go to the log.
    assert "warn  slack     SLACK_BOT_TOKEN is not set" in renamed.stdout


def test_unreachable_redis_and_bad_settings_fail_in_a_line(tmp_path: Path) -> None:
    gone = _check(REDIS_URL="redis://127.0.0.1:1/0")
    bad = _check(REDIS_URL="redis://127.0.0.1/x")

    assert gone.returncode == ExitCode.ERROR
    assert "FAIL  redis     redis://127.0.0.1:1/0 is not answering" in gone.stdout
    assert bad.returncode == ExitCode.ERROR
    assert "FAIL  settings" in bad.stdout and "REDIS_URL" in bad.stdout
    assert "Traceback" not in gone.stderr + bad.stderr


def test_the_built_in_scopes_are_the_manifests() -> None:
    from bot import defaults

    assert bot_scopes() == defaults.BOT_SCOPES
    socket_mode = ROOT / "manifest-socket-mode.yml"
    if socket_mode.exists():  # the Socket Mode manifest asks for the same
        granted = yaml.safe_load(socket_mode.read_text())["oauth_config"]["scopes"]["bot"]
        assert frozenset(granted) == bot_scopes()


def test_a_token_that_cannot_be_sent_is_a_failure_shown_masked(
    durable_redis: RedisServer, slack: SlackStandIn
) -> None:
    token = "xoxb-1234567890\nSECRETTOKENPART"

    done = _check("--json", REDIS_URL=durable_redis.url, **_slack_env(slack, SLACK_BOT_TOKEN=token))

    assert done.returncode == ExitCode.ERROR, done.stderr
    report = json.loads(done.stdout)  # still JSON, no traceback
    assert any("auth.test could not be sent" in c["message"] for c in report["checks"])
    assert "SECRETTOKENPART" not in done.stdout + done.stderr
    assert "1234567890" not in done.stdout + done.stderr


def test_a_password_in_the_query_is_not_shown() -> None:
    done = _check(REDIS_URL="redis://127.0.0.1:1/3?password=TopSecretPW")

    assert "TopSecretPW" not in done.stdout + done.stderr
    assert "password=***" in done.stdout


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("oauth_config: [unclosed", "is not valid YAML"),
        ("oauth_config:\n  scopes:\n    bot: chat:write\n", "must be a list of scopes"),
        ("features:\n  slash_commands: [/handoff]\n", "slash_commands must be a list"),
    ],
)
def test_a_broken_manifest_is_a_failure_not_a_traceback(
    durable_redis: RedisServer, tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / "manifest.yml").write_text(text)

    done = _check(cwd=tmp_path, REDIS_URL=durable_redis.url)

    assert done.returncode == ExitCode.ERROR
    assert problem in done.stdout and "Traceback" not in done.stderr


def test_a_redis_that_refuses_config_is_warned_about_for_both_settings(tmp_path: Path) -> None:
    gen = _server(tmp_path / "managed", "--rename-command", "CONFIG", "")
    server = next(gen)
    try:
        done = _check(REDIS_URL=server.url)
    finally:
        gen.close()

    warnings = [line for line in done.stdout.splitlines() if line.startswith("warn")]
    assert any("persistence settings" in line for line in warnings), done.stdout
    assert any("maxmemory-policy" in line for line in warnings), done.stdout
