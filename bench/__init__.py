"""Benchmarks of the report pipeline, run side by side with peers (see BENCHMARKS.md).

`python -m bench` runs them all; each one also runs alone, e.g. `python -m bench.throughput`.
"""

from pathlib import Path

#: The repository root: the stack's processes and children run from here.
ROOT = Path(__file__).resolve().parent.parent
