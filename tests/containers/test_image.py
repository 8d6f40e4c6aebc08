"""The product's image (Containerfile): what it holds, who it runs as, and how it refuses a
configuration it cannot run with.

These need no server: each runs the image alone, as `podman run` would on a new host.
"""

from __future__ import annotations

import json

import pytest

from scripts.lock_drift import OWN, drift, locked
from tests.containers import engine

pytestmark = [pytest.mark.slow, pytest.mark.system]

#: The size the image must stay under, uncompressed (what `podman images` shows).
SIZE_LIMIT_BYTES = 250_000_000
PYTHON = "/opt/mi-assessment/bin/python"
#: The settings every process type needs, as a test gives them (nothing listens there).
URLS = [
    "--env",
    "DATABASE_URL=postgresql://u:p@db.invalid:5432/d",
    "--env",
    "REDIS_URL=redis://r.invalid:6379/0",
]


def run(*args: str, entrypoint: str | None = None) -> tuple[int, str, str]:
    """`podman run --rm` of the image; (exit code, stdout, stderr). No health check: podman would
    print its own complaint (no systemd to schedule it) on the same stderr."""
    options = ["--entrypoint", entrypoint] if entrypoint else []
    done = engine.podman(
        "run", "--rm", "--network", "none", "--no-healthcheck", *options, *args, check=False, timeout=120
    )
    return done.returncode, done.stdout, done.stderr


def test_the_image_is_small_non_root_labelled_and_holds_the_lock(images: dict[str, float]) -> None:
    image = engine.inspect("image", engine.APP_IMAGE)
    size = int(image["Size"])
    print(f"image {engine.APP_IMAGE}: {size / 1e6:.1f} MB uncompressed")
    assert size < SIZE_LIMIT_BYTES, size
    config = image["Config"]
    assert config["User"] == "10001:10001"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == engine.app_version()
    assert labels["org.opencontainers.image.revision"]
    assert config["StopSignal"] == "SIGTERM"
    assert config["Entrypoint"][:3] == ["/usr/bin/tini", "-g", "--"]
    # The docker format keeps HEALTHCHECK (OCI drops it): the probe of the type the container runs.
    assert image["Healthcheck"]["Test"][-1] == "health"

    code, out, err = run(
        engine.APP_IMAGE,
        "sh",
        "-c",
        "id -u; command -v gcc cc x86_64-linux-gnu-gcc-12 || true;"
        " ls -d /src /wheels /root/.cache 2>/dev/null || true",
    )
    assert code == 0, err
    assert out.split() == ["10001"], out  # no compiler, no source tree, no wheels or pip cache

    # Every dependency at the lock's version (requirements.txt, installed with --require-hashes),
    # the broker library and the application from their own wheels.
    code, out, err = run(
        engine.APP_IMAGE, PYTHON, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"
    )
    assert code == 0, err
    installed = {item["name"].lower().replace("_", "-"): item["version"] for item in json.loads(out)}
    assert drift(locked(engine.ROOT / "requirements.txt"), installed) == []
    assert installed.keys() >= OWN
    assert installed["mi-assessment"] == engine.app_version()


def test_every_procfile_type_runs_the_procfile_line(images: dict[str, float]) -> None:
    """The image's resolved lines are what the systemd units run (scripts.procfile_exec)."""
    from scripts import procfile_exec, procfile_supervisor

    code, out, err = run(engine.APP_IMAGE, "cat", "/opt/mi-assessment/procfile.json")
    assert code == 0, err
    resolved = json.loads(out)
    types = [name for name, _ in procfile_supervisor.procfile_entries(engine.ROOT / "Procfile")]
    assert list(resolved) == types
    for name in types:
        assert resolved[name]["argv"] == procfile_exec.command_for(name)


@pytest.mark.parametrize(
    ("type_", "env", "variable"),
    [
        ("worker", [], "DATABASE_URL"),
        ("release", ["--env", "DATABASE_URL=postgresql://u:p@db.invalid/d"], "REDIS_URL"),
        ("hotpath", [*URLS, "--env", "REDIS_URL=http://r.invalid"], "REDIS_URL"),
        ("reconciler", [*URLS, "--env", "RECONCILE_INTERVAL_MS=soon"], "RECONCILE_INTERVAL_MS"),
        ("web", URLS, "SECRET_KEY"),
        ("web", [*URLS, "--env", "SECRET_KEY=" + "k" * 40, "--env", "ADMIN_TOKENS=short"], "ADMIN_TOKENS"),
    ],
)
def test_a_missing_or_malformed_setting_stops_the_container_at_once_naming_it(
    images: dict[str, float], type_: str, env: list[str], variable: str
) -> None:
    code, out, err = run(*env, engine.APP_IMAGE, type_)
    assert code == 78, (code, out, err)
    assert variable in err
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1, err
