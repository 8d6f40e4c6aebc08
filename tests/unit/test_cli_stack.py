"""Which stack the CLI talks to (web/cli_stack.py): found in a stated order, said, never guessed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from web import cli_stack
from web.auth import verify_user_token
from web.cli_stack import find_stack

DB = "postgresql://postgres:pw@127.0.0.1:55432/mi_assessment"
REDIS = "redis://default:pw@127.0.0.1:56379/0"


def state_folder(root: Path, *, pid: int | None = None, secret: str | None = None) -> Path:
    state = root / ".state"
    state.mkdir(parents=True)
    info = {"database_url": DB, "redis_url": REDIS, "pid": pid or os.getpid(), "credentials": {}}
    if secret is not None:
        info["credentials"] = {"SECRET_KEY": "secrets.json"}
        (state / "secrets.json").write_text(json.dumps({"SECRET_KEY": secret}))
    (state / "stack.json").write_text(json.dumps(info))
    return state


@pytest.fixture(autouse=True)
def no_checkout_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The checkout's own .state (a `make run` of the developer) must not be found here."""
    monkeypatch.setattr(cli_stack, "CHECKOUT", tmp_path / "checkout")


def test_the_order_is_option_variable_environment_state_folder(tmp_path: Path) -> None:
    state = state_folder(tmp_path / "stack", secret="s3cret")
    other = {"DATABASE_URL": "postgresql://elsewhere/db", "REDIS_URL": "redis://elsewhere:1/0"}
    assert find_stack(str(state), other).source == f"--stack {state / 'stack.json'}"
    assert find_stack(None, {**other, "MI_STACK": str(state)}).source.startswith("MI_STACK ")
    from_env = find_stack(None, other)
    assert (from_env.database_url, from_env.redis_url) == (other["DATABASE_URL"], other["REDIS_URL"])
    assert find_stack(None, {"MI_STATE_DIR": str(state)}).redis_url == REDIS
    # From a folder inside the checkout, the nearest .state/stack.json.
    inside = tmp_path / "stack" / "web" / "console"
    inside.mkdir(parents=True)
    found = find_stack(None, {}, cwd=inside)
    assert (found.database_url, found.secret_key) == (DB, "s3cret")
    assert found.environment({})["SECRET_KEY"] == "s3cret"
    assert found.environment({"SECRET_KEY": "mine"})["SECRET_KEY"] == "mine"
    assert "pw" not in found.describe()  # passwords shown as ***
    assert "127.0.0.1:56379" in found.describe()


def test_nothing_found_is_refused_never_a_default_server(tmp_path: Path) -> None:
    with pytest.raises(click.ClickException, match="no stack found"):
        find_stack(None, {}, cwd=tmp_path)
    with pytest.raises(click.ClickException, match="REDIS_URL is not set"):
        find_stack(None, {"DATABASE_URL": DB}, cwd=tmp_path)
    with pytest.raises(click.ClickException, match="does not exist"):
        find_stack(str(tmp_path / "nowhere"), {})


def test_a_stack_file_left_by_a_stopped_make_run_is_refused(tmp_path: Path) -> None:
    gone = 2**22 + 12345  # above Linux's default pid_max: no such process
    state = state_folder(tmp_path, pid=gone)
    with pytest.raises(click.ClickException, match="no longer runs"):
        find_stack(str(state), {})


def flask(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`flask --app web ARGS` as typed in a shell at `cwd` that exported nothing of a stack."""
    hidden = {"SECRET_KEY", "ADMIN_TOKENS", "DATABASE_URL", "REDIS_URL", "MI_STACK", "MI_STATE_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "flask", "--app", "web", *args],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k not in hidden},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_issue_user_token_finds_the_stack_as_the_other_commands_do(tmp_path: Path) -> None:
    """In a `make run` checkout, nothing exported: the token is signed with its secrets.json's key."""
    state = state_folder(tmp_path / "checkout", secret="s3cret-of-the-stack")
    done = flask(state.parent, "issue-user-token", "7")
    assert done.returncode == 0, done.stderr
    assert verify_user_token("s3cret-of-the-stack", done.stdout.strip()) == 7
    assert f"stack from {state / 'stack.json'}" in done.stderr
    # With no stack and no SECRET_KEY it says what to do, without a traceback.
    alone = flask(tmp_path, "issue-user-token", "7", "--stack", str(tmp_path / "none"))
    assert alone.returncode != 0
    assert "Traceback" not in alone.stderr
    assert "is `make run` running there?" in alone.stderr
