"""Held events on disk (redis_adapters/event_spool.py): a process killed while neither Redis
nor PostgreSQL took its events loses none; the next process started takes them over.

Found by the soak (bench/soak.py): web processes SIGKILLed while holding events lost them.
The killed process here is a real one, killed with SIGKILL by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, text

from config.settings import Settings
from hotpath.eventlog_consumer import EventLogConsumer
from redis_adapters import event_sink
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.event_spool import SPOOL_SUFFIX, EventSpool, spool_at
from redis_adapters.keyspace import EventLogKeys
from services.domain.events import Event, EventType, dropped_events, emit
from services.persistence.event_store import DirectEventWriter
from tests.support.processes import ROOT, wait_until
from tests.support.urls import CLOSED_DATABASE_URL, CLOSED_REDIS_URL

EVENTS = EventLogKeys()

#: A process whose sink cannot reach either server: it holds three events, then kills itself.
KILLED_WHILE_HOLDING = textwrap.dedent(
    """
    import os, signal, sys, time
    import redis
    from redis_adapters.event_sink import RedisEventSink
    from redis_adapters.event_spool import EventSpool
    from services.domain.events import Event, EventType, emit
    from services.persistence.event_store import DirectEventWriter

    client = redis.Redis.from_url(sys.argv[2], socket_connect_timeout=1, socket_timeout=1)
    sink = RedisEventSink(client, fallback=DirectEventWriter(sys.argv[3]), spool=EventSpool(sys.argv[1]))
    events = [Event.new(EventType.ANSWERS_SAVED, record_id=n, actor="user:1") for n in (1, 2, 3)]
    assert emit(sink, *events) and sink.held == 3, sink.held
    print(" ".join(str(e.id) for e in events), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def spool_files(folder: Path) -> dict[str, int]:
    """name -> lines, of each spool file in `folder`."""
    return {p.name: len(p.read_bytes().splitlines()) for p in folder.glob(f"*{SPOOL_SUFFIX}")}


def test_events_held_by_a_process_killed_meanwhile_are_handed_over_by_the_next_one(
    tmp_path: Path, redis_client: redis.Redis, settings: Settings, event_log: Engine
) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_HOLDING, str(tmp_path), CLOSED_REDIS_URL, CLOSED_DATABASE_URL],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    ids = set(killed.stdout.split())
    assert len(ids) == 3
    assert list(spool_files(tmp_path).values()) == [3]  # on disk when the process died
    # The next process started on the host: its sink takes them over and hands them to Redis.
    writer = DirectEventWriter(settings.database_url)
    sink = RedisEventSink(redis_client, fallback=writer, spool=EventSpool(tmp_path))
    wait_until(
        lambda: redis_client.llen(EVENTS.queue) == 3 and sink.held == 0,
        timeout=30,
        what="the events handed over",
    )
    wait_until(
        lambda: list(spool_files(tmp_path).values()) == [0],
        timeout=30,
        what="the dead process's file removed",
    )
    consumer = EventLogConsumer(redis_client, writer._factory()[0])
    assert consumer.run_once().inserted == 3
    consumer.close()
    with event_log.connect() as conn:
        stored = {row[0] for row in conn.execute(text("SELECT id::text FROM event_log"))}
    assert stored == ids
    writer.dispose()


def test_a_living_process_keeps_its_held_events(tmp_path: Path) -> None:
    """A file whose process is alive (its lock held) is not taken over."""
    alive, starting = EventSpool(tmp_path), EventSpool(tmp_path)
    events = [Event.new(EventType.RECORD_CREATED, record_id=n) for n in (1, 2)]
    alive.append(events)
    assert starting.take_over() == []
    assert spool_files(tmp_path) == {alive.path.name: 2}


