"""supervisord's configuration for `make run`, made from the Procfile at every start.

Every long-running type (all but `release`), in the Procfile's order, becomes a
`[program:NAME]` that supervisord restarts when it dies (with a growing delay while it
keeps dying within START_SECONDS of its start) and stops as a whole process group,
giving it `stop_timeout_s` to finish in-flight work before SIGKILL. Nothing here is
specific to a type but `web`, which gets $PORT as on Heroku and under honcho, under
`make run` the socket already bound on that port (scripts/web_socket.py), and whose
stdout, gunicorn's access log, goes to logs/access.log instead of the console.

The console is a file, .state/console.log: supervisord logs its own messages there, and
a small event listener (scripts/supervisor_output.py) appends the processes' output
with a name prefix, as honcho printed it. `make run` copies that file to the terminal,
the lines of supervisor_output.TerminalFilter (starts, stops, warnings and errors).
No pipe: a closed terminal or a killed `make run` must not break supervisord's writes
(it dies on a failed write to its stdout, leaving its processes orphaned).
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: The one-off step of the Procfile: run before the others, never supervised.
RELEASE_TYPE = "release"
#: The type that listens on $PORT.
WEB_TYPE = "web"
#: Name of the output listener in supervisord (not a Procfile type).
OUTPUT_LISTENER = "output"
#: supervisord group of the Procfile's types (`supervisorctl status stack:*`).
GROUP = "stack"
#: User name of supervisord's socket (with `SupervisorConfig.rpc_password`).
RPC_USER = "stack"
#: A process that exits sooner than this after its start has failed to start: supervisord
#: then waits 1 s, 2 s, 3 s … before the next try (its backoff), instead of restarting it at once.
START_SECONDS = 5
#: After this many failed starts in a row supervisord gives up on the type (state FATAL): the
#: delays have grown to START_RETRIES s by then, about 8 minutes of trying with the default.
START_RETRIES = 30
#: Margin over the worker's own shutdown timeout before supervisord SIGKILLs a type.
STOP_MARGIN_S = 10
#: What `--worker-shutdown-timeout` defaults to in the Procfile's worker line.
DEFAULT_WORKER_SHUTDOWN_TIMEOUT_MS = 600_000
#: Shell words after which a Procfile line is more than one command, so `exec` cannot prefix it.
SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&", ";&"})
#: A unix socket path longer than this does not fit in sockaddr_un (108 bytes with the NUL).
MAX_SOCKET_PATH = 100
LOG_MAX_BYTES = "10MB"
#: The web's access log, beside each type's own log (logs/TYPE.log).
ACCESS_LOG = "access.log"
LOG_BACKUPS = 2
#: Events buffered for the output listener; beyond that supervisord drops the oldest lines.
OUTPUT_BUFFER = 10_000


#: A Procfile line, `type: command`: the format honcho and Heroku read (honcho's own pattern).
PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")


def procfile_entries(path: Path) -> list[tuple[str, str]]:
    """The Procfile's (type, command) pairs in file order, parsed as honcho parses it (other
    lines are ignored; a type named twice is refused). Not through honcho itself: the deploy's
    units run `scripts.procfile_exec` on an installation without the tooling extras."""
    entries: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = PROCFILE_LINE.match(line)
        if match is None:
            continue
        if match.group(1) in entries:
            raise ValueError(f"process type {match.group(1)} appears twice in {path}")
        entries[match.group(1)] = match.group(2)
    return list(entries.items())


def long_running(entries: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, command) for name, command in entries if name != RELEASE_TYPE]


def shell_argv(command: str) -> list[str]:
    """How a Procfile line is run: `sh -c LINE`, as honcho and Heroku run it.

    A line that is one simple command gets `exec ` in front, so the shell becomes the
    program: the pid supervisord watches is the program's own, and no orphan survives
    a killed shell (Debian's dash does not exec the last command by itself).
    """
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: leave it to the shell to report
        words = [";"]
    if words and not SHELL_OPERATORS.intersection(words) and words[0] != "exec":
        command = f"exec {command}"
    return ["/bin/sh", "-c", command]


def stop_timeout_s(env: dict[str, str]) -> int:
    """Seconds a type gets to stop after SIGTERM: MI_STOP_TIMEOUT_S, else the worker's
    WORKER_SHUTDOWN_TIMEOUT_MS (its jobs in flight may run that long) plus a margin."""
    explicit = env.get("MI_STOP_TIMEOUT_S", "").strip()
    if explicit:
        value = int(explicit)
        if value < 1:
            raise ValueError(f"MI_STOP_TIMEOUT_S must be at least 1, not {explicit}")
        return value
    worker_ms = int(env.get("WORKER_SHUTDOWN_TIMEOUT_MS", "").strip() or DEFAULT_WORKER_SHUTDOWN_TIMEOUT_MS)
    return max(1, -(-worker_ms // 1000)) + STOP_MARGIN_S


def _value(text: str) -> str:
    """A value as supervisord's ConfigParser reads it back: `%` is its interpolation sign,
    and ` ;` / ` #` would start an inline comment, which no quoting protects."""
    for marker in (" ;", " #", "\t;", "\t#"):
        if marker in text:
            raise ValueError(f"supervisord would read {marker.strip()!r} here as a comment: {text!r}")
    if "\n" in text:
        raise ValueError(f"a supervisord value must be one line: {text!r}")
    return text.replace("%", "%%")


def _command(argv: Sequence[str]) -> str:
    return _value(shlex.join(argv))


@dataclass(frozen=True)
class SupervisorConfig:
    """What `render` needs besides the Procfile."""

    state: Path  # pid file, socket, logs, the configuration itself
    root: Path  # the processes' working directory (the Procfile's folder)
    python: str  # runs the output listener
    port: int  # $PORT of the web type
    stop_timeout_s: int
    colour: bool = False
    #: Where `make run` serves the web socket (scripts/web_socket.py); None: web binds $PORT itself.
    web_socket: Path | None = None
    start_seconds: int = START_SECONDS
    start_retries: int = START_RETRIES
    #: Password of supervisord's socket (user `RPC_USER`), written in this file (0600) for
    #: supervisorctl: the socket is 0700 already, but without one supervisord prints a CRIT
    #: line ("running without any HTTP authentication checking") at every start.
    rpc_password: str | None = None
    #: The web's access log (its stdout: gunicorn's `--access-logfile -`) in the console too;
    #: else only in logs/access.log (MI_TERMINAL_LOG=all, scripts/run_stack.py).
    access_log_to_terminal: bool = False

    @property
    def socket(self) -> Path:
        return self.state / "supervisor.sock"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def console(self) -> Path:
        return self.state / "console.log"


def render(entries: Sequence[tuple[str, str]], config: SupervisorConfig) -> str:
    """supervisord.conf for the long-running types of `entries` (a parsed Procfile)."""
    types = long_running(entries)
    if not types:
        raise ValueError("the Procfile has no long-running process type")
    state, logs = config.state, config.logs
    lines = [
        "; Made by scripts/run_stack.py from the Procfile at every `make run`: edits here are lost.",
        "[supervisord]",
        "nodaemon = true",
        # Not on its stdout: into the console file only (see the top of this module).
        "silent = true",
        f"directory = {_value(str(config.root))}",
        f"logfile = {_value(str(config.console))}",
        # Not rotated under the reader's feet: `make run` empties it at each start.
        "logfile_maxbytes = 0",
        f"pidfile = {_value(str(state / 'supervisord.pid'))}",
        f"childlogdir = {_value(str(logs))}",
        "loglevel = info",
        # Ourselves: no privileges to drop, and no warning that none were dropped.
        f"user = {_value(pwd.getpwuid(os.geteuid()).pw_name)}",
        "",
    ]
    if len(str(config.socket)) <= MAX_SOCKET_PATH:
        # For `supervisorctl -c .state/supervisord.conf status` (and restart, tail …) while it runs.
        credentials = (
            [f"username = {RPC_USER}", f"password = {_value(config.rpc_password)}"]
            if config.rpc_password
            else []
        )
        lines += [
            "[unix_http_server]",
            f"file = {_value(str(config.socket))}",
            "chmod = 0700",
            *credentials,
            "",
            "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
            "",
            "[supervisorctl]",
            f"serverurl = unix://{_value(str(config.socket))}",
            *credentials,
            "",
        ]
    width = max(len(name) for name, _ in types)
    listener = [config.python, str(Path(__file__).resolve().parent / "supervisor_output.py")]
    listener += ["--output", str(config.console), "--width", str(width)]
    listener += ["--colour"] if config.colour else []
    listener += [name for name, _ in types]
    lines += [
        f"[eventlistener:{OUTPUT_LISTENER}]",
        f"command = {_command(listener)}",
        "events = PROCESS_LOG,PROCESS_STATE_EXITED",
        f"buffer_size = {OUTPUT_BUFFER}",
        # Started first and stopped last, so that it prints the others' last words.
        "priority = 1",
        "autorestart = true",
        "stdout_logfile = NONE",
        f"stderr_logfile = {_value(str(logs / f'{OUTPUT_LISTENER}.log'))}",
        "",
    ]
    lines += [
        # One group: supervisord stops a group's processes all at once, as honcho did (it
        # stops separate groups one after the other, each waiting for the previous one).
        f"[group:{GROUP}]",
        f"programs = {','.join(name for name, _ in types)}",
        "priority = 100",
        "",
    ]
    for index, (name, command) in enumerate(types):
        argv = shell_argv(command)
        if name == WEB_TYPE and config.web_socket is not None:
            # The line itself, unchanged, with the port `make run` bound for it (see web_socket.py).
            argv = [config.python, "-m", "scripts.web_socket", str(config.web_socket), "--", *argv]
        lines += [
            f"[program:{name}]",
            f"command = {_command(argv)}",
            f"directory = {_value(str(config.root))}",
            # Started in the Procfile's order.
            f"priority = {100 + index}",
            "autostart = true",
            "autorestart = true",
            f"startsecs = {config.start_seconds}",
            f"startretries = {config.start_retries}",
            "stopsignal = TERM",
            # The whole group: Dramatiq's and gunicorn's children are signalled too, as by
            # honcho and systemd; broker/src/listbroker/signals.py absorbs the duplicate SIGTERM.
            "stopasgroup = true",
            "killasgroup = true",
            f"stopwaitsecs = {config.stop_timeout_s}",
        ]
        if name == WEB_TYPE:
            # gunicorn writes its access log to stdout and everything else to stderr: the
            # requests go to a file of their own, the rest to web.log and the console.
            lines += [
                "redirect_stderr = false",
                f"stdout_logfile = {_value(str(logs / ACCESS_LOG))}",
                f"stdout_logfile_maxbytes = {LOG_MAX_BYTES}",
                f"stdout_logfile_backups = {LOG_BACKUPS}",
                f"stdout_events_enabled = {'true' if config.access_log_to_terminal else 'false'}",
                f"stderr_logfile = {_value(str(logs / f'{name}.log'))}",
                f"stderr_logfile_maxbytes = {LOG_MAX_BYTES}",
                f"stderr_logfile_backups = {LOG_BACKUPS}",
                "stderr_events_enabled = true",
                f'environment = PORT="{config.port}"',
            ]
        else:
            lines += [
                "redirect_stderr = true",
                f"stdout_logfile = {_value(str(logs / f'{name}.log'))}",
                f"stdout_logfile_maxbytes = {LOG_MAX_BYTES}",
                f"stdout_logfile_backups = {LOG_BACKUPS}",
                "stdout_events_enabled = true",
            ]
        lines.append("")
    return "\n".join(lines)


def write(path: Path, text: str) -> Path:
    """Write the configuration readable by its owner only (it names the state folder's socket)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)
    return path
