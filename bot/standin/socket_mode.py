"""Socket Mode: Slack's side of the WebSocket a Socket Mode app opens.

A Socket Mode app has no request URL. It calls ``apps.connections.open`` with its app-level
token (``xapp-…``) and gets a ``wss://`` URL with a one-use ticket; it connects, Slack greets
it with a ``hello``, and from then on Slack sends it *envelopes* over the socket instead of
HTTP requests::

    {"envelope_id": "…", "type": "interactive", "payload": {…block_actions…},
     "accepts_response_payload": false}

The app acknowledges each one by sending ``{"envelope_id": "…"}`` back, with a ``payload``
when it answers something (a slash command's reply, a modal's ``response_action``): that is
the HTTP response of Socket Mode. An Events API envelope that is not acknowledged within
3 seconds is sent again, as a new envelope with ``retry_attempt`` one higher and a
``retry_reason``; an interaction or a command is not (the person sees an error).

Slack refreshes connections: it sends ``{"type": "disconnect", "reason": …}``
(``warning``: this connection closes in about ten seconds; ``refresh_requested``: reconnect
now; ``link_disabled``: Socket Mode was turned off) and the app opens a new connection. A
connection can also simply break.

``SocketMode`` plays all of that for ``SlackStandIn`` (``socket_mode=True``), on a port of
its own, with the ``websockets`` library's threaded server; it is started by the first
``apps.connections.open``, so a stand-in that never plays Socket Mode imports nothing of it.
"""

from __future__ import annotations

import copy
import ctypes
import json
import logging
import secrets
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request
from websockets.http11 import Response as HandshakeResponse
from websockets.sync.server import Server, ServerConnection, serve

from bot.standin.records import BotUnreachable, StandInError

logger = logging.getLogger(__name__)

LINK_PATH = "/link/"
"""The path of the URLs ``apps.connections.open`` answers (``wss://wss-….slack.com/link/``)."""
TICKET_TTL_SECONDS = 30.0
"""How long a URL's ticket can be used to connect (once)."""
WARNING_CLOSE_SECONDS = 10.0
"""After a ``warning`` disconnect message, Slack closes the connection in about this long."""
REFRESH_CLOSE_SECONDS = 2.0
"""After any other disconnect message, the connection is closed this soon (if the app has
not closed it itself by then, as it does once it has connected again)."""
RETRY_REASON = "timeout"
"""The ``retry_reason`` of an Events API envelope sent again because it was not acknowledged."""
DISCONNECT_REASONS = ("warning", "refresh_requested", "link_disabled")
"""The reasons Slack gives in a ``disconnect`` message."""
KINDS = ("events_api", "interactive", "slash_commands")
"""The envelope types the stand-in sends."""


@dataclass
class Envelope:
    """One envelope sent over Socket Mode, and what came back for it."""

    envelope_id: str
    type: str
    """``events_api``, ``interactive`` or ``slash_commands``."""
    payload: dict[str, Any]
    accepts_response_payload: bool
    connection: int
    """The number of the connection it was sent over (``SocketMode.connections``)."""
    retry_attempt: int = 0
    retry_reason: str = ""
    ack: dict[str, Any] | None = None
    """The app's acknowledgement as received (None: none arrived, or it was lost)."""
    ack_lost: bool = False
    """The app acknowledged it but the acknowledgement was lost (``lose_acks``)."""
    sent_at: float = 0.0

    def to_slack(self) -> dict[str, Any]:
        """The envelope as Slack sends it."""
        shaped: dict[str, Any] = {
            "envelope_id": self.envelope_id,
            "payload": self.payload,
            "type": self.type,
            "accepts_response_payload": self.accepts_response_payload,
        }
        if self.type == "events_api":
            shaped.update(retry_attempt=self.retry_attempt, retry_reason=self.retry_reason)
        return shaped


@dataclass
class _Link:
    """One open WebSocket connection of the app."""

    number: int
    connection: ServerConnection
    opened_at: float
    leaving: bool = False
    """A disconnect message was sent on it: no more envelopes go to it."""
    waiting: dict[str, Envelope] = field(default_factory=dict)


