"""The workbench: a browser page on the Slack stand-in that shows what reviewers see in Slack.

The stand-in's own HTTP server (``SlackStandIn.url``) serves it; ``handoff dev`` prints its
address. The page shows channels, the app's DM and Home tab, messages rendered from their Block
Kit, threads, ephemerals and modals, and lets you act as any member of the workspace (a user
switcher). Every action goes through the stand-in's acting-as-a-person methods (``click``,
``submit_view``, ``post_message``, ``send_command``, ``send_app_home_opened``), so the bot
receives exactly what Slack would send: the same payload shapes, signed.

Routes (all JSON except the page and its files)::

    GET  /                              the page (static/workbench.html)
    GET  /static/<file>                 its script and style sheet
    GET  /workbench/state?user=U…&since=V
                                        what user U… sees; with ``since``, a long poll that
                                        answers as soon as the state differs from version V
    POST /workbench/click               {"user", "action_id", "block_id", "selected_option"?,
                                         "message": {"channel", "ts"} | "ephemeral": {"ts"}
                                         | "view": {"id"}}
    POST /workbench/submit              {"user", "view_id", "values": {block_id: {action_id: v}}}
    POST /workbench/close               {"user", "view_id"}
    POST /workbench/message             {"user", "channel", "text", "thread_ts"?}; text that
                                        starts with "/" runs a slash command instead
    POST /workbench/home                {"user"}: the user opens the app's Home tab

It listens where the stand-in listens (127.0.0.1 by default) and anyone who can reach it can act
as any member: it is a development tool, never expose it. So that no other web page the developer
has open can act through their browser, the stand-in serves only requests addressed to a
loopback name and sent by no other site (``bot.standin.guard``), and every POST here must be
``Content-Type: application/json`` (which no form can send, and which a page of another origin
cannot send without asking first) and carry this run's random token in ``X-Workbench-Token``
(``Workbench.token``; the page gets it in its HTML). Anything else is answered 403, untouched.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import html
import json
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from bot.standin.guard import Headers
from bot.standin.records import (
    BotUnreachable,
    Ephemeral,
    Message,
    Response,
    StandInError,
    StandInUser,
    View,
)
from bot.standin.workspace import Workspace

if TYPE_CHECKING:
    from bot.standin.server import SlackStandIn

LONG_POLL_SECONDS = 25.0
"""How long a state request with ``since`` waits for a change before answering anyway."""
POLL_INTERVAL_SECONDS = 0.1
"""How often a waiting state request looks for a change."""

_STATIC_PACKAGE = "bot.standin"
_STATIC_FOLDER = "static"
_STATIC_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_JSON = "application/json; charset=utf-8"
_NO_STORE = {"Cache-Control": "no-store"}
_PAGE = "workbench.html"
_TOKEN_SLOT = b"{{workbench_token}}"
"""Where the page's HTML takes this run's token (``<meta name="workbench-token">``)."""
_NO_FRAMING = {
    **_NO_STORE,
    # Another site could show the page in a hidden frame and have the developer click in it.
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
}
TOKEN_HEADER = "X-Workbench-Token"
"""The header every POST to the workbench carries this run's ``Workbench.token`` in."""


