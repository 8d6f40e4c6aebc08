"""deploy/compose.yaml: the whole stack in containers on one host, used through its web container.

The file runs as Compose runs it (tests/containers/compose.py) in a network namespace of the
test's own: PostgreSQL and Redis (the stand-in images), the release step as a one-shot the
others wait for, web, two worker containers (`--scale worker=2`), hotpath and reconciler, with
the secrets from a `.env` file. Users submit through the web container; the faults are a
worker container SIGKILLed mid-burst (its jobs come back and complete: none lost) and a
worker container stopped, as `compose stop` does, with jobs in flight (they finish first).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import redis
import requests
import yaml
from sqlalchemy import Engine, create_engine

from bench import netns
from redis_adapters.queue_figures import queue_figures
from redis_adapters.report_queue import RedisReportQueue
from services.domain.status import RecordStatus
from tests.containers import engine as containers
from tests.containers.compose import Project
from tests.support.processes import row_locked, sessions_waiting_for_a_lock, wait_until
from tests.support.stack import db_status, insert_record
from tests.system.shipped import User, Web
from web import issue_user_token

pytestmark = [pytest.mark.slow, pytest.mark.system]

COMPOSE_FILE = containers.ROOT / "deploy" / "compose.yaml"
WORKERS = 2
#: The burst of the SIGKILL test, and when (submissions answered) the kill comes.
BURST = 30
KILL_AFTER = 10
#: Jobs the killed worker holds mid-transaction when it dies.
HELD = 3
#: The test's own settings in .env beside the secrets: a killed worker's jobs come back after
#: 3 s of silence (the product's default is 60 s), a lost job is healed after 5 s.
#: The image's HEALTHCHECK command.
HEALTH = ("/opt/mi-assessment/bin/python", "/opt/mi-assessment/entrypoint.py", "health")
#: What Dramatiq's worker processes log when SIGTERM reaches them (their warm shutdown).
SHUTDOWN_LINE = "Shutting down"
TEST_SETTINGS = {
    "BROKER_HEARTBEAT_TIMEOUT_MS": "3000",
    "RECONCILE_GRACE_MS": "5000",
    "RECONCILE_INTERVAL_MS": "2000",
}


@dataclass
class ComposeStack:
    project: Project
    address: str  # the network namespace's address on the test's bridge
    secrets: dict[str, str]
    up_began: float  # time.monotonic() when `up` began
    up_ended: float

    @property
    def web(self) -> Web:
        return Web(f"http://{self.address}:{self.project.services['web'].container_ports[0]}")

    def user(self, user_id: int) -> User:
        return User(self.web, issue_user_token(self.secrets["SECRET_KEY"], user_id))

    @property
    def database_url(self) -> str:
        return f"postgresql+psycopg://mi_assessment:{self.secrets['POSTGRES_PASSWORD']}@{self.address}:5432/mi_assessment"

    def redis(self) -> redis.Redis:
        return redis.Redis(host=self.address, port=6379, password=self.secrets["REDIS_PASSWORD"])

    def worker(self, index: int) -> str:
        return self.project.container("worker", index)


def memory_limits() -> dict[str, int]:
    """The memory limit of each type's container in deploy/kubernetes/, in bytes."""
    limits = {}
    for path in (containers.ROOT / "deploy" / "kubernetes").glob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "Deployment":
                (main,) = document["spec"]["template"]["spec"]["containers"]
                limit = str(main["resources"]["limits"]["memory"])
                assert limit.endswith("Mi"), limit
                limits[main["name"]] = int(limit[:-2]) * 2**20
    return limits


@pytest.fixture(scope="module")
def stack(
    images: dict[str, float], owner_label: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeStack]:
    folder = tmp_path_factory.mktemp("compose")
    values = {
        "POSTGRES_PASSWORD": secrets.token_urlsafe(24),
        "REDIS_PASSWORD": secrets.token_urlsafe(24),
        "SECRET_KEY": secrets.token_urlsafe(32),
        "ADMIN_TOKENS": secrets.token_urlsafe(32),
        "MI_IMAGE": containers.APP_IMAGE,
        **TEST_SETTINGS,
    }
    env_file = folder / ".env"
    env_file.touch(mode=0o600)
    env_file.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    with netns.hosts(1) as hosts:
        project = Project(
            COMPOSE_FILE,
            folder,
            hosts.names[0],
            labels=[owner_label],
            name=f"{containers.PROJECT_PREFIX}{os.getpid()}",
        )
        address = f"10.231.{hosts.slot}.2"
        try:
            began = time.monotonic()
            project.up(scale={"worker": WORKERS})
            yield ComposeStack(project, address, values, began, time.monotonic())
        finally:
            project.down(keep_logs_in=folder / "logs")


