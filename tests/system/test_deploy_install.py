"""The deploy's install line, as deploy/README.md writes it, gives a working installation,
at the versions of the lock (requirements.txt).

The broker library is a distribution of its own (`./broker`) that is not on PyPI, so the
application's `pip install .` alone fails on a new host (pip looks for dramatiq-listbroker
on PyPI). The line is read from deploy/README.md itself and run in a fresh copy of the
checkout's files, into a fresh virtualenv, as an operator would on a new host; then every
Procfile process kind's package imports, the release line's command answers, and the broker
installed is the one from `./broker`, not something of that name from an index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts.lock_drift import drift, installed, locked
from tests.support.source_files import project_files

pytestmark = [pytest.mark.slow, pytest.mark.system]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_README = ROOT / "deploy" / "README.md"
#: pip downloads the application's dependencies (PyPI or the machine's mirror) the first time.
INSTALL_TIMEOUT_S = 600


def install_line() -> str:
    """The deploy README's line that makes the virtualenv and installs into it."""
    lines = [
        line.strip()
        for line in DEPLOY_README.read_text().splitlines()
        if line.startswith("python3 -m venv .venv") and "pip install" in line
    ]
    assert len(lines) == 1, f"expected one install line in {DEPLOY_README}, found {lines}"
    return lines[0]


def checkout_copy(target: Path) -> None:
    """The project's files as a clone holds them (without git: a new host may have none)."""
    for source in project_files(ROOT):
        destination = target / source.relative_to(ROOT)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`argv` in `cwd` with this environment minus any virtualenv of ours; fails with its stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_the_deploy_install_line_installs_every_process_kind(tmp_path: Path) -> None:
    host = tmp_path / "srv"
    checkout_copy(host)
    run(["bash", "-c", install_line()], host, timeout=INSTALL_TIMEOUT_S)
    python = host / ".venv" / "bin" / "python"

    # Run from elsewhere, so nothing is imported from the copy's folder by accident.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, listbroker, web, actors.run_worker, hotpath, reconciler;"
            "d = m.distribution('dramatiq-listbroker');"
            "print(d.version); print(listbroker.__file__); print(web.__file__)",
        ],
        elsewhere,
    )
    version, broker_file, web_file = probe.stdout.split()
    expected = (ROOT / "broker" / "pyproject.toml").read_text()
    assert f'version = "{version}"' in expected
    # Installed into the virtualenv (not run from the copy), like any dependency.
    assert broker_file.startswith(str(host / ".venv")), broker_file
    assert web_file.startswith(str(host / ".venv")), web_file

    # Every dependency at the lock's version, and nothing missing that setup.cfg requires.
    lock = locked(ROOT / "requirements.txt")
    assert drift(lock, installed(str(python))) == []
    run([str(python), "-m", "pip", "check"], elsewhere)

    # The release line's first command is on the virtualenv's PATH and answers.
    migrate = host / ".venv" / "bin" / "mi-assessment-migrate"
    run([str(migrate), "--help"], elsewhere)
