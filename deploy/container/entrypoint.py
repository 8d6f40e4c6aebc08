"""The image's entrypoint: run a process type of the Procfile, or probe one.

    entrypoint.py TYPE [ARG…]       the Procfile's line of TYPE (web, worker, hotpath, reconciler,
                                    release), ARGs appended to a one-command line
    entrypoint.py health [TYPE]     the probe of TYPE (default: the type this container runs)
    entrypoint.py wait-release      until the database holds this image's migrations (an init step)
    entrypoint.py COMMAND [ARG…]    any other command, e.g. `flask --app web queue stats`

A type's line is the Procfile's as the systemd units run it (`scripts.procfile_exec`): the
image's build resolves every line once into `procfile.json` beside this file
(`freeze-procfile`), so the image holds no checkout. Before the line runs, the settings are
checked as the processes will read them: a setting missing or malformed ends the container at
once with one line naming the variable (exit 78, EX_CONFIG), not a traceback at every restart.
Then the line is exec'd through `sh -c`, so the program is the process tini signals.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

#: The resolved Procfile of the image: {type: {"argv": [...], "with_args": [...] or null}}.
PROCFILE_JSON = Path(__file__).with_name("procfile.json")
#: sysexits' EX_CONFIG: the configuration is wrong; restarting will not help.
EX_CONFIG = 78
#: What every type needs explicitly in a container: the defaults (127.0.0.1) would name the
#: container itself, where neither server runs.
REQUIRED = ("DATABASE_URL", "REDIS_URL")
#: What each required variable looks like, for the message.
EXAMPLES = {
    "DATABASE_URL": "postgresql://USER:PASSWORD@HOST:5432/DATABASE",
    "REDIS_URL": "redis://default:PASSWORD@HOST:6379/0 (or redis+sentinel://…, redis+cluster://…)",
}
#: The types whose processes beat in Redis's process registry (observability/liveness.py).
BEATING = ("worker", "hotpath", "reconciler")
WEB = "web"
RELEASE = "release"
#: The folders a long-running process writes, made (and checked writable) before it starts.
FOLDERS = ("EVENT_SPOOL_DIR", "PROMETHEUS_MULTIPROC_DIR")
#: A beat is counted as this container's when its process began at most this long before
#: PID 1 (clocks read in whole ticks): beats of an earlier run under the same host name are not.
START_SLACK_S = 2.0
#: How long `wait-release` waits by default for the release step (migrations can take a while).
DEFAULT_RELEASE_WAIT_S = 900.0


class SettingError(Exception):
    """A setting the container cannot run with; the message names the variable."""


def load_procfile(path: Path = PROCFILE_JSON) -> dict[str, dict[str, list[str] | None]]:
    return dict(json.loads(path.read_text()))


def command(entry: dict[str, list[str] | None], args: Sequence[str], type_: str) -> list[str]:
    """The argv that runs a type's line, with `args` after its own arguments."""
    argv = entry["argv"]
    assert argv is not None
    if not args:
        return list(argv)
    prefix = entry["with_args"]
    if prefix is None:
        raise SettingError(f"the {type_} line is more than one command: no arguments can follow it")
    return [*prefix, *args]


def check_settings(type_: str, env: dict[str, str]) -> None:
    """Refuse, naming the variable, a setting this type's processes would refuse or misuse."""
    for name in REQUIRED:
        if not env.get(name, "").strip():
            raise SettingError(f"{name} is not set: give the container {name}={EXAMPLES[name]}")
    from config import ConfigError
    from config.settings import Settings

    try:
        settings = Settings.from_env(env)
        if type_ == WEB:
            # The web tier's own rule (APP_ENV=production refuses a short SECRET_KEY or admin
            # token), checked here so that it is one line, not gunicorn's traceback per worker.
            from web import app_env, check_production_secrets

            check_production_secrets(settings, app_env(env))
    except (ConfigError, ValueError) as exc:
        raise SettingError(str(exc)) from None
    # The folders the long-running processes write (held events, metrics); the release step
    # writes neither, and runs with a read-only file system where the others mount them.
    for name in FOLDERS if type_ != RELEASE else ():
        folder = env.get(name, "")
        if not folder:
            continue
        try:
            Path(folder).mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise SettingError(f"{name}={folder} cannot be made: {exc.strerror}") from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise SettingError(f"{name}={folder} is not writable by uid {os.getuid()} (mount it writable)")


def empty_metrics(env: dict[str, str]) -> None:
    """prometheus_client's multiprocess folder holds this run's values only (docs/operations.md, Metrics):
    a restarted container keeps its file system, so the last run's files go first."""
    folder = env.get("PROMETHEUS_MULTIPROC_DIR", "")
    if folder:
        for path in Path(folder).glob("*.db"):
            path.unlink(missing_ok=True)


def run_type(type_: str, args: Sequence[str]) -> int:
    entry = load_procfile()[type_]
    env = dict(os.environ)
    try:
        argv = command(entry, args, type_)
        check_settings(type_, env)
    except SettingError as exc:
        print(f"mi-assessment {type_}: {exc}", file=sys.stderr)
        return EX_CONFIG
    empty_metrics(env)
    os.execv(argv[0], argv)


# -- probes ----------------------------------------------------------------------------------