@pytest.fixture(scope="module")
def database(stack: ComposeStack) -> Iterator[Engine]:
    engine = create_engine(stack.database_url, pool_size=2)
    yield engine
    engine.dispose()


def wait_ready(web: Web, timeout: float = 120) -> None:
    def ready() -> bool:
        try:
            return requests.get(f"{web.base_url}/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ready, timeout=timeout, what="the web container to answer /readyz", interval=0.2)


def wait_report(user: User, record_id: int, timeout: float = 120) -> dict[str, object]:
    wait_until(
        lambda: user.record(record_id)["status"] == RecordStatus.COMPLETED,
        timeout=timeout,
        what=f"the report of record {record_id}",
        interval=0.2,
    )
    return user.report(record_id)


def test_compose_up_serves_reports_through_the_web_container(stack: ComposeStack) -> None:
    wait_ready(stack.web)
    user = stack.user(1)
    submission = user.take_assessment(user.answer_sheet())
    assert submission.enqueued
    report = wait_report(user, submission.record_id)
    assert report["recordId"] == submission.record_id
    first_report_s = time.monotonic() - stack.up_began
    print(
        f"compose up: services started in {stack.up_ended - stack.up_began:.1f} s, "
        f"first report {first_report_s:.1f} s after `up` began"
    )
    project = stack.project
    # The release step ran once and succeeded; every long-running container is healthy by its
    # own probe (web: /healthz; the others: their processes beat in Redis).
    assert project.state(project.container("release"))["ExitCode"] == 0
    for service in ("web", "worker", "hotpath", "reconciler"):
        for name in project.instances(service):
            wait_until(
                functools.partial(containers.healthy, name),
                timeout=60,
                what=f"{name} healthy",
                interval=1,
            )
    assert len(project.instances("worker")) == WORKERS
    # The image's own HEALTHCHECK (`health` without a type) finds the type the container runs.
    for service in ("web", "worker", "hotpath", "reconciler"):
        name = project.container(service)
        probe = containers.podman("exec", name, *HEALTH, check=False)
        assert probe.returncode == 0, (name, probe.stdout, probe.stderr)
        assert (service if service != "web" else "/healthz") in probe.stdout
    # The secrets came from .env at run time: the image holds none.
    image_env = containers.inspect("image", containers.APP_IMAGE)["Config"]["Env"]
    assert not [v for v in image_env if v.split("=", 1)[0] in ("SECRET_KEY", "ADMIN_TOKENS", "DATABASE_URL")]


def test_a_worker_container_killed_mid_burst_loses_nothing(stack: ComposeStack, database: Engine) -> None:
    """SIGKILL to a worker container while users submit and while it holds jobs in flight (three
    records' rows locked by the test, so their generations wait mid-transaction in it): its
    restart policy starts it again, and every job, the held ones included, completes: none is
    lost, none dead-lettered, and the web answered every call."""
    wait_ready(stack.web)
    project = stack.project
    victim, other = stack.worker(1), stack.worker(2)
    url = stack.database_url
    held = [insert_record(database, 99) for _ in range(HELD)]
    with contextlib.closing(stack.redis()) as client, contextlib.ExitStack() as locks:
        # The held jobs go to the victim alone: the other worker is stopped while it takes them.
        project.stop(other)
        for record_id in held:
            locks.enter_context(row_locked(url, record_id))
            RedisReportQueue(client).enqueue(record_id)
        wait_until(
            lambda: sessions_waiting_for_a_lock(url) >= HELD,
            timeout=60,
            what=f"{HELD} generations mid-transaction in {victim}",
        )
        containers.podman("start", other)
        before = project.state(victim)
        users = [stack.user(100 + n) for n in range(4)]
        sheet = users[0].answer_sheet()
        answered: dict[int, User] = {}
        lock = threading.Lock()
        killed = threading.Event()

        def submit(n: int) -> None:
            user = users[n % len(users)]
            submission = user.take_assessment(sheet)
            with lock:
                answered[submission.record_id] = user
                if len(answered) == KILL_AFTER and not killed.is_set():
                    # A crash, not a `stop`: SIGKILL to the container's PID 1 from the host (as
                    # the OOM killer would): every process of the container dies at once.
                    os.kill(int(before["Pid"]), signal.SIGKILL)
                    killed.set()

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(submit, range(BURST)))
        assert killed.is_set()
        assert len(answered) == BURST
        # The locks go with this block: the held jobs can complete once they are given back.
    # The restart policy (unless-stopped) starts it again.
    wait_until(
        lambda: project.state(victim)["Running"] and project.state(victim)["Pid"] != before["Pid"],
        timeout=60,
        what=f"{victim} restarted by its restart policy",
        interval=0.5,
    )
    for record_id, user in answered.items():
        assert wait_report(user, record_id, timeout=180)["recordId"] == record_id
    wait_until(
        lambda: all(db_status(database, r) == RecordStatus.COMPLETED for r in held),
        timeout=120,
        what="the jobs the killed worker held to come back and complete",
    )
    with contextlib.closing(stack.redis()) as client:
        figures = queue_figures(client)
    assert (figures.dead, figures.in_flight, figures.queued) == (0, 0, 0)
    assert stack.web.unanswered_or_failed() == []
    # After the burst, every container within the memory limit deploy/kubernetes gives its type.
    limits = memory_limits()
    for service in ("web", "worker", "hotpath", "reconciler"):
        for name in project.instances(service):
            used = project.memory_bytes(name)
            print(f"{name}: {used / 2**20:.0f} MiB after the burst (limit {limits[service] / 2**20:.0f} MiB)")
            assert used < limits[service], name


