"""The systemd units of deploy/ run what the Procfile says, restart forever, and stop gracefully.

systemd cannot run here: the unit files are parsed as systemd reads them (sections,
`Key=value` lines, keys that may repeat), and the command a unit would start is
resolved through scripts/procfile_exec.py, what the units' ExecStart runs. Every type
of the Procfile is checked, so a type added to it is covered with no change here.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from scripts import procfile_exec, procfile_supervisor

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

TEMPLATE = "mi-assessment@.service"
RELEASE = "mi-assessment-release.service"
TARGET = "mi-assessment.target"
#: Where the units expect the checkout (deploy/README.md).
APP = "/srv/mi-assessment"

Unit = dict[str, dict[str, list[str]]]


def parse_unit(path: Path) -> Unit:
    """{section: {key: [values, in order]}}: systemd's syntax, without specifier expansion."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{path.name}: {line!r} outside a section"
        assert "=" in line, f"{path.name}: not a Key=value line: {line!r}"
        assert not line.endswith("\\"), f"{path.name}: a continued line: {line!r}"
        key, value = (part.strip() for part in line.split("=", 1))
        section.setdefault(key, []).append(value)
    return unit


def one(unit: Unit, section: str, key: str) -> str:
    values = unit.get(section, {}).get(key, [])
    assert len(values) == 1, f"[{section}] {key}: {values}"
    return values[0]


def seconds(value: str) -> float:
    """systemd time spans as used here: `610`, `610s`, `10min`."""
    for suffix, factor in (("min", 60), ("ms", 0.001), ("s", 1)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def procfile_lines() -> dict[str, str]:
    return dict(procfile_supervisor.procfile_entries(ROOT / "Procfile"))


def long_running_types() -> list[str]:
    return [name for name, _ in procfile_supervisor.long_running(list(procfile_lines().items()))]


def exec_start(unit: Unit, instance: str) -> list[str]:
    """The unit's ExecStart for an instance (systemd's %i), as argv."""
    return shlex.split(one(unit, "Service", "ExecStart").replace("%i", instance))


def test_deploy_has_the_template_the_release_step_and_the_target() -> None:
    names = sorted(p.name for p in DEPLOY.iterdir() if p.suffix in {".service", ".target"})
    assert names == sorted([TEMPLATE, RELEASE, TARGET])


@pytest.mark.parametrize("name", long_running_types())
def test_every_procfile_type_has_a_unit_that_runs_its_procfile_line(name: str) -> None:
    unit = parse_unit(DEPLOY / TEMPLATE)
    argv = exec_start(unit, name)
    assert argv == [f"{APP}/.venv/bin/python", "-m", "scripts.procfile_exec", name]
    # What that ExecStart becomes: the Procfile's line, through sh as under honcho and make run.
    line = procfile_exec.command_for(name)
    assert line[:2] == ["/bin/sh", "-c"]
    assert line[2].removeprefix("exec ") == procfile_lines()[name]


def test_the_process_units_restart_always_with_backoff_and_stop_gracefully() -> None:
    unit = parse_unit(DEPLOY / TEMPLATE)
    assert one(unit, "Service", "Restart") == "always"
    assert one(unit, "Unit", "StartLimitIntervalSec") == "0"  # never give up
    assert seconds(one(unit, "Service", "RestartSec")) >= 1
    assert int(one(unit, "Service", "RestartSteps")) >= 1
    assert seconds(one(unit, "Service", "RestartMaxDelaySec")) > seconds(one(unit, "Service", "RestartSec"))
    assert one(unit, "Service", "KillMode") in {"mixed", "control-group"}
    # Jobs in flight may run WORKER_SHUTDOWN_TIMEOUT_MS (the Procfile's default) after SIGTERM.
    worker_s = procfile_supervisor.DEFAULT_WORKER_SHUTDOWN_TIMEOUT_MS / 1000
    assert seconds(one(unit, "Service", "TimeoutStopSec")) > worker_s
    assert one(unit, "Install", "WantedBy") == TARGET
    assert one(unit, "Unit", "PartOf") == TARGET


@pytest.mark.parametrize("unit_name", [TEMPLATE, RELEASE])
def test_the_units_run_as_a_dedicated_user_with_the_environment_file(unit_name: str) -> None:
    unit = parse_unit(DEPLOY / unit_name)
    assert one(unit, "Service", "User") == "mi-assessment"
    assert one(unit, "Service", "Group") == "mi-assessment"
    assert one(unit, "Service", "EnvironmentFile") == "/etc/mi-assessment/env"
    assert one(unit, "Service", "WorkingDirectory") == APP
    paths = [v for v in unit["Service"]["Environment"] if v.startswith("PATH=")]
    assert paths
    assert paths[0].startswith(f"PATH={APP}/.venv/bin:")  # gunicorn, dramatiq, mi-assessment-migrate


def test_the_release_step_is_a_oneshot_the_processes_require() -> None:
    release = parse_unit(DEPLOY / RELEASE)
    assert one(release, "Service", "Type") == "oneshot"
    assert one(release, "Service", "RemainAfterExit") == "yes"
    assert "Restart" not in release["Service"]
    runner = [f"{APP}/.venv/bin/python", "-m", "scripts.procfile_exec"]
    assert exec_start(release, "") == [*runner, "release"]
    assert procfile_exec.command_for("release") == ["/bin/sh", "-c", procfile_lines()["release"]]
    template = parse_unit(DEPLOY / TEMPLATE)
    assert RELEASE in one(template, "Unit", "Requires").split()
    assert RELEASE in one(template, "Unit", "After").split()


def test_procfile_exec_refuses_an_unknown_type(capsys: pytest.CaptureFixture[str]) -> None:
    assert procfile_exec.main(["no-such-type"]) == 2
    assert "no process type 'no-such-type'" in capsys.readouterr().err


def test_procfile_exec_prints_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert procfile_exec.main(["--print", "web"]) == 0
    assert shlex.split(capsys.readouterr().out) == procfile_exec.command_for("web")


def test_arguments_after_a_line_reach_the_program_verbatim(tmp_path: Path) -> None:
    """What tests and benchmarks append to a line (`--queues admin`, `--only events`) is the
    shell's "$@": never re-parsed, so spaces and quotes arrive as they were."""
    procfile = tmp_path / "Procfile"
    procfile.write_text("echo: printf '%s|' start ${WHO:-nobody}\nboth: true && printf x\n")
    argv = procfile_exec.command_for("echo", procfile, ["a b", "it's", "$HOME"])
    done = subprocess.run(
        argv, env={"WHO": "me", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True
    )
    assert done.stdout == "start|me|a b|it's|$HOME|"
    with pytest.raises(ValueError, match="more than one command"):
        procfile_exec.command_for("both", procfile, ["x"])
