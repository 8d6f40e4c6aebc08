"""What a virtualenv holds that differs from a lock file: `make test-latest` prints it.

    python -m scripts.lock_drift LOCK PYTHON

LOCK is a lock file of `make lock` (requirements/test.txt), PYTHON the virtualenv's
interpreter. One line per distribution installed at another version than the lock's
(`redis 8.1.0 -> 8.2.0`), or not locked at all; the exit status is 0 either way (a difference is news, not
an error: the suite run after it decides).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

#: A pinned line of a lock: `name==version \` (markers and hashes follow).
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)
#: The project's own distributions: installed from the checkout, never locked.
OWN = {"mi-assessment", "dramatiq-listbroker"}


def locked(lock: Path) -> dict[str, str]:
    """Each distribution a lock pins, by canonical name, with its version."""
    return {canonicalize_name(name): version for name, version in PIN.findall(lock.read_text())}


def installed(python: str) -> dict[str, str]:
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {canonicalize_name(item["name"]): item["version"] for item in json.loads(listed)}


def drift(lock: dict[str, str], venv: dict[str, str]) -> list[str]:
    """What the virtualenv holds at another version than the lock's, or holds unlocked. (A
    locked distribution it lacks is one whose marker excludes this platform or Python.)"""
    lines = []
    for name in sorted(venv.keys() - OWN):
        old, new = lock.get(name, "(not locked)"), venv[name]
        if old != new:
            lines.append(f"{name} {old} -> {new}")
    return lines


def main(argv: list[str]) -> int:
    lock, python = argv
    lines = drift(locked(Path(lock)), installed(python))
    print("\n".join(lines) if lines else f"the newest versions the ranges allow are those of {lock}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
