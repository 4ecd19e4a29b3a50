"""What the stand-in remembers: users, messages, ephemerals, views, Web API calls, bot replies.

Everything the stand-in hands out is a deep copy taken under its lock, so a test can keep a
snapshot (say, the message a reviewer saw before someone else decided) without it changing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal


class StandInError(Exception):
    """The stand-in was asked to do something Slack (or a person) could not do."""


class ElementNotFound(StandInError):
    """A click named an action_id that is not in the blocks the person actually received."""


class BotUnreachable(StandInError):
    """Nothing answered at ``bot_url``: start the bot (or set ``bot_url``) first."""


@dataclass
class StandInUser:
    """A member of the stand-in workspace, as ``users.info`` reports it.

    Example: ``StandInUser("U0ALICE", "alice", tz="Europe/Paris")``.
    """

    id: str
    name: str
    is_admin: bool = False
    is_owner: bool = False
    is_bot: bool = False
    tz: str = "UTC"
    real_name: str = ""
    """Shown name; defaults to ``name``."""


@dataclass
class MessageVersion:
    """A previous version of a message, kept when ``chat.update`` or a response_url replaced it."""

    text: str
    blocks: list[dict[str, Any]]
    metadata: dict[str, Any] | None
    replaced_by: str
    """What replaced this version: "chat.update" or "response_url"."""


@dataclass
class Message:
    """A message in a channel or thread, posted by the bot or by a person (``post_message``)."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None
    user: str
    """The bot's user id for the bot's posts, the person's id otherwise."""
    bot_id: str | None
    metadata: dict[str, Any] | None
    permalink: str
    updates: list[MessageVersion] = field(default_factory=list)
    """Previous versions, oldest first."""
    deleted: bool = False
    app_id: str | None = None

    def to_slack(self, team_id: str) -> dict[str, Any]:
        """This message as Slack shows it in payloads and ``conversations.replies``."""
        shaped: dict[str, Any] = {"type": "message", "user": self.user}
        if self.bot_id:
            shaped["bot_id"] = self.bot_id
        if self.app_id:
            shaped["app_id"] = self.app_id
        shaped.update({"ts": self.ts, "text": self.text, "team": team_id})
        if self.blocks:
            shaped["blocks"] = self.blocks
        if self.thread_ts:
            shaped["thread_ts"] = self.thread_ts
        if self.metadata is not None:
            shaped["metadata"] = self.metadata
        return shaped


@dataclass
class Ephemeral:
    """A message only ``user`` can see: from ``chat.postEphemeral``, a response_url, or an ack."""

    channel: str
    user: str
    text: str
    blocks: list[dict[str, Any]]
    source: Literal["chat.postEphemeral", "response_url", "ack"]
    ts: str
    thread_ts: str | None = None
    updates: list[MessageVersion] = field(default_factory=list)
    deleted: bool = False
    message_ts: str | None = None
    """For a response_url reply: the message whose interaction it answers."""


@dataclass
class View:
    """A modal (views.open/push, or a submission's ``response_action``) or an App Home tab."""

    id: str
    user: str
    trigger_id: str | None
    view: dict[str, Any]
    """The view as Slack answered it: what the bot sent plus id, hash, state, root_view_id..."""
    hash: str
    position: int
    """Place in the user's modal stack: 0 for the root modal, 1 and 2 for pushed ones."""
    closed: bool = False
    errors: dict[str, str] | None = None
    """The bot's last ``response_action: errors`` answer, keyed by block_id."""
    submission_error: str | None = None
    """Why the last submission failed in a way the person would see as a generic error."""
    updates: list[dict[str, Any]] = field(default_factory=list)
    """Previous versions of ``view``, oldest first."""

    @property
    def type(self) -> str:
        """ "modal" or "home"."""
        return str(self.view.get("type", "modal"))

    @property
    def blocks(self) -> list[dict[str, Any]]:
        """The view's blocks."""
        return list(self.view.get("blocks", []))

    @property
    def callback_id(self) -> str:
        """The view's callback_id ("" if none)."""
        return str(self.view.get("callback_id", ""))

    @property
    def private_metadata(self) -> str:
        """The view's private_metadata ("" if none)."""
        return str(self.view.get("private_metadata", ""))

    @property
    def title(self) -> str:
        """The text of the view's title."""
        title = self.view.get("title") or {}
        return str(title.get("text", ""))


@dataclass
class ApiCall:
    """One Web API request the bot made (or one POST to a response_url: method "response_url")."""

    method: str
    params: dict[str, Any]
    """Query, form or JSON fields, with JSON-valued fields (blocks, view...) decoded; no token."""
    http_status: int
    """0 when an injected fault reset the connection instead of answering."""
    response: dict[str, Any]
    at: float


@dataclass
class Response:
    """What the bot answered to a request the stand-in sent it as Slack.

    ``status`` is 0 and ``timed_out`` true when the bot did not answer within the ack timeout
    (Slack gives up after 3 seconds). Header names are lower-cased.
    """

    status: int
    headers: dict[str, str]
    body: bytes
    request_body: bytes = b""
    request_headers: dict[str, str] = field(default_factory=dict)
    timed_out: bool = False
    elapsed: float = 0.0

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (raises ``ValueError`` if it is not JSON)."""
        return json.loads(self.body)
