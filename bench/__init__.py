"""Benchmarks of the report pipeline, side by side with peers and lean baselines (BENCHMARKS.md).

`python -m bench` (`make bench`) runs the list of bench/__main__.py; every benchmark also runs
alone, e.g. `python -m bench.throughput --help`, including those that start servers of their
own (`scaling`, `cluster`) and the chaos soak (`soak`, with its `soak_*` parts).

Beside the benchmarks: the lean baselines (`sql_generate`, `web_baseline`,
`web_baseline_flask`), the workers they start (`workers/`), and their shared parts (`stores`
and `db`: the servers and the records; `launch`: child processes; `cpu`, `stats`,
`http_load`, `netns`; `output`: tables and result files).
"""

from pathlib import Path

#: The repository root: the stack's processes and children run from here.
ROOT = Path(__file__).resolve().parent.parent
