"""The container files agree with the Procfile, the settings and each other (no engine needed).

The stop timeouts that let jobs in flight finish, the probes docs/operations.md describes, the image's
version label, the entrypoint's refusal of a missing setting, and the readers of the Compose
file and the kustomization that the container tests run them through.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from scripts import procfile_supervisor
from tests.containers import engine
from tests.containers.compose import ComposeError, Project, interpolate, seconds
from tests.containers.kube import Kustomization

ROOT = engine.ROOT
COMPOSE_FILE = ROOT / "deploy" / "compose.yaml"
MANIFESTS = ROOT / "deploy" / "kubernetes"
TYPES = [name for name, _ in procfile_supervisor.procfile_entries(ROOT / "Procfile")]
LONG_RUNNING = [t for t in TYPES if t != procfile_supervisor.RELEASE_TYPE]
GRACEFUL = re.search(r"--graceful-timeout (\d+)", (ROOT / "Procfile").read_text())
assert GRACEFUL is not None
#: gunicorn's graceful stop in the Procfile's web line: requests in progress get this long.
WEB_GRACE_S = int(GRACEFUL.group(1))


def entrypoint() -> ModuleType:
    """deploy/container/entrypoint.py, a script of the image, imported by its path."""
    path = ROOT / "deploy" / "container" / "entrypoint.py"
    spec = importlib.util.spec_from_file_location("mi_container_entrypoint", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compose(tmp_path: Path) -> Project:
    (tmp_path / ".env").write_text("POSTGRES_PASSWORD=p\nREDIS_PASSWORD=r\n")
    return Project(COMPOSE_FILE, tmp_path, "unused")


def kustomization(tmp_path: Path) -> Kustomization:
    (tmp_path / "secrets.env").write_text((MANIFESTS / "secrets.env.example").read_text())
    return Kustomization(MANIFESTS, secrets_folder=tmp_path)


def settings_map(kube: Kustomization) -> dict[str, str]:
    return dict(kube.of_kind("ConfigMap")[0]["data"])


def container(kube: Kustomization, name: str) -> dict[str, Any]:
    deployments = {d["metadata"]["name"]: d for d in kube.of_kind("Deployment")}
    deployment = deployments[f"mi-assessment-{name}"]
    (main,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(main)


def test_compose_runs_every_procfile_type_from_the_image_after_the_release(tmp_path: Path) -> None:
    project = compose(tmp_path)
    commands = {name: s.spec.get("command") for name, s in project.services.items()}
    for type_ in TYPES:
        assert commands[type_] == [type_]
        assert project.services[type_].spec["image"] == project.services["release"].spec["image"]
    for type_ in LONG_RUNNING:
        service = project.services[type_]
        assert service.depends_on["release"] == "service_completed_successfully"
        assert service.spec["restart"] == "unless-stopped"
        assert service.spec["healthcheck"]["test"][-2:] == ["health", type_]
    assert project.services["release"].spec["restart"] == "no"
    # Scalable: no fixed container name, no published port.
    assert "ports" not in project.services["worker"].spec
    assert project.order().index("release") < min(project.order().index(t) for t in LONG_RUNNING)


def test_the_stop_timeouts_let_jobs_and_requests_in_flight_finish(tmp_path: Path) -> None:
    kube = kustomization(tmp_path)
    shutdown_s = int(settings_map(kube)["WORKER_SHUTDOWN_TIMEOUT_MS"]) // 1000
    project = compose(tmp_path)
    assert project.services["worker"].stop_timeout_s > shutdown_s
    assert project.services["web"].stop_timeout_s > WEB_GRACE_S
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in kube.of_kind("Deployment")}
    assert pods["mi-assessment-worker"]["terminationGracePeriodSeconds"] > shutdown_s
    assert pods["mi-assessment-web"]["terminationGracePeriodSeconds"] > WEB_GRACE_S + 5  # preStop's sleep
    # Drains take one worker pod at a time and keep a web pod serving; each budget selects its
    # Deployment's pods (the reader checks that every budget selects some).
    budgets = {d["metadata"]["name"]: d["spec"] for d in kube.of_kind("PodDisruptionBudget")}
    assert budgets["mi-assessment-worker"]["maxUnavailable"] == 1
    assert budgets["mi-assessment-web"]["minAvailable"] == 1
    deployments = {d["metadata"]["name"]: d for d in kube.of_kind("Deployment")}
    for name, budget in budgets.items():
        assert budget["selector"] == deployments[name]["spec"]["selector"]


def test_the_manifests_probe_healthz_readyz_and_the_beats(tmp_path: Path) -> None:
    kube = kustomization(tmp_path)
    web = container(kube, "web")
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["ports"][0]["containerPort"] == int(settings_map(kube)["PORT"])
    for kind in ("worker", "hotpath", "reconciler"):
        assert container(kube, kind)["livenessProbe"]["exec"]["command"][-2:] == ["health", kind]
    for document in kube.of_kind("Deployment"):
        spec = document["spec"]["template"]["spec"]
        assert [c["args"] for c in spec["initContainers"]] == [["wait-release"]]
        (main,) = spec["containers"]
        assert main["resources"]["requests"]
        assert main["resources"]["limits"]
        assert spec["securityContext"]["runAsNonRoot"] is True
    (job,) = kube.of_kind("Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["release"]
    # The pods need every secret the example names, and the example names the URLs' forms.
    example = (MANIFESTS / "secrets.env.example").read_text()
    for name in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "ADMIN_TOKENS"):
        assert re.search(rf"^{name}=", example, re.MULTILINE)
    assert "redis+sentinel://" in example
    assert "redis+cluster://" in example
    assert "PgBouncer" in example


def test_the_image_label_has_the_package_version() -> None:
    containerfile = (ROOT / "Containerfile").read_text()
    assert f"ARG VERSION={engine.app_version()}\n" in containerfile


def test_the_entrypoint_names_a_missing_or_weak_setting() -> None:
    module = entrypoint()
    urls = {"DATABASE_URL": "postgresql://u:p@h/d", "REDIS_URL": "redis://h:6379/0"}
    with pytest.raises(module.SettingError, match="DATABASE_URL is not set"):
        module.check_settings("worker", {})
    with pytest.raises(module.SettingError, match="REDIS_URL is not set"):
        module.check_settings("release", {"DATABASE_URL": urls["DATABASE_URL"]})
    with pytest.raises(module.SettingError, match="SECRET_KEY"):
        module.check_settings("web", {**urls, "APP_ENV": "production"})
    with pytest.raises(module.SettingError, match="LOG_FORMAT"):
        module.check_settings("release", {**urls, "LOG_FORMAT": "xml"})
    module.check_settings("release", urls)  # nothing else is required


def test_the_entrypoint_appends_arguments_to_a_one_command_line_only() -> None:
    module = entrypoint()
    entry = {
        "argv": ["/bin/sh", "-c", "exec python -m hotpath"],
        "with_args": ["/bin/sh", "-c", 'exec python -m hotpath "$@"', "hotpath"],
    }
    assert module.command(entry, [], "hotpath") == entry["argv"]
    assert module.command(entry, ["--only", "events"], "hotpath")[-2:] == ["--only", "events"]
    with pytest.raises(module.SettingError, match="more than one command"):
        module.command({"argv": ["/bin/sh", "-c", "a && b"], "with_args": None}, ["x"], "release")


def test_the_compose_reader_interpolates_as_compose_does() -> None:
    variables = {"SET": "value", "EMPTY": ""}
    assert interpolate("${SET}-${UNSET:-fallback}-${EMPTY:-e}-${EMPTY-kept}-$$HOME", variables) == (
        "value-fallback-e--$HOME"
    )
    with pytest.raises(ComposeError, match="EMPTY: say so"):
        interpolate("${EMPTY:?say so}", variables)
    assert seconds("610s") == 610
    assert seconds("1m30s") == 90


def test_the_compose_reader_refuses_keys_it_does_not_know(tmp_path: Path) -> None:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    document["services"]["worker"]["privileged"] = True
    changed = tmp_path / "compose.yaml"
    changed.write_text(yaml.safe_dump(document))
    (tmp_path / ".env").write_text("POSTGRES_PASSWORD=p\nREDIS_PASSWORD=r\n")
    with pytest.raises(ComposeError, match="privileged"):
        Project(changed, tmp_path, "unused")


def test_the_image_builds_every_package_the_distribution_holds() -> None:
    """The build copies each top-level package of setup.cfg's `packages.find` (its COPY lines and
    the .dockerignore's allow-list name them one by one): a package added there must be added
    here, or the image's wheel would lack it."""
    lines = (ROOT / "setup.cfg").read_text().split("[options.packages.find]", 1)[1].split("[", 1)[0]
    include = lines.split("include =", 1)[1].split("exclude =", 1)[0].split()
    packages = sorted({name.split(".", 1)[0] for name in include})
    containerfile = (ROOT / "Containerfile").read_text().splitlines()
    allowed = (ROOT / ".dockerignore").read_text().splitlines()
    for package in packages:
        assert f"COPY {package} {package}" in containerfile, package
        assert f"!{package}" in allowed, package
