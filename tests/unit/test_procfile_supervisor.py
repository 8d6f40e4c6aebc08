"""supervisord's configuration made from the Procfile (scripts/procfile_supervisor.py), read
back by supervisord's own parser, and the output listener's line handling."""

from __future__ import annotations

import io
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from supervisor.datatypes import RestartUnconditionally

from scripts import procfile_supervisor as ps
from scripts import supervisor_output

ROOT = Path(__file__).resolve().parents[2]

#: The repository's Procfile plus a type added later: nothing may be specific to a type but web.
EXTRA_TYPE = ("scheduler", "python -m actors.scheduler")
PROCFILE = (ROOT / "Procfile").read_text().rstrip("\n") + f"\n{EXTRA_TYPE[0]}: {EXTRA_TYPE[1]}\n"


def supervisord_view(tmp_path: Path, procfile_text: str = PROCFILE, **overrides: Any) -> Any:
    """The configuration as supervisord itself reads it (its ServerOptions)."""
    from supervisor.options import ServerOptions

    procfile = tmp_path / "Procfile"
    procfile.write_text(procfile_text)
    settings: dict[str, Any] = {
        "state": tmp_path / "state",
        "root": ROOT,
        "python": sys.executable,
        "port": 8123,
        "stop_timeout_s": 42,
        **overrides,
    }
    config = ps.SupervisorConfig(**settings)
    config.logs.mkdir(parents=True)
    path = ps.write(config.state / "supervisord.conf", ps.render(ps.procfile_entries(procfile), config))
    assert path.stat().st_mode & 0o777 == 0o600
    options = ServerOptions()
    options.realize(args=["--configuration", str(path)])
    return options


def programs(options: Any) -> dict[str, Any]:
    groups = {group.name: group for group in options.process_group_configs}
    return {p.name: p for p in sorted(groups[ps.GROUP].process_configs, key=lambda p: p.priority)}


def test_every_long_running_type_is_a_program_in_the_procfiles_order(tmp_path: Path) -> None:
    found = programs(supervisord_view(tmp_path))
    expected = [name for name, _ in ps.procfile_entries(ROOT / "Procfile") if name != "release"]
    assert list(found) == [*expected, EXTRA_TYPE[0]]  # release is not supervised


def test_each_program_runs_its_procfile_line_through_sh(tmp_path: Path) -> None:
    lines = dict(ps.procfile_entries(ROOT / "Procfile")) | dict([EXTRA_TYPE])
    for name, program in programs(supervisord_view(tmp_path)).items():
        assert shlex.split(program.command) == ["/bin/sh", "-c", f"exec {lines[name]}"], name
        assert program.directory == str(ROOT)


def test_restart_backoff_group_stop_and_stop_timeout(tmp_path: Path) -> None:
    for name, program in programs(supervisord_view(tmp_path)).items():
        assert program.autorestart is RestartUnconditionally, name
        assert program.startsecs == ps.START_SECONDS
        assert program.startretries == ps.START_RETRIES
        assert (program.stopasgroup, program.killasgroup) == (True, True)
        assert program.stopwaitsecs == 42
        # Only web listens on $PORT.
        assert (program.environment or {}).get("PORT") == ("8123" if name == "web" else None)
        if name != "web":
            assert program.stdout_events_enabled
            assert program.redirect_stderr
            assert program.stdout_logfile == str(tmp_path / "state" / "logs" / f"{name}.log")


def test_the_webs_access_log_has_a_file_of_its_own_and_stays_out_of_the_console(tmp_path: Path) -> None:
    """gunicorn writes its access log to stdout (`--access-logfile -`), the rest to stderr."""
    logs = tmp_path / "state" / "logs"
    web = programs(supervisord_view(tmp_path))["web"]
    assert not web.redirect_stderr
    assert (web.stdout_logfile, web.stderr_logfile) == (str(logs / "access.log"), str(logs / "web.log"))
    assert (web.stdout_events_enabled, web.stderr_events_enabled) == (False, True)
    (tmp_path / "all").mkdir()
    loud = programs(supervisord_view(tmp_path / "all", access_log_to_terminal=True))["web"]
    assert (loud.stdout_events_enabled, loud.stderr_events_enabled) == (True, True)
    assert "--access-logfile -" in (ROOT / "Procfile").read_text()  # what the split relies on


def test_supervisord_runs_in_the_foreground_and_logs_to_the_console_file(tmp_path: Path) -> None:
    options = supervisord_view(tmp_path)
    assert options.nodaemon
    assert options.silent
    assert options.logfile == str(tmp_path / "state" / "console.log")
    listener = next(g for g in options.process_group_configs if g.name == ps.OUTPUT_LISTENER)
    assert listener.priority < min(p.priority for p in programs(options).values())  # stopped last
    assert "--output" in listener.process_configs[0].command


def test_a_percent_sign_survives_and_an_inline_comment_is_refused(tmp_path: Path) -> None:
    found = programs(supervisord_view(tmp_path, "web: echo 100%\n"))
    assert shlex.split(found["web"].command) == ["/bin/sh", "-c", "exec echo 100%"]
    with pytest.raises(ValueError, match="comment"):
        ps.render([("web", "gunicorn app # listen")], ps.SupervisorConfig(tmp_path, ROOT, "python", 1, 1))


