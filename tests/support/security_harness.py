"""What the security tests share: the bot's WSGI app called in this process, Slack's
request signing, captured payloads, and a byte-level snapshot of the Redis state.

The in-process bot is ``handoff serve``'s own WSGI app (``bot.serve.build_wsgi_app``: the
request gate, then Bolt and every listener) on the same Redis and the same Slack stand-in as
the ``SlackEnv`` processes; only the socket is missing, which makes thousands of signed
requests per test affordable. Representative cases also go over real HTTP to ``handoff serve``.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode

from redis import Redis

from bot.config import Settings
from bot.http.signing import sign
from bot.standin import Message, SlackStandIn, View
from tests.support.slack_env import BOT_TOKEN, SIGNING_SECRET, SlackEnv

NAMESPACE_KEYS = "{ho}:*"
"""Every key of the store and the bot (the default namespace)."""
QUEUE_KEYS = "rq:queue:*"
"""RQ's queues: a forged decision would enqueue work here (RQ's own heartbeats are left out)."""

ALLOWED_PREFIXES = (
    b"{ho}:bot:request:",  # replay guard: one marker per accepted signed request
    b"{ho}:event:",  # event dedupe markers
    b"{ho}:bot:admin:",  # cached users.info answers ("is this user an admin?")
    b"{ho}:bot:usergroups",  # the user-group cache (permission checks and listings share it)
    b"{ho}:bot:channel:",  # the channel-member cache (who may decide unassigned handoffs)
    b"{ho}:op:",  # what a script answered, for a resend after a lost reply (expires in 2 min)
    b"{ho}:bot:home:",  # App Home bookkeeping (who opened it, what it shows)
    b"{ho}:bot:unassigned:read",  # how far a Home build read the audit stream
    b"{ho}:bot:unassigned:walk",  # how far a Home build walked the pending index
)
"""Keys a refused or read-only request may add or change: markers, caches, Home bookkeeping.
Nothing else (handoffs, indexes, outbox, message links, queues) may change at all."""

ALLOWED_AUDIT_EVENTS = frozenset({"denied", "viewed_full"})
"""Audit events a refused or read-only request may append (and nothing else to the audit)."""

AUDIT_STREAM = b"{ho}:audit"
AUDIT_LIST_PREFIX = b"{ho}:audit:"
BODY_PREFIX = b"{ho}:hb:"
"""A handoff's body: its fields may not change, its trail (the last field) may only grow."""


@dataclass(frozen=True)
class Answer:
    """The bot's HTTP answer."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def signed_headers(
    body: bytes, *, secret: str = SIGNING_SECRET, timestamp: int | None = None
) -> dict[str, str]:
    """Slack's two signature headers for ``body`` (signed now unless ``timestamp``)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(secret, ts, body)}


def interaction_body(payload: Any) -> bytes:
    """An interactivity request body: ``payload=<JSON>``, form-encoded, as Slack sends it."""
    return urlencode({"payload": json.dumps(payload)}).encode()


FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


class InProcessBot:
    """``handoff serve``'s WSGI app, configured like ``slack``'s, called without a socket."""

    def __init__(self, slack: SlackEnv) -> None:
        from bot.serve import build_wsgi_app

        env = slack.env
        self.settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            REDIS_URL=env["REDIS_URL"],
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=env["SLACK_API_URL"],
            HANDOFF_CHANNEL=env["HANDOFF_CHANNEL"],
            HANDOFF_ADMINS=env["HANDOFF_ADMINS"],
            allow_any_channel_member=env["HANDOFF_ALLOW_ANY_CHANNEL_MEMBER"],
        )
        self.app = build_wsgi_app(self.settings)

    def post(
        self,
        body: bytes,
        *,
        content_type: str = FORM,
        headers: Mapping[str, str] | None = None,
        sign: bool = True,
    ) -> Answer:
        """POST ``body`` to /slack/events, signed now unless ``sign`` is False; ``headers``
        are added last (and so may replace the signature headers)."""
        sent = {**(signed_headers(body) if sign else {}), **(headers or {})}
        environ: dict[str, Any] = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/slack/events",
            "QUERY_STRING": "",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "3000",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": content_type,
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
        }
        for name, value in sent.items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        status: list[str] = []

        def start_response(line: str, _headers: list[tuple[str, str]], *_: Any) -> None:
            status.append(line)

        answer = b"".join(self.app(environ, start_response))
        return Answer(int(status[0].split()[0]), answer)

    def interaction(self, payload: Any, **options: Any) -> Answer:
        return self.post(interaction_body(payload), content_type=FORM, **options)

    def event(self, envelope: Any, **options: Any) -> Answer:
        return self.post(json.dumps(envelope).encode(), content_type=JSON, **options)

    def command(self, fields: Mapping[str, str], **options: Any) -> Answer:
        return self.post(urlencode(fields).encode(), content_type=FORM, **options)


