"""The shape of the Slack ids a handoff names: conversations, people and user groups.

A handoff's routing fields (``channel``, ``reviewers``, ``escalate_to``) are posted to and
mentioned in Slack (``<#C…>``, ``<@U…>``, ``<!subteam^S…>``), so anything but an id could
ping a whole channel or slip in a link. They are checked here when a request is made, when
the settings are read and when an admin command names them; the Slack side's mention helpers
(``bot.mrkdwn``) test the same shapes before they emit a mention, for records stored before
the check. Stored handoffs are never checked on read: an old record still loads.

Slack ids are a capital letter saying what they name, then capitals and digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

MAX_ID_LENGTH = 32
"""The longest id taken (Slack's are 9 to 11 characters today; room to grow, no more)."""

_REST = rf"[A-Z0-9]{{2,{MAX_ID_LENGTH - 1}}}"
CHANNEL_ID = re.compile(rf"[CGD]{_REST}")
"""A conversation: a public channel (C…), a private one (G…) or a direct message (D…)."""
USER_ID = re.compile(rf"[UW]{_REST}")
"""A person (U…, or W… in an Enterprise Grid)."""
USERGROUP_ID = re.compile(rf"S{_REST}")
"""A user group (S…)."""

ID_FORM = f"a capital letter, then 2 to {MAX_ID_LENGTH - 1} capitals or digits"
"""How a Slack id looks, said in each refusal."""
_SHOWN = 40  # of a refused value in an error: enough to recognise it, not a whole document


_MENTION = re.compile(r"<@([A-Za-z0-9]+)(?:\|[^>]*)?>")


def plain_person(value: str) -> str:
    """Who a decision names, without Slack's mention syntax: ``<@U123>`` and
    ``<@U123|ann>`` are ``U123``; surrounding spaces go. Anything else is kept as it is
    (a name, an email): votes and the requester are then compared regardless of case."""
    value = value.strip()
    mention = _MENTION.fullmatch(value)
    return mention.group(1) if mention else value


def is_channel_id(value: object) -> bool:
    """Whether ``value`` is a conversation id (``C…``, ``G…``, ``D…``)."""
    return isinstance(value, str) and CHANNEL_ID.fullmatch(value) is not None


def is_user_id(value: object) -> bool:
    """Whether ``value`` is a person's id (``U…``, ``W…``)."""
    return isinstance(value, str) and USER_ID.fullmatch(value) is not None


def reassigned_channel(
    current: str | None, channel: str | None, reviewers: Sequence[str]
) -> str | None:
    """Where a reassigned handoff is posted: ``channel`` when given; else, for a handoff
    in a person's DM given to one other person, that person's DM (the other person could
    not see it in the first one); else None, where it was."""
    if channel is not None:
        return channel
    people = [r for r in reviewers if is_user_id(r)]
    if current and is_user_id(current) and len(people) == 1:
        return people[0]
    return None


def is_usergroup_id(value: object) -> bool:
    """Whether ``value`` is a user group's id (``S…``)."""
    return isinstance(value, str) and USERGROUP_ID.fullmatch(value) is not None


def is_reviewer_id(value: object) -> bool:
    """Whether ``value`` may be a reviewer: a person's or a user group's id."""
    return is_user_id(value) or is_usergroup_id(value)


def is_destination(value: object) -> bool:
    """Whether ``value`` may be where a handoff is posted: a conversation id, or a person's
    id (posted in their DM with the bot; the Slack side opens it)."""
    return is_channel_id(value) or is_user_id(value)


def is_escalation_target(value: object) -> bool:
    """Whether ``value`` may be an escalation target: a conversation or a user group id."""
    return is_channel_id(value) or is_usergroup_id(value)


@dataclass(frozen=True)
class IdKind:
    """What a field or setting holds, and how its refusal reads, e.g. "'bob' is not a Slack
    user id (U…/W…) or user-group id (S…), such as U0123ABCD or S0123ABCD (...)"."""

    what: str
    """What the value should be, e.g. "a Slack channel id (C…/G…/D…)"."""
    example: str
    accepts: Callable[[object], bool]

    def refusal(self, value: object) -> str | None:
        """Why ``value`` is not an id of this kind, or None when it is one."""
        if self.accepts(value):
            return None
        shown = repr(value)
        shown = shown if len(shown) <= _SHOWN else shown[:_SHOWN] + "…"
        return f"{shown} is not {self.what}, such as {self.example} ({ID_FORM})"

    def first_refusal(self, values: Iterable[object]) -> str | None:
        """The refusal of the first of ``values`` that is not an id of this kind."""
        return next(filter(None, map(self.refusal, values)), None)


_USERGROUP = "user-group id (S…)"
CHANNEL = IdKind("a Slack channel id (C…/G…/D…)", "C0123ABCD", is_channel_id)
USER = IdKind("a Slack user id (U…/W…)", "U0123ABCD", is_user_id)
DESTINATION = IdKind(
    f"{CHANNEL.what} or user id (U…/W…, for their DM with the bot)",
    "C0123ABCD or U0123ABCD",
    is_destination,
)
"""Where a handoff is posted: a conversation, or a person (in their DM)."""
REVIEWER = IdKind(f"{USER.what} or {_USERGROUP}", "U0123ABCD or S0123ABCD", is_reviewer_id)
"""A reviewer: a person or a user group."""
ESCALATION_TARGET = IdKind(
    f"{CHANNEL.what} or {_USERGROUP}", "C0123ABCD or S0123ABCD", is_escalation_target
)
"""Where a handoff is escalated: a channel (a copy is posted there) or a user group (called
in the message's thread)."""


def parse_id_list(text: str) -> list[str]:
    """A comma-separated list of ids (a setting), blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]