@pytest.mark.parametrize(
    ("line", "argv"),
    [
        ("python -m hotpath", ["/bin/sh", "-c", "exec python -m hotpath"]),
        ("exec foo", ["/bin/sh", "-c", "exec foo"]),
        ("alembic upgrade head && python -m x", ["/bin/sh", "-c", "alembic upgrade head && python -m x"]),
        ("a | b", ["/bin/sh", "-c", "a | b"]),
        ("a; b", ["/bin/sh", "-c", "a; b"]),
        ("echo 'a && b'", ["/bin/sh", "-c", "exec echo 'a && b'"]),
    ],
)
def test_exec_prefixes_one_simple_command_only(line: str, argv: list[str]) -> None:
    assert ps.shell_argv(line) == argv


def test_the_stop_timeout_follows_the_workers_shutdown_timeout() -> None:
    assert ps.stop_timeout_s({}) == 600 + ps.STOP_MARGIN_S
    assert ps.stop_timeout_s({"WORKER_SHUTDOWN_TIMEOUT_MS": "30500"}) == 31 + ps.STOP_MARGIN_S
    assert ps.stop_timeout_s({"WORKER_SHUTDOWN_TIMEOUT_MS": "30500", "MI_STOP_TIMEOUT_S": "7"}) == 7
    with pytest.raises(ValueError, match="at least 1"):
        ps.stop_timeout_s({"MI_STOP_TIMEOUT_S": "0"})


def test_the_listener_prints_whole_lines_with_the_name_in_front() -> None:
    out = io.StringIO()
    printer = supervisor_output.Printer(["web", "worker"], 0, False, out)
    printer.chunk("web", "stdout", "one\ntw")
    printer.chunk("worker", "stdout", "job done\r\n")
    printer.chunk("web", "stdout", "o\n")
    printer.chunk("web", "stdout", "unfinished")
    printer.flush("web")  # the process exited: its last words are printed
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["web    | one", "worker | job done", "web    | two", "web    | unfinished"]


def test_the_listener_speaks_supervisords_protocol(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    payload = "processname:web groupname:stack pid:7 channel:stdout\n答案 saved\n"
    header = "ver:3.0 server:supervisor serial:1 pool:output poolserial:1 eventname:PROCESS_LOG_STDOUT"
    header += f" len:{len(payload)}\n"  # characters, not bytes: the payload is not ASCII
    stdin = io.TextIOWrapper(io.BytesIO((header + payload).encode()), encoding="utf-8")
    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", stdout)
    console = tmp_path / "console.log"
    assert supervisor_output.main(["--output", str(console), "web"]) == 0
    assert stdout.getvalue() == "READY\nRESULT 2\nOKREADY\n"
    assert console.read_text().split(" ", 1)[1] == "web | 答案 saved\n"


#: A terminal's view of a start: what the console file holds, and whether `make run` shows it.
CONSOLE = [
    ("2026-12-01 08:00:00,001 INFO Set uid to user 0 succeeded", False),
    ("2026-12-01 08:00:00,002 INFO RPC interface 'supervisor' initialized", False),
    ("2026-12-01 08:00:00,003 CRIT Server 'unix_http_server' running without any HTTP authentication", True),
    ("2026-12-01 08:00:01,000 INFO spawned: 'output' with pid 10", False),
    ("2026-12-01 08:00:01,001 INFO spawned: 'web' with pid 11", False),  # the first start: the banner's
    ("2026-12-01 08:00:01,002 INFO spawned: 'worker' with pid 12", False),
    ("2026-12-01 08:00:06,000 INFO success: web entered RUNNING state, process has stayed up", False),
    (
        "08:00:07 web    | 2026-12-01 08:00:07,000 INFO [web 11] gunicorn.error: Booting worker with pid: 13",
        False,
    ),
    (
        '08:00:07 web    | 2026-12-01 08:00:07,001 INFO [web 13] gunicorn.access: 127.0.0.1 "GET /readyz"',
        False,
    ),
    ("\x1b[33m08:00:08 worker |\x1b[0m 2026-12-01 08:00:08,000 INFO [worker 12] reports: report of 4", False),
    ('08:00:08 worker | {"time": "2026-12-01T08:00:08Z", "level": "INFO", "message": "done"}', False),
    ('08:00:08 worker | {"time": "2026-12-01T08:00:08Z", "level": "ERROR", "message": "lost"}', True),
    ("08:00:09 worker | 2026-12-01 08:00:09,000 WARNING [worker 12] reports: database down", True),
    ("08:00:09 worker | Traceback (most recent call last):", True),  # not a log line: shown
    ('08:00:09 worker |   File "x.py", line 1', True),
    ("2026-12-01 08:00:10,000 WARN exited: worker (terminated by SIGKILL; not expected)", True),
    ("2026-12-01 08:00:11,000 INFO spawned: 'worker' with pid 14", True),  # a restart
    ("2026-12-01 08:00:20,000 WARN received SIGTERM indicating exit request", True),
    ("2026-12-01 08:00:20,001 INFO waiting for web, worker to die", True),
    ("2026-12-01 08:00:22,001 INFO waiting for web, worker to die", False),  # said once
    ("2026-12-01 08:00:23,000 INFO stopped: web (exit status 0)", True),
    ("2026-12-01 08:00:24,000 WARN stopped: output (terminated by SIGTERM)", False),
]


def test_the_terminal_shows_starts_stops_warnings_and_errors_only() -> None:
    shown = supervisor_output.TerminalFilter()
    assert [(line, shown.accepts(line)) for line, _ in CONSOLE] == CONSOLE
    everything = supervisor_output.TerminalFilter(everything=True)
    assert all(everything.accepts(line) for line, _ in CONSOLE)
