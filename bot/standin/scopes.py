"""Which OAuth scope each Web API method needs, as Slack checks it.

A method that needs a scope the bot token lacks answers ``missing_scope`` with ``needed``
(Slack names one scope) and ``provided`` (the token's, comma-separated). The conversation
methods need the scope of the conversation's kind: ``channels:`` for public channels,
``groups:`` for private ones, ``im:`` for DMs. Methods Slack lets any token call (auth.test,
chat.getPermalink, views.*) need none.

From the method pages of https://docs.slack.dev/reference/methods/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_BY_KIND = {"public": "channels", "private": "groups", "dm": "im"}

SCOPES: dict[str, str | None] = {
    "auth.test": None,
    "chat.delete": "chat:write",
    "chat.getPermalink": None,
    "chat.postEphemeral": "chat:write",
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "conversations.history": "{kind}:history",
    "conversations.info": "{kind}:read",
    "conversations.join": "channels:join",
    "conversations.members": "{kind}:read",
    "conversations.open": "im:write",
    "conversations.replies": "{kind}:history",
    "usergroups.list": "usergroups:read",
    "usergroups.users.list": "usergroups:read",
    "users.info": "users:read",
    "views.open": None,
    "views.publish": None,
    "views.push": None,
    "views.update": None,
}
"""Every method the stand-in answers and the scope it needs (``{kind}``: by conversation)."""

POST_ANYWHERE = "chat:write.public"
"""Lets ``chat.postMessage`` post in public channels the bot is not in."""


def needed_scope(
    method: str, params: dict[str, Any], kind_of: Callable[[str], str | None]
) -> str | None:
    """The scope a call of ``method`` needs, or None. ``kind_of(channel)`` says what kind of
    conversation a channel argument is (``public``, ``private``, ``dm``; None: unknown, in
    which case the method's own error is answered rather than a scope's)."""
    scope = SCOPES.get(method)
    if scope is None or "{kind}" not in scope:
        return scope
    kind = kind_of(str(params.get("channel") or ""))
    if kind is None:
        return None
    return scope.format(kind=_BY_KIND[kind])