def pid1_type(types: Sequence[str]) -> str | None:
    """The type PID 1 was started for (tini's arguments end with this script's), if any."""
    try:
        words = Path("/proc/1/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    for index, word in enumerate(words):
        if word.endswith("entrypoint.py") and index + 1 < len(words) and words[index + 1] in types:
            return words[index + 1]
    return None


def container_started_at() -> float:
    """When PID 1 began (epoch seconds), from /proc: its start in ticks after the boot."""
    fields = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[19])  # the 22nd field of stat(5), counted after the command's ")"
    boot = next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def probe_web(ready: bool, env: dict[str, str]) -> int:
    """GET /healthz (the process answers; no I/O) or, with `ready`, /readyz (PostgreSQL and Redis)."""
    bind = env.get("BIND", "") or "127.0.0.1"
    host = "127.0.0.1" if bind in ("0.0.0.0", "::", "[::]") else bind
    path = "/readyz" if ready else "/healthz"
    url = f"http://{host}:{env.get('PORT', '') or '8000'}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        print(f"{url}: no answer ({exc})")
        return 1
    print(f"{url}: {status}")
    return 0 if status == 200 else 1


def probe_beats(kind: str) -> int:
    """This container's processes of `kind` beat (docs/operations.md, Liveness): healthy while every one that
    began in this container beats. Not judged while Redis does not answer: the processes ride
    out a Redis outage by themselves, and a restart would not bring Redis back."""
    import redis

    from config.settings import Settings
    from observability.liveness import ProcessState, live_processes
    from redis_adapters.redis_clients import redis_client

    client = redis_client(Settings.from_env().redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        beats = live_processes(client)
    except (redis.RedisError, OSError) as exc:
        print(f"Redis does not answer ({type(exc).__name__}): the {kind} processes are not judged")
        return 0
    finally:
        client.close()
    host = socket.gethostname()
    since = container_started_at() - START_SLACK_S
    mine = [b for b in beats if b.kind == kind and b.host == host and b.started_at.timestamp() >= since]
    counts = {state.value: sum(1 for b in mine if b.state is state) for state in ProcessState}
    print(f"{kind} processes of {host}: {counts}")
    return 0 if counts["alive"] > 0 and counts["gone"] == 0 else 1


def health(type_: str | None, ready: bool) -> int:
    type_ = type_ or pid1_type(list(load_procfile()))
    if type_ == WEB:
        return probe_web(ready, dict(os.environ))
    if type_ in BEATING:
        return probe_beats(type_)
    print(f"nothing to probe for {type_ or 'this command'}")
    return 0


# -- the release, as the long-running types' init step ---------------------------------------


def wait_release(wait_s: float) -> int:
    """Until the database's migrations are this image's head (or newer: a later release ran)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy import create_engine

    from config.settings import Settings
    from services.persistence.migrate import alembic_config

    env = dict(os.environ)
    try:
        check_settings(RELEASE, env)
    except SettingError as exc:
        print(f"mi-assessment wait-release: {exc}", file=sys.stderr)
        return EX_CONFIG
    settings = Settings.from_env(env)
    scripts = ScriptDirectory.from_config(alembic_config(settings.database_url))
    heads = set(scripts.get_heads())
    engine = create_engine(settings.database_url, pool_pre_ping=True)
    deadline = time.monotonic() + wait_s
    last = ""
    try:
        while True:
            try:
                with engine.connect() as connection:
                    current = set(MigrationContext.configure(connection).get_current_heads())
                unknown = {rev for rev in current if scripts.get_revision(rev) is None}
                if current == heads or unknown:
                    print(f"the database is at {', '.join(sorted(current))}: released")
                    return 0
                at = ", ".join(sorted(current)) or "no revision"
                state = f"the database is at {at}, this image's head is {', '.join(sorted(heads))}"
            except Exception as exc:
                state = f"the database does not answer yet ({type(exc).__name__})"
            if state != last:
                print(f"waiting for the release step: {state}", flush=True)
                last = state
            if time.monotonic() > deadline:
                print(f"mi-assessment wait-release: gave up after {wait_s:g} s: {state}", file=sys.stderr)
                return 1
            time.sleep(2)
    finally:
        engine.dispose()


# -- the image's build -----------------------------------------------------------------------


def freeze_procfile(procfile: Path, out: Path) -> int:
    """Resolve every line of `procfile` as the systemd units do, into `out` (the build runs this
    with the checkout's scripts/ on PYTHONPATH; the image keeps only the result)."""
    from scripts import procfile_exec, procfile_supervisor

    resolved: dict[str, dict[str, list[str] | None]] = {}
    for type_, _ in procfile_supervisor.procfile_entries(procfile):
        try:
            with_args: list[str] | None = procfile_exec.command_for(type_, procfile, ["ARG"])[:-1]
        except ValueError:
            with_args = None
        resolved[type_] = {"argv": procfile_exec.command_for(type_, procfile), "with_args": with_args}
    out.write_text(json.dumps(resolved, indent=1) + "\n")
    return 0


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    first, rest = argv[0], list(argv[1:])
    if first == "freeze-procfile":
        return freeze_procfile(Path(rest[0]), Path(rest[1]))
    if first in ("health", "wait-release"):
        parser = argparse.ArgumentParser(prog=f"entrypoint.py {first}")
        if first == "health":
            parser.add_argument("type", nargs="?", help="default: the type this container runs")
            parser.add_argument("--ready", action="store_true", help="web: /readyz instead of /healthz")
            options = parser.parse_args(rest)
            return health(options.type, options.ready)
        parser.add_argument("--wait", type=float, default=DEFAULT_RELEASE_WAIT_S, metavar="SECONDS")
        return wait_release(parser.parse_args(rest).wait)
    if first in load_procfile():
        return run_type(first, rest)
    try:
        os.execvp(first, list(argv))
    except OSError as exc:
        types = ", ".join(load_procfile())
        print(f"mi-assessment: {first}: {exc.strerror} (a process type is one of {types})", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
