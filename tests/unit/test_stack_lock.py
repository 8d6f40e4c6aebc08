"""One `make run` per state folder (scripts/stack_lock.py): the lock, who holds it, what a second run says."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scripts import stack_lock


def test_a_held_lock_names_its_holder_and_a_free_one_nothing(tmp_path: Path) -> None:
    assert stack_lock.running(tmp_path) is None  # never run here
    held = stack_lock.acquire(tmp_path)
    assert isinstance(held, stack_lock.StackLock)
    assert (tmp_path / "run.lock").stat().st_mode & 0o777 == 0o600
    starting = stack_lock.running(tmp_path)
    assert starting is not None
    assert (starting.pid, starting.base_url) == (os.getpid(), None)
    assert "still starting" in starting.describe()
    (tmp_path / "stack.json").write_text(
        json.dumps({"pid": os.getpid(), "base_url": "http://127.0.0.1:8123"})
    )

    second = stack_lock.acquire(tmp_path)  # another open file: refused as another process is
    assert isinstance(second, stack_lock.RunningStack)
    said = " ".join(second.refusal())
    assert f"already running on {tmp_path}" in said
    assert f"pid {os.getpid()}" in said
    assert "web http://127.0.0.1:8123/, console http://127.0.0.1:8123/admin/" in said
    assert "`make stop`" in said
    assert f"`kill {os.getpid()}`" in said
    assert "MI_STATE_DIR=" in said

    held.handle.close()  # the process ended, however: the kernel drops the lock
    assert stack_lock.running(tmp_path) is None
    again = stack_lock.acquire(tmp_path)
    assert isinstance(again, stack_lock.StackLock)
    again.handle.close()


def test_a_stack_json_of_another_run_is_not_taken_for_the_holders(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(json.dumps({"pid": 1, "base_url": "http://127.0.0.1:9999"}))
    held = stack_lock.acquire(tmp_path)
    assert isinstance(held, stack_lock.StackLock)
    holder = stack_lock.running(tmp_path)
    assert holder is not None
    assert holder.base_url is None  # left by an earlier run: not this one's URL
    held.handle.close()
