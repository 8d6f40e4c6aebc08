"""Benchmarks of the report pipeline, run side by side with peers (see BENCHMARKS.md).

`python -m bench` runs them all; each one also runs alone, e.g. `python -m bench.throughput`.
"""
