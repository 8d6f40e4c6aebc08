"""The commands `make run`'s banner prints work as printed: the redis-cli line and
`redis-cli -u "$REDIS_URL"` reach a password-protected Redis like the embedded one (an
empty user name in the URL made redis-cli fail with WRONGPASS), from a shell, with the
password never on a command line."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from scripts import run_stack, servers


@pytest.mark.timeout(60)
def test_the_printed_redis_commands_reach_a_password_protected_redis() -> None:
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli not installed (Debian: redis-tools)")
    with servers.temporary_directory("mi-banner-redis-") as tmp:
        server = servers.RedisServer(tmp / "redis", password="s3cret-pass_word")
        server.start()
        try:
            command = run_stack.redis_cli_command(server.url)
            assert command is not None
            assert "s3cret" not in command.split("redis-cli", 1)[1]  # only in REDISCLI_AUTH
            ping = subprocess.run(
                ["bash", "-c", f"{command} PING"], capture_output=True, text=True, timeout=20, check=False
            )
            assert (ping.returncode, ping.stdout.strip()) == (0, "PONG"), ping.stderr
            by_url = subprocess.run(
                ["bash", "-c", 'redis-cli -u "$REDIS_URL" PING'],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
                env={"PATH": "/usr/bin:/bin", "REDIS_URL": server.url},
            )
            assert by_url.stdout.strip() == "PONG", by_url.stdout + by_url.stderr
        finally:
            server.stop()


def test_the_export_line_names_the_stack_and_the_venv() -> None:
    env = {
        "PORT": "8123",
        "ADMIN_TOKENS": "adm_one,adm_two",
        "SECRET_KEY": "k" * 32,
        "DATABASE_URL": "postgresql://postgres:pw@127.0.0.1:55432/mi_assessment",
        "REDIS_URL": "redis://default:pw@127.0.0.1:56379/0",
    }
    line = run_stack.export_line(env, {"SECRET_KEY": "secrets.json", "ADMIN_TOKENS": "secrets.json"})
    # Run by a shell, it sets exactly what the CLI, `make demo` and the walkthrough read.
    shown = subprocess.run(
        ["bash", "-c", f"{line}; env"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
        env={"PATH": "/bin"},
    ).stdout.splitlines()
    values = dict(item.split("=", 1) for item in shown if "=" in item)
    for name in ("DATABASE_URL", "REDIS_URL", "ADMIN_TOKENS", "SECRET_KEY"):
        assert values[name] == env[name]
    assert values["ADMIN_TOKEN"] == "adm_one"
    assert values["BASE_URL"] == "http://127.0.0.1:8123"
    assert shutil.which("flask", path=values["PATH"]) is not None  # the venv's: no activation needed
    # A SECRET_KEY the operator set in the environment is not printed back.
    assert "SECRET_KEY" not in run_stack.export_line(env, {"SECRET_KEY": "environment"})
