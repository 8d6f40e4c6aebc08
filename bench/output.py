"""What a benchmark shows and keeps: progress on stderr, Markdown tables, the machine, result files."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

RESULTS_DIR = Path(__file__).resolve().parent / "results"


class Progress:
    """A one-line progress indicator on stderr (a line per 10 % when not a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.total = max(1, total)
        self.done = 0
        self.tty = sys.stderr.isatty()
        self._last_decile = -1
        self._started = time.monotonic()

    def step(self, amount: int = 1, note: str = "") -> None:
        self.done += amount
        decile = 10 * self.done // self.total
        if self.tty:
            sys.stderr.write(f"\r  {self.label}: {self.done}/{self.total} {note}\x1b[K")
            sys.stderr.flush()
        elif decile != self._last_decile:
            sys.stderr.write(f"  {self.label}: {self.done}/{self.total} {note}\n")
            sys.stderr.flush()
        self._last_decile = decile

    def close(self) -> None:
        elapsed = time.monotonic() - self._started
        end = "\n" if self.tty else ""
        sys.stderr.write(f"{end}  {self.label}: done in {elapsed:.1f} s\n")
        sys.stderr.flush()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Print (and return) a Markdown table."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "–"
            return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
        return str(value)

    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    text = "\n".join(lines)
    print(text + "\n", flush=True)
    return text


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def machine_info(redis_client: redis.Redis | None = None) -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg": os.getloadavg(),
        "packages": {
            name: package_version(name)
            for name in ("dramatiq", "redis", "rq", "flask", "gunicorn", "sqlalchemy", "psycopg")
        },
    }
    if redis_client is not None:
        with contextlib.suppress(redis.RedisError):
            info["redis_server"] = redis_client.info("server").get("redis_version")
    return info


def results_dir() -> Path:
    """bench/results, or BENCH_RESULTS_DIR (the smoke test writes elsewhere)."""
    path = Path(os.environ.get("BENCH_RESULTS_DIR") or RESULTS_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_results(name: str, data: dict[str, Any]) -> Path:
    path = results_dir() / f"{name}.json"
    payload = {"benchmark": name, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **data}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    log(f"  results written to {path}")
    return path
