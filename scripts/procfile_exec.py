"""Become one process type of the Procfile: `python -m scripts.procfile_exec TYPE` execs its line.

What the systemd units in deploy/ start (`mi-assessment@TYPE.service` and the release
step), so that a unit runs exactly what the Procfile says, for every type, including
ones added later, with no copy of the commands to keep in step. The line runs as
`make run` and honcho run it, through `sh -c` (with `exec` in front when it is one
command, so the unit's main process is the program itself). `--print` shows the
command instead of running it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from scripts import procfile_supervisor

ROOT = Path(__file__).resolve().parent.parent


def command_for(name: str, procfile: Path = ROOT / "Procfile", extra: Sequence[str] = ()) -> list[str]:
    """The argv that runs process type `name` of `procfile`; KeyError if it has none.

    `extra` arguments go after the line's own, passed to the shell as its positional
    parameters (`"$@"`), so they are never re-parsed; only a line that is one command
    takes them (ValueError otherwise).
    """
    entries = dict(procfile_supervisor.procfile_entries(procfile))
    if name not in entries:
        raise KeyError(f"no process type {name!r} in {procfile} (it has {', '.join(entries)})")
    argv = procfile_supervisor.shell_argv(entries[name])
    if not extra:
        return argv
    if not argv[2].startswith("exec "):
        raise ValueError(f"the {name} line is more than one command: no arguments can follow it")
    return [*argv[:2], argv[2] + ' "$@"', name, *extra]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("type", help="a process type of the Procfile, e.g. web or release")
    parser.add_argument("--procfile", type=Path, default=ROOT / "Procfile")
    parser.add_argument("--print", action="store_true", help="print the command instead of running it")
    args = parser.parse_args(argv)
    try:
        command = command_for(args.type, args.procfile)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    if args.print:
        print(shlex.join(command))
        return 0
    # The repository root, as under honcho and `make run`: relative paths (alembic.ini) resolve.
    os.chdir(args.procfile.resolve().parent)
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
