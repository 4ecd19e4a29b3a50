"""What `handoff dev` shows and reads in the terminal: the bot's messages and the reviewer's
choices.

Kept apart from ``bot.dev.run`` (which starts and stops the processes) because it changes for
other reasons: it is the terminal's twin of the browser workbench. Messages are rendered the way
the workbench renders them (``bot/standin/static/workbench.js``): Slack's raw tokens (``<@U…>``,
``<#C…>``, ``<!date^…>``, ``:emoji:``, ``&lt;`` escapes) become a person's name, a channel's
name, a local time and the emoji, with the names the stand-in's workspace knows. A reviewer
deciding here acts through the stand-in exactly as a click in the workbench would.
"""

from __future__ import annotations

import json
import re
import select
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

import click

from bot.blockkit import ids
from bot.standin import Message, SlackStandIn, View
from store.models import Handoff, RequestType
from worker.client import Handoffs

EMOJI = {
    "white_check_mark": "✅",
    "heavy_check_mark": "✔️",
    "no_entry_sign": "🚫",
    "no_entry": "⛔",
    "speech_balloon": "💬",
    "hourglass": "⌛",
    "hourglass_flowing_sand": "⏳",
    "wastebasket": "🗑️",
    "bell": "🔔",
    "rotating_light": "🚨",
    "raising_hand": "🙋",
    "arrow_right": "➡️",
    "tada": "🎉",
    "repeat": "🔁",
    "warning": "⚠️",
    "x": "❌",
    "eyes": "👀",
    "memo": "📝",
    "robot_face": "🤖",
    "+1": "👍",
    "thumbsup": "👍",
    "-1": "👎",
    "thumbsdown": "👎",
    "information_source": "\u2139\ufe0f",
    "question": "❓",
    "exclamation": "❗",
    "mag": "🔍",
    "bar_chart": "📊",
    "stopwatch": "⏱️",
    "zap": "⚡",
    "fire": "🔥",
    "sparkles": "✨",
    "pencil2": "✏️",
    "link": "🔗",
    "lock": "🔒",
    "calendar": "📅",
    "inbox_tray": "📥",
    "outbox_tray": "📤",
    "bust_in_silhouette": "👤",
    "busts_in_silhouette": "👥",
    "gear": "⚙️",
    "page_facing_up": "📄",
    "clipboard": "📋",
    "hammer_and_wrench": "🛠️",
    "wave": "👋",
    "large_green_circle": "🟢",
    "red_circle": "🔴",
    "large_yellow_circle": "🟡",
    "smile": "😄",
}
"""The workbench's emoji table (``EMOJI`` in workbench.js; a test keeps the two alike), so the
terminal and the browser show the same characters; other names stay ``:name:``."""

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

# ANSI styles closed with their own "off" code rather than a full reset, so a bold word in a
# dimmed context line does not end the dimming of the rest of the line. click.echo strips
# them all when the output is not a terminal.
_BOLD = ("\x1b[1m", "\x1b[22m")
_ITALIC = ("\x1b[3m", "\x1b[23m")
_STRIKE = ("\x1b[9m", "\x1b[29m")
_CODE = ("\x1b[36m", "\x1b[39m")
_DIM = "\x1b[2m"


@dataclass(frozen=True)
class Names:
    """Who and what the ids in a message stand for: the workspace's people, channels and user
    groups (id -> name), as the workbench page gets them."""

    users: Mapping[str, str] = field(default_factory=dict)
    channels: Mapping[str, str] = field(default_factory=dict)
    usergroups: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, standin: SlackStandIn, viewer: str) -> Names:
        """The names ``viewer`` sees in the stand-in's workspace (the workbench's own state)."""
        state = standin.workbench.state(viewer)
        return cls(
            users={u["id"]: u["name"] for u in state["users"]},
            channels={c["id"]: c["name"] for c in state["channels"]},
            usergroups=dict(state["usergroups"]),
        )

    def user(self, user_id: str) -> str:
        return self.users.get(user_id, user_id)

    def channel(self, channel_id: str) -> str:
        return self.channels.get(channel_id, channel_id.lower())


@dataclass(frozen=True)
class _Clock:
    """The reader's time zone and "now", for dates: the local ones unless a test fixes them."""

    tz: tzinfo | None = None
    now: datetime | None = None

    def local(self, epoch: float) -> datetime:
        return datetime.fromtimestamp(epoch, self.tz) if self.tz else datetime.fromtimestamp(epoch)

    def today(self) -> datetime:
        if self.now is not None:
            return self.now.astimezone(self.tz) if self.tz else self.now.astimezone()
        return datetime.now(self.tz) if self.tz else datetime.now()