@dataclass
class WorkbenchAnswer:
    """What the stand-in's HTTP server sends back for a workbench request."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=lambda: dict(_NO_STORE))

    @classmethod
    def json(cls, status: int, data: Any) -> WorkbenchAnswer:
        """A JSON answer."""
        return cls(status, json.dumps(data).encode(), _JSON)


class _BadRequest(Exception):
    """The page sent something the workbench cannot act on; answered as HTTP 400."""


class Workbench:
    """The browser workbench of one ``SlackStandIn`` (created by it: ``standin.workbench``).

    ``admins`` are user ids shown with the "admin" role besides the workspace admins and owners
    (``handoff dev`` passes ``HANDOFF_ADMINS``); it changes only what the page shows, the bot
    decides who is an admin.
    """

    def __init__(
        self,
        standin: SlackStandIn,
        workspace: Workspace,
        *,
        stopping: threading.Event,
        admins: Iterable[str] = (),
    ) -> None:
        self._standin = standin
        self._ws = workspace
        self._stopping = stopping
        self.admins: frozenset[str] = frozenset(admins)
        self.token = secrets.token_urlsafe(24)
        """The secret every POST must carry in ``X-Workbench-Token`` (new for every stand-in):
        the page gets it in its HTML, which other sites' pages cannot read."""

    # Routing

    def respond(
        self,
        method: str,
        path: str,
        query: str,
        body: bytes,
        headers: Headers | None = None,
    ) -> WorkbenchAnswer | None:
        """Answer a request for the workbench, or None if ``path`` is not one of its routes.

        The stand-in has already refused requests of other sites (``bot.standin.guard``).
        """
        if path in ("/", "/index.html"):
            return self._page() if method == "GET" else _not_allowed()
        if path.startswith("/static/"):
            if method != "GET":
                return _not_allowed()
            return _static(path[len("/static/") :])
        if not path.startswith("/workbench/"):
            return None
        route = path[len("/workbench/") :]
        try:
            if route == "state":
                if method != "GET":
                    return _not_allowed()
                return WorkbenchAnswer.json(200, self._state_request(query))
            actions = {
                "click": self._click,
                "submit": self._submit,
                "close": self._close,
                "message": self._message,
                "home": self._home,
            }
            if route not in actions:
                return WorkbenchAnswer.json(404, {"ok": False, "error": f"no route {path}"})
            if method != "POST":
                return _not_allowed()
            refused = self._post_refusal(headers or {})
            if refused is not None:
                return WorkbenchAnswer.json(403, {"ok": False, "error": refused})
            return WorkbenchAnswer.json(200, actions[route](_json_object(body)))
        except _BadRequest as exc:
            return WorkbenchAnswer.json(400, {"ok": False, "error": str(exc)})
        except BotUnreachable as exc:
            return WorkbenchAnswer.json(502, {"ok": False, "error": str(exc)})
        except StandInError as exc:
            # What Slack itself would not let the person do (a gone message, a closed modal).
            return WorkbenchAnswer.json(409, {"ok": False, "error": str(exc)})

    def _post_refusal(self, headers: Headers) -> str | None:
        """Why a POST must not act (for its 403 answer), or None.

        A form of another site can POST text/plain or form bodies without the browser asking
        first, and cannot set headers: JSON and the token rule it out.
        """
        content_type = headers.get("Content-Type") or ""
        if content_type.partition(";")[0].strip().lower() != "application/json":
            return (
                f"refused: the workbench takes Content-Type: application/json only, not "
                f"{content_type or 'none'} (so that no other web page can post to it)"
            )
        sent = headers.get(TOKEN_HEADER) or ""
        if not hmac.compare_digest(sent.encode(), self.token.encode()):
            return (
                f"refused: {TOKEN_HEADER} is missing or wrong; reload the page, or send the "
                "token `handoff dev` printed"
            )
        return None

    def _page(self) -> WorkbenchAnswer:
        """The page, with this run's token in it, and never inside another site's frame."""
        page = _static(_PAGE)
        page.body = page.body.replace(_TOKEN_SLOT, html.escape(self.token).encode())
        page.headers = dict(_NO_FRAMING)
        return page

    # What the page shows

    def version(self) -> str:
        """A fingerprint of everything the page shows; it changes whenever any of it changes.

        The bot changes the workspace through Web API calls and response_urls (each one is
        recorded in ``calls``), people through new messages, and the bot's answers to modal
        submissions through the views themselves, so those are what it covers.
        """
        ws = self._ws
        with ws.lock:
            views = [
                (v.id, v.hash, v.closed, sorted((v.errors or {}).items()), v.submission_error)
                for v in ws.views.values()
            ]
            seen = (len(ws.calls), len(ws.messages), len(ws.ephemerals), views)
        return hashlib.sha1(repr(seen).encode()).hexdigest()[:16]

    def state(self, user_id: str | None = None) -> dict[str, Any]:
        """What ``user_id`` (default: the first member) sees, as the page's JSON.

        Example: ``standin.workbench.state("U0ALICE")["messages"][0]["blocks"]``.
        """
        ws = self._ws
        with ws.lock:
            members = [u for u in ws.users.values() if not u.is_bot]
            if user_id not in {u.id for u in members}:
                user_id = members[0].id if members else None
            dm = ws.dm_channel(user_id) if user_id else None
            channels = self._channels(dm)
            visible = {c["id"] for c in channels}
            shown = [m for m in ws.messages if not m.deleted and m.channel in visible]
            replies: dict[tuple[str, str], list[Message]] = {}
            for message in shown:
                if message.thread_ts and message.thread_ts != message.ts:
                    replies.setdefault((message.channel, message.thread_ts), []).append(message)
            # A deep copy: the bot's next call may change these records while the page reads them.
            return copy.deepcopy(
                {
                    "version": self.version(),
                    "team": {"id": ws.team_id, "domain": ws.team_domain},
                    "bot": {"id": ws.bot_user_id, "name": ws.users[ws.bot_user_id].name},
                    "me": user_id,
                    "users": [self._user_json(u) for u in ws.users.values()],
                    "usergroups": {group: group.lower() for group in ws.usergroups},
                    "channels": channels,
                    "dm": dm,
                    "messages": [
                        _message_json(m, replies.get((m.channel, m.ts), [])) for m in shown
                    ],
                    "ephemerals": [
                        _ephemeral_json(e)
                        for e in ws.ephemerals
                        if e.user == user_id and not e.deleted
                    ],
                    "modals": self._modals(user_id),
                    "home": self._home_json(user_id),
                }
            )

    def _state_request(self, query: str) -> dict[str, Any]:
        params = parse_qs(query)
        user_id = params["user"][0] if params.get("user") else None
        since = params["since"][0] if params.get("since") else None
        if since is not None:
            self._wait_for_change(since)
        return self.state(user_id)

    def _wait_for_change(self, since: str) -> None:
        # Polling a cheap fingerprint catches every change, whoever made it (the bot's Web API
        # calls, a test acting through SlackStandIn directly, this page), with no hooks in them.
        deadline = time.monotonic() + LONG_POLL_SECONDS
        while self.version() == since and time.monotonic() < deadline:
            if self._stopping.wait(POLL_INTERVAL_SECONDS):
                return

    def _channels(self, dm: str | None) -> list[dict[str, str]]:
        """The channels a member sees: every public one, and their own DM with the app."""
        ws = self._ws
        ids = list(ws.channel_names)
        ids += [m.channel for m in ws.messages if m.channel.startswith(("C", "G"))]
        channels = [
            {"id": c, "name": ws.channel_name(c), "kind": "channel"} for c in dict.fromkeys(ids)
        ]
        if dm:
            channels.append({"id": dm, "name": ws.users[ws.bot_user_id].name, "kind": "app"})
        return channels

    def _user_json(self, user: StandInUser) -> dict[str, Any]:
        if user.is_bot:
            role = "app"
        elif user.is_owner:
            role = "owner"
        elif user.is_admin or user.id in self.admins:
            role = "admin"
        else:
            role = "member"
        return {
            "id": user.id,
            "name": user.name,
            "real_name": user.real_name or user.name,
            "role": role,
            "is_bot": user.is_bot,
        }

    def _modals(self, user_id: str | None) -> list[dict[str, Any]]:
        ws = self._ws
        stack = [ws.views[v] for v in ws.stacks.get(user_id or "", []) if v in ws.views]
        return [_view_json(v) for v in stack if not v.closed]

    def _home_json(self, user_id: str | None) -> dict[str, Any] | None:
        ws = self._ws
        view = ws.views.get(ws.homes.get(user_id or "", ""))
        return None if view is None else _view_json(view)

    # Acting as a person

    def _click(self, sent: dict[str, Any]) -> dict[str, Any]:
        user = _text_field(sent, "user")
        target = self._target(user, sent)
        response = self._standin.click(
            user,
            target,
            _text_field(sent, "action_id"),
            block_id=_optional_text(sent, "block_id"),
            selected_option=_picked(sent.get("selected_option")),
        )
        return _bot_answer(response)

    def _target(self, user: str, sent: dict[str, Any]) -> Message | Ephemeral | View:
        """The snapshot the person clicked in, as the stand-in's ``click`` wants it."""
        try:
            if isinstance(sent.get("message"), dict):
                where = sent["message"]
                return self._standin.message(str(where["channel"]), str(where["ts"]))
            if isinstance(sent.get("view"), dict):
                return self._standin.view(str(sent["view"]["id"]))
            if isinstance(sent.get("ephemeral"), dict):
                ts = str(sent["ephemeral"]["ts"])
                return next(e for e in self._standin.ephemerals(user) if e.ts == ts)
        except (KeyError, StopIteration) as exc:
            raise StandInError("that message or view is gone; the page will refresh") from exc
        raise _BadRequest("say what was clicked: message, ephemeral or view")

    def _submit(self, sent: dict[str, Any]) -> dict[str, Any]:
        user = _text_field(sent, "user")
        view_id = _text_field(sent, "view_id")
        values = sent.get("values") or {}
        if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
            raise _BadRequest("values must map block_id to {action_id: value}")
        view = self._view(view_id)
        response = self._standin.submit_view(user, view, values)
        after = self._view(view_id)
        return {
            **_bot_answer(response),
            "closed": after.closed,
            "errors": after.errors or {},
            "submission_error": after.submission_error,
        }

    def _close(self, sent: dict[str, Any]) -> dict[str, Any]:
        user = _text_field(sent, "user")
        response = self._standin.close_view(user, self._view(_text_field(sent, "view_id")))
        return {"ok": True} if response is None else _bot_answer(response)

    def _message(self, sent: dict[str, Any]) -> dict[str, Any]:
        user = _text_field(sent, "user")
        channel = _text_field(sent, "channel")
        text = str(sent.get("text") or "").strip()
        if not text:
            raise _BadRequest("write something first")
        if text.startswith("/"):
            command, _, rest = text.partition(" ")
            return _bot_answer(
                self._standin.send_command(user, command, rest.strip(), channel_id=channel)
            )
        _, response = self._standin.post_message(
            user, channel, text, thread_ts=_optional_text(sent, "thread_ts")
        )
        return _bot_answer(response)

    def _home(self, sent: dict[str, Any]) -> dict[str, Any]:
        return _bot_answer(self._standin.send_app_home_opened(_text_field(sent, "user")))

    def _view(self, view_id: str) -> View:
        try:
            return self._standin.view(view_id)
        except KeyError as exc:
            raise StandInError(f"there is no view {view_id}") from exc


