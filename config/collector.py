"""Python's cyclic garbage collector, spaced out for the worker's and the web's processes.

CPython runs a generation-0 pass of its cycle collector every 700 container allocations
net of frees. A report's generation or a request allocates thousands of containers (rows,
tuples, dicts, models) that reference counting frees anyway, so the passes run many times
per batch of reports, each walking what is young at that moment. Measured (BENCHMARKS.md,
"Generation without the queue"; `python -m bench.generation_core --threads 4 --collectors spaced
default`): with CPython's default the collector took 22-40 µs per report (10-15 % of the
generation's CPU), at a threshold of 10,000 under 0.5 µs. Freezing what the process built at
boot (`gc.freeze`) made no difference (full passes are rare), so it is not done.

Only cycles wait longer: reference counting frees everything else at once, as before.
"""

from __future__ import annotations

import gc

#: Container allocations net of frees between two generation-0 passes (CPython's default:
#: 700). Older generations keep their ratios, so they are spaced by the same factor.
DEFAULT_GEN0_THRESHOLD = 10_000


def space_collections(gen0_threshold: int = DEFAULT_GEN0_THRESHOLD) -> None:
    """Run the collector's generation-0 pass every `gen0_threshold` allocations (see the module's doc)."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(1, gen0_threshold), gen1, gen2)
