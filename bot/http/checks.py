"""The checks an HTTP request to ``/slack/events`` passes before Bolt sees it.

In order: a size limit (413), Slack's signature and timestamp on the raw bytes (401), the
body's encoding and shape (400, see ``bot.http.shape``), then the replay guard (see
``bot.http.replay``): a replayed interaction or command gets 401, another delivery of an
event already let through is acknowledged without running (``AlreadyRun``), and a request
the guard could not check because Redis is down is refused with a "try again"
(``Unchecked``, answered by ``bot.http.unavailable``). A refused request changes nothing and
never gets a traceback. What passes goes to Bolt already parsed and verified (see
``bot.http.wsgi``). The one exception is Slack's ``ssl_check`` ping, admitted unsigned as
Bolt would: Bolt answers it 200 and runs nothing else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from bot.http import signing
from bot.http.prefetch import Prefetched, ReadFor
from bot.http.replay import ReplayGuard, Seen
from bot.http.shape import MalformedRequest, parse_body

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 2 * 1024 * 1024
"""Largest request body read. Slack's biggest payloads, modal submissions, stay well under
1 MB (a view is at most 250 kB); anything larger is refused unread."""


@dataclass(frozen=True)
class Rejection:
    """Why a request is refused: the HTTP status line and a short reason for the client."""

    status: str
    reason: str


UNSIGNED = Rejection("401 Unauthorized", "invalid request")

SSL_CHECK_MAX_BYTES = 256
"""An ``ssl_check`` ping is a few dozen bytes."""


@dataclass(frozen=True)
class Admitted:
    """A request that passed the gate: its raw body, the body parsed (as Bolt parses it),
    and what was read for it along the way, if anything."""

    raw: bytes
    body: dict[str, Any]
    prefetched: Prefetched | None = None


@dataclass(frozen=True)
class AlreadyRun:
    """Another delivery of an event already let through (Slack's retry, or a replay of
    one): answered 200, so that Slack stops sending it, and not run again."""

    event_id: str


@dataclass(frozen=True)
class Unchecked:
    """A signed request the replay guard could not check, Redis being unreachable: it may be
    a replay, so it does not run; the parsed body says how to tell the person to try again."""

    body: dict[str, Any]


NotAdmitted = Rejection | AlreadyRun | Unchecked
"""Why a request does not go on to Bolt."""

Outcome = Admitted | NotAdmitted
"""What the gate makes of a request."""


class RequestGate:
    """Admits a request's raw body, or says why not.

    Example::

        gate = RequestGate(settings.slack_signing_secret, ReplayGuard(redis, bot_keys))
        admitted = gate.admit(environ)
        if not isinstance(admitted, Admitted):
            ...  # answer as the Rejection, AlreadyRun or Unchecked says
        ...  # dispatch admitted.body
    """

    def __init__(
        self,
        signing_secret: str,
        replay: ReplayGuard,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        read_for: ReadFor | None = None,
    ) -> None:
        self.signing_secret = signing_secret
        self.replay = replay
        self.max_body_bytes = max_body_bytes
        # The read is made in the replay check's round trip (it is only a read, and a
        # refused request never gets to use it).
        self.read_for = read_for

    def admit(self, environ: dict[str, Any]) -> Outcome:
        """The body of a request that may go on to Bolt, or why it does not."""
        raw = self._read_body(environ)
        if isinstance(raw, Rejection):
            return raw
        if _is_ssl_check(raw):
            # Slack's certificate ping for slash commands, which Bolt answers 200 before any
            # signature check (it may come unsigned); nothing else runs for it.
            return Admitted(raw, {"ssl_check": "1"})
        timestamp = environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP")
        signature = environ.get("HTTP_X_SLACK_SIGNATURE")
        if not signing.verify(self.signing_secret, raw, timestamp=timestamp, signature=signature):
            return self._refuse(UNSIGNED, "bad or missing signature", environ)
        try:
            body = parse_body(raw.decode("utf-8"), _content_type(environ))
        except UnicodeDecodeError:
            return self._refuse(Rejection("400 Bad Request", "the body is not UTF-8"), "", environ)
        except MalformedRequest as exc:
            return self._refuse(Rejection("400 Bad Request", str(exc)), "", environ)
        if body.get("type") == "event_callback":
            return self._admit_event(raw, body, environ)
        sent_at = signing.request_time(timestamp) or 0
        return self._admit_request(raw, body, str(signature), sent_at, environ)

    def _admit_request(
        self,
        raw: bytes,
        body: dict[str, Any],
        signature: str,
        sent_at: int,
        environ: dict[str, Any],
    ) -> Outcome:
        """An interaction or a command: admitted the first time its signature is seen."""
        read = None if self.read_for is None else self.read_for(body)
        checked = self.replay.check_request(signature, sent_at=sent_at, read=read)
        if checked.seen is Seen.UNKNOWN:
            return self._unchecked(body, environ)
        if checked.seen is Seen.AGAIN:
            return self._refuse(UNSIGNED, "replayed request", environ)
        return Admitted(raw, body, checked.prefetched)

    def _admit_event(self, raw: bytes, body: dict[str, Any], environ: dict[str, Any]) -> Outcome:
        """An event: admitted the first time its (signed) event_id is seen."""
        event_id = str(body["event_id"])  # the shape check makes sure it is there
        seen = self.replay.check_event(event_id)
        if seen is Seen.UNKNOWN:
            return self._unchecked(body, environ)
        if seen is Seen.AGAIN:
            # Slack's retry of an event that ran, or a replay: the same to us. The retry
            # number is not signed: worth a log line, never a reason to run it again.
            logger.info(
                "event %s delivered again; not run again",
                event_id,
                extra={"retry_num": environ.get("HTTP_X_SLACK_RETRY_NUM")},
            )
            return AlreadyRun(event_id)
        return Admitted(raw, body)

    @staticmethod
    def _unchecked(body: dict[str, Any], environ: dict[str, Any]) -> Unchecked:
        logger.warning(
            "refused a request to %s: Redis is unavailable for the replay check",
            environ.get("PATH_INFO"),
            extra={"remote_addr": environ.get("REMOTE_ADDR")},
        )
        return Unchecked(body)

    def _read_body(self, environ: dict[str, Any]) -> bytes | Rejection:
        declared = environ.get("CONTENT_LENGTH") or ""
        if declared and not (declared.isascii() and declared.isdigit()):
            return self._refuse(Rejection("400 Bad Request", "bad Content-Length"), "", environ)
        if declared and int(declared) > self.max_body_bytes:
            return self._refuse(Rejection("413 Payload Too Large", "body too large"), "", environ)
        stream = environ.get("wsgi.input")
        if stream is None:
            return b""
        raw = stream.read(int(declared)) if declared else stream.read(self.max_body_bytes + 1)
        if len(raw) > self.max_body_bytes:
            return self._refuse(Rejection("413 Payload Too Large", "body too large"), "", environ)
        return bytes(raw)

    @staticmethod
    def _refuse(rejection: Rejection, why: str, environ: dict[str, Any]) -> Rejection:
        logger.info(
            "refused a request to %s: %s",
            environ.get("PATH_INFO"),
            why or rejection.reason,
            extra={"remote_addr": environ.get("REMOTE_ADDR")},
        )
        return rejection


def _is_ssl_check(raw: bytes) -> bool:
    """Is this only ``ssl_check=1`` (and the deprecated verification token)?"""
    if len(raw) > SSL_CHECK_MAX_BYTES or not raw.isascii():
        return False
    fields = parse_qs(raw.decode("ascii"), keep_blank_values=True)
    return fields.get("ssl_check") == ["1"] and set(fields) <= {"ssl_check", "token"}


def _content_type(environ: dict[str, Any]) -> str | None:
    # Exactly as Bolt reads it, so that both parse the body the same way.
    content_type = environ.get("CONTENT_TYPE")
    return str(content_type).split(";")[0] if content_type else None
