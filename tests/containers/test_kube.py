"""deploy/kubernetes/: its pods run with `podman kube play` and make a report.

The kustomization is read as `kubectl apply -k` applies it (tests/containers/kube.py): the
Secret from a secrets.env of the test's own, pointing at the suite's PostgreSQL database and
Redis db index on this machine (every pod on the host's network, each with its own host name),
the image set to the one the suite built. The release Job runs first and succeeds; then the
Deployments' pods start, each after its `wait-release` init step, and a user's submission made
through the web pod gets its report from the worker pod.
"""

from __future__ import annotations

import functools
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from config.settings import Settings
from scripts.servers import free_port
from services.domain.status import RecordStatus
from tests.containers import engine as containers
from tests.containers.kube import Kustomization, container_name, pod_name
from tests.support.processes import wait_until
from tests.system.shipped import User, Web
from web import issue_user_token

pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.integration]

MANIFESTS = containers.ROOT / "deploy" / "kubernetes"
DEPLOYMENTS = ("web", "worker", "hotpath", "reconciler")
#: The web container's port in the manifests.
WEB_PORT = 8000
#: The types whose probes are `exec` commands (podman runs them as the container's health check).
EXEC_PROBED = ("worker", "hotpath", "reconciler")


def run_to_the_end(pods: list[dict[str, Any]]) -> None:
    """Every container of the one-shot `pods` exits 0 (its output in the failure otherwise)."""
    for pod in pods:
        for container in pod["spec"]["containers"]:
            name = container_name(pod["metadata"]["name"], container["name"])
            code = containers.podman("wait", name, timeout=600).stdout.strip()
            logs = containers.podman("logs", name, check=False)
            assert code == "0", f"{name} exited {code}:\n{logs.stdout}{logs.stderr}"


@pytest.fixture
def played(
    images: dict[str, float], owner_label: str, settings: Settings, engine: object, tmp_path: Path
) -> Iterator[tuple[Kustomization, str, str]]:
    """The manifests played; (the kustomization, the web's base URL, the SECRET_KEY)."""
    secret_key = secrets.token_urlsafe(32)
    database_url = settings.database_url.replace("postgresql+psycopg://", "postgresql://")
    (tmp_path / "secrets.env").write_text(
        f"DATABASE_URL={database_url}\nREDIS_URL={settings.redis_url}\n"
        f"SECRET_KEY={secret_key}\nADMIN_TOKENS={secrets.token_urlsafe(32)}\n"
    )
    port = free_port()
    kustomization = Kustomization(
        MANIFESTS,
        # On the host's network: the web listens on the machine's loopback, on a free port.
        config={"mi-assessment-settings": {"BIND": "127.0.0.1", "PORT": str(port), "LOG_FORMAT": "text"}},
        secrets_folder=tmp_path,
        images={"mi-assessment": containers.APP_IMAGE},
        host_ports={WEB_PORT: port},
        pod_labels=dict([owner_label.split("=", 1)]),
        name_prefix=f"ct{os.getpid()}-",
    )
    configmaps = kustomization.of_kind("ConfigMap")
    kustomization.create_secrets()
    played: list[Path] = []
    try:
        started = time.monotonic()
        release = kustomization.job_pods()
        assert [pod["metadata"]["name"] for pod in release] == [kustomization.name("mi-assessment-release")]
        kustomization.play(tmp_path / "release.yaml", [*configmaps, *release], played)
        run_to_the_end(release)
        # Each Deployment's init step (wait-release), then its pod.
        init = kustomization.init_pods()
        assert len(init) == len(DEPLOYMENTS)
        kustomization.play(tmp_path / "init.yaml", [*configmaps, *init], played)
        run_to_the_end(init)
        kustomization.play(tmp_path / "deployments.yaml", [*configmaps, *kustomization.deployments()], played)
        took = time.monotonic() - started
        print(f"kube play: release and {len(DEPLOYMENTS)} deployments started in {took:.1f} s")
        yield kustomization, f"http://127.0.0.1:{port}", secret_key
    finally:
        # The pods' output outlives them, in the test's folder.
        pods = [*kustomization.job_pods(), *kustomization.init_pods()]
        names = [p["metadata"]["name"] for p in pods]
        names += [pod_name(d["metadata"]["name"]) for d in kustomization.of_kind("Deployment")]
        for name in names:
            logs = containers.podman("pod", "logs", name, check=False)
            if logs.returncode == 0:
                (tmp_path / f"{name}.log").write_text(logs.stdout + logs.stderr)
        for path in reversed(played):
            kustomization.down(path)
        kustomization.remove_secrets()


def test_the_kubernetes_pods_make_a_report(played: tuple[Kustomization, str, str]) -> None:
    kustomization, base_url, secret_key = played
    assert sorted(d["metadata"]["name"] for d in kustomization.of_kind("Deployment")) == sorted(
        kustomization.name(f"mi-assessment-{kind}") for kind in DEPLOYMENTS
    )

    def ready() -> bool:
        try:
            return requests.get(f"{base_url}/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ready, timeout=120, what="the web pod to answer /readyz", interval=0.5)
    assert requests.get(f"{base_url}/healthz", timeout=5).status_code == 200
    user = User(Web(base_url), issue_user_token(secret_key, 7))
    submission = user.take_assessment(user.answer_sheet())
    wait_until(
        lambda: user.record(submission.record_id)["status"] == RecordStatus.COMPLETED,
        timeout=120,
        what="the report made by the worker pod",
        interval=0.5,
    )
    assert user.report(submission.record_id)["recordId"] == submission.record_id
    # The other pods' liveness probes pass (podman runs each as the container's health check).
    for kind in EXEC_PROBED:
        name = container_name(pod_name(kustomization.name(f"mi-assessment-{kind}")), kind)
        wait_until(
            functools.partial(containers.healthy, name),
            timeout=60,
            what=f"{name}'s liveness probe",
            interval=1,
        )
