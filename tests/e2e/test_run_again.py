"""End to end: `make run` run again in the same checkout, as an operator does.

- A second `make run` on the state folder of one running refuses at once, names the running
  stack (pid, URL, how to stop it), and leaves it untouched: its processes, its web socket,
  its servers (it stopped them as leftovers, and its web never got its socket again).
- Started again after a stop, `make run` takes the web port of the previous run while it is
  free, so URLs already handed out keep working; when that port is taken it says so in the
  banner.
- The terminal is quiet: the banner, then `ready`; the web's access log in its file.

The stacks run scripts/run_stack.py (what `make run` runs) on the test servers, with no
PORT: the port is `make run`'s own choice, as for an operator.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from sqlalchemy import Engine

from config.settings import Settings
from scripts import run_stack
from tests.support.processes import RunStack, wait_until
from tests.support.stack import ADMIN_TOKEN, STACK_SETTINGS, reset

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

READY_S = 150


@pytest.fixture
def environment(settings: Settings, redis_url: str, engine: Engine) -> dict[str, str]:
    client = redis.Redis.from_url(redis_url)
    reset(engine, client)
    client.close()
    env = {k: v for k, v in os.environ.items() if k != "PORT"}
    # Credentials as strong as `make run` makes them (it refuses a weaker admin token).
    env.update(
        STACK_SETTINGS,
        DATABASE_URL=settings.database_url,
        REDIS_URL=redis_url,
        SECRET_KEY="k" * 43,
        ADMIN_TOKENS=ADMIN_TOKEN,
    )
    return env


def stack_info(state: Path) -> dict[str, Any]:
    return dict(json.loads((state / "stack.json").read_text()))


def ready(run: RunStack) -> bool:
    assert run.alive(), "make run exited:\n" + run.output()[-3000:]
    try:
        base_url = stack_info(run.state)["base_url"]
        return requests.get(f"{base_url}/readyz", timeout=2).status_code == 200 and "ready: " in run.output()
    except (OSError, ValueError, KeyError, requests.RequestException):
        return False


@contextmanager
def make_run(env: dict[str, str], state: Path, log: Path) -> Iterator[RunStack]:
    """`make run` on `state`, ready; stopped at the end (nothing of it may be left)."""
    run = RunStack(env=env, state=state, log_path=log)
    try:
        wait_until(lambda: ready(run), timeout=READY_S, what=f"make run in {state} to be ready", interval=0.2)
        yield run
    finally:
        run.stop()
        assert run.pids() == []


@contextmanager
def port_taken(port: int) -> Iterator[bool]:
    """Listen on `port` (all addresses, as another program would) while inside; False when
    another program has it already (taken either way)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT, as a server binds
        try:
            holder.bind(("", port))
        except OSError:
            yield False
            return
        holder.listen(1)
        yield True


def banner_and_after(output: str) -> tuple[str, list[str]]:
    """The banner (from its first line to the Ctrl-C lines) and the lines printed after it."""
    start = output.index("mi-assessment is starting")
    end = output.index("shows it all here).", start) + len("shows it all here).")
    return output[start:end], [line for line in output[end:].splitlines() if line.strip()]


def test_a_second_make_run_refuses_and_a_restart_keeps_the_web_port_while_it_is_free(
    environment: dict[str, str], tmp_path: Path
) -> None:
    """One operator's afternoon, three stacks on one state folder: started with 8000 taken, run
    again while it runs (refused, nothing touched), stopped and started again (the same port,
    nothing said, no lock left behind), then started with that port taken (a new one, said)."""
    state = tmp_path / "state"
    # 8000 held (by us, or by whoever has it already): the first run gets another port.
    with port_taken(run_stack.WEB_PORT), make_run(environment, state, tmp_path / "first.log") as first:
        info = stack_info(state)
        base_url = str(info["base_url"])
        port = int(info["port"])
        assert port != run_stack.WEB_PORT
        banner, after = banner_and_after(first.output())
        assert f"port {run_stack.WEB_PORT} is in use: web listens on {port}" in banner
        pids = sorted(first.pids())
        web_pid = first.info("web")["pid"]
        socket_path = state / "web.sock"
        assert socket_path.exists()

        # The quiet terminal: `ready` right below the banner; no INFO line, no request.
        assert after[0].startswith("[servers] ready: "), after[:5]
        assert "gunicorn.access" not in first.output()
        assert not [line for line in after if " INFO [" in line]
        wait_until(
            lambda: "GET /readyz" in (state / "logs" / "access.log").read_text(),
            timeout=10,
            what="the access log in its file",
        )

        second = RunStack(env=environment, state=state, log_path=tmp_path / "second.log")
        try:
            code = second.process.wait(timeout=60)
        finally:
            second.service.log.close()  # never second.stop(): it would stop the stack of the folder
        said = second.output()
        assert code == 1, said
        assert f"`make run` is already running on {state}" in said
        assert f"pid {first.process.pid}" in said
        assert f"web {base_url}/" in said
        assert "make stop" in said
        assert "left running by an earlier run" not in said  # it stopped nothing
        assert "release:" not in said  # it started nothing

        # The first stack is as it was: same processes, its socket, its web answering.
        assert first.alive()
        assert sorted(first.pids()) == pids
        assert first.info("web")["pid"] == web_pid
        assert socket_path.exists()
        assert requests.get(f"{base_url}/readyz", timeout=5).status_code == 200
        assert stack_info(state)["pid"] == first.process.pid
    assert (state / "web-port").read_text().strip() == str(port)

    # Stopped, the folder is free again (a stopped run leaves no lock behind), and 8000 may be
    # free now: the previous run's port is taken all the same, and nothing is said.
    with make_run(environment, state, tmp_path / "third.log") as third:
        assert "already running" not in third.output()
        assert int(stack_info(state)["port"]) == port
        banner, _ = banner_and_after(third.output())
        assert f"http://127.0.0.1:{port}/" in banner
        assert "NOTE" not in banner

    # Taken by another program: a new port, and the banner says so (the export line changed).
    with ExitStack() as held:
        taken = held.enter_context(port_taken(port))
        assert taken, f"port {port} was taken by someone else meanwhile"
        with make_run(environment, state, tmp_path / "fourth.log") as fourth:
            new_port = int(stack_info(state)["port"])
            assert new_port != port
            banner, _ = banner_and_after(fourth.output())
            assert (
                f"the web port changed: {port} (the previous run's) is in use, web listens on {new_port}"
                in (banner)
            )
            assert f"BASE_URL=http://127.0.0.1:{new_port}" in banner
