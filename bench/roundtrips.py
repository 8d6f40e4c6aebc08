"""Redis round trips and commands per processed message, for each system.

    python -m bench.roundtrips [--n 5000] [--threads 1 8] [--quick] [--redis-url URL]

Runs the children of `bench.throughput` (same systems, same no-op actor, a fresh
interpreter each) against a private `redis-server` started for the purpose on a free
port, because `INFO commandstats` counts every client of a server: on a shared one
other people's commands would be counted too (give --redis-url to use another server
anyway). For the drain phase (N messages processed) and the single-enqueue phase:

- requests/msg: requests redis-py sent from the worker process (a pipeline or a
  script call counts once), i.e. network round trips;
- commands/msg: the server's `INFO commandstats` delta, every command counted,
  including those run inside Lua scripts (an EVALSHA and the LMOVEs it runs);
- the largest entries of that delta.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import Any

from bench import output, stores, throughput


def per_message(result: dict[str, Any], phase: str) -> tuple[float, float, str]:
    io = result[phase]
    n = result["n"]
    commands = io["commands"]
    top = sorted(commands.items(), key=lambda kv: -kv[1])[:4]
    breakdown = ", ".join(f"{name} {count / n:.2f}" for name, count in top)
    return io["round_trips"] / n, sum(commands.values()) / n, breakdown


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.roundtrips", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="messages per system (default 5000)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--systems", nargs="+", default=list(throughput.SYSTEMS), choices=throughput.SYSTEMS)
    parser.add_argument("--redis-url", default=None, help="default: a private redis-server")
    parser.add_argument("--quick", action="store_true", help="tiny size: --n 300")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.n = 300
    with contextlib.ExitStack() as stack:
        url = args.redis_url or stack.enter_context(stores.private_redis())
        output.log(f"bench.roundtrips: n={args.n} threads={args.threads} redis={url}")
        results = throughput.measure(args.systems, args.threads, 1, args.n, url, label="roundtrips")
        machine = output.machine_info(stores.redis_client(url))
    rows = []
    table_rows = []
    for r in results:
        if r["system"] == "stub":
            continue  # no Redis
        drain_rt, drain_cmd, drain_top = per_message(r, "drain_io")
        enq_rt, enq_cmd, _ = per_message(r, "enqueue_io")
        label = f"{throughput.LABELS[r['system']]} @{r['threads']}"
        rows.append(
            {
                "system": r["system"],
                "threads": r["threads"],
                "prefetch": r["prefetch"],
                "drain_requests_per_msg": drain_rt,
                "drain_commands_per_msg": drain_cmd,
                "drain_commands": r["drain_io"]["commands"],
                "enqueue_requests_per_msg": enq_rt,
                "enqueue_commands_per_msg": enq_cmd,
                "enqueue_commands": r["enqueue_io"]["commands"],
            }
        )
        table_rows.append([label, r["prefetch"], drain_rt, drain_cmd, drain_top, enq_rt, enq_cmd])
    table = output.print_table(
        f"Redis work per message ({args.n} messages; per processed message, and per single enqueue)",
        [
            "system",
            "prefetch",
            "drain requests/msg",
            "drain commands/msg",
            "largest (per msg)",
            "enqueue requests/msg",
            "enqueue commands/msg",
        ],
        table_rows,
    )
    data = {"params": vars(args), "machine": machine, "rows": rows, "runs": results, "tables": [table]}
    output.write_results("roundtrips", data)
    return data


if __name__ == "__main__":
    main()
