"""What the agent receives for text Slack sends (bot/received_text.py): what the person typed."""

from __future__ import annotations

import random
import time

import pytest

from bot.received_text import mentioned_users, plain_text

NAMES = {"U123": "jerry", "W42": "ann"}


@pytest.mark.parametrize(
    ("received", "typed"),
    [
        ("Tom &amp; Jerry &lt;3 <@U123>", "Tom & Jerry <3 @jerry (U123)"),
        ("a &gt; b &amp;&amp; c", "a > b && c"),
        ("&amp;lt;b&amp;gt;", "&lt;b&gt;"),  # typed "&lt;b&gt;": unescaped once only
        ("&amp;copy; &quot; &#39;", "&copy; &quot; &#39;"),  # Slack escapes only three
        ("<@U123|jerry>", "@jerry (U123)"),
        ("<@U123|@jerry>", "@jerry (U123)"),
        ("<@U999>", "@U999"),  # a name nobody knows: the id
        ("<@U999|>", "@U999"),
        ("<@W42>", "@ann (W42)"),
        ("<#C123|general>", "#general"),
        ("<#C123>", "#C123"),
        ("<#C123|>", "#C123"),
        ("<!here> <!channel> <!everyone>", "@here @channel @everyone"),
        ("<!here|@here>", "@here"),
        ("<!subteam^S123|@team>", "@team"),
        ("<!subteam^S123>", "@S123"),
        ("<!date^1392734382^{date_pretty}|Feb 18th>", "Feb 18th"),
        ("<!date^1392734382^{date_pretty}^https://x.y|Feb 18th>", "Feb 18th"),
        ("<!date^1392734382^{date_short}>", "2014-02-18 14:39 UTC"),
        ("<https://x.y|the docs>", "the docs (https://x.y)"),
        ("<https://x.y>", "https://x.y"),
        ("<https://x.y|https://x.y>", "https://x.y"),
        ("<http://x.y/|x.y>", "http://x.y/"),  # typed "x.y": Slack added the scheme
        ("<https://x.y/a?b=1&amp;c=2>", "https://x.y/a?b=1&c=2"),
        ("<https://x.y|Tom &amp; Jerry>", "Tom & Jerry (https://x.y)"),
        ("<mailto:a@b.c|a@b.c>", "a@b.c"),
        ("<mailto:a@b.c>", "a@b.c"),
        ("<mailto:a@b.c|Ann>", "Ann (a@b.c)"),
        ("<!unknown|as text>", "as text"),
    ],
)
def test_received_text_becomes_what_the_person_typed(received: str, typed: str) -> None:
    assert plain_text(received, user_names=NAMES) == typed


def test_an_escaped_token_stays_text_and_never_becomes_a_mention() -> None:
    assert plain_text("&lt;@U123&gt; &lt;!here&gt;", user_names=NAMES) == "<@U123> <!here>"


@pytest.mark.parametrize(
    "received",
    [
        "<",
        ">",
        "a < b",
        "<@U123",
        "@U123>",
        "<>",
        "<|>",
        "<@>",
        "<#>",
        "<!>",
        "<@u123>",  # not an id
        "<not a link>",
        "<!date^not-a-time^{date}>",
        "<!date^99999999999999999999^{date}>",
        "<!subteam^>",
        "<&amp;>",
    ],
)
def test_malformed_input_is_kept_as_sent_unescaped(received: str) -> None:
    out = plain_text(received, user_names=NAMES)
    assert out == received.replace("&amp;", "&")


def test_a_mention_next_to_a_stray_bracket_is_still_read() -> None:
    assert plain_text("<<@U123>>", user_names=NAMES) == "<@jerry (U123)>"


def test_half_a_surrogate_pair_becomes_a_replacement_character() -> None:
    out = plain_text("eu \ud83d <@U123|\udc00x>")
    assert out == "eu \ufffd @\ufffdx (U123)"
    out.encode("utf-8")  # always encodable


@pytest.mark.parametrize("value", [None, 42, b"bytes", ["list"], {"text": "x"}])
def test_not_a_string_gives_nothing(value: object) -> None:
    assert plain_text(value) == ""
    assert mentioned_users(value) == []


def test_names_come_from_the_label_before_the_lookup() -> None:
    asked: list[str] = []

    def names(user: str) -> str | None:
        asked.append(user)
        return "someone-else"

    assert plain_text("<@U123|jerry> <@U7>", user_names=names) == (
        "@jerry (U123) @someone-else (U7)"
    )
    assert asked == ["U7"]


def test_a_failing_or_odd_name_lookup_falls_back_to_the_id() -> None:
    def broken(user: str) -> str | None:
        raise RuntimeError("Slack is down")

    assert plain_text("<@U123>", user_names=broken) == "@U123"
    assert plain_text("<@U123>", user_names=lambda u: None) == "@U123"
    assert plain_text("<@U123>", user_names=lambda u: 7) == "@U123"  # type: ignore[arg-type,return-value]
    assert plain_text("<@U123>", user_names=lambda u: "U123") == "@U123"


def test_mentioned_users_are_those_without_a_name_once_each_in_order() -> None:
    text = "<@U2> <@U1|ann> <@U3|> &lt;@U9&gt; <@U2> <@bad> <!here>"
    assert mentioned_users(text) == ["U2", "U3"]


def test_very_long_text_is_read_in_linear_time() -> None:
    hostile = "<" * 200_000 + "&amp;" * 100_000 + "<@U1" * 50_000 + "<@U1>" * 20_000
    started = time.monotonic()
    out = plain_text(hostile, user_names={"U1": "x"})
    assert time.monotonic() - started < 10  # quadratic on 1.3 M characters would take hours
    assert out.startswith("<" * 200_000 + "&" * 100_000)
    assert out.endswith("@x (U1)" * 20_000)


def test_random_input_never_raises() -> None:
    alphabet = ["<", ">", "|", "@", "#", "!", "^", "&", "amp;", "lt;", "U1", "a", " ", "\ud800"]
    rng = random.Random(17)
    for _ in range(3_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        out = plain_text(text, user_names={"U1": "x"})
        assert isinstance(out, str)
        out.encode("utf-8")
        mentioned_users(text)