def _message_json(message: Message, replies: list[Message]) -> dict[str, Any]:
    return {
        "channel": message.channel,
        "ts": message.ts,
        "thread_ts": message.thread_ts,
        "user": message.user,
        "is_bot": bool(message.bot_id),
        "text": message.text,
        "blocks": message.blocks,
        "edits": len(message.updates),
        "reply_count": len(replies),
        "reply_users": list(dict.fromkeys(r.user for r in replies)),
        "latest_reply": replies[-1].ts if replies else None,
    }


def _view_json(view: View) -> dict[str, Any]:
    shown = view.view
    return {
        "id": view.id,
        "hash": view.hash,
        "type": view.type,
        "callback_id": view.callback_id,
        "title": shown.get("title"),
        "submit": shown.get("submit"),
        "close": shown.get("close"),
        "blocks": view.blocks,
        "errors": view.errors or {},
        "submission_error": view.submission_error,
    }


def _ephemeral_json(ephemeral: Ephemeral) -> dict[str, Any]:
    return {
        "channel": ephemeral.channel,
        "ts": ephemeral.ts,
        "thread_ts": ephemeral.thread_ts,
        "text": ephemeral.text,
        "blocks": ephemeral.blocks,
        "source": ephemeral.source,
        "edits": len(ephemeral.updates),
    }


