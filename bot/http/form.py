"""Decoding Slack's URL-encoded form bodies quickly.

An interaction arrives as ``payload=<the JSON, percent-encoded>``: a click on a handoff
message is a few kilobytes with hundreds of ``%XX`` escapes, and ``urllib.parse.parse_qsl``
decodes those one at a time in Python (about a sixth of ``handoff serve``'s time per
click). ``parse_form`` gives exactly what ``parse_qsl(text, keep_blank_values=True)``
gives, decoding the escapes with the ``unicode_escape`` codec (C) instead; any text that
codec cannot take as-is (a stray ``%``, an escape that is not UTF-8) goes to ``parse_qsl``
itself, so the result never differs.
"""

from __future__ import annotations

from urllib.parse import parse_qsl


def parse_form(text: str) -> list[tuple[str, str]]:
    """The fields of a URL-encoded form, as ``parse_qsl(text, keep_blank_values=True)``.

    Example::

        parse_form("payload=%7B%22type%22%3A+%22block_actions%22%7D")
        # [("payload", '{"type": "block_actions"}')]
    """
    try:
        fields = []
        for field in text.split("&"):
            if field:
                name, _, value = field.partition("=")
                fields.append((_unquote_plus(name), _unquote_plus(value)))
        return fields
    except UnicodeError:
        return parse_qsl(text, keep_blank_values=True)


def _unquote_plus(text: str) -> str:
    """``urllib.parse.unquote_plus`` for well-formed input; raises ``UnicodeError`` on
    anything else (a ``%`` not followed by two hex digits, escapes that are not UTF-8).

    Each ``%`` becomes ``\\x`` (backslashes already in the text are doubled first, so they
    stay themselves), ``unicode_escape`` turns every ``\\xHH`` into the code point HH, and
    Latin-1 maps those back to the bytes they stand for, which are then read as UTF-8.
    """
    if "%" not in text and "+" not in text:
        return text
    escaped = text.replace("+", " ").encode().replace(b"\\", b"\\\\").replace(b"%", b"\\x")
    return escaped.decode("unicode_escape").encode("latin-1").decode()
