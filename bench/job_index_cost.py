"""The job index's cost per job: the broker's Lua scripts at a git revision against the checkout's.

    python -m bench.job_index_cost [--old b4b866d] [--n 20000] [--rounds 9]

On a private redis-server (started here on a free port, no persistence, stopped at the end),
a cycle of N report jobs: enqueued 100 per call (enqueue.lua), then fetched 100 per call
with the previous 100 acknowledged in the same call (fetch.lua), as a consumer does. The
old and the new scripts alternate, `--rounds` times; a third run pushes the jobs with a bare
LPUSH (another producer's, counted by the fetch). Then the memory of N jobs waiting, and one
`jobs_alive.lua` call with N jobs of another producer waiting (it counts them all).
Figures: µs per job of the whole round trip (the client's share is the same for both).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "broker" / "src" / "listbroker" / "lua"
BATCH = 100
#: listbroker 1.x read the job key with this Lua pattern; 2.x reads the member RecordId.
OLD_READING = '"RecordId"%s*:%s*(%d+)'


def source(read: Callable[[str], str], name: str) -> str:
    """A script with its prologues in front, as listbroker.scripts.source builds it."""
    body = read(name)
    first = body.split("\n", 1)[0]
    prologues = first[len("-- uses:") :].split() if first.startswith("-- uses:") else []
    return "".join(read(p) for p in prologues) + body


def reader(revision: str | None) -> Callable[[str], str]:
    def read(name: str) -> str:
        if revision is None:
            return (LUA / f"{name}.lua").read_text(encoding="utf-8")
        path = f"{revision}:broker/src/listbroker/lua/{name}.lua"
        return subprocess.run(
            ["git", "-C", str(ROOT), "show", path], capture_output=True, text=True, check=True
        ).stdout

    return read


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="b4b866d", help="git revision of the scripts to compare with")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    n: int = args.n
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        old, new = reader(args.old), reader(None)
        kinds: dict[str, tuple[Any, Any, list[str], list[str], str]] = {
            "old": (
                client.register_script(source(old, "enqueue")),
                client.register_script(source(old, "fetch")),
                ["q", "q:jobs"],
                ["q", "q:p", "q:crashed", "q:jobs"],
                OLD_READING,
            ),
            "new": (
                client.register_script(source(new, "enqueue")),
                client.register_script(source(new, "fetch")),
                ["q", "q:jobs", "q:counted"],
                ["q", "q:p", "q:crashed", "q:jobs", "q:counted", "q:started"],
                "RecordId",
            ),
        }
        moment = "2026-12-06T06:10:44.058898+00:00"
        payloads = [
            json.dumps(
                {"RecordId": 1_000_000 + i, "RetryCount": 0, "EnqueueTime": moment}, separators=(",", ":")
            )
            for i in range(n)
        ]

        def enqueue(kind: str) -> None:
            script, _, keys, _, reading = kinds[kind]
            for i in range(0, n, BATCH):
                script(keys=keys, args=[reading, *payloads[i : i + BATCH]])

        def cycle(kind: str, *, other_producer: bool = False) -> tuple[float, float]:
            _, fetch, _, fetch_keys, reading = kinds[kind]
            client.flushdb()
            started = time.perf_counter()
            if other_producer:
                for i in range(0, n, BATCH):
                    client.lpush("q", *payloads[i : i + BATCH])
            else:
                enqueue(kind)
            enqueued = time.perf_counter()
            acks: list[bytes] = []
            while True:
                acks = list(fetch(keys=fetch_keys, args=[BATCH, reading, *acks])[0])
                if not acks:
                    break
            done = time.perf_counter()
            assert client.llen("q:p") == 0
            assert client.hlen("q:jobs") == 0
            return (enqueued - started) / n * 1e6, (done - enqueued) / n * 1e6

        results: dict[str, list[tuple[float, float]]] = {"old": [], "new": [], "new, another producer's": []}
        for _ in range(args.rounds):
            results["old"].append(cycle("old"))
            results["new"].append(cycle("new"))
            results["new, another producer's"].append(cycle("new", other_producer=True))
        for kind, runs in results.items():
            enq = statistics.median(r[0] for r in runs)
            fetched = statistics.median(r[1] for r in runs)
            print(f"{kind:24s} enqueue {enq:6.2f} µs/job   fetch + ack {fetched:6.2f} µs/job (medians)")
        for kind in ("old", "new"):
            client.flushdb()
            before = int(client.info("memory")["used_memory"])
            enqueue(kind)
            used = int(client.info("memory")["used_memory"]) - before
            counted = int(client.memory_usage("q:counted", samples=0) or 0)
            print(f"{kind}: {n} jobs waiting take {used / n:.0f} B/job, of which q:counted {counted / n:.0f}")
        client.flushdb()
        for i in range(0, n, BATCH):
            client.lpush("q", *payloads[i : i + BATCH])
        jobs_alive = client.register_script(source(new, "jobs_alive"))
        timings = []
        for _ in range(2):
            started = time.perf_counter()
            jobs_alive(keys=["q", "q:jobs", "q:counted"], args=["RecordId", 1_000_005])
            timings.append((time.perf_counter() - started) * 1000)
        print(
            f"jobs_alive, {n} jobs of another producer waiting: {timings[0]:.1f} ms, then {timings[1]:.2f} ms"
        )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
