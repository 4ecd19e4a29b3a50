"""``parse_form`` must give exactly what ``parse_qsl(text, keep_blank_values=True)`` gives."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, quote, urlencode

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.http.form import parse_form
from tests.support.fixtures import COMMANDS, SLACK_FIXTURES, slack_fixture_paths, slack_fixtures


def expected(text: str) -> list[tuple[str, str]]:
    return parse_qsl(text, keep_blank_values=True)


def test_a_slack_interaction_decodes_to_its_json() -> None:
    payload = {
        "type": "block_actions",
        "user": {"id": "U1", "name": "alice"},
        "actions": [{"action_id": "handoff_approve", "value": "ho_01ABC"}],
        "message": {"text": 'Refund 30 € — "double" charge, 100% sure \\ + & = ;'},
    }
    text = urlencode({"payload": json.dumps(payload, ensure_ascii=False)})

    fields = parse_form(text)

    assert fields == expected(text)
    assert json.loads(dict(fields)["payload"]) == payload


def test_the_slack_fixtures_decode_as_parse_qsl_decodes_them() -> None:
    examples = slack_fixture_paths()
    assert examples, f"no examples in {SLACK_FIXTURES}"
    for path in examples:
        text = urlencode({"payload": path.read_text()})
        assert parse_form(text) == expected(text), path.name


def test_the_slash_command_fixtures_decode_to_their_fields() -> None:
    for name, fields in slack_fixtures(COMMANDS).items():
        text = urlencode(fields)  # as Slack sends them: one form field per key

        assert parse_form(text) == expected(text), name
        assert parse_form(text) == list(fields.items()), name


def test_slash_command_forms_keep_blank_values_and_plus_signs() -> None:
    text = "token=x&team_id=T1&text=&command=%2Fhandoff&user_name=a+b&flag&=v&&k=a=b"

    assert parse_form(text) == expected(text)
    assert ("text", "") in parse_form(text) and ("flag", "") in parse_form(text)


def test_malformed_escapes_fall_back_to_the_same_answer_as_parse_qsl() -> None:
    for text in ["a=%zz", "a=%4", "a=%", "a=%E2%82", "a=%FF&b=%C3%A9", "a=\\x41%5C\\%41"]:
        assert parse_form(text) == expected(text), text


@settings(max_examples=500, derandomize=True)
@given(st.text())
def test_any_text_decodes_as_parse_qsl_decodes_it(text: str) -> None:
    assert parse_form(text) == expected(text)


# Lone surrogates cannot be percent-encoded as UTF-8; the test above covers them raw.
ENCODABLE = st.text(alphabet=st.characters(exclude_categories=("Cs",)))


@settings(max_examples=300, derandomize=True)
@given(st.lists(st.tuples(ENCODABLE, ENCODABLE), max_size=5))
def test_any_encoded_form_decodes_back_to_its_fields(fields: list[tuple[str, str]]) -> None:
    text = "&".join(f"{quote(name, safe='')}={quote(value, safe='')}" for name, value in fields)

    assert parse_form(text) == expected(text)
    assert parse_form(text) == fields
