"""`python -m bench`: run every benchmark, one after the other, and collect their tables.

    python -m bench [--quick] [--only throughput memory ...]

`make bench` runs this under scripts/with_test_services.py (TEST_DATABASE_URL,
TEST_REDIS_URL). Each benchmark writes bench/results/<name>.json; all the tables are
also written to bench/results/summary.md.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence

from bench import output, stores

BENCHMARKS = (
    "throughput",
    "roundtrips",
    "e2e_reports",
    "submit_latency",
    "retry_lateness",
    "batch_regenerate",
    "memory",
    "generation_limit",
    "web_tier",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes everywhere (a smoke run)")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    sections = []
    machine = output.machine_info(stores.redis_client(stores.redis_url()))
    output.log(f"machine: {machine['nproc']} cores, {machine['cpu']}, Python {machine['python']}")
    for name in args.only:
        output.log(f"== {name}")
        module = importlib.import_module(f"bench.{name}")
        data = module.main(["--quick"] if args.quick else [])
        sections += [f"## {name}\n", *data.get("tables", []), ""]
    summary = "\n\n".join(sections)
    (output.results_dir() / "summary.md").write_text(summary + "\n")
    output.log(f"all done in {time.monotonic() - started:.0f} s; tables in bench/results/summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
