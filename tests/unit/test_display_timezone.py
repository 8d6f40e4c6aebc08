"""DISPLAY_TIMEZONE: the users' time zone, checked at start-up."""

from __future__ import annotations

import pytest

from config import ConfigError
from config.settings import DEFAULT_DISPLAY_TIMEZONE, Settings


def test_default_is_shanghai() -> None:
    assert DEFAULT_DISPLAY_TIMEZONE == "Asia/Shanghai"
    settings = Settings.from_env({})
    assert settings.display_timezone == "Asia/Shanghai"
    assert settings.display_zone.key == "Asia/Shanghai"
    assert Settings.from_env({"DISPLAY_TIMEZONE": "  "}).display_timezone == "Asia/Shanghai"


def test_any_iana_zone() -> None:
    assert Settings.from_env({"DISPLAY_TIMEZONE": "Europe/Paris"}).display_timezone == "Europe/Paris"
    assert Settings.from_env({"DISPLAY_TIMEZONE": " UTC "}).display_timezone == "UTC"


@pytest.mark.parametrize("value", ["Mars/Olympus", "+08:00", "../etc/passwd", "Asia/"])
def test_unknown_zone_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="DISPLAY_TIMEZONE must be an IANA time zone"):
        Settings.from_env({"DISPLAY_TIMEZONE": value})
