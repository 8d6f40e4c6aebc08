"""`make status`, `make start|stop|restart PROCESS=NAME`: the processes of the running `make run`.

Works from any shell in the checkout, with nothing exported: the stack is the one running on
the state folder (`MI_STATE_DIR`, else the checkout's `.state/`, as `make run` chooses it),
found by its lock (scripts/stack_lock.py), and its processes are asked of its supervisord over
the state folder's socket with the credentials of `.state/supervisord.conf` (0600: this
account's own), as `supervisorctl -c .state/supervisord.conf` would ask them.

    status               the stack (pid, URL) and each process: state, pid, uptime
    start NAME           start a stopped (or given-up) process; one running is left as it is
    stop NAME            stop one process (jobs in flight finish first); it stays stopped
    restart NAME         stop it if it runs, then start it (NAME omitted: every process)
    stop                 the whole stack, as Ctrl-C in its terminal: processes, then servers

Exit status 0 when done, 1 when no `make run` runs there or the request failed, 2 for a
usage error.
"""

from __future__ import annotations

import configparser
import os
import signal
import sys
import time
import xmlrpc.client
from pathlib import Path
from typing import Any, cast

from scripts import stack_lock

ROOT = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("MI_STATE_DIR", ROOT / ".state")).resolve()
#: supervisord's group of the Procfile's types (scripts/procfile_supervisor.py).
GROUP = "stack"
ACTIONS = ("status", "start", "stop", "restart")
#: How long `make stop` waits for the stack to end before it says so (the processes may take
#: up to MI_STOP_TIMEOUT_S, 610 s by default, to finish the jobs they hold).
STACK_STOP_WAIT_S = 900.0
#: What every answer ends with: the commands, as the console's alarm and the README print them.
ADVICE = (
    "make status                   the processes\n"
    "make start PROCESS=worker     start a stopped one (restart: make restart PROCESS=worker)\n"
    "make stop PROCESS=worker      stop one; `make stop` alone stops the whole stack\n"
    "logs                          {logs}/<process>.log, the web's requests in {logs}/access.log"
)


class StackError(Exception):
    """Said to the operator, and the command exits 1."""


def supervisor(state: Path) -> Any:
    """supervisord's XML-RPC interface on the state folder's socket, as supervisorctl reaches it."""
    from supervisor.xmlrpc import SupervisorTransport

    conf = configparser.RawConfigParser()
    if not conf.read(state / "supervisord.conf"):
        raise StackError(f"{state / 'supervisord.conf'} cannot be read")
    url = conf.get("supervisorctl", "serverurl", fallback=None)
    if url is None:
        raise StackError(f"{state / 'supervisord.conf'} names no socket (its path is too long for one)")
    user = conf.get("supervisorctl", "username", fallback=None)
    password = conf.get("supervisorctl", "password", fallback=None)
    transport = SupervisorTransport(user, password, url)
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor


def processes(rpc: Any) -> list[dict[str, Any]]:
    """The Procfile's processes (supervisord's group), in their order."""
    found = [p for p in cast(list[dict[str, Any]], rpc.getAllProcessInfo()) if p["group"] == GROUP]
    if not found:
        raise StackError("supervisord runs no process of the stack (it is stopping?)")
    return found


def named(rpc: Any, name: str) -> dict[str, Any]:
    for process in processes(rpc):
        if process["name"] == name:
            return process
    known = ", ".join(p["name"] for p in processes(rpc))
    raise StackError(f"the stack has no process {name!r}: it runs {known}")


def show(rpc: Any, holder: stack_lock.RunningStack) -> None:
    print(f"make run on {holder.state}: {holder.describe()}")
    rows = [(p["name"], p["statename"], p["description"]) for p in processes(rpc)]
    width = max(len(name) for name, _, _ in rows)
    for name, state, description in rows:
        print(f"  {name.ljust(width)}  {state.ljust(8)}  {description}")


def start(rpc: Any, name: str) -> str:
    process = named(rpc, name)
    if process["statename"] in {"RUNNING", "STARTING"}:
        return f"{name} is {process['statename'].lower()} already (pid {process['pid']})"
    rpc.startProcess(f"{GROUP}:{name}", True)
    return f"{name} started (pid {named(rpc, name)['pid']})"


def stop(rpc: Any, name: str) -> str:
    process = named(rpc, name)
    if process["statename"] not in {"RUNNING", "STARTING", "BACKOFF"}:
        return f"{name} is not running ({process['statename']})"
    print(f"stopping {name} (jobs in flight finish first)…", flush=True)
    rpc.stopProcess(f"{GROUP}:{name}", True)
    return f"{name} stopped; it stays stopped until `make start PROCESS={name}`"


def restart(rpc: Any, names: list[str]) -> list[str]:
    said = []
    for name in names:
        if named(rpc, name)["statename"] in {"RUNNING", "STARTING", "BACKOFF"}:
            stop(rpc, name)
        said.append(start(rpc, name).replace(" started", " restarted"))
    return said


def stop_stack(holder: stack_lock.RunningStack) -> str:
    """SIGTERM to `make run` itself (its Ctrl-C): it stops the processes, then its servers."""
    pid = holder.pid
    if pid is None or "scripts.run_stack" not in _cmdline(pid):
        raise StackError(f"the process holding {holder.state / stack_lock.LOCK_FILE} is not `make run`")
    os.kill(pid, signal.SIGTERM)
    print(
        f"asked `make run` (pid {pid}) to stop: its processes finish their jobs in flight, then its "
        "servers stop (its terminal shows the progress)…",
        flush=True,
    )
    deadline = time.monotonic() + STACK_STOP_WAIT_S
    while stack_lock.running(holder.state) is not None:
        if time.monotonic() > deadline:
            raise StackError(f"`make run` (pid {pid}) still runs after {STACK_STOP_WAIT_S:.0f} s")
        time.sleep(0.2)
    return f"the stack on {holder.state} stopped"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def run(action: str, name: str | None, state: Path) -> list[str]:
    holder = stack_lock.running(state)
    if holder is None:
        raise StackError(f"no `make run` is running on {state}: start the stack with `make run`")
    if action == "stop" and name is None:
        return [stop_stack(holder)]
    try:
        rpc = supervisor(state)
        if action == "status":
            show(rpc, holder)
            return []
        if action == "restart":
            return restart(rpc, [name] if name else [p["name"] for p in processes(rpc)])
        if name is None:
            raise StackError(f"name the process: make {action} PROCESS=worker")
        return [start(rpc, name) if action == "start" else stop(rpc, name)]
    except xmlrpc.client.Fault as fault:
        raise StackError(f"supervisord refused: {fault.faultString}") from None
    except OSError as exc:
        raise StackError(f"supervisord of {state} does not answer ({exc}): is the stack stopping?") from None


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ACTIONS or len(argv) > 2:
        print(f"usage: python -m scripts.stack_ctl {{{'|'.join(ACTIONS)}}} [PROCESS]", file=sys.stderr)
        return 2
    action, name = argv[0], (argv[1].strip() or None) if len(argv) == 2 else None
    try:
        lines = run(action, name, STATE)
    except StackError as exc:
        print(f"[stack] {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    if action == "status":
        print("\n" + ADVICE.format(logs=STATE / "logs"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
