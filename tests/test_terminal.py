"""The terminal view of `handoff dev`: Slack's tokens rendered as the browser workbench renders
them (bot/standin/static/workbench.js), not printed raw."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import click
import pytest

from bot.blockkit.message import render_message
from bot.dev.terminal import EMOJI, Names, mrkdwn, render_text
from bot.standin import SlackStandIn, StandInUser
from store.models import Handoff, RequestType, ResumeData, Status
from tests.conftest import ROOT

NAMES = Names(
    users={"U0DEVREVIEWER": "you", "U0DEVADMIN": "ada"},
    channels={"C0DEVAPPROVALS": "approvals"},
    usergroups={"S0FINANCE": "finance"},
)
# Two hours east of UTC: a time shown in UTC instead of the reader's zone is caught.
PARIS_SUMMER = timezone(timedelta(hours=2))
NOW = datetime(2026, 6, 10, 15, 0, tzinfo=UTC)
EPOCH = int(datetime(2026, 6, 10, 17, 59, 30, tzinfo=UTC).timestamp())  # 19:59:30 in the zone


def shown(text: str, *, now: datetime = NOW) -> str:
    """``text`` as the terminal shows it (read in PARIS_SUMMER at ``now``), without styles."""
    return click.unstyle(mrkdwn(text, NAMES, tz=PARIS_SUMMER, now=now))


# -- people, channels, groups ----------------------------------------------------------------


def test_a_user_mention_shows_the_persons_name() -> None:
    assert shown("Approved by <@U0DEVREVIEWER>") == "Approved by @you"
    assert shown("<@U0DEVADMIN|someone>") == "@someone"  # a label wins, as in Slack
    assert shown("<@U0NOBODY>") == "@U0NOBODY"  # unknown: the id, never dropped


def test_a_channel_reference_shows_the_channels_name() -> None:
    assert shown("Moved to <#C0DEVAPPROVALS>") == "Moved to #approvals"
    assert shown("<#C123|general>") == "#general"
    assert shown("<#C0UNKNOWN>") == "#c0unknown"  # the workbench lower-cases an unknown id


def test_a_user_group_and_special_mentions() -> None:
    assert shown("<!subteam^S0FINANCE>") == "@finance"
    assert shown("<!subteam^S0OTHER|@ops>") == "@ops"
    assert shown("<!here> and <!channel>") == "@here and @channel"


def test_names_come_from_the_standin_workspace() -> None:
    standin = SlackStandIn(
        signing_secret="s",
        users=[StandInUser("U0DEVREVIEWER", "you", real_name="You (reviewer)")],
        channels={"C0DEVAPPROVALS": "approvals"},
    )
    names = Names.of(standin, "U0DEVREVIEWER")

    assert mrkdwn("<@U0DEVREVIEWER> in <#C0DEVAPPROVALS>, by <@U0BOT>", names) == (
        "@you in #approvals, by @handoff"
    )


# -- dates -----------------------------------------------------------------------------------


def date(fmt: str, fallback: str = "2026-06-10 17:59 UTC") -> str:
    return f"<!date^{EPOCH}^{fmt}|{fallback}>"


def test_a_date_shows_in_the_readers_time_zone() -> None:
    assert shown(date("{date_short_pretty} at {time}")) == "today at 7:59 PM"
    assert shown(date("{time_secs}")) == "7:59:30 PM"
    # The same moment read in UTC: 5:59 PM.
    assert click.unstyle(mrkdwn(date("{time}"), NAMES, tz=UTC, now=NOW)) == "5:59 PM"


def test_pretty_dates_are_relative_to_the_readers_day() -> None:
    day_after = NOW + timedelta(days=1)
    two_days_after = NOW + timedelta(days=2)

    assert shown(date("{date_pretty}"), now=day_after) == "yesterday"
    assert shown(date("{date_short_pretty}"), now=two_days_after) == "Jun 10, 2026"
    assert shown(date("{date_long_pretty}"), now=NOW - timedelta(days=1)) == "tomorrow"


def test_every_date_token() -> None:
    assert shown(date("{date_num}")) == "2026-06-10"
    assert shown(date("{date}")) == "June 10th, 2026"
    assert shown(date("{date_short}")) == "Jun 10, 2026"
    assert shown(date("{date_long}")) == "Wednesday, June 10th, 2026"
    assert shown(date("{ago}"), now=datetime.fromtimestamp(EPOCH + 180, UTC)) == "3 minutes ago"
    assert shown(date("{ago}"), now=datetime.fromtimestamp(EPOCH - 7200, UTC)) == "in 2 hours"
    assert shown(date("{nonsense}")) == "{nonsense}"  # kept, as the workbench keeps it


def test_a_date_that_cannot_be_read_shows_its_fallback() -> None:
    assert shown("<!date^soon^{date}|2026-06-10 17:59 UTC>") == "2026-06-10 17:59 UTC"


def test_a_date_with_a_link_shows_where_it_goes() -> None:
    linked = f"<!date^{EPOCH}^{{time}}^https://example.test/x|fallback>"
    assert shown(linked) == "7:59 PM (https://example.test/x)"


# -- emoji, escapes, links, formatting -------------------------------------------------------


def test_emoji_names_become_the_emoji() -> None:
    assert shown(":white_check_mark: *Approved*") == "✅ Approved"
    assert shown(":speech_balloon: :no_entry_sign: :hourglass:") == "💬 🚫 ⌛"
    assert shown(":not_an_emoji_name:") == ":not_an_emoji_name:"


def test_the_emoji_table_is_the_workbenchs() -> None:
    script = (ROOT / "bot" / "standin" / "static" / "workbench.js").read_text()
    table = re.search(r"const EMOJI = \{(.*?)\};", script, re.DOTALL)
    assert table is not None
    pairs = re.findall(r'(?:"([^"]+)"|([a-z0-9_]+)): "([^"]+)"', table[1])
    workbench = {quoted or bare: char for quoted, bare, char in pairs}

    assert workbench == EMOJI


def test_slack_escapes_are_undone() -> None:
    assert shown("a &lt;b&gt; &amp; c") == "a <b> & c"
    assert shown("`x &lt; y`") == "x < y"
    assert shown("&lt;@U0DEVREVIEWER&gt;") == "<@U0DEVREVIEWER>"  # escaped: text, no mention


def test_links_show_their_label_and_address() -> None:
    assert shown("<https://example.test/a|the docs>") == "the docs (https://example.test/a)"
    assert shown("<https://example.test/a>") == "https://example.test/a"
    assert shown("<mailto:ops@example.test|ops>") == "ops (mailto:ops@example.test)"


def test_emphasis_is_styled_and_code_is_left_alone() -> None:
    styled = mrkdwn("*Why* _now_ ~later~ `<@U0DEVREVIEWER> *x* :tada:`", NAMES)

    assert click.unstyle(styled) == "Why now later <@U0DEVREVIEWER> *x* :tada:"
    assert "\x1b[1mWhy\x1b[22m" in styled
    assert "\x1b[3mnow\x1b[23m" in styled
    assert "\x1b[9mlater\x1b[29m" in styled


def test_quotes_and_preformatted_blocks() -> None:
    assert shown(">Dana Lee was charged\n>twice") == "│ Dana Lee was charged\n│ twice"
    assert shown("```\n<@U0DEVREVIEWER> :tada:\n```\nafter :tada:") == (
        "    \n    <@U0DEVREVIEWER> :tada:\n    \nafter 🎉"
    )


# -- whole messages --------------------------------------------------------------------------


def test_a_decided_message_from_the_bot_shows_no_raw_tokens() -> None:
    created = datetime(2026, 6, 10, 17, 50, tzinfo=UTC)
    handoff = Handoff(
        id="ho_01JDZ3Q6T5N9W2V8K4M7R1X0BC",
        run_id="run-1",
        thread_id="t-1",
        request_type=RequestType.APPROVAL,
        context="Refund <order> & more",
        payload={"kind": "approval", "action": {"name": "issue_refund", "args": {"a": 1}}},
        status=Status.APPROVED,
        resume_data=ResumeData(
            decision_id="d-1", outcome=Status.APPROVED, decided_by="U0DEVREVIEWER"
        ),
        created_at=created,
        decided_at=datetime.fromtimestamp(EPOCH, UTC),
    )
    text = click.unstyle(
        render_text(render_message(handoff).blocks, NAMES, tz=PARIS_SUMMER, now=NOW)
    )

    assert "✅ Approved by @you today at 7:59 PM" in text
    assert "│ Refund <order> & more" in text
    for raw in ("<@", "<!date", ":white_check_mark:", "&lt;", "&amp;", "*Approved*"):
        assert raw not in text


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"type": "header", "text": {"type": "plain_text", "text": ":bell: Hi"}}, "🔔 Hi"),
        (
            {"type": "header", "text": {"type": "plain_text", "text": ":bell:", "emoji": False}},
            ":bell:",
        ),
        (
            {"type": "section", "fields": [{"type": "mrkdwn", "text": "*who*\n<@U0DEVADMIN>"}]},
            "  who: @ada",
        ),
        (
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "in <#C0DEVAPPROVALS>"}]},
            "in #approvals",
        ),
        (
            {
                "type": "actions",
                "elements": [{"type": "button", "text": {"type": "plain_text", "text": ":x: No"}}],
            },
            "[❌ No]",
        ),
    ],
)
def test_each_block_kind_renders_its_text(block: dict[str, object], expected: str) -> None:
    assert click.unstyle(render_text([block], NAMES)) == expected + "\n"


@pytest.mark.parametrize(
    "hostile",
    [
        "\x1b]8;;https://evil.example\x07Approve\x1b]8;;\x07",  # an OSC 8 hyperlink
        "refund\r\x1b[2KApproved by the CFO",  # overwrite the line
        "\x1b[31mred\x1b[0m \x9b2J \x07",  # colours, C1 CSI, bell
    ],
)
def test_agent_text_cannot_send_terminal_control_sequences(hostile: str) -> None:
    for text in (
        mrkdwn(hostile),
        render_text([{"type": "section", "text": {"type": "plain_text", "text": hostile}}]),
    ):
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", click.unstyle(text)), repr(text)