def render_text(
    blocks: list[dict[str, Any]],
    names: Names | None = None,
    *,
    tz: tzinfo | None = None,
    now: datetime | None = None,
) -> str:
    """A terminal rendering of Block Kit: headers, sections, fields, context and buttons.

    Text is rendered as the workbench renders it (see ``mrkdwn``); ``tz`` and ``now`` default
    to the machine's local time zone and clock.
    """
    names = names or Names()
    clock = _Clock(tz, now)
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            lines.append(_styled(_BOLD, _text(block.get("text"), names, clock)))
        elif kind == "section":
            if block.get("text"):
                lines.append(_text(block["text"], names, clock))
            for item in block.get("fields", []):
                lines.append("  " + _text(item, names, clock).replace("\n", ": ", 1))
        elif kind == "context":
            shown = [_element_text(e, names, clock) for e in block.get("elements", [])]
            lines.append(_dimmed(" ".join(s for s in shown if s)))
        elif kind == "actions":
            buttons = [
                f"[{_text(e.get('text'), names, clock)}]"
                for e in block.get("elements", [])
                if e.get("type") == "button"
            ]
            lines.append(" ".join(buttons))
        elif kind == "divider":
            lines.append("-" * 40)
        elif kind in ("image", "input", "rich_text", "file", "video"):
            # Shown as a stand-in rather than dropped, as the workbench does.
            lines.append(_dimmed(f"[{kind}]"))
    return "\n".join(lines) + "\n"


def mrkdwn(
    text: str,
    names: Names | None = None,
    *,
    tz: tzinfo | None = None,
    now: datetime | None = None,
) -> str:
    """Slack mrkdwn for the terminal: mentions, channels, dates, links, emoji and escapes
    resolved, *bold*, _italic_, ~strike~ and `code` styled, ``>`` quotes and ``` blocks kept
    apart (the workbench's ``mrkdwn()``)."""
    return _mrkdwn(text, names or Names(), _Clock(tz, now))


def _mrkdwn(text: str, names: Names, clock: _Clock) -> str:
    lines = _printable(str(text)).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            rest = "\n".join([line[3:], *lines[i + 1 :]])
            end = rest.find("```")
            if end >= 0:
                # A preformatted block is shown as typed: no tokens resolved inside it.
                out.extend("    " + row for row in _unslack(rest[:end]).split("\n"))
                consumed = rest[: end + 3].count("\n")
                after = rest[end + 3 :].split("\n")[0]
                i += consumed + 1
                if after.strip():
                    out.append(_inline(after, names, clock))
                continue
        if line.startswith(">"):
            out.append(_dimmed("│ ") + _inline(line[1:].removeprefix(" "), names, clock))
            i += 1
            continue
        out.append(_inline(line, names, clock))
        i += 1
    return "\n".join(out)


_CODE_SPAN = re.compile(r"`([^`]+)`")
_CONTROL = re.compile(r"<([^<>\s][^<>]*)>")
_SLOT = re.compile(r"\x00(\d+)\x00")
_EMOJI_NAME = re.compile(r":([a-z0-9_+-]+):")
_EMPHASIS = [
    (re.compile(r"(^|[^\w*])\*(?!\s)([^*]+?)\*(?!\w)"), _BOLD),
    (re.compile(r"(^|[^\w_])_(?!\s)([^_]+?)_(?!\w)"), _ITALIC),
    (re.compile(r"(^|[^\w~])~(?!\s)([^~]+?)~(?!\w)"), _STRIKE),
]


def _inline(text: str, names: Names, clock: _Clock) -> str:
    """One line: code spans and control sequences first (their insides are not formatted),
    then the escapes, emphasis and emoji of what is left, as the workbench's ``inline()``."""
    slots: list[str] = []

    def keep(shown: str) -> str:
        slots.append(shown)
        return f"\x00{len(slots) - 1}\x00"

    out = _CODE_SPAN.sub(lambda m: keep(_styled(_CODE, _unslack(m[1]))), text)
    out = _CONTROL.sub(lambda m: keep(_control_sequence(m[1], names, clock)), out)
    out = _unslack(out)
    for pattern, style in _EMPHASIS:
        out = pattern.sub(_emphasis(style), out)
    out = _emojify(out)
    return _SLOT.sub(lambda m: slots[int(m[1])], out)


def _emphasis(style: tuple[str, str]) -> Callable[[re.Match[str]], str]:
    return lambda m: m[1] + _styled(style, m[2])


