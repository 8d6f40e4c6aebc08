"""End to end: `make run` is safe on a shared host.

Two `make run` (scripts/run_stack.py, each with a state folder of its own and no
DATABASE_URL / REDIS_URL / PORT, so each starts its embedded servers and binds a web port
of its own) are started at once and prefer the same ports: each must end up on its own
servers and its own web port, with its own data and its own tokens. Another
local account (`nobody`) must be refused by both servers, and the files of the state
folder that hold secrets must be readable by their owner only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
import requests

from scripts import servers
from tests.support.processes import RunStack, wait_until
from tests.support.stack import STACK_SETTINGS
from web import issue_user_token

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Files of a state folder that hold a password, a token or a URL carrying one.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
SECRET_FILES = ("secrets.json", "stack.json", "supervisord.conf", "redis/redis.conf")


@dataclass
class Run:
    run: RunStack
    state: Path

    def info(self) -> dict[str, Any]:
        return dict(json.loads((self.state / "stack.json").read_text()))

    def secrets(self) -> dict[str, str]:
        return dict(json.loads((self.state / "secrets.json").read_text()))

    def ready(self) -> bool:
        assert self.run.alive(), "make run exited:\n" + self.run.output()[-3000:]
        try:
            base_url = self.info()["base_url"]
            return requests.get(f"{base_url}/readyz", timeout=2).status_code == 200
        except (OSError, ValueError, KeyError, requests.RequestException):
            return False

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        token = issue_user_token(self.secrets()["SECRET_KEY"], 4242)
        response = requests.request(
            method,
            f"{self.info()['base_url']}{path}",
            headers={"Authorization": f"Bearer {token}"},
            json=body,
            timeout=30,
        )
        return response.status_code, response.json()


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Run]]:
    """Two `make run` on embedded servers, started at the same moment."""
    logs = tmp_path_factory.mktemp("run-safe")
    env = {
        k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "PORT"}
    }
    env.update(STACK_SETTINGS)
    env.pop("ADMIN_TOKENS", None)
    runs: list[Run] = []
    with ExitStack() as cleanup:
        for name in ("a", "b"):
            # A folder the postgres account can reach (pytest's own is 0700 under root).
            state = cleanup.enter_context(servers.temporary_directory(f"mi-run-safe-{name}-")) / "state"
            # No PORT: both prefer the same one (8000), as two `make run` on one host do.
            stack = RunStack(env=env, state=state, log_path=logs / f"{name}.log")
            cleanup.callback(stack.stop)
            runs.append(Run(stack, state))
        for run in runs:
            wait_until(run.ready, timeout=150, what=f"make run in {run.state} to be ready", interval=0.2)
        yield runs
        for run in runs:
            run.run.stop()
            assert run.run.pids() == []


def says_ready(stack: RunStack) -> bool:
    return "ready: " in stack.output()


def test_two_make_runs_started_at_once_each_use_servers_of_their_own(stacks: list[Run]) -> None:
    for run in stacks:
        info = run.info()
        with psycopg.connect(info["database_url"], connect_timeout=5) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        assert row is not None
        assert Path(str(row[0])).resolve() == (run.state / "pg" / "data").resolve()
        client = redis.Redis.from_url(info["redis_url"], decode_responses=True)
        assert Path(str(client.config_get("dir")["dir"])).resolve() == (run.state / "redis").resolve()
        client.close()
    for run in stacks:  # each announced its own web process, not the other's
        wait_until(partial(says_ready, run.run), timeout=60, what="the ready line")
        assert "not this stack's" not in run.run.output()
    a, b = (run.info() for run in stacks)
    assert urlsplit(a["database_url"]).port != urlsplit(b["database_url"]).port
    assert urlsplit(a["redis_url"]).port != urlsplit(b["redis_url"]).port

    # A record made through one stack is not seen through the other.
    status, created = stacks[0].call("POST", "/api/assessment/createRecord")
    assert (status, created["code"]) == (200, 0), created
    record_id = created["data"]["id"]
    path = f"/api/assessment/record?recordId={record_id}"
    assert stacks[0].call("GET", path)[0] == 200
    status, missing = stacks[1].call("GET", path)
    assert (status, missing["code"]) == (404, 3241), missing
    with psycopg.connect(b["database_url"]) as conn:
        row = conn.execute("SELECT count(*) FROM assessment_records").fetchone()
    assert row == (0,)


def test_two_make_runs_started_at_once_each_serve_their_own_web_port(stacks: list[Run]) -> None:
    """Each announces a port it owns: its banner, stack.json and its processes agree, and
    each stack's user token is refused by the other stack's web (another SECRET_KEY)."""
    a, b = stacks
    assert a.info()["port"] != b.info()["port"]
    for run in stacks:
        port = run.info()["port"]
        assert f"web          http://127.0.0.1:{port}" in run.run.output()
        assert f"BASE_URL=http://127.0.0.1:{port}" in run.run.output()
        holders = servers.pids_listening_on(port)
        assert holders, f"nothing listens on {port}"
        assert holders <= {*run.run.pids(), run.run.process.pid}, (holders, run.run.pids())
    for mine, other in ((a, b), (b, a)):
        token = issue_user_token(mine.secrets()["SECRET_KEY"], 4242)
        headers = {"Authorization": f"Bearer {token}"}
        path = "/api/assessment/questions"
        assert (
            requests.get(f"{mine.info()['base_url']}{path}", headers=headers, timeout=10).status_code == 200
        )
        assert (
            requests.get(f"{other.info()['base_url']}{path}", headers=headers, timeout=10).status_code == 401
        )


def _as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    runuser = shutil.which("runuser", path=SYSTEM_PATH) or "runuser"
    return subprocess.run(
        [runuser, "-u", "nobody", "--", *args],
        capture_output=True,
        text=True,
        timeout=20,
        cwd="/",
        env={"PATH": SYSTEM_PATH, "LC_ALL": "C"},
        check=False,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another account (runuser)")
def test_another_local_account_is_refused_by_both_servers(stacks: list[Run]) -> None:
    psql = servers.postgres_bindir(allow_install=False) / "psql"
    if not psql.exists():
        psql = Path(shutil.which("psql") or "psql")
    for run in stacks:
        info = run.info()
        pg_port = str(urlsplit(info["database_url"]).port)
        socket_dir = str((run.state / "pg" / "socket").resolve())
        for host in ("127.0.0.1", socket_dir):
            args = ["-w", "-h", host, "-p", pg_port, "-U", "postgres", "-d", "postgres", "-c", "SELECT 1"]
            result = _as_nobody(str(psql), *args)
            assert result.returncode != 0, (host, result.stdout)
            # Over TCP the password is asked for; the socket's folder it cannot even enter.
            refusals = ("no password supplied", "Permission denied")
            assert any(refusal in result.stderr for refusal in refusals), result.stderr
        redis_port = str(urlsplit(info["redis_url"]).port)
        # A raw connection: no client library needed by the other account.
        script = (
            'exec 3<>/dev/tcp/127.0.0.1/"$0"; printf "GET x\\r\\nCONFIG GET dir\\r\\n" >&3; head -n 2 <&3'
        )
        result = _as_nobody("bash", "-c", script, redis_port)
        assert result.stdout.splitlines() == ["-NOAUTH Authentication required."] * 2, result
        for name in SECRET_FILES:
            assert _as_nobody("cat", str(run.state / name)).returncode != 0, name


def test_the_files_holding_secrets_are_readable_by_their_owner_only(stacks: list[Run]) -> None:
    for run in stacks:
        for name in SECRET_FILES:
            assert (run.state / name).stat().st_mode & 0o777 == 0o600, name
        secrets = run.secrets()
        assert secrets["POSTGRES_PASSWORD"] in run.info()["database_url"]
        assert secrets["REDIS_PASSWORD"] in run.info()["redis_url"]
        for folder in (run.state / "redis", run.state / "pg", run.state / "pg" / "socket"):
            assert folder.stat().st_mode & 0o777 == 0o700, folder
        for path in (run.state / "redis").rglob("*"):
            assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
        # No other file of the state folder (console, process logs) carries a secret.
        private = {run.state / name for name in SECRET_FILES}
        for path in run.state.rglob("*"):
            servers_own = path.relative_to(run.state).parts[0] in {"redis", "pg"}  # 0700 folders
            if path.is_file() and path not in private and not servers_own:
                text = path.read_bytes()
                assert not any(value.encode() in text for value in secrets.values()), path


def test_the_process_logs_are_the_accounts_own_and_keep_no_signed_link(stacks: list[Run]) -> None:
    """The access log must name no signed report link (a week-long bearer credential), and
    the logs must not be readable by any local account (0644 files in a 0755 folder)."""
    for run in stacks:
        base_url = run.info()["base_url"]
        signed = "eyJ1aWQiOjEsInJpZCI6MX0.aw7l9A.SIGNATURE-THAT-MUST-NOT-BE-LOGGED"
        requests.get(f"{base_url}/reports/1", params={"s": signed}, timeout=10)
        logs = run.state / "logs"
        web_log = logs / "access.log"  # the web's access log, beside web.log

        def logged(web_log: Path = web_log) -> bool:
            return web_log.exists() and b"/reports/1?s=REDACTED" in web_log.read_bytes()

        wait_until(
            logged,
            timeout=30,
            what="the access log line of the signed link",
        )
        assert logs.stat().st_mode & 0o777 == 0o700
        files = [path for path in logs.rglob("*") if path.is_file()]
        assert web_log in files
        assert logs / "web.log" in files
        for path in [*files, run.state / "console.log"]:
            assert path.stat().st_mode & 0o777 == 0o600, path
            assert b"SIGNATURE-THAT-MUST-NOT-BE-LOGGED" not in path.read_bytes(), path
        if os.geteuid() == 0:
            assert _as_nobody("cat", str(web_log)).returncode != 0
