"""supervisord event listener: the processes' output, line by line, with a name prefix.

supervisord has no prefixed console output of its own; it hands each chunk a process
writes to a listener as a PROCESS_LOG event. This one appends `HH:MM:SS name | line` (as
honcho printed it) to the console file, where supervisord logs its own messages too
(appends of whole lines, so they interleave cleanly). Standard library only, and it must
never stop reading: a listener that dies or hangs holds events back.

Protocol (supervisord's, version 3): write READY, read a header line whose `len` counts
the payload's characters, read the payload, answer `RESULT 2\\nOK`.

`TerminalFilter` decides which lines of that file `make run` copies to its terminal: starts
and stops of processes, warnings and errors; the rest (each process's INFO lines, the web's
access log, supervisord's own chatter) stays in the files under .state/logs/.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import time
from typing import TextIO

#: honcho's colours, one per process type in turn.
COLOURS = ("36", "33", "32", "35", "34", "31")
#: A line still unfinished at this size is printed anyway.
MAX_PENDING = 65536


#: A line of this listener: `HH:MM:SS name |` (in colour on a terminal), then the process's line.
_PREFIXED = re.compile(r"^(?:\x1b\[[0-9;]*m)?\d\d:\d\d:\d\d (\S+) *\|(?:\x1b\[0m)? ?(.*)$")
#: A process's log line in the project's text format (observability/logs.py): its level.
_TEXT_LEVEL = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+ ([A-Z]+) ")
#: A line of supervisord's own log: `2026-12-01 08:00:00,123 INFO spawned: 'web' with pid 42`.
_SUPERVISORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([A-Z]+) (.*)$")
_SPAWNED = re.compile(r"^spawned: '([^']+)'")
_PROCESS_NAMED = re.compile(r"^(?:exited|stopped|gave up|spawnerr): '?([^\s':]+)")
_WAITING = re.compile(r"^waiting for (.+?) to (?:stop|die)$")
#: Levels of the processes' lines below which a line stays out of the terminal.
_QUIET_BELOW = {"DEBUG", "INFO"}
#: supervisord's INFO lines that are a process's start or stop (its other INFO lines are not shown).
_SHOWN_INFO = ("exited:", "stopped:", "gave up:", "spawnerr:")


class TerminalFilter:
    """Which lines of the console file `make run` shows (all of them with `everything`).

    Shown: supervisord's warnings and errors, a process's exit, stop or giving up, a start
    after the first (the banner names the first starts, `ready` says they worked), the first
    "waiting for … to stop" of a stop; a process's lines at WARNING and above, and every
    line not in a log format (a traceback, a crash's last words). Not shown: the processes'
    DEBUG and INFO lines, supervisord's other INFO lines, anything of this listener's own
    start and stop. Each process's file under .state/logs/ keeps everything.
    """

    def __init__(self, *, everything: bool = False, listener: str = "output") -> None:
        self.everything = everything
        self.listener = listener
        self.started: set[str] = set()
        self.waiting: set[str] = set()

    def accepts(self, line: str) -> bool:
        if self.everything:
            return True
        prefixed = _PREFIXED.match(line)
        if prefixed:
            return _level(prefixed.group(2)) not in _QUIET_BELOW
        own = _SUPERVISORD.match(line)
        if own is None:
            return True  # a line of a multi-line message: not knowing, show it
        level, message = own.groups()
        if message == f"stopped: {self.listener} (terminated by SIGTERM)":
            return False  # this listener, stopped last of all at every shutdown
        if level != "INFO":
            return level in {"WARN", "ERRO", "CRIT"}
        return self._process_news(message)

    def _process_news(self, message: str) -> bool:
        """Whether an INFO line of supervisord's is a start (but the first) or a stop of a process."""
        spawned = _SPAWNED.match(message)
        waiting = _WAITING.match(message)
        named = _PROCESS_NAMED.match(message) if message.startswith(_SHOWN_INFO) else None
        if spawned:
            name = spawned.group(1)
            shown = name in self.started
            self.started.add(name)
        elif waiting:
            name = waiting.group(1)
            shown = name not in self.waiting
            self.waiting.add(name)
        elif named:
            name = named.group(1)
            shown = True
        else:
            return False
        if not waiting:
            self.waiting.discard(name)
        return shown and name != self.listener


def _level(line: str) -> str | None:
    """The level of a process's log line (text or JSON format), None for any other line."""
    text = _TEXT_LEVEL.match(line)
    if text:
        return text.group(1)
    if line.startswith("{"):
        try:
            level = json.loads(line).get("level")
        except (ValueError, AttributeError):
            return None
        return level if isinstance(level, str) else None
    return None


def parse_headers(line: str) -> dict[str, str]:
    return dict(word.split(":", 1) for word in line.split() if ":" in word)


class Printer:
    def __init__(self, names: list[str], width: int, colour: bool, out: TextIO) -> None:
        self.width = max(width, *(len(n) for n in names)) if names else width
        self.colours = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(names)}
        self.colour = colour
        self.out = out
        self.pending: dict[tuple[str, str], str] = {}

    def prefix(self, name: str) -> str:
        text = f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} |"
        if self.colour:
            code = self.colours.get(name, "37")
            return f"\033[{code}m{text}\033[0m"
        return text

    def emit(self, name: str, line: str) -> None:
        try:
            self.out.write(f"{self.prefix(name)} {line}\n")
            self.out.flush()
        except (OSError, ValueError):
            pass  # nowhere to print (terminal gone): keep consuming events all the same

    def chunk(self, name: str, channel: str, data: str) -> None:
        key = (name, channel)
        text = self.pending.pop(key, "") + data
        *lines, rest = text.split("\n")
        for line in lines:
            self.emit(name, line.rstrip("\r"))
        if len(rest) >= MAX_PENDING:
            self.emit(name, rest)
        elif rest:
            self.pending[key] = rest

    def flush(self, name: str) -> None:
        for key in [k for k in self.pending if k[0] == name]:
            self.emit(name, self.pending.pop(key))


def handle(printer: Printer, headers: dict[str, str], payload: str) -> None:
    event = headers.get("eventname", "")
    if event.startswith("PROCESS_LOG"):
        head, _, data = payload.partition("\n")
        fields = parse_headers(head)
        printer.chunk(fields.get("processname", "?"), fields.get("channel", "stdout"), data)
    elif event == "PROCESS_STATE_EXITED":
        printer.flush(parse_headers(payload).get("processname", "?"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", help="file to append the lines to (default: stderr)")
    parser.add_argument("--width", type=int, default=0)
    parser.add_argument("--colour", action="store_true")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    # `len` counts characters of UTF-8 text: read text, not bytes.
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n")
    stdout = sys.stdout
    # Line-buffered: each line is one write(2), appended whole even among supervisord's own.
    out = open(args.output, "a", buffering=1, encoding="utf-8") if args.output else sys.stderr  # noqa: SIM115
    printer = Printer(args.names, args.width, args.colour, out)
    while True:
        stdout.write("READY\n")
        stdout.flush()
        header_line = stdin.readline()
        if not header_line:
            return 0  # supervisord closed our stdin: it is going away
        headers = parse_headers(header_line)
        payload = stdin.read(int(headers.get("len", "0")))
        try:
            handle(printer, headers, payload)
        except Exception as exc:  # a bad event must not stop the output of the others
            printer.emit("output", f"could not print an event: {exc!r}")
        stdout.write("RESULT 2\nOK")
        stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