def _control_sequence(inner: str, names: Names, clock: _Clock) -> str:
    """A ``<…>`` sequence: a mention, a channel, a user group, a date, @here and the like, or
    a link."""
    target, bar, label = inner.partition("|")
    label = _unslack(label) if bar else ""
    if target.startswith("@"):
        return "@" + (label or names.user(target[1:]))
    if target.startswith("#"):
        return "#" + (label or names.channel(target[1:]))
    if target.startswith("!subteam^"):
        group = target.removeprefix("!subteam^")
        return "@" + (label.removeprefix("@") or names.usergroups.get(group, group))
    if target.startswith("!date^"):
        return _slack_date(target, label, clock)
    if target.startswith("!"):
        return "@" + (label or target[1:].split("^")[0])
    if re.match(r"(https?:|mailto:)", target, re.IGNORECASE):
        href = _unslack(target)
        # No link to click in a terminal: show where it goes beside its label.
        return f"{label} ({href})" if label and label != href else href
    return _unslack(f"<{inner}>")


def _slack_date(target: str, fallback: str, clock: _Clock) -> str:
    """``<!date^epoch^format^link|fallback>`` in the reader's local time, like Slack."""
    parts = target.split("^")
    epoch = parts[1] if len(parts) > 1 else ""
    template = parts[2] if len(parts) > 2 else "{date}"
    link = parts[3] if len(parts) > 3 else ""
    try:
        moment = clock.local(float(epoch))
    except (ValueError, OverflowError, OSError):
        return fallback
    shown = re.sub(r"\{(\w+)\}", lambda m: _date_token(moment, m[1], clock) or m[0], template)
    return f"{shown} ({link})" if link else shown


def _date_token(moment: datetime, token: str, clock: _Clock) -> str | None:
    """One token of Slack's date formatting (the workbench's ``dateToken``)."""
    month = _MONTHS[moment.month - 1]
    long = f"{month} {_ordinal(moment.day)}, {moment.year}"
    short = f"{month[:3]} {moment.day}, {moment.year}"
    full = f"{_DAYS[moment.weekday()]}, {long}"
    if token == "date_num":
        return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
    if token in ("date", "date_short", "date_long"):
        return {"date": long, "date_short": short, "date_long": full}[token]
    if token in ("date_pretty", "date_short_pretty", "date_long_pretty"):
        plain = {"date_pretty": long, "date_short_pretty": short, "date_long_pretty": full}
        return _pretty_day(moment, clock) or plain[token]
    if token == "time":
        return _clock_time(moment, seconds=False)
    if token == "time_secs":
        return _clock_time(moment, seconds=True)
    if token == "ago":
        return _ago(moment, clock)
    return None


