"""Run the test suite as three shards at once, each with servers of its own.

    python -m scripts.test_shards [pytest arguments]

The tests marked `slow` spend most of their time waiting (the real 10/30/60 s retry
schedule, outages held for seconds, processes killed and restarted), so they run beside
the rest instead of after it, as two parts of about equal time (tests/support/slow_parts.py):
the suite takes about the time of its longest shard. Each
shard runs under `scripts.with_test_services`, which claims a test database and a Redis
db index of its own, so the shards share no data. Each output line is prefixed with its
shard's name, and the failed tests of every shard are named again at the end (pytest's
`FAILED`/`ERROR` summary lines), where a CI log's tail shows them; the exit status is
the first failing shard's (0 when all pass; a shard to which a narrow selection leaves no
test passes).

The shards, and what they start, end when this process ends, however it ends (killed
included): scripts/lifeline.py.

When TEST_DATABASE_URL or TEST_REDIS_URL is set, the shards would share those
servers' data, so the suite runs as one shard, as `make pytest` runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from scripts import lifeline

#: Name, marker expression and pytest options of each shard; together they select every test
#: once. The slow tests (they mostly wait) run as two parts of about equal time beside the
#: CPU-bound rest (tests/support/slow_parts.py).
SLOW_PARTS = ("-p", "tests.support.slow_parts", "--slow-part")
SHARDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # The chaos soak's 3-minute run is a gate; its run on Redis Sentinel (`make soak-sentinel`,
    # 6 minutes more) is not (RELIABILITY.md, "Soak on Redis Sentinel").
    ("slow-1", "slow and not sentinel_soak", (*SLOW_PARTS, "1/2")),
    ("slow-2", "slow and not sentinel_soak", (*SLOW_PARTS, "2/2")),
    ("rest", "not slow", ()),
)
#: pytest's exit status when a run selects no test (a shard's share of a narrow selection).
NO_TESTS_COLLECTED = 5

#: The lines of pytest's short summary (`-ra`) that name a failed test; each shard's are
#: printed again after the last shard ends, so the tail of a long CI log names them.
FAILURE_PREFIXES = ("FAILED ", "ERROR ")

_print_lock = threading.Lock()


def _pytest(
    marker: str | None, args: list[str], basetemp: Path | None = None, options: tuple[str, ...] = ()
) -> list[str]:
    selection = ["-m", marker] if marker else []
    # Each shard's temporary folders apart: pytest's shared /tmp/pytest-of-USER keeps only the
    # last three runs' folders, so a run starting elsewhere (the other shard, a nested run of
    # the fresh-machine tests, another checkout) could remove a folder a slow test still uses.
    temp = ["--basetemp", str(basetemp)] if basetemp is not None else []
    return [
        sys.executable,
        "-m",
        "scripts.with_test_services",
        "--",
        sys.executable,
        "-m",
        "pytest",
        # Two runs at once must not both rewrite .pytest_cache.
        *(["-p", "no:cacheprovider"] if marker else []),
        *selection,
        *options,
        *temp,
        *args,
    ]


def _relay(name: str, stream: IO[str], failures: list[str]) -> None:
    for line in stream:
        if line.startswith(FAILURE_PREFIXES):
            failures.append(f"[{name}] {line}")
        with _print_lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()


def run_shards(args: list[str]) -> int:
    """Start every shard, relay their output line by line, wait for all of them."""
    started = time.monotonic()
    own_temp = not any(arg.startswith("--basetemp") for arg in args)
    temp_root = Path(tempfile.mkdtemp(prefix="mi-pytest-")) if own_temp else None
    running: list[tuple[str, subprocess.Popen[str], threading.Thread]] = []
    failures: list[str] = []
    for name, marker, options in SHARDS:
        process = subprocess.Popen(
            _pytest(marker, args, temp_root / name if temp_root else None, options),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert process.stdout is not None
        relay = threading.Thread(target=_relay, args=(name, process.stdout, failures), daemon=True)
        relay.start()
        running.append((name, process, relay))
    outcome = 0
    summary: list[str] = []
    try:
        for name, process, relay in running:
            code = process.wait()
            relay.join()
            if code == NO_TESTS_COLLECTED:
                code = 0  # nothing of a narrow selection fell to this shard
            summary.append(f"shard {name}: exit {code}")
            if code and not outcome:
                outcome = code
    except KeyboardInterrupt:
        for _, process, _ in running:
            process.terminate()
        raise
    if failures:
        print("failed tests, by shard:", "".join(failures), sep="\n", end="", flush=True)
    if temp_root is not None:
        if outcome:
            summary.append(f"temporary folders kept in {temp_root}")
        else:
            shutil.rmtree(temp_root, ignore_errors=True)
    print(f"{'; '.join(summary)}; {time.monotonic() - started:.0f} s in all", flush=True)
    return outcome


def main(args: list[str]) -> int:
    lifeline.attach()
    if os.environ.get("TEST_DATABASE_URL") or os.environ.get("TEST_REDIS_URL"):
        return subprocess.call(_pytest(None, args))
    return run_shards(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
