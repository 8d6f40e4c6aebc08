"""The log format of every process (observability/logs.py): JSON lines or plain text, the job's ids."""

from __future__ import annotations

import io
import json
import logging

import pytest

from config import ConfigError
from observability.logs import ContextFilter, JobContext, formatter, job_context, log_format, readable


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


def emit(fmt: str, stream: io.StringIO, *, job: JobContext | None = None, fail: bool = False) -> str:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(ContextFilter("worker"))
    logger = logging.getLogger(f"test_logs.{fmt}")
    logger.propagate = False
    logger.addHandler(handler)
    token = job_context.set(job)
    try:
        if fail:
            try:
                raise RuntimeError("generation failed\non two lines")
            except RuntimeError:
                logger.exception("report of record %s failed", 42)
        else:
            logger.warning("report of record %s generated", 42)
    finally:
        job_context.reset(token)
        logger.removeHandler(handler)
    return stream.getvalue()


def test_json_is_one_line_with_the_traceback_and_the_job_ids(stream: io.StringIO) -> None:
    out = emit("json", stream, job=JobContext("m-1", 42), fail=True)
    assert out.count("\n") == 1
    entry = json.loads(out)
    assert entry["message"] == "report of record 42 failed"
    assert (entry["level"], entry["process_kind"], entry["message_id"], entry["record_id"]) == (
        "ERROR",
        "worker",
        "m-1",
        42,
    )
    assert "Traceback" in entry["exc_info"]
    assert "on two lines" in entry["exc_info"]
    assert entry["time"].endswith("+00:00")
    assert "job" not in entry


def test_json_outside_a_job_has_no_job_fields(stream: io.StringIO) -> None:
    entry = json.loads(emit("json", stream))
    assert "message_id" not in entry
    assert "record_id" not in entry


def test_text_names_the_process_and_the_job(stream: io.StringIO) -> None:
    line = emit("text", stream, job=JobContext("m-1", 42))
    assert "WARNING [worker " in line
    assert line.rstrip().endswith("report of record 42 generated [message m-1 record 42]")


def test_a_job_without_a_record_names_its_message_only(stream: io.StringIO) -> None:
    line = emit("text", stream, job=JobContext("m-2", None))
    assert line.rstrip().endswith("[message m-2]")
    assert "None" not in line


def test_stored_bytes_read_as_text_in_a_log_line() -> None:
    assert readable("答案 saved".encode()) == "“答案 saved”"
    assert readable(b"not json \xff\nsecond line") == "“not json \\xff\\nsecond line”"
    assert readable(b"x" * 300, 10) == "“xxxxxxxxxx…”"
    assert "b'" not in readable(b"\x00\x1b[31m")


@pytest.mark.parametrize(("value", "expected"), [("", "text"), ("JSON", "json"), (" text ", "text")])
def test_log_format_values(value: str, expected: str) -> None:
    assert log_format({"LOG_FORMAT": value}) == expected


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ConfigError, match="LOG_FORMAT"):
        log_format({"LOG_FORMAT": "yaml"})


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_format_needs_the_callers_place(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """configure_logging turns off the lookup of each record's file, line and function (and the
    multiprocessing name): the lines are the same without them, but for their time."""

    def line(lookups: bool) -> str:
        monkeypatch.setattr(logging, "_srcfile", logging.__file__ if lookups else None)
        monkeypatch.setattr(logging, "logMultiprocessing", lookups)
        out = emit(fmt, io.StringIO(), job=JobContext("m-1", 42), fail=True)
        if fmt == "json":
            entry = json.loads(out)
            del entry["time"]
            return json.dumps(entry, sort_keys=True)
        return out.split(" ", 2)[2]  # after the date and time

    assert line(lookups=True) == line(lookups=False)