def _ordinal(n: int) -> str:
    if 11 <= n % 100 <= 13:
        return f"{n}th"
    return f"{n}" + {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _clock_time(moment: datetime, *, seconds: bool) -> str:
    secs = f":{moment.second:02d}" if seconds else ""
    noon = "AM" if moment.hour < 12 else "PM"
    return f"{moment.hour % 12 or 12}:{moment.minute:02d}{secs} {noon}"


def _pretty_day(moment: datetime, clock: _Clock) -> str | None:
    diff = (moment.date() - clock.today().date()).days
    return {0: "today", -1: "yesterday", 1: "tomorrow"}.get(diff)


def _ago(moment: datetime, clock: _Clock) -> str:
    seconds = round((clock.today() - moment).total_seconds())
    count = abs(seconds)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if count >= size or unit == "second":
            count //= size
            break
    phrase = f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{phrase} ago" if seconds >= 0 else f"in {phrase}"


def _emojify(text: str) -> str:
    return _EMOJI_NAME.sub(lambda m: EMOJI.get(m[1], m[0]), text)


_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """``text`` without terminal control characters (escape sequences, carriage returns):
    agent text must not draw fake links (OSC 8), move the cursor or overwrite a line. Only
    the styles this module adds reach the terminal."""
    return _TERMINAL_CONTROLS.sub("", text)


def _unslack(text: str) -> str:
    """Slack escapes &, < and > in message text; the terminal shows them as typed."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _text(obj: Any, names: Names, clock: _Clock) -> str:
    """A Block Kit text object: mrkdwn rendered, plain_text with its emoji (unless off)."""
    if not obj:
        return ""
    if isinstance(obj, str):
        return obj
    text = str(obj.get("text", ""))
    if obj.get("type") == "mrkdwn":
        return _mrkdwn(text, names, clock)
    text = _printable(text)
    return text if obj.get("emoji") is False else _emojify(text)


def _element_text(element: Mapping[str, Any], names: Names, clock: _Clock) -> str:
    if element.get("type") in ("mrkdwn", "plain_text"):
        return _text(element, names, clock)
    if element.get("type") == "image":
        return f"[{element.get('alt_text') or 'image'}]"
    return ""


def _styled(style: tuple[str, str], text: str) -> str:
    return f"{style[0]}{text}{style[1]}"


def _dimmed(text: str) -> str:
    # Bold's "off" code also ends dim (both are intensity), so dim is set again after it.
    return _DIM + text.replace(_BOLD[1], _BOLD[1] + _DIM) + "\x1b[22m"


# Deciding as the reviewer --------------------------------------------------------------------


def auto_choice(handoff: Handoff) -> str:
    """What ``--auto`` decides: approve an approval, pick the first choice of a question."""
    if handoff.request_type is RequestType.APPROVAL:
        return "a"
    return (getattr(handoff.payload, "choices", None) or [""])[0]


def decide_interactively(
    standin: SlackStandIn, handoffs: Handoffs, handoff: Handoff, message: Message, *, user: str
) -> None:
    """Wait for a decision in the workbench, or take one typed in the terminal."""
    if handoff.request_type is RequestType.APPROVAL:
        prompt = "Click a button in the workbench, or type [a]pprove, [r]eject or [e]dit"
        choices: list[str] | None = ["a", "r", "e"]
        default = "a"
    else:
        prompt = "Reply in the message's thread in the workbench, or type your answer"
        choices = None
        default = auto_choice(handoff)
    choice = _browser_or_terminal(handoffs, handoff.id, prompt, choices, default)
    if choice is None:
        decided = handoffs.get(handoff.id)
        who = decided.resume_data.decided_by if decided.resume_data else "someone"
        who = Names.of(standin, user).user(who)
        click.secho(f"-> {decided.status.value} by {who} in the workbench\n", fg="green")
        return
    decide(standin, handoffs, handoff, message, choice=choice, user=user)


def _browser_or_terminal(
    handoffs: Handoffs, handoff_id: str, prompt: str, choices: list[str] | None, default: str
) -> str | None:
    """A line typed in the terminal, or None as soon as the handoff is decided elsewhere.

    ``click.prompt`` would block on the terminal while a click in the browser decides the
    handoff, so this watches both: stdin (a tty here: ``--auto`` is forced otherwise) and the
    handoff's state.
    """
    click.echo(f"{prompt} [{default}]: ", nl=False)
    while True:
        if not handoffs.get(handoff_id).is_pending:
            click.echo()
            return None
        readable, _, _ = select.select([sys.stdin], [], [], 0.2)
        if not readable:
            continue
        line = sys.stdin.readline()
        if not line:  # end of input: nobody is typing, so only the workbench can decide
            while handoffs.get(handoff_id).is_pending:
                time.sleep(0.2)
            return None
        typed = line.strip() or default
        if choices is None or typed in choices:
            return typed
        click.echo(f"Type one of {', '.join(choices)} [{default}]: ", nl=False)


def decide(
    standin: SlackStandIn,
    handoffs: Handoffs,
    handoff: Handoff,
    message: Message,
    *,
    choice: str,
    user: str,
) -> None:
    """Act as ``user``: ``choice`` is a/r/e for an approval, the answer otherwise."""
    if handoff.request_type is RequestType.APPROVAL:
        if choice == "a":
            standin.click(user, message, ids.APPROVE)
        elif choice == "r":
            standin.click(user, message, ids.REJECT)
            reason = click.prompt("Reason", default="Not without a manager's OK")
            standin.submit_view(
                user, _modal(standin, user), {ids.REASON_BLOCK: {ids.VALUE: reason}}
            )
        else:
            _edit(standin, handoff, message, user)
    else:
        standin.post_message(user, message.channel, choice, thread_ts=message.ts)
    decided = handoffs.get(handoff.id)
    click.secho(f"-> {decided.status.value}\n", fg="green" if not decided.is_pending else "red")


def _edit(standin: SlackStandIn, handoff: Handoff, message: Message, user: str) -> None:
    standin.click(user, message, ids.EDIT)
    modal = _modal(standin, user)
    args = handoff.payload.action.args  # type: ignore[union-attr]
    while True:
        values = {}
        for name, value in args.items():
            shown = value if isinstance(value, str) else json.dumps(value)
            typed = click.prompt(f"  {name}", default=shown)
            values[ids.arg_block_id(name)] = {ids.VALUE: typed}
        response = standin.submit_view(user, modal, values)
        errors = response.json().get("errors") if response.body else None
        if not errors:
            return
        for block_id, error in errors.items():
            click.secho(f"  {block_id}: {error}", fg="red")


def _modal(standin: SlackStandIn, user: str) -> View:
    open_views = [v for v in standin.views(user) if not v.closed]
    return open_views[-1]


def resumed_line(report: Mapping[str, Any]) -> str:
    """What the demo's resumed run reports it received (the decider as the id the run got)."""
    details = ""
    if report.get("answer"):
        details = f", answer: {report['answer']}"
    elif report.get("comment"):
        details = f", reason: {report['comment']}"
    elif report.get("edited_args"):
        details = f", edited args: {json.dumps(report['edited_args'])}"
    return (
        f"Run {report['run_id']} resumed: {report['request_type']} {report['status']} "
        f"by {report['decided_by']}{details} (attempt {report['attempt']})"
    )
