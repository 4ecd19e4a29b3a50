"""The mention helpers: the only place the bot writes ``<@U…>``, ``<#C…>`` and
``<!subteam^S…>``, and only for values of the shape of an id; anything else (a record
stored before requests were checked, a name) comes out as escaped, shortened text."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.mrkdwn import channel_mention, is_conversation_id, is_usergroup, mention, reviewer_mention

NOT_IDS = [
    "S1> <!channel> <https://evil|x>",
    "bob",
    "U1",  # too short
    "C1",
    "S1",
    "u0alice",  # lowercase
    "U0ALICE\n",
    "Ué0",  # letters, but not ASCII capitals
    "CÉ0",
    "U٣٣",  # digits, but not ASCII ones
    "<#C0123>",
    "",
    "U" + "0" * 32,  # 33 characters
]


@pytest.mark.parametrize(
    ("helper", "value", "shown"),
    [
        (mention, "U0ALICE", "<@U0ALICE>"),
        (mention, "W0GRID", "<@W0GRID>"),
        (reviewer_mention, "U0ALICE", "<@U0ALICE>"),
        (reviewer_mention, "S0FINANCE", "<!subteam^S0FINANCE>"),
        (channel_mention, "C0OPS", "<#C0OPS>"),
        (channel_mention, "G0PRIVATE", "<#G0PRIVATE>"),
        (channel_mention, "D0DIRECT", "<#D0DIRECT>"),
        (mention, "U" + "0" * 31, f"<@U{'0' * 31}>"),  # 32 characters, the longest
    ],
)
def test_an_id_becomes_a_mention(helper: Callable[[str], str], value: str, shown: str) -> None:
    assert helper(value) == shown


@pytest.mark.parametrize("value", NOT_IDS)
def test_anything_else_is_shown_as_escaped_text(value: str) -> None:
    shown = [mention(value), reviewer_mention(value), channel_mention(value)]

    for text in shown:
        assert "<" not in text and ">" not in text, text
    assert channel_mention(value).startswith("#")
    assert not is_usergroup(value) and not is_conversation_id(value)


def test_a_hostile_name_keeps_its_characters_escaped_and_is_shortened() -> None:
    assert mention("S1> <!channel>") == "S1&gt; &lt;!channel&gt;"
    assert channel_mention("#general & co") == "##general &amp; co"
    assert len(reviewer_mention("x" * 10_000)) <= 80


ID = re.compile(r"[UW][A-Z0-9]{2,31}|S[A-Z0-9]{2,31}|[CGD][A-Z0-9]{2,31}")


_near_ids = st.builds(str.__add__, st.sampled_from("UWSCGD"), st.text(max_size=4))
"""An id's first letter and anything after it: too short, lowercase, other scripts' letters
and digits, punctuation."""


@settings(max_examples=300, deadline=None, database=None)
@given(value=st.text(max_size=60) | _near_ids | st.from_regex(ID, fullmatch=True))
def test_no_text_but_an_id_ever_becomes_a_token(value: str) -> None:
    for helper in (mention, reviewer_mention, channel_mention):
        shown = helper(value)
        if "<" in shown:
            # A token, and then only the mention of an id exactly as given.
            assert ID.fullmatch(value), (value, shown)
            tokens = (f"<@{value}>", f"<!subteam^{value}>", f"<#{value}>", f"DM with <@{value}>")
            assert shown in tokens
        else:
            assert ">" not in shown
