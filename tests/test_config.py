"""Settings: read from the environment, and documented in the README."""

from __future__ import annotations

import re

import pytest

from bot.config import Settings
from tests.conftest import ROOT


def _env_name(field_name: str) -> str:
    alias = Settings.model_fields[field_name].validation_alias
    choices = getattr(alias, "choices", None)
    return str(choices[0]) if choices else f"HANDOFF_{field_name.upper()}"


def test_every_setting_is_in_the_readme_configuration_table() -> None:
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", readme, flags=re.MULTILINE))
    expected = {_env_name(name) for name in Settings.model_fields}
    assert documented == expected


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