def _bot_answer(response: Response | None) -> dict[str, Any]:
    """How the bot answered, in the words Slack's client would use for a failure (None: the
    bot was sent nothing, as Slack sends no message events from a channel it is not in)."""
    if response is None:
        return {
            "ok": True,
            "status": 0,
            "note": "the app is not in this channel: Slack sent it nothing",
        }
    answer: dict[str, Any] = {"ok": response.status == 200, "status": response.status}
    if response.timed_out:
        answer["error"] = "the app did not answer within 3 seconds (Slack shows an error)"
    elif response.status != 200:
        answer["error"] = f"the app answered HTTP {response.status}: {response.text[:300]}"
    return answer


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        sent = json.loads(body or b"{}")
    except ValueError as exc:
        raise _BadRequest("the body is not JSON") from exc
    if not isinstance(sent, dict):
        raise _BadRequest("the body must be a JSON object")
    return sent


def _text_field(sent: dict[str, Any], name: str) -> str:
    value = sent.get(name)
    if not isinstance(value, str) or not value:
        raise _BadRequest(f"{name} is required")
    return value


def _optional_text(sent: dict[str, Any], name: str) -> str | None:
    value = sent.get(name)
    return str(value) if value else None


def _picked(value: Any) -> Any:
    """The value of the option picked, or a list of them (checkboxes); None if none."""
    if value is None:
        return None
    if isinstance(value, list):
        return [str(item) for item in value]
    return str(value)


def _not_allowed() -> WorkbenchAnswer:
    return WorkbenchAnswer.json(405, {"ok": False, "error": "method not allowed"})


def _static(name: str) -> WorkbenchAnswer:
    """A file of the page, from the package data (never a path outside ``static/``)."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    if not _STATIC_NAME.match(name) or suffix not in _CONTENT_TYPES:
        return WorkbenchAnswer(404, b"not found", "text/plain")
    resource = resources.files(_STATIC_PACKAGE).joinpath(_STATIC_FOLDER).joinpath(name)
    if not resource.is_file():
        return WorkbenchAnswer(404, b"not found", "text/plain")
    return WorkbenchAnswer(200, resource.read_bytes(), _CONTENT_TYPES[suffix])
