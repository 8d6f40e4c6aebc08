"""The system tests' readers of logs (tests/system): they must find what they look for, or a
topology test's "no error line" and "failover time" would hold whatever happened."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from tests.system.process_logs import error_lines, errors_outside
from tests.system.topologies import CLUSTER_TAKEOVER, SWITCH_MASTER, first_after

PROCESS_LOG = """\
2026-12-01 15:22:16,285 INFO [worker 15095] actors.report: report of record 12 generated
2026-12-01 15:22:16,289 CRITICAL [worker 15095] dramatiq.worker.ConsumerThread(report): connection error
2026-12-01 15:22:16,328 WARNING [worker 15095] listbroker.maintenance: housekeeping failed
2026-12-01 15:31:21,779 ERROR [hotpath 14616] hotpath: retention: cycle failed; retrying every cycle
Traceback (most recent call last):
  File "x.py", line 1, in <module>
redis.exceptions.CrossSlotTransactionError: All keys must map to the same slot
"""


def at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def test_error_lines_are_found_with_their_time(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(PROCESS_LOG)
    found = error_lines(log)
    assert [line.text.split(" ", 3)[2] for line in found[:2]] == ["CRITICAL", "ERROR"]
    assert found[0].when == at("2026-12-01 15:22:16.289")
    # the traceback and its last line carry the time of the line they follow
    assert [line.when for line in found[2:]] == [at("2026-12-01 15:31:21.779")] * 2
    assert "CrossSlotTransactionError" in found[-1].text


def test_errors_inside_a_fault_window_are_left_out(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(PROCESS_LOG)
    window = (at("2026-12-01 15:22:16.000"), at("2026-12-01 15:22:17.000"))
    outside = errors_outside([log], [window])
    assert len(outside) == 3
    assert all(
        "hotpath" in line.text or "CrossSlot" in line.text or "Traceback" in line.text for line in outside
    )


def test_the_takeover_is_read_from_the_servers_logs(tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel.log"
    sentinel.write_text(
        "123:X 01 Dec 2026 15:22:16.500 # +sdown master mymaster 127.0.0.1 40001\n"
        "123:X 01 Dec 2026 15:22:18.400 # +switch-master mymaster 127.0.0.1 40001 127.0.0.1 40002\n"
    )
    replica = tmp_path / "replica.log"
    replica.write_text(
        "77:S 01 Dec 2026 15:31:20.000 * Failover election won for epoch 7.\n"
        "77:M 01 Dec 2026 15:31:20.010 # configEpoch set to 7 after successful failover\n"
    )
    since = at("2026-12-01 15:22:16.000")
    assert first_after([sentinel], SWITCH_MASTER, since) == at("2026-12-01 15:22:18.400")
    assert first_after([sentinel, replica], CLUSTER_TAKEOVER, since) == at("2026-12-01 15:31:20.010")
    assert first_after([sentinel], SWITCH_MASTER, at("2026-12-01 15:22:19.000")) is None
