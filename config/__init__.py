"""Configuration, the lowest layer: it imports nothing of ours, and every layer may import it.

- `settings`: the one `Settings` object, every variable the application reads, each field
  documented (docs/configuration.md is generated from them), and the only module that reads
  the environment;
- `retries`: the report job's retry schedule (the .NET system's), the default of its setting;
- `redis_urls`: `redis+sentinel://` URLs parsed;
- `collector`: the spacing of Python's cycle collector in the worker and web processes;
- `ConfigError`, here: what a malformed setting or data file raises.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A setting in the environment, or a data file the product reads at start-up, is missing or
    malformed: the process refuses to start rather than run on a value it misread."""