def test_a_worker_container_stopped_with_jobs_in_flight_finishes_them(
    stack: ComposeStack, database: Engine
) -> None:
    """`compose stop worker`: SIGTERM, then the stop_grace_period (610 s) before any SIGKILL.
    Two jobs are held mid-transaction (their records' rows locked); the container stays up
    while either runs, each completes once its lock goes, and then it exits by itself, 0."""
    project = stack.project
    # One worker container, so that both jobs are in flight in the one that is stopped.
    other = stack.worker(2)
    project.stop(other)
    name = stack.worker(1)
    quick, stuck = (insert_record(database, 200) for _ in range(2))
    url = stack.database_url
    with (
        contextlib.closing(stack.redis()) as client,
        contextlib.ExitStack() as stuck_lock,
        contextlib.ExitStack() as quick_lock,
    ):
        quick_lock.enter_context(row_locked(url, quick))
        stuck_lock.enter_context(row_locked(url, stuck))
        queue = RedisReportQueue(client)
        queue.enqueue(quick)
        wait_until(
            lambda: sessions_waiting_for_a_lock(url) >= 1, timeout=60, what="a generation mid-transaction"
        )
        queue.enqueue(stuck)
        wait_until(
            lambda: sessions_waiting_for_a_lock(url) >= 2, timeout=60, what="two generations mid-transaction"
        )

        stopping = threading.Thread(target=project.stop, args=(name,), daemon=True)
        stopping.start()
        wait_until(lambda: SHUTDOWN_LINE in project.logs(name), timeout=30, what="the worker's shutdown")
        quick_lock.close()
        wait_until(
            lambda: db_status(database, quick) == RecordStatus.COMPLETED,
            timeout=60,
            what="the first job in flight to finish during the shutdown",
        )
        assert project.alive(name), "the worker exited with a job still in flight"
        stuck_lock.close()
        wait_until(
            lambda: db_status(database, stuck) == RecordStatus.COMPLETED,
            timeout=60,
            what="the second job in flight to finish during the shutdown",
        )
        stopping.join(timeout=120)
        assert not stopping.is_alive(), "the worker did not exit once its jobs were done"
        assert queue_figures(client).in_flight == 0
    state = project.state(name)
    assert not project.alive(name)
    assert state["ExitCode"] == 0, project.logs(name)[-4000:]  # not SIGKILLed (137)


def test_the_worker_container_comes_back_after_a_stop(stack: ComposeStack) -> None:
    """After the stop above: `compose start` brings the workers back and a report is made."""
    for index in range(1, WORKERS + 1):
        containers.podman("start", stack.worker(index))
    user = stack.user(300)
    submission = user.take_assessment(user.answer_sheet())
    wait_report(user, submission.record_id)


def test_every_app_service_runs_the_product_image(stack: ComposeStack) -> None:
    for service in ("release", "web", "worker", "hotpath", "reconciler"):
        assert stack.project.services[service].spec["image"] == containers.APP_IMAGE
