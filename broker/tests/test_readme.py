"""The README's example application runs as written: its code block is imported as the module
`app` (as `dramatiq app` does) and a Dramatiq worker runs its messages against the test Redis."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import dramatiq
import pytest
import redis
from listbroker import DEAD_LETTER_OPTION, QueueKeys, RedisListBroker

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## A Dramatiq application on this broker"

#: Longest wait for the worker to reach what the example promises (a bound, not a measure).
PATIENCE_S = 30.0


def example_code() -> str:
    """The first Python block of the README's section on a Dramatiq application."""
    section = README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str, redis_client: redis.Redis
) -> Iterator[ModuleType]:
    (tmp_path / "app.py").write_text(example_code(), encoding="utf-8")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = dramatiq.get_broker()
    module = importlib.import_module("app")
    try:
        yield module
    finally:
        sys.modules.pop("app", None)
        module.broker.close()
        module.results.close()
        dramatiq.set_broker(previous)


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, "the worker did not get there"
        time.sleep(0.05)


def test_the_readme_example_runs_its_messages_retries_and_dead_letters(
    app: ModuleType, redis_client: redis.Redis
) -> None:
    assert isinstance(app.broker, RedisListBroker)
    assert dramatiq.get_broker() is app.broker
    broken = app.broken.send()
    app.add.send(2, 3)
    app.flaky.send("a")
    dead_key = QueueKeys.for_queue("default").dead

    worker = dramatiq.Worker(app.broker, worker_threads=2, worker_timeout=100)
    worker.start()
    try:
        wait_for(lambda: redis_client.llen("example:done") == 1 and redis_client.llen(dead_key) == 1)
    finally:
        worker.stop(timeout=10_000)

    assert redis_client.lrange("example:sums", 0, -1) == [b"5"]
    # flaky: its first attempt failed, its retry succeeded.
    assert redis_client.get("example:attempts:a") == b"2"
    assert redis_client.lrange("example:done", 0, -1) == [b"a"]
    # broken: two attempts (one retry), then the hook and the dead letter, with its error.
    assert redis_client.lrange("example:dead", 0, -1) == [broken.message_id.encode()]
    [entry] = redis_client.lrange(dead_key, 0, -1)
    body = json.loads(entry)
    assert body["message_id"] == broken.message_id
    assert body["options"][DEAD_LETTER_OPTION]["attempts"] == 2
    assert "ValueError: every attempt fails" in body["options"][DEAD_LETTER_OPTION]["error"]
    assert redis_client.llen(QueueKeys.for_queue("default").queue) == 0


def test_the_readme_commands_send_and_run_the_messages(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    """`python app.py` queues the messages, `dramatiq app` runs them, as the README says."""
    (tmp_path / "app.py").write_text(example_code(), encoding="utf-8")
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": ""}
    subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env, check=True, timeout=60)
    assert redis_client.llen(QueueKeys.for_queue("default").queue) == 3
    worker = subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "app", "--processes", "1", "--threads", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        dead_key = QueueKeys.for_queue("default").dead
        wait_for(lambda: redis_client.llen("example:done") == 1 and redis_client.llen(dead_key) == 1)
        assert redis_client.lrange("example:sums", 0, -1) == [b"5"]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
