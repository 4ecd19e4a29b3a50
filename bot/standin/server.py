"""``SlackStandIn``: a local HTTP server that plays Slack for the bot, in both directions.

Toward the bot it is the Web API (point ``slack_sdk.WebClient(base_url=standin.api_url)`` at it)
and the response_url host. Toward the bot's request URL it is Slack delivering what a person did:
clicks on the buttons the bot actually posted, modal submissions, messages, slash commands,
signed exactly as Slack signs them.

Example::

    with SlackStandIn(signing_secret="s3cret", users=[StandInUser("U0ALICE", "alice")]) as slack:
        slack.bot_url = "http://127.0.0.1:3000/slack/events"
        client = WebClient(token=slack.bot_token, base_url=slack.api_url)
        posted = client.chat_postMessage(channel="C0APPROVALS", text="Approve?", blocks=[...])
        slack.click("U0ALICE", slack.message("C0APPROVALS", posted["ts"]), "approve")
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlencode, urlsplit

from slack_sdk.signature import SignatureVerifier

from bot.standin import answers, faults, guard, payloads, rate_limits, webapi
from bot.standin import scopes as standin_scopes
from bot.standin.blockkit import (
    find_element,
)
from bot.standin.faults import Fault, RandomFaults
from bot.standin.records import (
    ApiCall,
    BotUnreachable,
    ElementNotFound,
    Ephemeral,
    Message,
    Response,
    StandInError,
    StandInUser,
    View,
)
from bot.standin.workbench import Workbench
from bot.standin.workspace import (
    TRIGGER_TTL_SECONDS,
    ApiError,
    Workspace,
)

if TYPE_CHECKING:  # imported when Socket Mode is first used: websockets is loaded then
    from bot.standin.socket_mode import Envelope, SocketMode

logger = logging.getLogger(__name__)

ACK_TIMEOUT_SECONDS = 3.0
"""How long Slack waits for the bot to answer a request before showing the person an error."""
EVENT_RETRY_DELAYS = (0.0, 60.0, 300.0)
"""When Slack sends an event again that was not acknowledged: at once, after a minute, after
five minutes."""
USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"
APPS_CONNECTIONS_OPEN = "apps.connections.open"

_NO_GROUPS: Mapping[str, Sequence[str]] = MappingProxyType({})
_NO_CHANNELS: Mapping[str, str] = MappingProxyType({})
_SERVER_ERRORS = {500: "internal_error", 502: "bad_gateway", 503: "service_unavailable"}

T = TypeVar("T")


class _Server(ThreadingHTTPServer):
    standin: SlackStandIn

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout, injected delay) is expected, not worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            logger.debug("stand-in: client %s went away", client_address)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self.server.standin._serve(self)

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("stand-in %s - %s", self.address_string(), format % args)


class SlackStandIn:
    """A fake Slack for tests and ``handoff dev``: Web API, response URLs, and people acting.

    ``users`` are the workspace's members (the bot user is added); ``usergroups`` maps a user
    group id to member ids; ``channels`` maps channel ids to names. Start it with ``start()`` or
    a ``with`` block; set ``bot_url`` before acting as a person.

    ``bot_token`` is the token the Web API accepts; by default a random one (read it back as
    ``bot_token``), so that no token printed in a README works against a running stand-in. It
    serves only requests addressed to a loopback name (or to ``host`` as written) and sent by
    no other web site: see ``bot.standin.guard``.

    As in Slack, the bot is in no channel until it joins (``conversations.join``) or is
    invited (``invite_bot``, or ``set_channel_members`` with the bot among them): it reads
    the history of, and hears messages in, only those. ``scopes`` are the bot token's (the
    tests give the scopes ``manifest.yml`` grants); a call needing another answers
    ``missing_scope``. None grants every scope.
    """

    def __init__(
        self,
        *,
        signing_secret: str,
        bot_token: str | None = None,
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        team_id: str = "T0STANDIN",
        users: Iterable[StandInUser] = (),
        usergroups: Mapping[str, Sequence[str]] = _NO_GROUPS,
        host: str = "127.0.0.1",
        port: int = 0,
        app_id: str = "A0STANDIN",
        team_domain: str = "standin",
        bot_name: str = "handoff",
        channels: Mapping[str, str] = _NO_CHANNELS,
        bot_url: str | None = None,
        trigger_ttl: float = TRIGGER_TTL_SECONDS,
        ack_timeout: float | None = ACK_TIMEOUT_SECONDS,
        latency: float = 0.0,
        scopes: Iterable[str] | None = None,
        socket_mode: bool = False,
        app_token: str | None = None,
    ) -> None:
        self.signing_secret = signing_secret
        self.bot_token = bot_token or f"xoxb-standin-{secrets.token_urlsafe(18)}"
        self.app_token = app_token or f"xapp-1-{app_id}-{secrets.token_hex(12)}"
        """The app-level token ``apps.connections.open`` accepts (Socket Mode)."""
        self.socket_mode = socket_mode
        """Socket Mode is on (the app's setting): what people do reaches the bot in envelopes
        over the WebSocket it opened (``apps.connections.open``), not at ``bot_url``."""
        self.event_retry_delays: Sequence[float] = EVENT_RETRY_DELAYS
        """Seconds before each re-sending of an Events API envelope not acknowledged in
        time (Socket Mode); Slack's: at once, after a minute, after five minutes."""
        self._socket_mode: SocketMode | None = None
        self.bot_url = bot_url
        """The bot's request URL (e.g. http://127.0.0.1:3000/slack/events)."""
        self.ack_timeout = ack_timeout
        """Seconds to wait for the bot's answer; None waits forever (handy under a debugger)."""
        self.latency = latency
        """Seconds every Web API answer takes once the call is carried out (Slack's round trip
        is tens of milliseconds or more); 0 answers at once."""
        self._host = host
        self._port = port
        self._hosts = guard.allowed_hosts(host)
        self._ws = Workspace(
            team_id=team_id,
            team_domain=team_domain,
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            app_id=app_id,
            bot_name=bot_name,
            users=users,
            usergroups=usergroups,
            channels=channels,
            trigger_ttl=trigger_ttl,
        )
        self._ws.scopes = frozenset(scopes) if scopes is not None else None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.workbench = Workbench(self, self._ws, stopping=self._stopping)
        """The browser page served at ``url`` (see ``bot.standin.workbench``)."""

    # Lifecycle

    def start(self) -> None:
        """Listen (on ``port``, or a free one if 0) and serve in a background thread."""
        if self._server is not None:
            raise StandInError("the stand-in is already running")
        self._stopping.clear()
        server = _Server((self._host, self._port), _Handler)
        server.standin = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            daemon=True,
            name="slack-standin",
        )
        self._thread.start()
        logger.info("Slack stand-in listening at %s", self.url)

    def stop(self) -> None:
        """Stop serving and close the socket (injected delays are cut short). Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        if self._socket_mode is not None:
            self._socket_mode.stop()
            self._socket_mode = None
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SlackStandIn:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The stand-in's base URL, e.g. "http://127.0.0.1:53127/"."""
        if self._server is None:
            raise StandInError("start() the stand-in first")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    @property
    def api_url(self) -> str:
        """Base URL for ``WebClient(base_url=...)``: slack_sdk appends the method name."""
        return self.url + "api/"

    @property
    def trigger_ttl(self) -> float:
        """Seconds a trigger_id stays usable (Slack: 3); lower it to test expiry quickly."""
        return self._ws.trigger_ttl

    @trigger_ttl.setter
    def trigger_ttl(self, seconds: float) -> None:
        self._ws.trigger_ttl = seconds

    @property
    def team_id(self) -> str:
        """The workspace's team id."""
        return self._ws.team_id

    @property
    def bot_name(self) -> str:
        """The bot user's name (as people mention it: ``/invite @handoff``)."""
        return self._ws.users[self._ws.bot_user_id].name

    @property
    def bot_user_id(self) -> str:
        """The bot's user id (the ``user`` of its messages)."""
        return self._ws.bot_user_id

    # Changing the workspace

    def set_usergroup(self, group_id: str, members: Sequence[str]) -> None:
        """Make ``members`` the members of user group ``group_id`` (created if new), as a
        workspace admin editing it in Slack would: ``usergroups.list`` and
        ``usergroups.users.list`` answer with them from now on."""
        with self._ws.lock:
            self._ws.usergroups[group_id] = list(members)

    def set_channel_members(self, channel: str, members: Sequence[str]) -> None:
        """Make ``members`` the members of ``channel``, as people joining and leaving it
        would: ``conversations.members`` answers with them from now on (channels never set
        have every person of the workspace). The bot is in it if it is among them."""
        with self._ws.lock:
            self._ws.channel_members[channel] = list(members)
            if self._ws.bot_user_id in members:
                self._ws.bot_channels.add(channel)
            else:
                self._ws.bot_channels.discard(channel)

    def invite_bot(self, channel: str) -> None:
        """Someone invites the bot to ``channel`` (public or private), as ``/invite @bot``."""
        with self._ws.lock:
            self._ws.bot_channels.add(channel)

    def remove_bot(
        self, channel: str, *, by: str | None = None, announce: bool = True
    ) -> Response | None:
        """Someone (``by``) removes the bot from ``channel``. As Slack does, the bot is told
        with a ``channel_left`` event (``group_left`` for a private channel) when
        ``bot_url`` is set, unless ``announce`` is False (an event that never arrived);
        returns the bot's answer to it."""
        with self._ws.lock:
            self._ws.bot_channels.discard(channel)
            private = self._ws.is_private(channel)
        if not announce or self.bot_url is None:
            return None
        event: dict[str, Any] = {
            "type": "group_left" if private else "channel_left",
            "channel": channel,
            "event_ts": payloads.action_ts(),
        }
        if by is not None:
            event["actor_id"] = by
        return self.send_event(event)

    def make_private(self, channel: str) -> None:
        """Make a ``C…`` channel private (as Slack's newer private channels are; every
        ``G…`` channel is private already)."""
        with self._ws.lock:
            self._ws.private_channels.add(channel)

    def bot_channels(self) -> set[str]:
        """The channels the bot is in (joined or invited; its DMs are not listed)."""
        with self._ws.lock:
            return set(self._ws.bot_channels)

    # What the bot did

    def _snapshot(self, value: T) -> T:
        with self._ws.lock:
            return copy.deepcopy(value)

    def messages(self, channel: str | None = None) -> list[Message]:
        """Messages (top-level and thread replies, not deleted) in post order."""
        with self._ws.lock:
            return self._snapshot(
                [
                    m
                    for m in self._ws.messages
                    if not m.deleted and (channel is None or m.channel == channel)
                ]
            )

    def message(self, channel: str, ts: str) -> Message:
        """The message at (channel, ts), even if deleted; ``KeyError`` if there is none."""
        with self._ws.lock:
            found = self._ws.find_message(channel, ts)
            if found is None:
                raise KeyError(f"no message {ts} in {channel}")
            return self._snapshot(found)

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """The replies in a thread (not its parent), oldest first."""
        return self._snapshot(self._ws.replies(channel, thread_ts))

    def ephemerals(self, user: str | None = None) -> list[Ephemeral]:
        """Ephemeral messages (not deleted), optionally only those ``user`` saw."""
        with self._ws.lock:
            return self._snapshot(
                [
                    e
                    for e in self._ws.ephemerals
                    if not e.deleted and (user is None or e.user == user)
                ]
            )

    def views(self, user: str | None = None) -> list[View]:
        """Modals, open and closed, in the order they were opened (App Home tabs: ``home``)."""
        with self._ws.lock:
            return self._snapshot(
                [
                    v
                    for v in self._ws.views.values()
                    if v.type != "home" and (user is None or v.user == user)
                ]
            )

    def view(self, view_id: str) -> View:
        """The current version of a modal or Home tab; ``KeyError`` if there is none."""
        with self._ws.lock:
            return self._snapshot(self._ws.views[view_id])

    def home(self, user_id: str) -> View | None:
        """The App Home tab the bot last published for ``user_id``, if any."""
        with self._ws.lock:
            view_id = self._ws.homes.get(user_id)
            return None if view_id is None else self._snapshot(self._ws.views[view_id])

    def calls(self, method: str | None = None) -> list[ApiCall]:
        """Every Web API call (and response_url post, method "response_url"), in order."""
        with self._ws.lock:
            return self._snapshot(
                [c for c in self._ws.calls if method is None or c.method == method]
            )

    def wait_for(self, condition: Callable[[], T], *, timeout: float = 2.0) -> T:
        """Poll ``condition`` until it returns something truthy, and return that.

        Bolt runs listeners after the ack unless ``process_before_response=True``, so what a
        click causes can land after ``click()`` returns. Raises ``TimeoutError`` after ``timeout``.
        Example: ``modal = slack.wait_for(lambda: slack.views("U0ALICE"))[-1]``.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if result:
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition still false after {timeout}s")
            time.sleep(0.01)

    # Fault injection

    def fail_next(
        self,
        method: str,
        *,
        status: int = 500,
        times: int = 1,
        retry_after: int | None = None,
        delay: float = 0.0,
        reset_connection: bool = False,
        error: str | None = None,
        carried_out: bool = False,
        then: Callable[[dict[str, Any]], None] | None = None,
        after: int = 0,
        truncated: bool = False,
    ) -> None:
        """Make the next ``times`` calls of ``method`` ("*": any method; "response_url" for
        posts to a response_url, which take only ``delay`` and ``reset_connection``) fail
        (after letting ``after`` calls through).

        ``status`` 429 answers ``{"ok": false, "error": "ratelimited"}`` with ``Retry-After``
        (``retry_after``, default 1); 5xx answers an error body. ``error`` instead answers HTTP 200
        ``{"ok": false, "error": error}``. ``reset_connection`` closes the socket unanswered;
        with ``carried_out`` the call is made first (Slack did the work, the answer was lost).
        ``delay`` waits first (to trip client timeouts); with ``status=200`` and no error the call
        is then carried out normally, as when Slack did the work but answered too late.
        ``then`` (with ``carried_out``) is called with the call's parameters after the call is
        made and before the answer is lost: e.g. other members post in the channel before the
        bot can look. ``carried_out`` with ``error`` makes the call and answers the error all
        the same (Slack's ``internal_error``: part of it may have been done); ``truncated``
        makes it and answers only the first half of the answer's body.
        """
        if times < 1 or after < 0:
            raise ValueError("times must be at least 1, and after at least 0")
        fault = Fault(
            status=status,
            retry_after=retry_after,
            delay=delay,
            reset_connection=reset_connection,
            error=error,
            carried_out=truncated or (carried_out and (reset_connection or error is not None)),
            then=then,
            truncated=truncated,
        )
        with self._ws.lock:
            self._ws.faults.setdefault(method, deque()).extend([None] * after + [fault] * times)

    def limit(
        self, method: str, *, calls: int, per_seconds: float, page_size: int | None = None
    ) -> None:
        """From now on, answer calls of ``method`` beyond ``calls`` in any ``per_seconds``
        with 429 and a ``Retry-After`` in whole seconds (until a call is allowed again), as
        Slack does; ``page_size`` caps the messages a page of a listing method returns."""
        with self._ws.lock:
            self._ws.rate_limits.set(
                method, calls=calls, per_seconds=per_seconds, page_size=page_size
            )

    def limit_like_slack(self, *, time_scale: float = 1.0) -> None:
        """Slack's limits for apps outside the Slack Marketplace (since 2025): one call a
        minute to ``conversations.history`` and to ``conversations.replies``, 15 messages a
        page. ``time_scale`` shrinks the minute (0.01: 0.6 s) for tests that cannot wait one.

        Example: ``slack.limit_like_slack()``; ``slack.refused_by_limits()`` then counts the
        calls answered 429.
        """
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        for method in rate_limits.HISTORY_METHODS:
            self.limit(
                method,
                calls=rate_limits.NON_MARKETPLACE_HISTORY_CALLS,
                per_seconds=rate_limits.SLACK_MINUTE * time_scale,
                page_size=rate_limits.NON_MARKETPLACE_PAGE_SIZE,
            )

    def limit_by_tier(self, *, time_scale: float = 1.0) -> None:
        """Slack's per-method rate limits: each method's tier (calls a minute: tier 1 one,
        tier 2 twenty, tier 3 fifty, tier 4 a hundred), and ``chat.postMessage`` about one a
        second per channel with bursts of ten. ``time_scale`` shrinks the minute. Combine
        with ``limit_like_slack`` (called after) for the non-Marketplace history limits."""
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        with self._ws.lock:
            self._ws.rate_limits.set_tiers(time_scale=time_scale)

    def refused_by_limits(self) -> dict[str, int]:
        """How many calls of each method the rate limits answered 429 so far."""
        with self._ws.lock:
            return dict(self._ws.rate_limits.refused)

    def fail_randomly(
        self,
        *,
        rate: float,
        seed: int | None = None,
        kinds: Iterable[str] = faults.KINDS,
        methods: Collection[str] | None = None,
        timeout_delay: float = 2.0,
        retry_after: int = 1,
    ) -> RandomFaults:
        """From now on, fail a share ``rate`` of Web API calls (of ``methods``; all when None).

        Each failure is drawn (seeded by ``seed``) from ``kinds``: "ratelimited" (429 with
        ``Retry-After: retry_after``), "server_error" (500), "timeout" (answered after
        ``timeout_delay`` seconds but carried out: set it above the client's timeout), "reset"
        (connection reset, nothing done) and "answer_lost" (carried out, then reset). Faults
        queued by ``fail_next`` come first. Returns the policy; its ``counts()`` says what was
        injected. ``fail_randomly(rate=0)`` turns it off.

        Example: ``slack.fail_randomly(rate=0.3, seed=7, timeout_delay=1.5)``.
        """
        policy = RandomFaults(
            rate=rate,
            seed=seed,
            kinds=kinds,
            methods=methods,
            timeout_delay=timeout_delay,
            retry_after=retry_after,
        )
        with self._ws.lock:
            self._ws.random_faults = policy if rate > 0 else None
        return policy

    # The HTTP side

    def _serve(self, handler: _Handler) -> None:
        parts = urlsplit(handler.path)
        refused = self._refusal(handler) or _length_problem(handler)
        if refused is not None:
            # Its body is left unread (a foreign page's, or of no known length): the
            # connection cannot carry another request.
            handler.close_connection = True
            status = 400 if refused.startswith("bad Content-Length") else 403
            answer = json.dumps({"ok": False, "error": refused}).encode()
            _answer(handler, status, answer, "application/json; charset=utf-8")
            return
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        if parts.path.startswith("/api/"):
            self._serve_api(handler, parts.path[len("/api/") :], parts.query, body)
        elif parts.path.startswith("/response/"):
            self._serve_response_url(handler, parts.path[len("/response/") :], body)
        elif page := self.workbench.respond(
            handler.command, parts.path, parts.query, body, handler.headers
        ):
            _answer(handler, page.status, page.body, page.content_type, page.headers)
        else:
            _answer(handler, 404, b"not found", "text/plain")

    def _refusal(self, handler: _Handler) -> str | None:
        """Why no route may answer this request (a web page's, not a program's), or None.

        Every route: the workbench acts as any member, the Web API as the bot, and a
        response_url changes messages.
        """
        port = handler.server.server_address[1]
        return guard.refusal(handler.headers, hosts=self._hosts, port=int(port))

    def _serve_api(self, handler: _Handler, method: str, query: str, body: bytes) -> None:
        content_type = handler.headers.get("Content-Type", "")
        try:
            params = webapi.decode_params(query, body, content_type)
            decode_error: ApiError | None = None
        except ApiError as exc:
            params, decode_error = {}, exc
        token = params.pop("token", None)
        fault = self._ws.take_fault(method)
        if fault is not None:
            if fault.delay:
                self._stopping.wait(fault.delay)
            if fault.reset_connection and not fault.carried_out:
                self._record(method, params, 0, {})
                _reset(handler)
                return
            if not fault.carried_out and (fault.error is not None or fault.status >= 300):
                self._answer_fault(handler, method, params, fault)
                return
        with self._ws.lock:
            limited = self._ws.rate_limits.admit(
                method, time.time(), str(params.get("channel") or "")
            )
        if limited is not None:
            limit = Fault(
                status=429, retry_after=limited, delay=0.0, reset_connection=False, error=None
            )
            self._answer_fault(handler, method, params, limit)
            return
        status, answer = 200, self._call(method, params, handler, token, decode_error)
        if fault is not None and fault.carried_out:
            if fault.then is not None:
                fault.then(params)
            if fault.truncated:
                self._record(method, params, 200, answer)
                whole = json.dumps(answer).encode()
                _answer(handler, 200, whole[: len(whole) // 2], "application/json")
            elif fault.error is not None:
                self._answer_fault(handler, method, params, fault)
            else:
                self._record(method, params, 0, answer)
                _reset(handler)
            return
        self._record(method, params, status, answer)
        if self.latency:
            self._stopping.wait(self.latency)
        headers = {}
        if (
            self._ws.scopes is not None
            and answer.get("error") not in _AUTH_ERRORS
            and method != APPS_CONNECTIONS_OPEN  # the app-level token's: no bot scopes
        ):
            # Slack names the token's scopes on every answer (`handoff check` reads them).
            headers["x-oauth-scopes"] = ",".join(sorted(self._ws.scopes))
        _answer(
            handler,
            status,
            json.dumps(answer).encode(),
            "application/json; charset=utf-8",
            headers,
        )

    def _call(
        self,
        method: str,
        params: dict[str, Any],
        handler: _Handler,
        token: Any,
        decode_error: ApiError | None,
    ) -> dict[str, Any]:
        authorization = handler.headers.get("Authorization", "")
        bearer = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else None
        if method == APPS_CONNECTIONS_OPEN:
            return self._open_connection(bearer)
        if method not in webapi.METHODS:
            return {"ok": False, "error": "unknown_method", "req_method": method}
        token = bearer or token
        if not token:
            return {"ok": False, "error": "not_authed"}
        if token == self.app_token:
            # An app-level token opens Socket Mode connections and calls no other method.
            return {"ok": False, "error": "not_allowed_token_type"}
        if token != self.bot_token:
            return {"ok": False, "error": "invalid_auth"}
        try:
            if decode_error is not None:
                raise decode_error
            with self._ws.lock:
                refusal = self._missing_scope(method, params)
                if refusal is not None:
                    return refusal
                return {"ok": True, **webapi.METHODS[method](self._ws, params)}
        except ApiError as exc:
            return {"ok": False, "error": exc.error, **exc.extra}
        except Exception as exc:
            # A stand-in bug must not pass for a Slack outage (which clients would retry).
            logger.exception("stand-in failed to answer %s", method)
            return {"ok": False, "error": "standin_bug", "detail": repr(exc)}

    def _open_connection(self, bearer: str | None) -> dict[str, Any]:
        """``apps.connections.open``: a WebSocket URL for the app-level token, which must come
        in the Authorization header (Slack refuses it as a parameter)."""
        if not bearer:
            return {"ok": False, "error": "not_authed"}
        if bearer == self.bot_token:
            return {"ok": False, "error": "not_allowed_token_type"}
        if bearer != self.app_token:
            return {"ok": False, "error": "invalid_auth"}
        return {"ok": True, "url": self._socket().url()}

    def _socket(self) -> SocketMode:
        """The Socket Mode side, made (and websockets imported) the first time it is needed."""
        with self._ws.lock:
            if self._socket_mode is None:
                from bot.standin.socket_mode import SocketMode

                self._socket_mode = SocketMode(
                    app_id=self._ws.app_id, host=self._host, stopping=self._stopping
                )
            return self._socket_mode

    def _missing_scope(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Slack's ``missing_scope`` answer when the token lacks the scope the call needs."""
        granted = self._ws.scopes
        if granted is None:
            return None

        def kind_of(channel: str) -> str | None:
            try:
                resolved = self._ws.resolve_channel(channel)
            except ApiError:
                return None
            if resolved.startswith("D"):
                return "dm"
            return "private" if self._ws.is_private(resolved) else "public"

        needed = standin_scopes.needed_scope(method, params, kind_of)
        if needed is None or needed in granted:
            return None
        return {
            "ok": False,
            "error": "missing_scope",
            "needed": needed,
            "provided": ",".join(sorted(granted)),
        }

    def _answer_fault(
        self, handler: _Handler, method: str, params: dict[str, Any], fault: Fault
    ) -> None:
        headers: dict[str, str] = {}
        if fault.error is not None:
            status, answer = 200, {"ok": False, "error": fault.error}
        elif fault.status == 429:
            status, answer = 429, {"ok": False, "error": "ratelimited"}
            headers["Retry-After"] = str(1 if fault.retry_after is None else fault.retry_after)
        else:
            status = fault.status
            answer = {"ok": False, "error": _SERVER_ERRORS.get(status, "fatal_error")}
        self._record(method, params, status, answer)
        _answer(handler, status, json.dumps(answer).encode(), "application/json", headers)

    def _record(
        self, method: str, params: dict[str, Any], status: int, answer: dict[str, Any]
    ) -> None:
        call = ApiCall(
            method=method,
            params=copy.deepcopy(params),
            http_status=status,
            response=copy.deepcopy(answer),
            at=time.time(),
        )
        with self._ws.lock:
            self._ws.calls.append(call)

    def _serve_response_url(self, handler: _Handler, token: str, body: bytes) -> None:
        """A POST to a response_url (see ``answers.post_to_response_url``); faults queued
        for the method "response_url" slow it down (``delay``) or reset it first."""
        fault = self._ws.take_queued_fault("response_url")
        if fault is not None:
            if fault.delay:
                self._stopping.wait(fault.delay)
            if fault.reset_connection:
                _reset(handler)
                return
        try:
            sent = json.loads(body or b"null")
        except ValueError:
            sent = None
        with self._ws.lock:
            status, answer = answers.post_to_response_url(self._ws, token, sent)
            self._record(
                "response_url",
                sent if isinstance(sent, dict) else {},
                status,
                {"ok": status == 200, **({} if status == 200 else {"error": answer})},
            )
        _answer(handler, status, answer.encode(), "text/html")

    # Socket Mode

    def _over_socket(
        self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0, retry_reason: str = ""
    ) -> Response:
        """Deliver ``payload`` in a Socket Mode envelope of type ``kind``; the app's
        acknowledgement is the answer (its ``payload`` the body). An Events API envelope not
        acknowledged within ``ack_timeout`` is sent again after each of
        ``event_retry_delays``; the answer is then the last envelope's."""
        started = time.monotonic()
        hub = self._socket()
        if kind == "events_api":
            envelope = hub.deliver_event(
                payload,
                ack_timeout=self.ack_timeout,
                retry_delays=self.event_retry_delays,
                retry_attempt=retry_attempt,
                retry_reason=retry_reason,
            )
        else:
            envelope = hub.deliver(kind, payload, ack_timeout=self.ack_timeout)
        return _envelope_response(envelope, time.monotonic() - started)

    def wait_for_socket_mode(self, *, timeout: float = 10.0) -> None:
        """Wait until the app has a Socket Mode connection open (``TimeoutError`` if not)."""
        if not self._socket().wait_connected(timeout):
            raise TimeoutError(f"no Socket Mode connection opened within {timeout}s")

    def socket_mode_connections(self) -> int:
        """How many Socket Mode connections the app has open (not told to go)."""
        return 0 if self._socket_mode is None else self._socket_mode.connections()

    def envelopes(self) -> list[Envelope]:
        """Every Socket Mode envelope sent to the app, with its acknowledgement, in order."""
        return [] if self._socket_mode is None else self._socket_mode.sent()

    def disconnect_socket_mode(
        self, reason: str = "refresh_requested", *, close_after: float | None = None
    ) -> int:
        """Tell every Socket Mode connection to go, as Slack does before it refreshes them:
        a ``disconnect`` message with ``reason`` ("warning", "refresh_requested",
        "link_disabled"), then the connection closed ``close_after`` seconds later (default:
        10 after a warning, else 2) unless the app closed it. Returns how many were told."""
        return self._socket().disconnect(reason, close_after=close_after)

    def drop_socket_mode(self) -> int:
        """Break every Socket Mode connection with no goodbye (a TCP reset, as when the
        network fails): the app must notice and connect again. Returns how many."""
        return self._socket().drop()

    def lose_acks(self, times: int = 1) -> None:
        """Lose the next ``times`` Socket Mode acknowledgements: the app handled the
        envelope, Slack never heard it did (an Events API envelope is then sent again)."""
        self._socket().lose_acks(times)

    # Acting as a person

    def click(
        self,
        user_id: str,
        target: Message | View | Ephemeral,
        action_id: str,
        *,
        block_id: str | None = None,
        value: str | None = None,
        selected_option: str | None = None,
    ) -> Response:
        """``user_id`` uses the element ``action_id`` of a message, ephemeral or view they got.

        ``target`` is a snapshot from ``messages()``/``message()``/``views()``/``home()``/
        ``ephemerals()``: the version the person sees (an older snapshot models a person whose
        screen has not refreshed yet). Raises ``ElementNotFound`` if no such element is in it,
        ``StandInError`` if the message was deleted or the view closed. ``selected_option`` is
        the value picked in a select, overflow or radio group; ``value`` replaces a button's own
        value (to model a tampered payload). Sends a signed block_actions payload.
        """
        return self._send_interaction(
            self.click_payload(
                user_id,
                target,
                action_id,
                block_id=block_id,
                value=value,
                selected_option=selected_option,
            )
        )

    def click_payload(
        self,
        user_id: str,
        target: Message | View | Ephemeral,
        action_id: str,
        *,
        block_id: str | None = None,
        value: str | None = None,
        selected_option: str | None = None,
    ) -> dict[str, Any]:
        """The block_actions payload ``click`` sends (fresh trigger_id and response_url), not sent.

        For load tests that prepare many interactions and then send them at once, possibly to
        several bot processes: ``interaction_body(payload)`` is the body to sign and POST.
        """
        ws = self._ws
        with ws.lock:
            self._require_user(user_id)
            self._require_visible(user_id, target)
            block, element = self._element(target.blocks, action_id, block_id)
            used = payloads.action(block, element, value=value, selected_option=selected_option)
            common: dict[str, Any] = {
                "user": user_id,
                "trigger_id": ws.issue_trigger(user_id),
                "action_payload": used,
                "state": payloads.state_of_action(block, used),
            }
            if isinstance(target, View):
                view = copy.deepcopy(target.view)
                view["state"] = copy.deepcopy(ws.views[target.id].view["state"])
                payload = payloads.block_actions(
                    ws, container={"type": "view", "view_id": target.id}, view=view, **common
                )
            else:
                payload = self._message_click(user_id, target, common)
        return payload

    def _require_visible(self, user_id: str, target: Message | View | Ephemeral) -> None:
        """Raise unless ``user_id`` can still see ``target`` (and so click in it)."""
        ws = self._ws
        if isinstance(target, View):
            current = ws.views.get(target.id)
            if current is None or current.closed:
                raise StandInError(f"view {target.id} is closed: nobody can click in it")
            if current.user != user_id:
                raise StandInError(f"view {target.id} is {current.user}'s, not {user_id}'s")
            return
        if isinstance(target, Ephemeral):
            if target.user != user_id:
                raise StandInError(f"only {target.user} sees that ephemeral message")
            gone = next(
                (e.deleted for e in ws.ephemerals if e.ts == target.ts and e.user == user_id), True
            )
        else:
            found = ws.find_message(target.channel, target.ts)
            gone = found is None or found.deleted
        if gone:
            raise StandInError(
                f"message {target.ts} in {target.channel} is gone: nobody can click it"
            )

    def _message_click(
        self, user_id: str, target: Message | Ephemeral, common: dict[str, Any]
    ) -> dict[str, Any]:
        ws = self._ws
        is_ephemeral = isinstance(target, Ephemeral)
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": target.ts,
            "channel_id": target.channel,
            "is_ephemeral": is_ephemeral,
        }
        if target.thread_ts:
            container["thread_ts"] = target.thread_ts
        token = ws.issue_response_url(
            user=user_id, channel=target.channel, message_ts=target.ts, is_ephemeral=is_ephemeral
        )
        return payloads.block_actions(
            ws,
            container=container,
            channel=target.channel,
            message=None if isinstance(target, Ephemeral) else target.to_slack(ws.team_id),
            response_url=f"{self.url}response/{token}",
            **common,
        )

    def submit_view(
        self, user_id: str, view: View, values: Mapping[str, Mapping[str, Any]]
    ) -> Response:
        """``user_id`` fills in and submits their open modal ``view``.

        ``values`` maps block_id -> action_id -> what was entered: a str (typed text, or the value
        of the picked option), a list of str (multi-selects), or an already-shaped dict passed
        through. Inputs left out are sent empty, as Slack does. The bot's answer is applied like
        Slack applies it: ``response_action`` "errors" sets ``errors`` (the modal stays open),
        "update"/"push"/"clear" change the stack, and an empty 200 closes the modal. Anything else
        sets ``submission_error`` and leaves the modal open.
        """
        response = self._send_interaction(self.submission_payload(user_id, view, values))
        with self._ws.lock:
            answers.apply_submission_answer(self._ws, self._ws.views[view.id], response)
        return response

    def submission_payload(
        self, user_id: str, view: View, values: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The view_submission payload ``submit_view`` sends, not sent (see ``click_payload``).

        The bot's answer is not applied to the modal: the caller reads it from the response.
        """
        ws = self._ws
        with ws.lock:
            self._require_user(user_id)
            current = ws.views.get(view.id)
            if current is None or current.closed or current.type != "modal":
                raise StandInError(f"view {view.id} is not an open modal: it cannot be submitted")
            if current.user != user_id:
                raise StandInError(f"view {view.id} is {current.user}'s, not {user_id}'s")
            state = payloads.view_state_values(view.blocks, values)
            current.view["state"] = {"values": copy.deepcopy(state)}
            shaped = copy.deepcopy(view.view)
            shaped["state"] = {"values": state}
            return payloads.view_submission(
                ws, user=user_id, trigger_id=ws.issue_trigger(user_id), view=shaped
            )

    def close_view(self, user_id: str, view: View) -> Response | None:
        """``user_id`` dismisses their modal (the Cancel or X button).

        Closes it (the whole stack if it has ``clear_on_close``) and, if it has
        ``notify_on_close``, sends the bot a view_closed payload and returns the answer.
        """
        ws = self._ws
        with ws.lock:
            current = ws.views.get(view.id)
            if current is None or current.closed or current.user != user_id:
                raise StandInError(f"{user_id} has no open modal {view.id}")
            cleared = bool(current.view.get("clear_on_close"))
            notify = bool(current.view.get("notify_on_close"))
            shaped = copy.deepcopy(current.view)
            answers.close_modal(ws, current, cleared=cleared)
        if not notify:
            return None
        return self._send_interaction(
            payloads.view_closed(ws, user=user_id, view=shaped, cleared=cleared)
        )

    def post_message(
        self,
        user_id: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        event_id: str | None = None,
        bot_id: str | None = None,
        subtype: str | None = None,
        files: Sequence[str] = (),
        raw: bool = False,
    ) -> tuple[Message, Response | None]:
        """``user_id`` writes ``text`` in ``channel`` (in the thread ``thread_ts`` if given).

        The message is recorded first, then delivered as a ``message`` event, if the bot is
        in the channel: Slack sends message events only of conversations the bot is a member
        of (None is returned for the response then). ``bot_id`` makes it another app's
        message; ``subtype`` sets the event subtype. ``text`` is what the person types, sent
        as Slack sends it (see ``message_event``; ``raw=True`` sends it exactly as given), and
        ``files`` the names of files they attach.
        """
        recorded, event = self.message_event(
            user_id,
            channel,
            text,
            thread_ts=thread_ts,
            bot_id=bot_id,
            subtype=subtype,
            files=files,
            raw=raw,
        )
        if not self._ws.bot_is_member(recorded.channel):
            return recorded, None
        return recorded, self.send_event(event, event_id=event_id)

    def message_event(
        self,
        user_id: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        bot_id: str | None = None,
        subtype: str | None = None,
        files: Sequence[str] = (),
        raw: bool = False,
    ) -> tuple[Message, dict[str, Any]]:
        """Record ``user_id``'s message as ``post_message`` does and return it with its
        ``message`` event, not delivered (``event_body(event)`` is the body to sign and POST).

        As in Slack, the text the person types is escaped (``&``, ``<``, ``>``) and their
        mentions and links wrapped (``@alice`` becomes ``<@U0ALICE>``, a URL ``<https://...>``:
        ``payloads.typed_message``), in the event and in the recorded message; ``raw=True``
        sends ``text`` exactly as given, for a test that needs a given wire form.
        ``subtype="thread_broadcast"`` is a reply also sent to the channel (its event carries
        the thread's parent as ``root``); ``files`` attach files by name, making it a
        ``file_share`` message unless ``subtype`` says otherwise.
        """
        ws = self._ws
        with ws.lock:
            self._require_user(user_id)
            if subtype == "thread_broadcast" and not thread_ts:
                raise StandInError("a thread_broadcast is a reply: give its thread_ts")
            if raw:
                wire, blocks = text, payloads.rich_text(text)
            else:
                wire, blocks = payloads.typed_message(ws, text)
            shared = [payloads.file_object(ws, name=name, user=user_id) for name in files]
            if shared and subtype is None:
                subtype = "file_share"
            try:
                resolved = ws.resolve_channel(channel)
                recorded = webapi.post_message(
                    ws,
                    channel=resolved,
                    text=wire,
                    blocks=blocks,
                    thread_ts=thread_ts,
                    user=user_id,
                    bot_id=bot_id,
                    metadata=None,
                )
            except ApiError as exc:
                raise StandInError(f"cannot post in {channel} ({thread_ts=}): {exc.error}") from exc
            parent = ws.find_message(resolved, recorded.thread_ts) if recorded.thread_ts else None
            event = payloads.message_event(
                ws,
                message=recorded.to_slack(ws.team_id),
                channel=resolved,
                parent_user_id=parent.user if parent else None,
                subtype=subtype,
                root=self._thread_root(parent) if parent else None,
                files=shared or None,
            )
            return copy.deepcopy(recorded), event

    def _thread_root(self, parent: Message) -> dict[str, Any]:
        """A thread's parent as a ``thread_broadcast`` event carries it (``root``)."""
        ws = self._ws
        replies = ws.replies(parent.channel, parent.ts)
        root = parent.to_slack(ws.team_id)
        root.update(
            thread_ts=parent.ts,
            reply_count=len(replies),
            reply_users_count=len({r.user for r in replies}),
            latest_reply=replies[-1].ts if replies else parent.ts,
            reply_users=list(dict.fromkeys(r.user for r in replies)),
            is_locked=False,
        )
        return root

    def send_app_home_opened(self, user_id: str) -> Response:
        """``user_id`` opens the bot's Home tab (the event carries the view last published)."""
        ws = self._ws
        with ws.lock:
            self._require_user(user_id)
            event: dict[str, Any] = {
                "type": "app_home_opened",
                "user": user_id,
                "channel": ws.dm_channel(user_id),
                "tab": "home",
                "event_ts": payloads.action_ts(),
            }
            home = ws.views.get(ws.homes.get(user_id, ""))
            if home is not None:
                event["view"] = copy.deepcopy(home.view)
        return self.send_event(event)

    def send_event(self, event: Mapping[str, Any], *, event_id: str | None = None) -> Response:
        """Deliver any Events API ``event`` in an event_callback envelope (JSON body)."""
        body = self.event_body(event, event_id=event_id)
        if self.socket_mode:
            return self._over_socket("events_api", json.loads(body))
        return self.send_signed(body, content_type="application/json")

    def event_body(self, event: Mapping[str, Any], *, event_id: str | None = None) -> bytes:
        """The JSON body that delivers ``event`` in an event_callback envelope, not sent
        (kept, so that ``resend_event`` can deliver it again by its event_id)."""
        with self._ws.lock:
            event_id = event_id or self._ws.next_event_id()
            body = json.dumps(payloads.event_callback(self._ws, dict(event), event_id=event_id))
            self._ws.events[event_id] = body.encode()
        return body.encode()

    def resend_event(
        self, previous: Response | str, *, retry_num: int = 1, reason: str = "http_timeout"
    ) -> Response:
        """Deliver an event again, as Slack's retries do: same body and event_id, fresh signature.

        ``previous`` is the Response of the first delivery or the event_id. In Socket Mode
        it goes in a new envelope with ``retry_attempt`` ``retry_num`` and ``retry_reason``
        ``reason`` (an envelope not acknowledged in time is sent again by itself, too).
        """
        if isinstance(previous, Response):
            body = previous.request_body
        else:
            with self._ws.lock:
                if previous not in self._ws.events:
                    raise StandInError(f"no event {previous!r} was sent")
                body = self._ws.events[previous]
        if self.socket_mode:
            sent = json.loads(body)
            payload = sent["payload"] if "envelope_id" in sent else sent
            return self._over_socket(
                "events_api", payload, retry_attempt=retry_num, retry_reason=reason
            )
        return self.send_signed(
            body,
            content_type="application/json",
            headers={"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": reason},
        )

    def send_command(
        self, user_id: str, command: str, text: str = "", *, channel_id: str = "C0STANDIN"
    ) -> Response:
        """``user_id`` runs a slash command such as ``/handoff list``.

        An answer in the HTTP response (Bolt's ``ack("...")``) is shown to the person as an
        ephemeral (source "ack"), or posted in the channel with ``response_type: in_channel``.
        """
        ws = self._ws
        with ws.lock:
            self._require_user(user_id)
            token = ws.issue_response_url(user=user_id, channel=channel_id, message_ts=None)
            fields = payloads.slash_command(
                ws,
                user=user_id,
                command=command,
                text=text,
                channel=channel_id,
                response_url=f"{self.url}response/{token}",
                trigger_id=ws.issue_trigger(user_id),
            )
        if self.socket_mode:
            response = self._over_socket("slash_commands", fields)
        else:
            response = self.send_signed(
                urlencode(fields).encode(), content_type="application/x-www-form-urlencoded"
            )
        if response.status == 200 and response.body.strip():
            try:
                answer = response.json()
            except ValueError:
                answer = {"text": response.text}
            if isinstance(answer, dict):
                with ws.lock:
                    answers.show_command_ack(ws, user_id, channel_id, answer)
        return response

    def send_signed(
        self,
        body: bytes,
        *,
        content_type: str,
        timestamp: int | None = None,
        signature: str | None = None,
        headers: Mapping[str, str] | None = None,
        sign: bool = True,
    ) -> Response:
        """POST ``body`` to ``bot_url`` signed as Slack signs (low level, for security tests).

        ``timestamp`` defaults to now; ``signature`` replaces the computed one (a forgery is
        sent as-is); ``sign=False`` leaves both Slack headers out; ``headers`` are added last.
        Returns the bot's answer whatever its status; raises ``BotUnreachable`` if nothing listens.
        """
        if not self.bot_url:
            raise StandInError("set bot_url (the bot's request URL) before acting as a person")
        sent_headers = {"Content-Type": content_type, "User-Agent": USER_AGENT}
        if sign:
            ts = str(int(time.time()) if timestamp is None else timestamp)
            sent_headers["X-Slack-Request-Timestamp"] = ts
            sent_headers["X-Slack-Signature"] = signature or str(
                SignatureVerifier(self.signing_secret).generate_signature(timestamp=ts, body=body)
            )
        sent_headers.update(headers or {})
        return self._post(body, sent_headers)

    def _post(self, body: bytes, headers: dict[str, str]) -> Response:
        assert self.bot_url is not None
        request = urllib.request.Request(self.bot_url, data=body, headers=headers, method="POST")
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=self.ack_timeout) as answer:
                status, answer_headers, answer_body = answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as exc:
            status, answer_headers, answer_body = exc.code, exc.headers, exc.read()
        except (TimeoutError, urllib.error.URLError) as exc:
            if not isinstance(exc, TimeoutError) and not isinstance(exc.reason, TimeoutError):
                raise BotUnreachable(f"nothing answered at {self.bot_url}: {exc.reason}") from exc
            status, answer_headers, answer_body = 0, None, b""
        return Response(
            status=status,
            headers={k.lower(): v for k, v in (answer_headers or {}).items()},
            body=answer_body,
            request_body=body,
            request_headers=dict(headers),
            timed_out=status == 0,
            elapsed=time.monotonic() - started,
        )

    def _send_interaction(self, payload: dict[str, Any]) -> Response:
        if self.socket_mode:
            return self._over_socket("interactive", payload)
        return self.send_signed(
            interaction_body(payload), content_type="application/x-www-form-urlencoded"
        )

    def _require_user(self, user_id: str) -> None:
        try:
            self._ws.user(user_id)
        except KeyError as exc:
            raise StandInError(exc.args[0]) from exc

    @staticmethod
    def _element(
        blocks: list[dict[str, Any]], action_id: str, block_id: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            block, element = find_element(blocks, action_id, block_id)
        except LookupError as exc:
            raise ElementNotFound(str(exc)) from exc
        if block.get("type") == "input" and not block.get("dispatch_action"):
            raise ElementNotFound(
                f"{action_id!r} is an input: Slack sends it with submit_view, not as a click"
            )
        return block, element


def _envelope_response(envelope: Envelope, elapsed: float) -> Response:
    """A Socket Mode envelope's fate as a ``Response``: 200 with the acknowledgement's
    payload as the body, or timed out when no acknowledgement arrived (or it was lost)."""
    ack = envelope.ack
    body, headers = b"", {}
    if ack is not None and ack.get("payload") is not None:
        body = json.dumps(ack["payload"]).encode()
        headers = {"content-type": "application/json"}
    return Response(
        status=200 if ack is not None else 0,
        headers=headers,
        body=body,
        request_body=json.dumps(envelope.to_slack()).encode(),
        timed_out=ack is None,
        elapsed=elapsed,
    )


def interaction_body(payload: Mapping[str, Any]) -> bytes:
    """The form body Slack POSTs for an interaction payload (``payload=<json>``)."""
    return urlencode({"payload": json.dumps(payload)}).encode()


def _length_problem(handler: _Handler) -> str | None:
    """What is wrong with the request's ``Content-Length``, or None."""
    sent = handler.headers.get("Content-Length")
    if sent is None or (sent.isascii() and sent.isdigit()):
        return None
    return f"bad Content-Length {sent[:20]!r}: send the body's length in bytes"


_AUTH_ERRORS = ("not_authed", "invalid_auth", "unknown_method", "not_allowed_token_type")
"""Answers to a call made with no valid token: Slack names no scopes with them."""


def _answer(
    handler: _Handler,
    status: int,
    body: bytes,
    content_type: str,
    headers: Mapping[str, str] | None = None,
) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def _reset(handler: _Handler) -> None:
    """Close the connection with a TCP reset and no answer."""
    handler.close_connection = True
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.rfile.close()
    handler.connection.close()
