"""The replay guard in the request gate: keyed by what Slack signs, never by a retry header;
an event let through once per event_id; closed (nothing let through, nothing recorded)
while Redis cannot be asked, and open again, for the same requests, once it is back."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from slack_sdk.signature import SignatureVerifier

from bot.http.checks import Admitted, RequestGate
from bot.http.prefetch import clicked_handoff_read
from bot.http.replay import ReplayGuard
from bot.keys import BotKeys
from tests.support.fixtures import slack_fixture
from tests.support.redis_server import RedisServer
from worker.client import Handoffs

SECRET = "replay-test-signing-secret"
HANDOFF_ID = "ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC"
"""A well-formed id, so that a click on it is read ahead in the replay check's round trip."""


def _environ(body: bytes, *, form: bool, timestamp: int | None = None, **headers: str) -> dict:
    """A POST of ``body`` to /slack/events, signed at ``timestamp`` (default now)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/slack/events",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/x-www-form-urlencoded" if form else "application/json",
        "wsgi.input": io.BytesIO(body),
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": ts,
        "HTTP_X_SLACK_SIGNATURE": SignatureVerifier(SECRET).generate_signature(
            timestamp=ts, body=body
        ),
    }
    environ.update({"HTTP_" + name.upper(): value for name, value in headers.items()})
    return environ


def _again(environ: dict[str, Any], **headers: str) -> dict[str, Any]:
    """The same request (same body and signature) sent again, with ``headers`` added."""
    body = environ["wsgi.input"].getvalue()
    again = {**environ, "wsgi.input": io.BytesIO(body)}
    again.update({"HTTP_" + name.upper(): value for name, value in headers.items()})
    return again


def _event() -> bytes:
    return json.dumps(slack_fixture("event_app_home_opened")).encode()


def _click() -> bytes:
    click = slack_fixture("block_actions_message")
    click["actions"][0]["value"] = HANDOFF_ID
    return urlencode({"payload": json.dumps(click)}).encode()


def _command() -> bytes:
    return urlencode(slack_fixture("slash_command")).encode()


def _gate(redis: Redis) -> RequestGate:
    store = Handoffs(redis).store
    guard = ReplayGuard(redis, BotKeys(store.keys))
    return RequestGate(SECRET, guard, read_for=clicked_handoff_read(store))


def test_an_event_sent_again_with_any_retry_number_passes_the_gate_once(redis: Redis) -> None:
    gate = _gate(redis)
    first = _environ(_event(), form=False)

    admitted = gate.admit(first)
    # The same signed request with X-Slack-Retry-Num 1 to 11 (not signed), then the same
    # body re-signed a second later, as Slack's later retries are.
    again = [gate.admit(_again(first, X_SLACK_RETRY_NUM=str(n))) for n in range(1, 12)]
    resigned = gate.admit(_environ(_event(), form=False, timestamp=int(time.time()) + 1))

    assert isinstance(admitted, Admitted)
    assert [isinstance(outcome, Admitted) for outcome in [*again, resigned]] == [False] * 12


def test_a_click_or_command_with_a_retry_number_is_still_a_replay(redis: Redis) -> None:
    gate = _gate(redis)
    for body in (_click(), _command()):
        first = _environ(body, form=True)
        assert isinstance(gate.admit(first), Admitted)

        replays = [gate.admit(_again(first, X_SLACK_RETRY_NUM=str(n))) for n in range(1, 4)]

        assert not any(isinstance(outcome, Admitted) for outcome in replays)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[RedisServer, Redis]]:
    """A Redis server of the test's own, to kill and start again, and a client on it that
    does not retry (a refused connection fails the check at once)."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Redis(port=server.port, socket_timeout=1, retry=Retry(NoBackoff(), 0))
    try:
        yield server, client
    finally:
        client.close()
        server.stop()


def test_while_redis_is_down_nothing_passes_the_gate_and_nothing_is_recorded(
    own_redis: tuple[RedisServer, Redis],
) -> None:
    server, client = own_redis
    gate = _gate(client)
    sent = {
        "click": _environ(_click(), form=True),
        "command": _environ(_command(), form=True),
        "event": _environ(_event(), form=False),
    }
    server.kill()

    while_down = {kind: gate.admit(_again(environ)) for kind, environ in sent.items()}
    server.start()
    recorded = client.dbsize()
    # Once Redis is back, the very same requests (Slack's retry of the event) go through.
    once_back = {kind: gate.admit(_again(environ)) for kind, environ in sent.items()}

    assert {kind: isinstance(o, Admitted) for kind, o in while_down.items()} == dict.fromkeys(
        sent, False
    )
    assert recorded == 0
    assert {kind: isinstance(o, Admitted) for kind, o in once_back.items()} == dict.fromkeys(
        sent, True
    )


def test_a_redis_that_refuses_writes_lets_nothing_through(
    own_redis: tuple[RedisServer, Redis],
) -> None:
    """Not only an unreachable Redis: one that answers with an error (full, read-only)."""
    _, client = own_redis
    gate = _gate(client)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")  # every write is refused: OOM

    outcomes = [
        gate.admit(_environ(_click(), form=True)),
        gate.admit(_environ(_command(), form=True)),
        gate.admit(_environ(_event(), form=False)),
    ]

    assert not any(isinstance(outcome, Admitted) for outcome in outcomes)