class SocketMode:
    """The WebSocket side of the stand-in: connection URLs, connections, envelopes and acks.

    ``app_id`` goes in the URLs and the ``hello``; ``stopping`` is the stand-in's, set when
    it stops (waits are cut short).
    """

    def __init__(self, *, app_id: str, host: str, stopping: threading.Event) -> None:
        self.app_id = app_id
        self._host = host
        self._stopping = stopping
        self._changed = threading.Condition()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._tickets: dict[str, float] = {}
        self._links: list[_Link] = []
        self._opened = 0
        self._acks_to_lose = 0
        self.envelopes: list[Envelope] = []
        """Every envelope sent, in order."""

    # Lifecycle

    def url(self) -> str:
        """A new URL to connect to, with a ticket good for one connection (what
        ``apps.connections.open`` answers); starts the WebSocket server the first time."""
        with self._changed:
            if self._server is None:
                self._start()
            assert self._server is not None
            port = self._server.socket.getsockname()[1]
            ticket = secrets.token_hex(16)
            now = time.monotonic()
            self._tickets = {
                issued: at for issued, at in self._tickets.items() if now - at < TICKET_TTL_SECONDS
            }
            self._tickets[ticket] = now
        return f"ws://{self._host}:{port}{LINK_PATH}?ticket={ticket}&app_id={self.app_id}"

    def _start(self) -> None:
        self._server = serve(
            self._serve,
            self._host,
            0,
            process_request=self._admit,
            # The app sends no Origin; a web page's connection always carries one.
            origins=[None],
            compression=None,
            logger=logging.getLogger(f"{__name__}.server"),
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="slack-standin-socket-mode"
        )
        self._thread.start()

    def stop(self) -> None:
        """Close every connection and stop listening. Idempotent."""
        with self._changed:
            server, self._server = self._server, None
            links = list(self._links)
            self._changed.notify_all()
        for link in links:
            link.connection.close()
        if server is not None:
            server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # The connections

    def _admit(self, connection: ServerConnection, request: Request) -> HandshakeResponse | None:
        """Refuse a handshake without a valid, unused ticket for this app."""
        parts = urlsplit(request.path)
        query = parse_qs(parts.query)
        ticket = (query.get("ticket") or [""])[0]
        with self._changed:
            issued = self._tickets.pop(ticket, None)
        fresh = issued is not None and time.monotonic() - issued < TICKET_TTL_SECONDS
        if parts.path != LINK_PATH or not fresh or query.get("app_id") != [self.app_id]:
            return connection.respond(
                HTTPStatus.UNAUTHORIZED, "call apps.connections.open for a new URL\n"
            )
        return None

    def _serve(self, connection: ServerConnection) -> None:
        with self._changed:
            self._opened += 1
            link = _Link(self._opened, connection, time.monotonic())
            others = sum(1 for other in self._links if not other.leaving)
        try:
            connection.send(json.dumps(self._hello(others + 1)))
        except ConnectionClosed:
            return
        with self._changed:
            self._links.append(link)
            self._changed.notify_all()
        logger.info("stand-in: Socket Mode connection %d opened", link.number)
        try:
            for message in connection:
                self._receive(link, message)
        except ConnectionClosed:
            pass
        finally:
            with self._changed:
                self._links.remove(link)
                self._changed.notify_all()
            logger.info("stand-in: Socket Mode connection %d closed", link.number)

    def _hello(self, connections: int) -> dict[str, Any]:
        return {
            "type": "hello",
            "num_connections": connections,
            "debug_info": {
                "host": "applink-standin",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": {"app_id": self.app_id},
        }

    def _receive(self, link: _Link, message: str | bytes) -> None:
        try:
            sent = json.loads(message)
        except ValueError:
            logger.warning("stand-in: Socket Mode message that is not JSON: %.200r", message)
            return
        envelope_id = sent.get("envelope_id") if isinstance(sent, dict) else None
        with self._changed:
            envelope = link.waiting.pop(str(envelope_id), None)
            if envelope is None:
                logger.warning("stand-in: acknowledgement of no envelope waiting: %.200r", message)
                return
            if self._acks_to_lose:
                self._acks_to_lose -= 1
                envelope.ack_lost = True
                logger.info("stand-in: acknowledgement of %s lost", envelope_id)
                return
            envelope.ack = sent
            self._changed.notify_all()

    def connections(self) -> int:
        """How many connections are open (and not told to go)."""
        with self._changed:
            return sum(1 for link in self._links if not link.leaving)

    def opened(self) -> int:
        """How many connections were opened so far."""
        with self._changed:
            return self._opened

    def wait_connected(self, timeout: float | None) -> bool:
        """Wait until a connection is open (not told to go); False if none opened in time."""
        with self._changed:
            return (
                self._changed.wait_for(
                    lambda: self._stopping.is_set() or self._pick() is not None, timeout=timeout
                )
                and not self._stopping.is_set()
            )

    def _pick(self) -> _Link | None:
        """The connection an envelope goes over: the newest that was not told to go."""
        staying = [link for link in self._links if not link.leaving]
        return staying[-1] if staying else None

    # Envelopes

    def deliver(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        ack_timeout: float | None,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> Envelope:
        """Send ``payload`` in an envelope of type ``kind`` over the newest connection and
        wait up to ``ack_timeout`` seconds (None: for ever) for its acknowledgement.

        Waits as long for a connection when none is open (the app may be reconnecting);
        raises ``BotUnreachable`` when none opened.
        """
        if kind not in KINDS:
            raise StandInError(f"no envelope type {kind!r}; use one of {', '.join(KINDS)}")
        if not self.wait_connected(ack_timeout):
            raise BotUnreachable("no Socket Mode connection is open: start the bot first")
        with self._changed:
            link = self._pick()
            if link is None:
                raise BotUnreachable("the Socket Mode connection closed before the envelope")
            envelope = Envelope(
                envelope_id=str(uuid.uuid4()),
                type=kind,
                payload=payload,
                accepts_response_payload=_accepts_response_payload(kind, payload),
                connection=link.number,
                retry_attempt=retry_attempt,
                retry_reason=retry_reason,
                sent_at=time.time(),
            )
            link.waiting[envelope.envelope_id] = envelope
            self.envelopes.append(envelope)
        try:
            link.connection.send(json.dumps(envelope.to_slack()))
        except ConnectionClosed:
            logger.info("stand-in: envelope %s not sent: connection closed", envelope.envelope_id)
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    envelope.ack is not None or self._stopping.is_set() or link not in self._links
                ),
                timeout=ack_timeout,
            )
            link.waiting.pop(envelope.envelope_id, None)
        return envelope

    def deliver_event(
        self,
        payload: dict[str, Any],
        *,
        ack_timeout: float | None,
        retry_delays: Sequence[float],
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> Envelope:
        """Deliver an Events API payload as Slack does: when its envelope is not
        acknowledged in time, wait the next of ``retry_delays`` and send it again in a new
        envelope (``retry_attempt`` one higher, ``retry_reason`` "timeout"), until one is
        acknowledged or the delays run out. Returns the last envelope."""
        envelope = self.deliver(
            "events_api",
            payload,
            ack_timeout=ack_timeout,
            retry_attempt=retry_attempt,
            retry_reason=retry_reason,
        )
        for delay in retry_delays[envelope.retry_attempt :]:
            if envelope.ack is not None or self._stopping.wait(delay):
                break
            envelope = self.deliver(
                "events_api",
                payload,
                ack_timeout=ack_timeout,
                retry_attempt=envelope.retry_attempt + 1,
                retry_reason=RETRY_REASON,
            )
        return envelope

    def sent(self) -> list[Envelope]:
        """Copies of every envelope sent, in order."""
        with self._changed:
            return copy.deepcopy(self.envelopes)

    def lose_acks(self, times: int = 1) -> None:
        """Lose the next ``times`` acknowledgements the app sends: the app did its work,
        but Slack never heard so (an events envelope is then sent again)."""
        if times < 1:
            raise ValueError("times must be at least 1")
        with self._changed:
            self._acks_to_lose += times

    # Slack ending connections

    def disconnect(self, reason: str, *, close_after: float | None = None) -> int:
        """Send ``{"type": "disconnect", "reason": reason}`` on every open connection, as
        Slack does before it refreshes them, and close each ``close_after`` seconds later
        unless the app did (default: 10 s after a ``warning``, else 2 s). No envelope goes
        to those connections after the message. Returns how many were told."""
        if reason not in DISCONNECT_REASONS:
            raise StandInError(f"Slack disconnects for {', '.join(DISCONNECT_REASONS)}")
        delay = close_after
        if delay is None:
            delay = WARNING_CLOSE_SECONDS if reason == "warning" else REFRESH_CLOSE_SECONDS
        with self._changed:
            links = [link for link in self._links if not link.leaving]
            for link in links:
                link.leaving = True
        message = json.dumps(
            {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-standin"}}
        )
        for link in links:
            try:
                link.connection.send(message)
            except ConnectionClosed:
                continue
            self._later(delay, link.connection.close)
        return len(links)

    def drop(self) -> int:
        """Break every open connection as a network failure does: no close frame, the TCP
        connection reset. Returns how many were dropped."""
        with self._changed:
            links = list(self._links)
            for link in links:
                link.leaving = True
        for link in links:
            _reset(link.connection.socket)
        with self._changed:  # gone once their readers saw the reset
            self._changed.wait_for(lambda: not set(map(id, links)) & set(map(id, self._links)), 5)
        return len(links)

    def _later(self, delay: float, action: Callable[[], object]) -> None:
        def run() -> None:
            if not self._stopping.wait(delay):
                action()

        threading.Thread(target=run, daemon=True, name="slack-standin-disconnect").start()


def _accepts_response_payload(kind: str, payload: dict[str, Any]) -> bool:
    """Whether Slack takes a payload in the acknowledgement: a slash command's reply, a
    modal submission's ``response_action``, a select's options; not for events or clicks."""
    if kind == "slash_commands":
        return True
    return kind == "interactive" and payload.get("type") in ("view_submission", "block_suggestion")


def _reset(sock: socket.socket) -> None:
    """Reset the TCP connection at once (RST, no FIN, no close frame), as a network failure
    does, although another thread (the connection's reader) is blocked reading it.

    Closing a socket another thread reads from frees it only once that read returns, and a
    ``shutdown`` sends a FIN first. On Linux, connecting a TCP socket to an ``AF_UNSPEC``
    address (``connect(2)``) disconnects it: it sends the RST and wakes the reader with
    ``ECONNRESET``. Elsewhere the connection is shut down (a FIN: an app may then take
    longer to notice).
    """
    if _LIBC is not None and sys.platform.startswith("linux"):
        unspecified = (ctypes.c_ubyte * 16)()  # a sockaddr whose family is AF_UNSPEC (0)
        if _LIBC.connect(sock.fileno(), unspecified, len(unspecified)) == 0:
            return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None
