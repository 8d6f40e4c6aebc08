"""supervisord event listener: the processes' output, line by line, with a name prefix.

supervisord has no prefixed console output of its own; it hands each chunk a process
writes to a listener as a PROCESS_LOG event. This one appends `HH:MM:SS name | line` (as
honcho printed it) to the console file, where supervisord logs its own messages too
(appends of whole lines, so they interleave cleanly). Standard library only, and it must
never stop reading: a listener that dies or hangs holds events back.

Protocol (supervisord's, version 3): write READY, read a header line whose `len` counts
the payload's characters, read the payload, answer `RESULT 2\\nOK`.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from typing import TextIO

#: honcho's colours, one per process type in turn.
COLOURS = ("36", "33", "32", "35", "34", "31")
#: A line still unfinished at this size is printed anyway.
MAX_PENDING = 65536


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
