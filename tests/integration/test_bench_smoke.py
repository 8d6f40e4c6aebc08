"""Smoke test of the benchmarks (bench/): each one runs with tiny sizes and yields its rows.

The real figures come from `make bench` (see BENCHMARKS.md); this only keeps the
scripts working. Results go to a temporary folder, not bench/results/.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from bench.web_tier import procfile_shape

#: Benchmark, arguments for a run of a few seconds, check of its result.
CASES: list[tuple[str, list[str], Callable[[dict[str, Any]], None]]] = []


def case(name: str, *args: str) -> Callable[[Callable[[dict[str, Any]], None]], None]:
    def register(check: Callable[[dict[str, Any]], None]) -> None:
        CASES.append((name, list(args), check))

    return register


@case(
    "throughput",
    "--n",
    "100",
    "--runs",
    "1",
    "--threads",
    "2",
    "--systems",
    "ours",
    "ours-batch",
    "dramatiq",
    "stub",
    "rq",
)
def _throughput(data: dict[str, Any]) -> None:
    rates = data["summary"]["drain_msgs_per_s"]
    assert set(rates) == {"ours@2", "ours-batch@2", "dramatiq@2", "stub@2", "rq@1"}
    assert all(rate > 0 for rate in rates.values())
    assert "ours/dramatiq@2" in data["summary"]["ratios"]
    assert "ours-batch/stub@2" in data["summary"]["ratios"]
    batched_run = next(r for r in data["runs"] if r["system"] == "ours-batch")
    assert 1 <= batched_run["batch_calls"] <= 100  # each of the 100 messages in some call
    assert set(data["summary"]["enqueue_batched_msgs_per_s"]) == {
        "ours",
        "ours-batch",
        "dramatiq",
        "stub",
        "rq",
    }


@case("roundtrips", "--n", "100", "--threads", "2", "--systems", "ours", "rq")
def _roundtrips(data: dict[str, Any]) -> None:
    rows = {row["system"]: row for row in data["rows"]}
    assert set(rows) == {"ours", "rq"}
    assert 0 < rows["ours"]["drain_requests_per_msg"] < rows["rq"]["drain_requests_per_msg"]
    assert rows["ours"]["drain_commands"].get("lmove", 0) >= 100


@case("e2e_reports", "--n", "20", "--processes", "1", "--runs", "1", "--threads", "2")
def _e2e(data: dict[str, Any]) -> None:
    assert data["median_reports_per_s"]["1"] > 0


# 100 records a mode: PostgreSQL's CPU for them (~0.5 ms a report) must register in psutil's
# 10 ms ticks, which a few records' worth does not always do.
@case("generation_limit", "--n", "100", "--runs", "1", "--processes", "1", "--threads", "2", "--batch", "5")
def _generation_limit(data: dict[str, Any]) -> None:
    assert set(data["summary"]) == {"pipeline", "sql", "sql100"}
    assert all(mode["reports_per_s"] > 0 for mode in data["summary"].values())
    assert data["summary"]["sql"]["vs_sql"] == 1.0
    # The worker's group-size histogram was read: every report ran in some group.
    [run] = data["runs"]["pipeline"]
    assert 1 <= run["groups"] <= 100
    assert data["summary"]["sql100"]["records_per_transaction"] == 5
    # psutil's CPU times tick in 10 ms: tiny runs are only sure to show some in total.
    assert sum(run["pg_cpu_s"] for runs in data["runs"].values() for run in runs) > 0


@case("submit_latency", "--rate", "20", "--duration", "0.5", "--runs", "1", "--slow-seconds", "0.1")
def _submit(data: dict[str, Any]) -> None:
    assert set(data["summary"]) == {"fast", "slow"}
    assert all(s["p50_ms"] > 0 for s in data["summary"].values())
    assert {r["count"] for r in data["runs"]} == {10}


@case("retry_lateness", "--n", "10", "--delay-ms", "300", "--threads", "2")
def _retry(data: dict[str, Any]) -> None:
    assert len(data["samples"]["repush_late_s"]) == 10
    assert len(data["samples"]["attempt_late_s"]) == 10
    assert data["summary"]["repush"]["min"] >= 0


@case("batch_regenerate", "--n", "40", "--batch", "20")
def _batch(data: dict[str, Any]) -> None:
    assert data["summary"]["batched_s"] > 0
    assert data["summary"]["single_s"] > 0


@case(
    "batch_regenerate", "--n", "40", "--batch", "20", "--no-single", "--end-to-end", "--worker-threads", "2"
)
def _batch_end_to_end(data: dict[str, Any]) -> None:
    summary = data["summary"]
    assert summary["single_s"] != summary["single_s"]  # NaN: skipped
    assert 0 < summary["end_to_end_calls_s"] < summary["end_to_end_generated_s"]


@case(
    "batch_regenerate",
    *("--n", "40", "--batch", "20", "--no-single", "--end-to-end", "--one-call", "--worker-threads", "2"),
)
def _batch_one_call(data: dict[str, Any]) -> None:
    summary = data["summary"]
    [call_s], [task_s], [generated_s] = (
        summary["one_call_s"],
        summary["one_call_task_s"],
        summary["one_call_generated_s"],
    )
    assert 0 < call_s < task_s <= generated_s
    assert len(summary["per_round_generated_ratio"]) == 1


@case("memory", "--n", "400", "--step", "200")
def _memory(data: dict[str, Any]) -> None:
    assert [s["processed"] for s in data["samples"]] == [0, 200, 400]


@case("cluster", "--n", "50", "--runs", "1", "--threads", "2")
def _cluster(data: dict[str, Any]) -> None:
    assert len(data["modes"]) == 3
    assert all(mode["drain_s"] > 0 for mode in data["modes"].values())


@case("profile_worker", "--quick", "--threads", "2")
def _profile_worker(data: dict[str, Any]) -> None:
    assert data["samples"] > 0
    assert abs(sum(data["shares"].values()) - 1) < 1e-9


@case("generation_core", "--quick")
def _generation_core(data: dict[str, Any]) -> None:
    assert {row["threads"] for row in data["rows"]} == {1, 2}
    assert all(row["per_s"] > 0 and row["cpu_us"] > 0 for row in data["rows"])


@case("profile_web", "--quick")
def _profile_web(data: dict[str, Any]) -> None:
    assert data["submissions"] > 0
    assert data["samples"] > 0
    assert abs(sum(data["shares"].values()) - 1) < 1e-9


@case("web_inprocess", "--quick", "--tree", ".", "--baselines")
def _web_inprocess(data: dict[str, Any]) -> None:
    # This tree against itself (the tree by its path, in its own interpreter) and the two
    # baselines' apps (each child checks every call answered 200): one pair.
    for side in ("this tree", "other tree", "baseline", "baseline-flask"):
        [run] = data["runs"][side]
        assert set(run) == {"createRecord", "startAssessment", "submitAnswers"}
        assert all(ms > 0 for ms in run.values())
    assert len(data["ratios"]) == 1
    ratios = data["baseline_ratios"]
    assert {name: len(r) for name, r in ratios.items()} == {"baseline": 1, "baseline-flask": 1}


SCALING_FIELDS = {"rate", "workers_ms_per_msg", "redis_ms_per_msg", "postgres_ms_per_msg", "saturated"}


def _scaling_rows(data: dict[str, Any], modes: list[str]) -> None:
    rows = data["summary"]["rows"]
    assert set(rows) == {f"{m}/{p}/{k}" for m in modes for p in (1, 2) for k in ("noop", "reports")}
    for row in rows.values():
        assert set(row) >= SCALING_FIELDS
        assert row["rate"] > 0
        assert 0 < row["machine_busy"] <= 1
    assert all(run["loadavg"] for run in data["runs"])
    # psutil's CPU times tick in 10 ms: tiny runs are only sure to show some in total.
    assert sum(run["cpu_s"]["workers"] for run in data["runs"]) > 0
    assert sum(run["cpu_s"]["postgres"] for run in data["runs"] if run["kind"] == "reports") > 0


SCALING_TINY = (
    "--processes",
    "1",
    "2",
    "--threads",
    "2",
    "--noop-n",
    "100",
    "--reports-n",
    # Enough for PostgreSQL's CPU to register (~0.5 ms a report; CPU times tick in 10 ms):
    # 10 reports' worth does not always register.
    "200",
    "--runs",
    "1",
)


@case("web_tier", "--quick", "--flask-floor")
def _web_tier(data: dict[str, Any]) -> None:
    # One submission through each side left the same record, answers, events and job.
    assert data["checks"]["product"] == data["checks"]["baseline"] == data["checks"]["baseline-flask"]
    assert data["checks"]["product"]["status"] == 3
    assert data["checks"]["product"]["answers_match"] is True
    assert data["checks"]["product"]["events"] == ["answers.submitted", "record.created", "record.started"]
    assert data["checks"]["product"]["jobs"] == [(True, 0)]
    assert {row["side"] for row in data["rows"]} == {"product", "baseline", "baseline-flask"}
    assert all(row["submissions"] > 0 and row["errors"] == 0 for row in data["rows"])
    assert {"flask_floor", "rate_vs_flask"} <= set(data["ratios"][0])
    # The product at the Procfile's shape as it ships, the baselines at the same.
    assert data["shapes"]["product"] == data["shapes"]["baselines"] == procfile_shape()


@case("scaling", *SCALING_TINY)
def _scaling(data: dict[str, Any]) -> None:
    _scaling_rows(data, ["local"])
    assert data["netns_error"] is None


@case("scaling", *SCALING_TINY, "--netns")
def _scaling_hosts(data: dict[str, Any]) -> None:
    """Network namespaces as hosts where the sandbox allows them; else the error, local only."""
    if data["netns_error"] is None:
        _scaling_rows(data, ["local", "netns"])
        # Each worker process beat under its host's name, as workers on other machines would.
        two_hosts = [r["worker_hosts"] for r in data["runs"] if r["mode"] == "netns" and r["processes"] == 2]
        assert two_hosts
        assert all(hosts == ["scaling-host-1", "scaling-host-2"] for hosts in two_hosts)
    else:
        assert "failed" in data["netns_error"]
        _scaling_rows(data, ["local"])


@pytest.mark.parametrize(("name", "args", "check"), CASES, ids=[c[0] for c in CASES])
def test_benchmark_runs_and_reports(
    name: str,
    args: list[str],
    check: Callable[[dict[str, Any]], None],
    engine: Engine,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    module = importlib.import_module(f"bench.{name}")
    data = module.main(args)
    check(data)
    assert (tmp_path / f"{name}.json").exists()
    assert data["tables"]
    assert "|" in data["tables"][0]