def test_a_line_cut_by_the_kill_is_skipped_and_the_rest_taken_over(tmp_path: Path) -> None:
    whole = Event.new(EventType.RECORD_CREATED, record_id=1)
    (tmp_path / f"1-dead{SPOOL_SUFFIX}").write_bytes(
        whole.encode().encode() + b"\n" + whole.encode().encode()[:20]
    )
    taken = EventSpool(tmp_path).take_over()
    assert taken == [whole]
    assert not (tmp_path / f"1-dead{SPOOL_SUFFIX}").exists()


def test_held_events_are_written_once_and_the_file_emptied_once_handed_over(
    tmp_path: Path, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retrier's rounds while both servers stay down do not write the events again (the
    file does not grow with the outage); once Redis takes them, the file is emptied."""
    monkeypatch.setattr(event_sink, "HOLD_RETRY_S", 0.05)
    monkeypatch.setattr(event_sink, "REDIS_RETRY_AFTER_S", 0.0)
    monkeypatch.setattr(event_sink, "DATABASE_RETRY_AFTER_S", 0.0)
    down = redis.Redis.from_url(CLOSED_REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
    unreachable = DirectEventWriter(CLOSED_DATABASE_URL)
    spool = EventSpool(tmp_path)
    sink = RedisEventSink(down, fallback=unreachable, spool=spool)
    before = dropped_events()
    assert emit(sink, *(Event.new(EventType.REPORT_GENERATION_FAILED, record_id=n) for n in (1, 2, 3)))
    assert emit(sink, Event.new(EventType.REPORT_GENERATION_FAILED, record_id=4))
    time.sleep(0.5)  # about ten retrier rounds, each failing on both servers
    assert sink.held == 4
    assert spool_files(tmp_path) == {spool.path.name: 4}
    sink.client = redis_client
    wait_until(
        lambda: sink.held == 0 and redis_client.llen(EVENTS.queue) == 4,
        timeout=30,
        what="the events handed over",
    )
    wait_until(lambda: spool_files(tmp_path) == {spool.path.name: 0}, timeout=30, what="the file emptied")
    assert dropped_events() == before
    unreachable.dispose()


def test_no_folder_no_spool() -> None:
    assert spool_at("") is None
    assert isinstance(spool_at("/nonexistent/yet"), EventSpool)


def test_a_spool_that_cannot_be_written_leaves_the_events_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    down = redis.Redis.from_url(CLOSED_REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
    unreachable = DirectEventWriter(CLOSED_DATABASE_URL)
    sink = RedisEventSink(down, fallback=unreachable, spool=EventSpool(blocker / "spool"))
    assert emit(sink, Event.new(EventType.REPORT_REQUEUED, record_id=1))
    assert sink.held == 1
    assert "in memory only" in caplog.text
    unreachable.dispose()


#: A process holding one event forks a child that holds one of its own, then kills itself;
#: the child lives on (its pid on stdout, then it sleeps until killed).
PARENT_KILLED_CHILD_ALIVE = textwrap.dedent(
    """
    import os, signal, sys, time
    from redis_adapters.event_spool import EventSpool
    from services.domain.events import Event, EventType

    spool = EventSpool(sys.argv[1])
    spool.append([Event.new(EventType.RECORD_CREATED, record_id=1)])
    child = os.fork()
    if child == 0:
        spool.append([Event.new(EventType.RECORD_CREATED, record_id=2)])
        print(os.getpid(), flush=True)
        time.sleep(600)
        os._exit(0)
    time.sleep(0.5)  # the child's file made, its pid printed
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_child_forked_from_a_process_does_not_keep_that_process_file_locked(tmp_path: Path) -> None:
    """A `flock` belongs to the open file: a child that kept its parent's descriptor would keep
    the parent's file locked after the parent ended, and its events would never be taken over."""
    run = subprocess.Popen(
        [sys.executable, "-c", PARENT_KILLED_CHILD_ALIVE, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    child = int(run.stdout.readline())
    try:
        assert run.wait(timeout=60) == -signal.SIGKILL
        taken = EventSpool(tmp_path).take_over()
        assert [event.record_id for event in taken] == [1]  # the parent's; the child's is alive
    finally:
        os.kill(child, signal.SIGKILL)