# -- capturing what the stand-in sends -----------------------------------------------------


class _SinkHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests.append((dict(self.headers), body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def sink() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A local HTTP endpoint that records every POST (headers, body) and answers an empty
    200: its URL, and the list the requests arrive in."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SinkHandler)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def capturing(standin: SlackStandIn) -> Iterator[list[tuple[dict[str, str], bytes]]]:
    """Point the stand-in's people at a sink that records each signed request (headers,
    body), instead of at the bot."""
    previous = standin.bot_url
    with sink() as (url, requests):
        standin.bot_url = url + "slack/events"
        try:
            yield requests
        finally:
            standin.bot_url = previous


def payload_of(body: bytes) -> Any:
    """The JSON payload of a captured interaction body."""
    return json.loads(dict(parse_qsl(body.decode()))["payload"])


def click_payload(
    standin: SlackStandIn, user: str, target: Message | View, action_id: str, **options: Any
) -> dict[str, Any]:
    """The block_actions payload Slack would send for the click (captured, not delivered)."""
    with capturing(standin) as captured:
        standin.click(user, target, action_id, **options)
    [(_, body)] = captured
    return dict(payload_of(body))


# -- Redis state ---------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """The store's and the bot's keys and RQ's queues, as DUMP bytes; audit lists and the
    audit stream by length and last entry (they may only grow, so that is enough to find
    what was appended, without reading long trails each time)."""

    dumps: dict[bytes, bytes]
    audit_ends: dict[bytes, tuple[int, bytes | None]]
    stream_end: tuple[int, bytes | None]


def snapshot(redis: Redis, *, with_allowed: bool = True) -> State:
    """Read the state in two round trips; ``with_allowed=False`` leaves out the keys that
    refused requests may change (``ALLOWED_PREFIXES``), which keeps it cheap under fuzzing."""
    keys = sorted(set(redis.keys(NAMESPACE_KEYS)) | set(redis.keys(QUEUE_KEYS)))
    if not with_allowed:
        keys = [k for k in keys if not k.startswith(ALLOWED_PREFIXES)]
    trails = (AUDIT_LIST_PREFIX, BODY_PREFIX)
    plain = [k for k in keys if k != AUDIT_STREAM and not k.startswith(trails)]
    audits = [k for k in keys if k.startswith(AUDIT_LIST_PREFIX)]
    bodies = [k for k in keys if k.startswith(BODY_PREFIX)]
    pipe = redis.pipeline(transaction=True)
    for key in plain:
        pipe.dump(key)
    for key in audits:
        pipe.llen(key)
        pipe.lindex(key, -1)
    for key in bodies:
        pipe.get(key)
    pipe.xlen(AUDIT_STREAM)
    pipe.xrevrange(AUDIT_STREAM, count=1)
    answers = pipe.execute()
    dumps = {k: v for k, v in zip(plain, answers, strict=False) if v is not None}
    ends = answers[len(plain) : len(plain) + 2 * len(audits)]
    audit_ends = {k: (ends[2 * i], ends[2 * i + 1]) for i, k in enumerate(audits)}
    for key, body in zip(bodies, answers[len(plain) + 2 * len(audits) : -2], strict=True):
        if body is not None:
            fields, trail = _split_body(body)
            dumps[key] = fields
            audit_ends[key] = (len(trail), trail[-1] if trail else None)
    last = answers[-1]
    return State(dumps, audit_ends, (answers[-2], last[0][0] if last else None))


def _split_body(body: bytes) -> tuple[bytes, list[bytes]]:
    """A handoff body's fields (``store.keys.BODY_FIELDS`` but the trail) and its trail."""
    parts = body.split(b"\n", 3)
    return b"\n".join(parts[:3]), parts[3].split(b"\n") if len(parts) > 3 else []


def _trail(redis: Redis, key: bytes) -> list[bytes]:
    """A trail's events: a list's, or a handoff body's."""
    if key.startswith(BODY_PREFIX):
        return _split_body(redis.get(key) or b"")[1]
    return redis.lrange(key, 0, -1)


_FINGERPRINT = """
local keys = redis.call('KEYS', ARGV[1])
for _, key in ipairs(redis.call('KEYS', ARGV[2])) do keys[#keys + 1] = key end
table.sort(keys)
local parts, audits = {}, {}
for _, key in ipairs(keys) do
  local allowed = false
  for i = 5, #ARGV do
    if string.sub(key, 1, #ARGV[i]) == ARGV[i] then allowed = true; break end
  end
  if not allowed and key ~= ARGV[3] then
    if string.sub(key, 1, #ARGV[3] + 1) == ARGV[3] .. ':' then
      audits[#audits + 1] = {key, redis.call('LLEN', key), redis.call('LINDEX', key, -1)}
    elseif string.sub(key, 1, #ARGV[4]) == ARGV[4] then
      -- A body: its first three lines are fields, the rest its trail (one event a line).
      local body, from, lines = redis.call('GET', key), 1, {}
      while true do
        local at = string.find(body, '\\n', from, true)
        if not at then lines[#lines + 1] = string.sub(body, from); break end
        lines[#lines + 1] = string.sub(body, from, at - 1)
        from = at + 1
      end
      parts[#parts + 1] = key
      parts[#parts + 1] = table.concat(lines, '\\n', 1, math.min(3, #lines))
      audits[#audits + 1] = {key, math.max(#lines - 3, 0), lines[#lines] or false}
      if #lines <= 3 then audits[#audits][3] = false end
    else
      parts[#parts + 1] = key
      parts[#parts + 1] = redis.call('DUMP', key)
    end
  end
end
local last = redis.call('XREVRANGE', ARGV[3], '+', '-', 'COUNT', 1)
local last_id = false
if last[1] then last_id = last[1][1] end
return {redis.sha1hex(table.concat(parts, '|')), audits, redis.call('XLEN', ARGV[3]), last_id}
"""


@dataclass(frozen=True)
class Fingerprint:
    """A digest of every key a refused request may not change (one round trip), and the
    ends of the audit trails (which it may extend with denials)."""

    digest: bytes
    audits: State


def fingerprint(redis: Redis) -> Fingerprint:
    """The state's fingerprint, computed by Redis (cheap enough for every fuzz example)."""
    digest, audits, stream_len, last_id = redis.eval(
        _FINGERPRINT, 0, NAMESPACE_KEYS, QUEUE_KEYS, AUDIT_STREAM, BODY_PREFIX, *ALLOWED_PREFIXES
    )
    ends = {key: (length, last or None) for key, length, last in audits}
    return Fingerprint(digest, State({}, ends, (stream_len, last_id or None)))


def changes(before: State, after: State, redis: Redis) -> list[str]:
    """What changed between two snapshots beyond what refused requests may change
    (``ALLOWED_PREFIXES``, and audit events in ``ALLOWED_AUDIT_EVENTS`` appended); empty
    when nothing else changed."""
    found: list[str] = []
    for key in sorted(set(before.dumps) | set(after.dumps)):
        if before.dumps.get(key) == after.dumps.get(key) or key.startswith(ALLOWED_PREFIXES):
            continue
        if key not in before.dumps:
            found.append(f"{key.decode()} added")
        else:
            found.append(f"{key.decode()} {'changed' if key in after.dumps else 'removed'}")
    for key in sorted(set(before.audit_ends) | set(after.audit_ends)):
        (old_len, old_last), (new_len, _) = (
            before.audit_ends.get(key, (0, None)),
            after.audit_ends.get(key, (0, None)),
        )
        if new_len == old_len:
            continue
        trail = _trail(redis, key)
        if new_len < old_len or (old_len and trail[old_len - 1] != old_last):
            found.append(f"{key.decode()}: existing audit entries changed")
            continue
        found += _event_problems(key, trail[old_len:new_len])
    (old_len, old_id), (new_len, _) = before.stream_end, after.stream_end
    if new_len != old_len:
        start = b"(" + old_id if old_id else b"-"
        added = [_whole_event(redis, f) for _, f in redis.xrange(AUDIT_STREAM, min=start)]
        if new_len < old_len or len(added) != new_len - old_len:
            found.append("the audit stream was not only appended to")
        found += _event_problems(AUDIT_STREAM, added)
    return found


def _whole_event(redis: Redis, fields: dict[bytes, bytes]) -> bytes:
    """A stream entry's event: whole, or the trail event a pending handoff's entry points at."""
    if b"p" in fields:
        index = int(fields.get(b"i", b"0"))
        listed = redis.lindex(AUDIT_LIST_PREFIX + fields[b"p"], index)
        if listed is not None:
            return listed  # type: ignore[return-value]
        trail = _trail(redis, BODY_PREFIX + fields[b"p"])
        return trail[index] if index < len(trail) else b"{}"
    return fields.get(b"e", b"{}")


def _event_problems(key: bytes, entries: list[bytes]) -> list[str]:
    # A body's trail holds each event as [at, actor, event, detail].
    parsed = [json.loads(raw) for raw in entries]
    events = {e[2] if isinstance(e, list) else e.get("event") for e in parsed}
    return [f"{key.decode()}: audit event {e!r} appended" for e in events - ALLOWED_AUDIT_EVENTS]


def assert_unchanged(before: State, after: State, redis: Redis) -> None:
    """Fail with the list of changes when anything but markers, caches and denials changed."""
    found = changes(before, after, redis)
    assert not found, "state changed: " + "; ".join(found)


def assert_identical(before: State, after: State) -> None:
    """Fail unless every store and bot key and queue is byte-identical (nothing at all)."""
    assert before == after, "\n".join(
        [f"{k!r} differs" for k in set(before.dumps) ^ set(after.dumps)]
        + [f"{k!r} differs" for k in before.dumps if before.dumps[k] != after.dumps.get(k)]
        + [f"{before.audit_ends=} {after.audit_ends=}"] * (before.audit_ends != after.audit_ends)
        + [f"{before.stream_end=} {after.stream_end=}"] * (before.stream_end != after.stream_end)
    )


def wait_quiet(redis: Redis, slack: SlackEnv, *, timeout: float = 15) -> None:
    """Wait until the workers have nothing left to do and the state stops changing (the
    same snapshot and Slack call count twice in a row, 0.15 s apart)."""
    deadline = time.monotonic() + timeout
    previous: tuple[State, int] | None = None
    while time.monotonic() < deadline:
        now_ms = int(time.time() * 1000)
        due = redis.zcount("{ho}:outbox", "-inf", now_ms)
        idle = due == 0 and redis.llen("rq:queue:handoff") == 0
        current = (snapshot(redis), len(slack.standin.calls()))
        if idle and previous is not None and previous == current:
            return
        previous = current if idle else None
        time.sleep(0.15)
    raise AssertionError("the bot's workers did not settle")


def no_traceback(text: str) -> bool:
    """True when an answer shows no Python traceback (nor a frame of one)."""
    return "Traceback (most recent call last)" not in text and '.py", line ' not in text
