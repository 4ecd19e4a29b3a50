"""The answer to a request the replay guard could not check: "try again", as each kind of
request lets the person hear it, or a 503 that Slack retries or shows as a failure."""

from __future__ import annotations

import json

import pytest

from bot.http.unavailable import TRY_AGAIN, TryAgain, tell, try_again
from handlers.decisions import UNAVAILABLE
from tests.support.fixtures import slack_fixture
from tests.support.security_harness import sink

RETRY_LATER = TryAgain("503 Service Unavailable", {"error": "try again"})


def test_the_words_are_those_of_the_listeners_when_the_store_is_down() -> None:
    assert TRY_AGAIN == UNAVAILABLE


def test_a_slash_command_is_answered_with_an_ephemeral_try_again() -> None:
    assert try_again(slack_fixture("slash_command")) == TryAgain(
        "200 OK", {"response_type": "ephemeral", "text": TRY_AGAIN}
    )


def test_a_modal_submission_shows_try_again_under_its_first_input() -> None:
    answer = try_again(slack_fixture("view_submission_answer"))

    assert answer == TryAgain(
        "200 OK", {"response_action": "errors", "errors": {"choice": TRY_AGAIN}}
    )


def test_a_click_on_a_message_is_told_through_its_response_url() -> None:
    click = slack_fixture("block_actions_message")

    assert try_again(click) == TryAgain("200 OK", None, response_url=click["response_url"])


@pytest.mark.parametrize("name", ["event_app_home_opened", "event_thread_reply"])
def test_an_event_gets_a_503_so_that_slack_delivers_it_again(name: str) -> None:
    assert try_again(slack_fixture(name)) == RETRY_LATER


def test_what_cannot_be_answered_in_words_gets_a_503() -> None:
    submission = slack_fixture("view_submission")
    submission["view"]["blocks"] = None  # no input to show the words under

    for body in (slack_fixture("block_actions_home"), slack_fixture("view_closed"), submission):
        assert try_again(body) == RETRY_LATER


def test_tell_posts_an_ephemeral_that_leaves_the_message_as_it_is() -> None:
    with sink() as (url, requests):
        tell(url + "response/T0/1/abc")

    [(_, body)] = requests
    assert json.loads(body) == {
        "text": TRY_AGAIN,
        "response_type": "ephemeral",
        "replace_original": False,
    }


def test_tell_gives_up_quietly_when_the_response_url_is_unreachable() -> None:
    tell("http://127.0.0.1:9/response/gone")  # nothing listens there: logged, not raised
