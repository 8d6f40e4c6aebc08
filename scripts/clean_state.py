"""`make clean-state`: delete what `make run` keeps between runs, wherever it is.

That is the state folder (`.state/`, or MI_STATE_DIR): the database cluster, Redis's data,
the secrets, the logs, and the cluster it links to outside the checkout when the postgres
account could not reach it (as root under /root: /var/lib/mi-assessment/<name>, see
scripts/servers.py), which deleting the checkout would leave behind. Refused while a
`make run` on that folder is running. `make clean` keeps all of it and says so.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from scripts import stack_lock

ROOT = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("MI_STATE_DIR", ROOT / ".state")).resolve()


def outside_links(state: Path) -> list[Path]:
    """Folders outside `state` that its symlinks point to (the relocated cluster)."""
    found = []
    for link in (p for p in state.rglob("*") if p.is_symlink()):
        target = link.resolve()
        if target.is_dir() and not target.is_relative_to(state):
            found.append(target)
    return found


def describe(state: Path) -> str:
    """A line for `make clean`: what it kept, and how to remove it."""
    if not state.exists():
        return ""
    elsewhere = "".join(f" and {p}" for p in outside_links(state))
    return f"kept {state}{elsewhere} (the stack's data and secrets): `make clean-state` removes them"


def log(message: str) -> None:
    print(f"[clean-state] {message}", file=sys.stderr, flush=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--describe":
        line = describe(STATE)
        if line:
            print(line)
        return 0
    if not STATE.exists():
        log(f"nothing to remove: {STATE} does not exist")
        return 0
    holder = stack_lock.running(STATE)
    if holder is not None:
        log(f"`make run` is running on {STATE} ({holder.describe()}): stop it first (Ctrl-C, or `make stop`)")
        return 1
    for target in outside_links(STATE):
        log(f"removing {target} (the cluster {STATE} links to)")
        shutil.rmtree(target)
    log(f"removing {STATE}")
    shutil.rmtree(STATE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
