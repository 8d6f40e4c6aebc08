"""Which stack the CLI talks to: found, said, never guessed.

An operator runs `flask --app web queue purge-invalid` in some shell; it must act on the
stack they mean, and say which. In this order:

1. `--stack PATH` (a `stack.json`, or the state folder holding it);
2. `MI_STACK` (the same, from the environment);
3. `DATABASE_URL` and `REDIS_URL`, both set (a deployment's environment, or the export
   line `make run` prints); one without the other is refused;
4. `MI_STATE_DIR/stack.json` (the state folder `make run` was given);
5. `.state/stack.json` of the current folder or a parent, then of this checkout.

A `stack.json` whose `make run` is no longer running is refused (its servers are gone),
and with none of these the command stops and says how to point it at a stack: it never
falls back on the default local servers, where another project's Redis may answer. The
servers found are printed (passwords as `***`) on stderr before anything is done.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import click

STACK_FILE = "stack.json"
SECRETS_FILE = "secrets.json"
STATE_FOLDER = ".state"
#: The checkout this package runs from (an editable install, as `make run` makes it).
CHECKOUT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class StackTarget:
    database_url: str
    redis_url: str
    #: Where they came from, in words ("--stack /x/.state/stack.json", "the environment", ...).
    source: str
    #: SECRET_KEY of the stack (its secrets.json) when the environment has none.
    secret_key: str | None = None

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with the stack's servers (and its SECRET_KEY, where `env` has none)."""
        found = {**env, "DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url}
        if self.secret_key and not env.get("SECRET_KEY"):
            found["SECRET_KEY"] = self.secret_key
        return found

    def describe(self) -> str:
        database, redis = redacted(self.database_url), redacted(self.redis_url)
        return f"stack from {self.source}: database {database}, redis {redis}"


def redacted(url: str) -> str:
    """`url` with its password as `***`."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


def _running(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # a stack.json without a pid cannot be checked: trusted
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another account's process: it runs
    return True


def read_stack_file(path: Path, source: str) -> StackTarget:
    """The stack described by `path` (a stack.json, or a folder holding one)."""
    file = path / STACK_FILE if path.is_dir() else path
    try:
        info = json.loads(file.read_text())
        database_url, redis_url = str(info["database_url"]), str(info["redis_url"])
    except FileNotFoundError:
        raise click.ClickException(
            f"{file} does not exist: is `make run` running there? (it writes the file while it runs)"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.ClickException(f"{file} cannot be read as a stack file: {exc}") from None
    if not _running(info.get("pid")):
        raise click.ClickException(
            f"{file} is left from a `make run` that no longer runs (pid {info.get('pid')}): "
            "its servers are gone. Start `make run` again, or point the CLI elsewhere (--stack, or "
            "DATABASE_URL and REDIS_URL)."
        )
    secret_key = None
    secrets = file.parent / SECRETS_FILE
    if info.get("credentials", {}).get("SECRET_KEY") == SECRETS_FILE and secrets.exists():
        try:
            secret_key = str(json.loads(secrets.read_text()).get("SECRET_KEY") or "") or None
        except (OSError, ValueError):
            secret_key = None  # unreadable (another account's): commands that need it say so
    return StackTarget(database_url, redis_url, f"{source} {file}".strip(), secret_key)


def _state_candidates(cwd: Path) -> list[Path]:
    """`.state` of the current folder and its parents, then of this checkout."""
    folders = [cwd, *cwd.parents, CHECKOUT]
    return list(dict.fromkeys(folder / STATE_FOLDER / STACK_FILE for folder in folders))


def find_stack(option: str | None, env: Mapping[str, str], cwd: Path | None = None) -> StackTarget:
    """The stack the CLI is to talk to (see the module's docstring); ClickException when none."""
    if option:
        return read_stack_file(Path(option).expanduser(), "--stack")
    if env.get("MI_STACK"):
        return read_stack_file(Path(env["MI_STACK"]).expanduser(), "MI_STACK")
    database_url, redis_url = env.get("DATABASE_URL", ""), env.get("REDIS_URL", "")
    if database_url and redis_url:
        return StackTarget(database_url, redis_url, "the environment (DATABASE_URL, REDIS_URL)")
    if database_url or redis_url:
        missing = "REDIS_URL" if database_url else "DATABASE_URL"
        raise click.ClickException(
            f"{missing} is not set while {'DATABASE_URL' if database_url else 'REDIS_URL'} is: set both "
            "(the export line `make run` prints has both), or neither to use the stack of .state/stack.json"
        )
    if env.get("MI_STATE_DIR"):
        return read_stack_file(Path(env["MI_STATE_DIR"]).expanduser(), "MI_STATE_DIR")
    for candidate in _state_candidates((cwd or Path.cwd()).resolve()):
        if candidate.exists():
            return read_stack_file(candidate, "")
    raise click.ClickException(
        "no stack found: no --stack, MI_STACK, DATABASE_URL/REDIS_URL, and no running `make run` "
        f"(.state/{STACK_FILE} in this folder, its parents or {CHECKOUT}). Start `make run`, run the "
        "export line it prints, or pass --stack PATH. The CLI never guesses a server."
    )
