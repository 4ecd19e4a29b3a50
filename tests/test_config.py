"""Settings: read from the environment, and documented in the README."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from redis import Redis

from bot.config import Settings
from store import exceptions as store_exceptions
from store.exceptions import ConfigurationError, HandoffError
from store.settings import StoreSettings


def _env_name(field_name: str) -> str:
    alias = Settings.model_fields[field_name].validation_alias
    choices = getattr(alias, "choices", None)
    return str(choices[0]) if choices else f"HANDOFF_{field_name.upper()}"


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://example:6379/3")
    monkeypatch.setenv("HANDOFF_RESUME_MAX_ATTEMPTS", "9")
    monkeypatch.setenv("HANDOFF_RETENTION_DAYS", "2")
    settings = Settings()
    assert settings.redis_url == "redis://example:6379/3"
    assert settings.store_config().tasks.resume_max_attempts == 9
    assert settings.store_config().retention_seconds == 2 * 86400


def test_invalid_setting_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_RESUME_MAX_ATTEMPTS", "0")
    with pytest.raises(ValueError, match="resume_max_attempts"):
        Settings()


# -- the store's settings, apart from the Slack app's -------------------------------------


def test_the_store_settings_hold_no_slack_setting_and_the_bot_adds_them() -> None:
    store_fields = set(StoreSettings.model_fields)

    assert issubclass(Settings, StoreSettings)
    assert store_fields < set(Settings.model_fields)
    assert not {name for name in store_fields if name.startswith("slack_")}
    assert {"redis_url", "namespace", "queue", "retention_days", "max_payload_bytes"} <= (
        store_fields
    )
    for name in store_fields:  # same env names, defaults and descriptions for both
        assert StoreSettings.env_name(name) == _env_name(name)
        assert repr(StoreSettings.model_fields[name]) == repr(Settings.model_fields[name])


def test_store_settings_come_from_the_same_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://example:6379/3")
    monkeypatch.setenv("HANDOFF_NAMESPACE", "tenant-3")
    monkeypatch.setenv("HANDOFF_MAX_PAYLOAD_BYTES", "1000")

    config = StoreSettings().store_config()

    assert StoreSettings().redis_url == "redis://example:6379/3"
    assert (config.namespace, config.max_payload_bytes) == ("tenant-3", 1000)


@pytest.mark.parametrize("url", ["notaurl", "http://example:6379", "redis://example:port/0"])
def test_a_bad_redis_url_is_a_validation_error_naming_the_valid_forms(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("REDIS_URL", url)

    with pytest.raises(ValidationError) as caught:
        Settings()
    with pytest.raises(ConfigurationError) as configuration:
        Settings.from_env()

    assert [error["loc"] for error in caught.value.errors()] == [("REDIS_URL",)]
    message = str(configuration.value)
    assert isinstance(configuration.value, HandoffError)
    assert "\n" not in message
    assert message.startswith("bad setting REDIS_URL: not a Redis URL")
    for scheme in ("redis://", "rediss://", "unix://"):
        assert scheme in message


def test_a_bad_redis_url_is_not_echoed_as_it_may_hold_a_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", "http://:hunter2-secret@example:6379")

    with pytest.raises(ValidationError) as caught:
        StoreSettings()
    with pytest.raises(ConfigurationError) as configuration:
        StoreSettings.from_env()

    assert "hunter2-secret" not in str(caught.value)
    assert "hunter2-secret" not in str(configuration.value)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://:pw@example:6380", "unix:///run/redis.sock"]
)
def test_every_kind_of_redis_url_is_accepted(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("REDIS_URL", url)

    assert Settings().redis_url == url


def test_a_blank_redis_url_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", " ")

    settings = StoreSettings()

    assert settings.redis_url is None
    with pytest.raises(ConfigurationError, match=r"REDIS_URL is not set; point it at"):
        settings.require_redis_url()


def test_several_bad_settings_are_one_line_naming_each_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANDOFF_RESUME_MAX_ATTEMPTS", "0")
    monkeypatch.setenv("HANDOFF_SLASH_COMMAND", "no-slash")

    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env()

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("bad settings HANDOFF_RESUME_MAX_ATTEMPTS: ")
    assert "; HANDOFF_SLASH_COMMAND: " in message
    assert message.endswith("(fix them in the environment or in .env)")


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("REDIS_URL", "redis://127.0.0.1:6379/abc", "the database in REDIS_URL is a number"),
        ("REDIS_URL", "redis://127.0.0.1:6379?ssl_cert_reqs=none", "an option redis-py"),
        ("HANDOFF_NAMESPACE", "a:b", "without braces, colons or spaces"),
        ("HANDOFF_NAMESPACE", "a b", "without braces, colons or spaces"),
        ("HANDOFF_RETENTION_DAYS", "inf", "less than or equal to 36500"),
        ("HANDOFF_RETENTION_DAYS", "1e300", "less than or equal to 36500"),
    ],
)
def test_a_setting_that_would_fail_later_is_refused_when_read(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    # Each of these used to pass validation and fail later, as a traceback (or, for a
    # namespace, as a worker whose dispatcher died while it went on taking jobs).
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as caught:
        StoreSettings.from_env()

    message = str(caught.value)
    assert "\n" not in message and f"bad setting {variable}: " in message
    assert problem in message


@pytest.mark.parametrize(
    ("variable", "value", "refused", "what"),
    [
        (
            "HANDOFF_CHANNEL",
            "#approvals",
            "#approvals",
            "a Slack channel id (C…/G…/D…) or user id (U…/W…, for their DM with the bot)",
        ),
        (
            "HANDOFF_CHANNEL",
            "C1",
            "C1",
            "a Slack channel id (C…/G…/D…) or user id (U…/W…, for their DM with the bot)",
        ),
        ("HANDOFF_ADMINS", "U0OPS, bob", "bob", "a Slack user id (U…/W…)"),
        ("HANDOFF_ADMINS", "U0OPS,S0TEAM", "S0TEAM", "a Slack user id (U…/W…)"),
        (
            "HANDOFF_DEFAULT_REVIEWERS",
            "S0TEAM, <!channel>",
            "<!channel>",
            "a Slack user id (U…/W…) or user-group id (S…)",
        ),
        (
            "HANDOFF_ESCALATE_TO",
            "S1> <!channel> <https://evil|x>",
            "S1> <!channel> <https://evil|x>",
            "a Slack channel id (C…/G…/D…) or user-group id (S…)",
        ),
        (
            "HANDOFF_ESCALATE_TO",
            "U0ONCALL",
            "U0ONCALL",
            "a Slack channel id (C…/G…/D…) or user-group id (S…)",
        ),
    ],
)
def test_a_setting_holding_ids_refuses_what_is_no_slack_id_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, refused: str, what: str
) -> None:
    # These are posted to and mentioned, as an agent's routing fields are.
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env()

    message = str(caught.value)
    assert message.startswith(f"bad setting {variable}: {refused!r} is not {what}, such as ")
    assert "a capital letter, then 2 to 31 capitals or digits" in message


def test_settings_holding_ids_take_ids_and_read_blank_as_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANDOFF_CHANNEL", " C0APPROVALS ")
    monkeypatch.setenv("HANDOFF_ADMINS", "U0OPS, W0GRID,")
    monkeypatch.setenv("HANDOFF_DEFAULT_REVIEWERS", "U0ALICE,S0FINANCE")
    monkeypatch.setenv("HANDOFF_ESCALATE_TO", "S0ONCALL")

    settings = Settings.from_env()

    assert settings.channel == "C0APPROVALS"
    assert settings.admin_ids == {"U0OPS", "W0GRID"}
    assert settings.default_reviewer_ids == ["U0ALICE", "S0FINANCE"]
    assert settings.escalate_to == settings.task_policy().escalate_to == "S0ONCALL"
    for variable in ("HANDOFF_CHANNEL", "HANDOFF_ESCALATE_TO"):
        monkeypatch.setenv(variable, "")
    blank = Settings.from_env()
    assert (blank.channel, blank.escalate_to) == (None, None)


def test_open_store_builds_the_store_the_settings_describe(redis: Redis, redis_url: str) -> None:
    settings = StoreSettings(redis_url=redis_url, namespace="tenant-7", retention_days=2)

    store = settings.open_store()
    on_given_client = settings.open_store(redis=redis)

    assert store.config == settings.store_config() == on_given_client.config
    assert on_given_client.redis is redis
    assert store.redis.ping()
    assert store.keys.prefix == "{tenant-7}:"


# -- one error base ------------------------------------------------------------------------


def test_configuration_error_is_a_handoff_error_also_importable_from_the_app() -> None:
    from bot.app import ConfigurationError as FromTheApp

    assert FromTheApp is ConfigurationError
    assert issubclass(ConfigurationError, HandoffError)
    assert issubclass(ConfigurationError, ValueError)


def test_the_agent_package_exports_every_deliberate_error_of_the_store() -> None:
    import worker

    errors = {
        name: value
        for name, value in vars(store_exceptions).items()
        if isinstance(value, type) and issubclass(value, HandoffError)
    }

    assert "ConfigurationError" in errors
    for name, error in errors.items():
        assert getattr(worker, name) is error, name
        assert name in worker.__all__
    for name in ("ApprovalRejected", "QuestionDeclined", "DecisionTimeout"):
        assert issubclass(getattr(worker, name), HandoffError)
