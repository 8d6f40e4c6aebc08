"""scripts/run_stack.py (`make run`) without servers: its secrets are kept private and
reused, its log lines hide passwords, and a web port held by another process is told
apart from its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import run_stack


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(run_stack, "STATE", tmp_path)
    return tmp_path


def test_secrets_are_generated_once_in_a_private_file(state: Path) -> None:
    first = run_stack.stored_secrets()
    assert set(first) == {"SECRET_KEY", "ADMIN_TOKENS", "POSTGRES_PASSWORD", "REDIS_PASSWORD"}
    assert all(len(value) >= 24 for value in first.values())
    assert (state / "secrets.json").stat().st_mode & 0o777 == 0o600
    assert run_stack.stored_secrets() == first  # a re-run reuses them


def test_an_earlier_secrets_file_keeps_its_values_gains_passwords_and_is_made_private(state: Path) -> None:
    path = state / "secrets.json"
    path.write_text(json.dumps({"SECRET_KEY": "old-key", "ADMIN_TOKENS": "adm_old"}))
    path.chmod(0o644)
    stored = run_stack.stored_secrets()
    assert (stored["SECRET_KEY"], stored["ADMIN_TOKENS"]) == ("old-key", "adm_old")
    assert stored["POSTGRES_PASSWORD"] != stored["REDIS_PASSWORD"]
    assert json.loads(path.read_text()) == stored
    assert path.stat().st_mode & 0o777 == 0o600


def test_the_stack_file_carrying_the_passwords_is_private(state: Path) -> None:
    env = {
        "PORT": "8123",
        "DATABASE_URL": "postgresql://postgres:pw1@127.0.0.1:55432/mi_assessment",
        "REDIS_URL": "redis://:pw2@127.0.0.1:56379/0",
    }
    path = run_stack.write_stack_file(env, {"SECRET_KEY": "secrets.json"})
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["redis_url"] == env["REDIS_URL"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://postgres:pw@127.0.0.1:5/db", "postgresql://postgres:***@127.0.0.1:5/db"),
        ("redis://:pw@127.0.0.1:6/0", "redis://:***@127.0.0.1:6/0"),
        ("redis://127.0.0.1:6/0", "redis://127.0.0.1:6/0"),
        ("postgresql://postgres@h/db", "postgresql://postgres@h/db"),
    ],
)
def test_log_lines_hide_passwords(url: str, shown: str) -> None:
    assert run_stack.redacted(url) == shown


def test_the_generated_admin_token_carries_at_least_128_random_bits(state: Path) -> None:
    import base64

    from web.auth import MIN_TOKEN_BITS, token_strength_bits

    token = run_stack.stored_secrets()["ADMIN_TOKENS"]
    random_part = token.removeprefix("adm_")
    assert len(base64.urlsafe_b64decode(random_part + "=" * (-len(random_part) % 4))) * 8 >= MIN_TOKEN_BITS
    assert token_strength_bits(token) >= MIN_TOKEN_BITS
    assert run_stack.admin_token_problem({}, run_stack.stored_secrets()) is None


@pytest.mark.parametrize(
    "configured", ["admin", "test-admin-token", "a" * 64, "good-one-Vq3x9LrT0bWk7ZsN2yHc5u,short"]
)
def test_a_configured_admin_token_weaker_than_128_bits_is_refused_by_name(
    state: Path, configured: str
) -> None:
    problem = run_stack.admin_token_problem({"ADMIN_TOKENS": configured}, run_stack.stored_secrets())
    assert problem is not None
    assert problem.startswith("ADMIN_TOKENS (from the environment or .env)")
    assert "128 bits" in problem
    for token in configured.split(","):
        assert token not in problem  # never the secret itself


def test_a_weak_token_left_in_the_secrets_file_is_refused_too(state: Path) -> None:
    (state / "secrets.json").write_text(json.dumps({"SECRET_KEY": "k" * 43, "ADMIN_TOKENS": "adm_old"}))
    problem = run_stack.admin_token_problem({}, run_stack.stored_secrets())
    assert problem is not None
    assert "secrets.json" in problem


def test_make_run_refuses_to_start_with_a_weak_admin_token(tmp_path: Path) -> None:
    """The whole script, as `make run` starts it: it exits before any server starts."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MI_STATE_DIR": str(tmp_path / "state"), "ADMIN_TOKENS": "letmein", "PORT": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "scripts.run_stack"],
        cwd=Path(run_stack.__file__).parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ADMIN_TOKENS (from the environment or .env)" in done.stdout + done.stderr
    assert "letmein" not in done.stdout + done.stderr
    assert not (tmp_path / "state" / "postgres").exists()
