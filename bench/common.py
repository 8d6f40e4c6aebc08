"""Shared helpers of the benchmarks: servers, child processes, statistics, output.

Servers come from TEST_REDIS_URL / TEST_DATABASE_URL (set by `make bench` through
scripts/with_test_services.py), falling back to REDIS_URL / DATABASE_URL. The
benchmarks only ever touch keys under their own prefixes (see `OWN_KEY_PATTERNS`) and
records of their own users (`BENCH_USER_BASE` and up); they never flush a server.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: Key patterns the benchmarks create, deleted before and after each run (never FLUSHDB).
#: `rq:*` is RQ's fixed namespace; `bench-dramatiq*` Dramatiq RedisBroker's namespace here;
#: `bench-*:queue*` our broker's queues; `broker:heartbeats`, `report:queue*`, `eventlog:*`
#: and `hotpath:*` belong to the real pipeline (the end-to-end benchmarks run it): the
#: benchmarks must be given a db index of their own (the test one).
OWN_KEY_PATTERNS = (
    "bench-*",
    "bench:*",
    "rq:*",
    "report:queue*",
    "broker:heartbeats",
    "eventlog:*",
    "hotpath:*",
)

#: Records of the database benchmarks belong to users from here on; deleted afterwards.
BENCH_USER_BASE = 8_000_000_000


def redis_url() -> str:
    url = os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL")
    if not url:
        raise SystemExit("set TEST_REDIS_URL (or REDIS_URL) to a Redis db index the benchmarks may use")
    return url


def database_url() -> str:
    url = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("set TEST_DATABASE_URL (or DATABASE_URL) to a database the benchmarks may use")
    return url


def delete_own_keys(client: redis.Redis, patterns: Iterable[str] = OWN_KEY_PATTERNS) -> int:
    """Delete the keys matching our own patterns (SCAN + DEL in chunks); the number deleted."""
    deleted = 0
    for pattern in patterns:
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += int(client.delete(*batch))
                batch = []
        if batch:
            deleted += int(client.delete(*batch))
    return deleted


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a free port (no persistence), stopped afterwards."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import servers  # type: ignore[import-not-found]  # scripts/servers.py, as `make test` uses it

    with servers.temporary_directory("mi-bench-redis-") as tmp:
        server = servers.RedisServer(tmp).start()
        try:
            yield server.url
        finally:
            server.stop()


# -- statistics ---------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on the sorted values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return float(ordered[rank - 1])


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


# -- output -------------------------------------------------------------------------------


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


# -- child processes ------------------------------------------------------------------------

#: Marks the line of a child's stdout that carries its JSON result.
RESULT_PREFIX = "BENCH-RESULT "


def emit_result(data: dict[str, Any]) -> None:
    """Called by a child process: hand its result to the parent."""
    print(RESULT_PREFIX + json.dumps(data), flush=True)


def run_child(
    module: str,
    args: Sequence[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    show_stderr: bool = False,
) -> Any:
    """Run `python -m module args...` in a fresh interpreter and return its emitted result."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=None if show_stderr else subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise RuntimeError(
        f"{module} {' '.join(args)} exited {proc.returncode} without a result:\n"
        f"{proc.stdout[-2000:]}\n{(proc.stderr or '')[-4000:]}"
    )


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class RoundTripCounter:
    """Counts the requests redis-py sends from this process (a pipeline counts once)."""

    def __init__(self) -> None:
        self._ticks = itertools.count()  # next() is atomic under the GIL; += is not
        self._reads = 0
        self.installed = False

    def install(self) -> RoundTripCounter:
        if self.installed:
            return self
        from redis.connection import AbstractConnection

        original = AbstractConnection.send_packed_command
        ticks = self._ticks

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            next(ticks)
            original(conn, command, check_health)

        setattr(AbstractConnection, "send_packed_command", counting)  # noqa: B010
        self.installed = True
        return self

    @property
    def value(self) -> int:
        total = next(self._ticks) - self._reads
        self._reads += 1
        return total


def command_stats(client: redis.Redis) -> dict[str, int]:
    """Calls per command on the server (INFO commandstats), e.g. {'lpush': 3, 'evalsha': 10}."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def stats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {k: v for k, v in sorted(delta.items()) if v}


# -- processes of the stack: `dramatiq` workers, the web app under gunicorn -------------------


class Service:
    """A process of the stack in a session of its own, logging to a temporary file."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str]) -> None:
        import tempfile

        self.name = name
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed by stop())
            prefix=f"mi-bench-{name}-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            list(argv),
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return Path(self.log_file.name).read_text(errors="replace")

    def stop(self, timeout: float = 30.0, *, graceful: bool = True) -> None:
        """SIGTERM (SIGKILL after `timeout`), or SIGKILL at once when not `graceful`:
        a benchmark's worker is killed once the measurement is over, its keys deleted."""
        import signal

        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.log_file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log_file.name)

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stack_env(redis: str, database: str) -> dict[str, str]:
    """Environment of the stack's processes: our servers, a secret, an admin token."""
    return {
        "REDIS_URL": redis,
        "DATABASE_URL": database,
        "SECRET_KEY": BENCH_SECRET,
        "ADMIN_TOKENS": BENCH_ADMIN_TOKEN,
        "DB_POOL_SIZE": "10",
    }


BENCH_SECRET = "bench-secret-key"
BENCH_ADMIN_TOKEN = "bench-admin-token"


def start_worker(
    redis: str,
    database: str,
    *,
    module: str = "actors.worker",
    processes: int = 1,
    threads: int = 8,
    env: dict[str, str] | None = None,
) -> Service:
    """`dramatiq MODULE` as the Procfile's worker line runs it; returns once its consumers beat."""
    client = redis_client(redis)
    before = set(client.zrange("broker:heartbeats", 0, -1))
    service = Service(
        "worker",
        [sys.executable, "-m", "dramatiq", module, "--processes", str(processes), "--threads", str(threads)],
        {**stack_env(redis, database), **(env or {})},
    )

    def ready() -> bool:
        if not service.alive():
            raise RuntimeError(f"worker exited:\n{service.output()[-3000:]}")
        return len(set(client.zrange("broker:heartbeats", 0, -1)) - before) >= processes

    wait_until(ready, timeout=60, what="the worker's consumers", interval=0.05)
    return service


def start_web(redis: str, database: str, *, workers: int = 2, threads: int = 1) -> tuple[Service, int]:
    """The real app under gunicorn on a free loopback port (the Procfile's web line)."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "web:create_app()",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--log-level",
        "warning",
    ]
    service = Service("web", argv, stack_env(redis, database))

    def ready() -> bool:
        if not service.alive():
            raise RuntimeError(f"gunicorn exited:\n{service.output()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/assessment/questions", timeout=1):
                return True
        except OSError as exc:
            return getattr(exc, "code", None) is not None  # any HTTP answer: the app is up

    wait_until(ready, timeout=60, what="gunicorn", interval=0.1)
    return service, port


def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=30)
