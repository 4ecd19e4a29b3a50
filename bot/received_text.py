"""Text Slack sends the bot (a thread reply), turned back into what the person typed.

Slack escapes ``&``, ``<`` and ``>`` in the ``text`` of messages it sends, and wraps
mentions, channels and links in ``<...>`` tokens. An agent wants plain text: ``plain_text``
reads the tokens first, then unescapes the entities, so an escaped ``&lt;@U1&gt;`` stays the
characters ``<@U1>`` and never becomes a mention. Mentions keep their ids, so the agent can
still tell who was meant.

===================================  ======================================================
received                             plain text
===================================  ======================================================
``Tom &amp; Jerry &lt;3``            ``Tom & Jerry <3`` (only these three entities: a typed
                                     ``&copy;`` arrives as ``&amp;copy;`` and stays ``&copy;``)
``<@U123>``                          ``@jerry (U123)`` when ``user_names`` knows the name,
                                     else ``@U123``
``<@U123|jerry>``                    ``@jerry (U123)`` (the label wins over ``user_names``)
``<#C123|general>`` / ``<#C123>``    ``#general`` / ``#C123``
``<!here>`` ``<!channel>``           ``@here`` ``@channel`` ``@everyone`` (a label is
``<!everyone>``                      ignored)
``<!subteam^S123|@team>``            ``@team``; without a label ``@S123``
``<!date^1392734382^{date}|Feb 18>`` ``Feb 18`` (the fallback); without one, the time in
                                     UTC: ``2014-02-18 14:39 UTC``
``<https://x.y|the docs>``           ``the docs (https://x.y)``
``<https://x.y>``                    ``https://x.y``; also when the label is the URL, with
``<http://x.y|x.y>``                 or without its scheme or a final ``/``
``<mailto:a@b.c|a@b.c>``             ``a@b.c``; another label: ``Ann (a@b.c)``
``<!unknown|text>``                  ``text``; without a label, kept as sent: ``<!unknown>``
anything else in ``<...>``           kept as it was sent, entities unescaped (``<>``,
                                     ``<@>``, ``<@u1>``, ``<not a link>``)
a ``<`` or ``>`` with no partner     kept as it was sent
half of a UTF-16 surrogate pair      U+FFFD (the character that replaces what cannot be
                                     shown), so the text can always be encoded
===================================  ======================================================

``plain_text`` never raises, whatever it is given: the text comes from the network.
Nothing here calls Slack; a caller that can look names up cheaply passes ``user_names``
(``mentioned_users`` lists the ids it would be asked about).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

logger = logging.getLogger(__name__)

UserNames = Mapping[str, str] | Callable[[str], str | None]
"""Names of users by id: a mapping, or a function answering None when it does not know."""

# A token is what lies between a "<" and the next ">", with no "<" inside: Slack escapes
# every "<" and ">" a person types, so a raw one only ever opens or closes a token. Linear
# time whatever the input (no nested repetition).
_TOKEN = re.compile(r"<([^<>]*)>")
_ENTITY = re.compile(r"&(amp|lt|gt);")
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_USER_ID = re.compile(r"[UW][A-Z0-9]{1,40}")
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{1,40}")
_GROUP_ID = re.compile(r"S[A-Z0-9]{1,40}")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_SPECIAL = frozenset({"here", "channel", "everyone"})


def plain_text(text: object, *, user_names: UserNames | None = None) -> str:
    """``text`` as Slack sent it, as the person typed it (see the module's table).

    Example::

        plain_text("Tom &amp; Jerry &lt;3 <@U123>", user_names={"U123": "jerry"})
        # 'Tom & Jerry <3 @jerry (U123)'

    A non-string ``text`` gives ""; a ``user_names`` that raises counts as not knowing.
    """
    if not isinstance(text, str):
        return ""
    parts: list[str] = []
    end = 0
    for token in _TOKEN.finditer(text):
        parts.append(_unescape(text[end : token.start()]))
        parts.append(_render_token(token.group(1), user_names))
        end = token.end()
    parts.append(_unescape(text[end:]))
    return _SURROGATE.sub("\ufffd", "".join(parts))


def mentioned_users(text: object) -> list[str]:
    """The ids of users mentioned in ``text`` without a name in the token (``<@U123>``),
    once each, in order: the ones ``plain_text`` would ask ``user_names`` about."""
    if not isinstance(text, str):
        return []
    found: dict[str, None] = {}
    for token in _TOKEN.finditer(text):
        target, _, label = token.group(1).partition("|")
        user = target[1:]
        if target.startswith("@") and _USER_ID.fullmatch(user) and not label.strip("@ "):
            found[user] = None
    return list(found)


def _unescape(text: str) -> str:
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(1)], text)


def _render_token(content: str, user_names: UserNames | None) -> str:
    target, _, label = content.partition("|")
    target, label = _unescape(target), _unescape(label)
    rendered: str | None = None
    if target.startswith("@"):
        rendered = _user(target[1:], label, user_names)
    elif target.startswith("#"):
        channel = target[1:]
        if _CHANNEL_ID.fullmatch(channel):
            rendered = f"#{label.lstrip('#') or channel}"
    elif target.startswith("!"):
        rendered = _special(target[1:], label)
    elif _SCHEME.match(target):
        rendered = _link(target, label)
    # Not a token Slack writes: give back what was sent, as text.
    return rendered if rendered is not None else f"<{_unescape(content)}>"


def _user(user: str, label: str, user_names: UserNames | None) -> str | None:
    if not _USER_ID.fullmatch(user):
        return None
    name = label.strip().lstrip("@") or _name_of(user, user_names)
    return f"@{name} ({user})" if name and name != user else f"@{user}"


def _name_of(user: str, user_names: UserNames | None) -> str:
    if user_names is None:
        return ""
    try:
        name = user_names.get(user) if isinstance(user_names, Mapping) else user_names(user)
    except Exception:  # a name is a nicety: the id alone still says who was meant
        logger.warning("no name for mentioned user %s", user, exc_info=True)
        return ""
    return name.strip().lstrip("@") if isinstance(name, str) else ""


def _special(command: str, label: str) -> str | None:
    if command in _SPECIAL:
        return f"@{command}"
    kind, _, argument = command.partition("^")
    if kind == "subteam" and _GROUP_ID.fullmatch(argument):
        return f"@{label.strip().lstrip('@') or argument}"
    if kind == "date" and argument:
        return label or _date(argument.partition("^")[0])
    return label or None


def _date(stamp: str) -> str | None:
    try:
        moment = datetime.fromtimestamp(int(stamp), UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _link(url: str, label: str) -> str:
    if url.lower().startswith("mailto:"):
        address = url[len("mailto:") :]
        return address if label in ("", address, url) else f"{label} ({address})"
    bare = url.rstrip("/")
    without_scheme = bare.split("://", 1)[-1]
    if label.rstrip("/") in ("", bare, without_scheme):
        return url
    return f"{label} ({url})"
