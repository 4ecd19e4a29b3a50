"""The grammar of the ``/handoff`` command: its text parsed into a ``Command``.

Parsing knows nothing of who asks or of the store; ``handlers.commands.run`` checks the
person and runs the command. Every problem is a ``UsageError`` whose message says what to
type instead, shown under the command's help.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from bot.queries.listings import ListFilter, ListKind
from store import slack_ids
from store.durations import InvalidDuration, parse_age
from store.exceptions import HandoffError
from store.ids import is_handoff_id
from store.models import RequestType

DEFAULT_STATS_WINDOW = timedelta(days=7)
"""The window of ``stats`` when none is given."""
MAX_STATS_WINDOW = timedelta(days=366)
"""The longest window ``stats`` reads (it reads the audit of its whole window)."""


def _target(escaped: str, bare: str, ids: re.Pattern[str]) -> re.Pattern[str]:
    # Slack's escaped form (``<#C0123|name>``, as autocomplete sends it) or the bare id, with
    # the id of the shape the request model takes (store.slack_ids), so a reassignment
    # routes a handoff only where an agent could have.
    return re.compile(rf"^(?:{escaped}({ids.pattern})(?:\|[^>]*)?>|{bare}?({ids.pattern}))$")


_CHANNEL = _target("<#", "#", slack_ids.CHANNEL_ID)
_USER = _target("<@", "@", slack_ids.USER_ID)
_GROUP = _target(r"<!subteam\^", "@", slack_ids.USERGROUP_ID)


class UsageError(HandoffError, ValueError):
    """The command's text does not say something the bot understands; the message says why."""


@dataclass(frozen=True)
class Command:
    """A parsed ``/handoff`` command.

    Example: ``parse_command("cancel ho_01J... duplicate")`` is
    ``Command("cancel", handoff_id="ho_01J...", reason="duplicate")``.
    """

    name: str
    listing: ListFilter | None = None
    handoff_id: str | None = None
    reason: str | None = None
    channel: str | None = None
    reviewers: tuple[str, ...] = ()
    window: timedelta = DEFAULT_STATS_WINDOW


def parse_command(text: str) -> Command:
    """Parse the text after the command name; raises ``UsageError``."""
    words = text.split(maxsplit=1)
    if not words:
        return Command("help")
    name, rest = words[0].lower(), (words[1].strip() if len(words) > 1 else "")
    if name == "help":
        return Command("help")
    if name == "list":
        return Command("list", listing=_parse_listing(rest))
    if name in ("show", "cancel", "expire", "retry", "reassign", "redeliver"):
        parts = rest.split(maxsplit=1)
        if not parts:
            raise UsageError(f"`{name}` needs a handoff id, e.g. `{name} ho_01JD...`.")
        handoff_id, tail = _handoff_id(parts[0]), (parts[1].strip() if len(parts) > 1 else "")
        if name == "cancel":
            return Command(name, handoff_id=handoff_id, reason=tail or None)
        if name == "reassign":
            channel, reviewers = _parse_targets(tail)
            return Command(name, handoff_id=handoff_id, channel=channel, reviewers=reviewers)
        if name == "redeliver":
            return Command(name, handoff_id=handoff_id, channel=_parse_destination(tail))
        if tail:
            raise UsageError(f"`{name}` takes only a handoff id; I don't know what `{tail}` is.")
        return Command(name, handoff_id=handoff_id)
    if name == "stats":
        return Command("stats", window=_parse_window(rest) if rest else DEFAULT_STATS_WINDOW)
    raise UsageError(f"I don't know the subcommand `{words[0]}`.")


def _parse_listing(text: str) -> ListFilter:
    words = text.split(maxsplit=1)
    if not words or words[0].lower() == "pending":
        if len(words) > 1:
            raise UsageError(f"`list pending` takes nothing more; I don't know `{words[1]}`.")
        return ListFilter(ListKind.PENDING)
    first, rest = words[0], (words[1].strip() if len(words) > 1 else "")
    if first.lower() == "mine" and not rest:
        return ListFilter(ListKind.MINE)
    if first.lower() == "failed":
        if rest:
            raise UsageError(f"`list failed` takes nothing more; I don't know `{rest}`.")
        return ListFilter(ListKind.FAILED)
    if first.lower() == "run" and rest and len(rest.split()) == 1:
        return ListFilter(ListKind.RUN, rest)
    if first.lower() == "type" and rest:
        kind = rest.lower().removesuffix("s")
        if kind not in {t.value for t in RequestType}:
            known = ", ".join(t.value for t in RequestType)
            raise UsageError(f"`{rest}` is not a request type; use one of {known}.")
        return ListFilter(ListKind.TYPE, kind)
    channel = _CHANNEL.match(first)
    if channel and not rest:
        return ListFilter(ListKind.CHANNEL, channel.group(1) or channel.group(2))
    if first.startswith(("#", "<#")):
        raise UsageError(
            f"Slack did not turn `{first}` into a channel: pick the channel from the "
            "autocomplete list, or give its id (`#C0123ABCD`)."
        )
    raise UsageError(f"I can't list `{text}`.")


def _parse_targets(text: str) -> tuple[str | None, tuple[str, ...]]:
    if not text:
        raise UsageError("`reassign` needs where to: a #channel, an @person or an @group.")
    channel: str | None = None
    reviewers: list[str] = []
    for word in text.split():
        if found := _CHANNEL.match(word):
            if channel is not None:
                raise UsageError("A handoff can be reassigned to one channel at a time.")
            channel = found.group(1) or found.group(2)
        elif found := _USER.match(word) or _GROUP.match(word):
            reviewers.append(found.group(1) or found.group(2))
        else:
            raise UsageError(
                f"`{word}` is not a #channel, an @person or an @group that Slack resolved; "
                "pick it from the autocomplete list, or give its id (`#C0123ABCD`, "
                "`@U0123ABCD`, `@S0123ABCD`)."
            )
    return channel, tuple(dict.fromkeys(reviewers))


def _parse_destination(text: str) -> str | None:
    """Where ``redeliver`` posts the new handoff: a #channel, or an @person's DM (their id,
    as ``reassign`` takes it); None: where the old one was sent."""
    if not text:
        return None
    words = text.split()
    found = _CHANNEL.match(words[0]) or _USER.match(words[0])
    if len(words) > 1 or not found:
        raise UsageError(
            f"`redeliver` takes a handoff id and, optionally, one #channel or @person to post "
            f"it to; `{text}` is not one that Slack resolved: pick it from the autocomplete "
            "list, or give its id (`#C0123ABCD`, `@U0123ABCD`)."
        )
    return found.group(1) or found.group(2)


def _parse_window(text: str) -> timedelta:
    try:
        window = parse_age(text)
    except InvalidDuration:
        raise UsageError(
            f"`stats` takes a window such as `7d`, `24h` or `2w`, not `{text}`."
        ) from None
    if not timedelta(hours=1) <= window <= MAX_STATS_WINDOW:
        raise UsageError("The stats window must be between 1 hour and a year.")
    return window


def _handoff_id(word: str) -> str:
    if not is_handoff_id(word):
        raise UsageError(f"`{word}` is not a handoff id (they look like `ho_01JDZ3Q6T5...`).")
    return word
