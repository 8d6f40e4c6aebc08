"""Run the test suite as parts at once, each with servers of its own.

    python -m scripts.test_shards [--broker-suite] [--parts N] [pytest arguments]

The suite's files are split into PARTS parts (or N) of about equal time (tests/support/parts.py),
run at once: many tests mostly wait (the real 10/30/60 s retry schedule, outages held for
seconds, processes killed and restarted, the soak's three minutes), so the parts overlap
their waits with the others' work and the suite takes about the time of its longest part.
`--broker-suite` runs the broker library's own suite (scripts/broker_suite.py) beside them,
as `make test` does. Each shard runs under `scripts.with_test_services`, which claims a test
database and a Redis db index of its own, so the shards share no data. Each output line is
prefixed with its shard's name, and the failed tests of every shard are named again at the
end (pytest's `FAILED`/`ERROR` summary lines), where a CI log's tail shows them; the exit
status is the first failing shard's (0 when all pass; a part to which a narrow selection
leaves no test passes).

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

#: How many parts the suite runs as, at once (tests/support/parts.py balances them).
PARTS = 6
#: Every test but the chaos soak on Redis Sentinel: the soak's 3-minute run is a gate, its run
#: on Sentinel (`make soak-sentinel`, 6 minutes more) is not (docs/reliability.md).
SELECTION = "not sentinel_soak"
#: The option asking for the broker library's suite beside the parts, and the one setting
#: how many parts there are.
BROKER_SUITE = "--broker-suite"
PARTS_OPTION = "--parts"
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
    # last three runs' folders, so a run starting elsewhere (another shard, a nested run of
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


def shards(
    args: list[str], temp_root: Path | None, *, broker_suite: bool, parts: int = PARTS
) -> list[tuple[str, list[str]]]:
    """(name, command) of each shard: the parts, and the broker library's suite if asked."""
    found = [
        (
            f"part-{k}",
            _pytest(
                SELECTION,
                args,
                temp_root / f"part-{k}" if temp_root else None,
                ("-p", "tests.support.parts", "--part", f"{k}/{parts}"),
            ),
        )
        for k in range(1, parts + 1)
    ]
    if broker_suite:
        runner = [sys.executable, "-m", "scripts.broker_suite"]
        found.append(("broker", [sys.executable, "-m", "scripts.with_test_services", "--", *runner]))
    return found


def _relay(name: str, stream: IO[str], failures: list[str], ended: dict[str, float] | None = None) -> None:
    """Print the shard's lines prefixed with its name, keep its failures; at the end of its
    output (the shard's end), note when."""
    for line in stream:
        if line.startswith(FAILURE_PREFIXES):
            failures.append(f"[{name}] {line}")
        with _print_lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
    if ended is not None:
        ended[name] = time.monotonic()


def run_shards(args: list[str], *, broker_suite: bool = False, parts: int = PARTS) -> int:
    """Start every shard, relay their output line by line, wait for all of them."""
    started = time.monotonic()
    own_temp = not any(arg.startswith("--basetemp") for arg in args)
    temp_root = Path(tempfile.mkdtemp(prefix="mi-pytest-")) if own_temp else None
    running: list[tuple[str, subprocess.Popen[str], threading.Thread]] = []
    failures: list[str] = []
    ended: dict[str, float] = {}
    for name, command in shards(args, temp_root, broker_suite=broker_suite, parts=parts):
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert process.stdout is not None
        relay = threading.Thread(target=_relay, args=(name, process.stdout, failures, ended), daemon=True)
        relay.start()
        running.append((name, process, relay))
    outcome = 0
    summary: list[str] = []
    try:
        for name, process, relay in running:
            code = process.wait()
            relay.join()
            if code == NO_TESTS_COLLECTED:
                code = 0  # nothing of a narrow selection fell to this part
            summary.append(f"shard {name}: exit {code}, {ended.get(name, time.monotonic()) - started:.0f} s")
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
    broker_suite = BROKER_SUITE in args
    args = [arg for arg in args if arg != BROKER_SUITE]
    parts = PARTS
    if PARTS_OPTION in args:
        at = args.index(PARTS_OPTION)
        parts = int(args[at + 1])
        del args[at : at + 2]
    if os.environ.get("TEST_DATABASE_URL") or os.environ.get("TEST_REDIS_URL"):
        code = subprocess.call(_pytest(None, args))
        if broker_suite:
            code = code or subprocess.call([sys.executable, "-m", "scripts.broker_suite"])
        return code
    return run_shards(args, broker_suite=broker_suite, parts=parts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
