"""deploy/compose.yaml run with podman, service by service, as Compose would run it.

Debian 12's podman-compose (1.0.3) ignores what this file relies on: `depends_on`'s
conditions (the release step first, the others once it succeeded), `stop_grace_period` (it
stops everything with 1 s) and `--scale`. So the tests read the file themselves: this module
takes the Compose file's keys that deploy/compose.yaml uses, with Compose's meaning, and
refuses any other (a key added to the file fails here rather than being ignored):

- `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?message}`, `${VAR?message}` and `$$`,
  from the project folder's `.env` (and the given overrides), as Compose interpolates;
- YAML anchors and `<<` merge keys, `x-` extension fields;
- per service: image, command, environment, env_file, volumes (named), restart,
  stop_grace_period, healthcheck, depends_on (service_started / _healthy /
  _completed_successfully) and ports; `build` is for the images, which the tests build first.

Networking is the one difference: every container joins one network namespace of the test's
own, and each service's name resolves to its loopback (`--add-host NAME:127.0.0.1`), where
Compose would give them a bridge with a DNS name each. Traffic stays in that namespace; the
test reaches a published port at the namespace's own address. Health checks run when a
condition waits for them (`podman healthcheck run`: podman schedules them with systemd
timers, and the machine has no systemd).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.containers.engine import podman

SERVICE_KEYS = frozenset(
    {
        "image", "build", "command", "environment", "env_file", "volumes", "restart",
        "stop_grace_period", "healthcheck", "depends_on", "ports",
    }
)  # fmt: skip
HEALTHCHECK_KEYS = frozenset({"test", "interval", "timeout", "retries", "start_period"})
CONDITIONS = frozenset({"service_started", "service_healthy", "service_completed_successfully"})
TOP_KEYS = frozenset({"name", "services", "volumes"})
VARIABLE = re.compile(
    r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])((?:[^{}]|\{[^{}]*\})*))?\}|([A-Za-z_][A-Za-z0-9_]*))"
)
UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
DURATION = re.compile(r"^(?:(\d+)m)?(?:(\d+)s)?$")


class ComposeError(ValueError):
    """The file uses something this reader does not know, or a required variable is unset."""


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (Compose's .env): `#` comments and blank lines ignored, no quoting."""
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                key, _, value = stripped.partition("=")
                values[key.strip()] = value
    return values


def interpolate(value: Any, variables: Mapping[str, str]) -> Any:
    """Compose's interpolation of every string in `value`."""
    if isinstance(value, dict):
        return {key: interpolate(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, variables) for item in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, argument = match.group(2), match.group(3) or ""
        current = variables.get(name)
        empty = current is None or (operator is not None and operator.startswith(":") and current == "")
        if operator in (":-", "-"):
            return interpolate(argument, variables) if empty else str(current)
        if operator in (":?", "?"):
            if empty:
                raise ComposeError(f"{name}: {argument or 'required'}")
            return str(current)
        return "" if current is None else current

    return VARIABLE.sub(replace, value)


def seconds(duration: str) -> int:
    """`610s`, `1m30s` as seconds."""
    match = DURATION.match(str(duration))
    if not match or not any(match.groups()):
        raise ComposeError(f"a duration the reader does not know: {duration!r}")
    return int(match.group(1) or 0) * 60 + int(match.group(2) or 0)


def healthcheck_args(service: str, check: Mapping[str, Any] | None) -> list[str]:
    """A service's `healthcheck` as podman's --health-* options."""
    if not check:
        return []
    test = check["test"]
    if test[0] == "CMD":
        args = ["--health-cmd", json.dumps(test[1:])]
    elif test[0] == "CMD-SHELL":
        args = ["--health-cmd", test[1]]
    else:
        raise ComposeError(f"{service}: healthcheck test {test[0]!r}")
    options = {
        "interval": "--health-interval",
        "timeout": "--health-timeout",
        "start_period": "--health-start-period",
        "retries": "--health-retries",
    }
    for key, option in options.items():
        if key in check:
            args += [option, str(check[key])]
    return args


@dataclass
class Service:
    name: str
    spec: dict[str, Any]

    @property
    def depends_on(self) -> dict[str, str]:
        raw = self.spec.get("depends_on", {})
        if isinstance(raw, list):
            return dict.fromkeys(raw, "service_started")
        conditions = {name: str(entry.get("condition", "service_started")) for name, entry in raw.items()}
        unknown = set(conditions.values()) - CONDITIONS
        if unknown:
            raise ComposeError(f"{self.name}: depends_on conditions {unknown}")
        return conditions

    @property
    def stop_timeout_s(self) -> int:
        """What Compose waits after SIGTERM before SIGKILL (its default: 10 s)."""
        return seconds(self.spec.get("stop_grace_period", "10s"))

    @property
    def container_ports(self) -> list[int]:
        return [int(str(port).rsplit(":", 1)[-1]) for port in self.spec.get("ports", [])]


@dataclass
class Project:
    """The file's services, ready to run in the network namespace `netns`."""

    compose_file: Path
    project_dir: Path
    netns: str
    overrides: dict[str, str] = field(default_factory=dict)
    #: Labels of every container (the test run's owner label).
    labels: list[str] = field(default_factory=list)
    name: str = ""
    services: dict[str, Service] = field(default_factory=dict)
    volumes: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        variables = {**read_env_file(self.project_dir / ".env"), **self.overrides}
        document = yaml.safe_load(self.compose_file.read_text())
        unknown = {key for key in document if not key.startswith("x-")} - TOP_KEYS
        if unknown:
            raise ComposeError(f"top-level keys the reader does not know: {sorted(unknown)}")
        self.name = self.name or str(document.get("name", self.compose_file.parent.name))
        self.volumes = list(document.get("volumes", {}) or {})
        for name, raw in document["services"].items():
            spec = interpolate(raw, variables)
            unknown = set(spec) - SERVICE_KEYS
            if unknown:
                raise ComposeError(f"{name}: keys the reader does not know: {sorted(unknown)}")
            unknown = set(spec.get("healthcheck", {})) - HEALTHCHECK_KEYS
            if unknown:
                raise ComposeError(f"{name}: healthcheck keys the reader does not know: {sorted(unknown)}")
            self.services[name] = Service(name, spec)

    # -- names --------------------------------------------------------------------------------

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.name}-{service}-{index}"

    def instances(self, service: str) -> list[str]:
        prefix = f"{self.name}-{service}-"
        return [name for name in self.started if name.startswith(prefix)]

    def volume(self, name: str) -> str:
        return f"{self.name}_{name}"

    # -- podman run ---------------------------------------------------------------------------

    def run_args(self, service: Service, index: int) -> list[str]:
        spec = service.spec
        args = [
            "run", "--detach", "--name", self.container(service.name, index),
            "--network", f"ns:/run/netns/{self.netns}",
            "--label", f"com.docker.compose.project={self.name}",
            "--label", f"com.docker.compose.service={service.name}",
            "--stop-timeout", str(service.stop_timeout_s),
        ]  # fmt: skip
        for label in self.labels:
            args += ["--label", label]
        for other in self.services:
            args += ["--add-host", f"{other}:127.0.0.1"]
        for env_file in spec.get("env_file", []):
            args += ["--env-file", str(self.project_dir / env_file)]
        environment = spec.get("environment", {})
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        for key, value in environment.items():
            args += ["--env", f"{key}={value}"]
        for volume in spec.get("volumes", []):
            source, target = str(volume).split(":", 1)
            if source not in self.volumes:
                raise ComposeError(f"{service.name}: only named volumes are read, not {volume!r}")
            args += ["--volume", f"{self.volume(source)}:{target}"]
        restart = str(spec.get("restart", "no"))
        args += ["--restart", restart]
        args += healthcheck_args(service.name, spec.get("healthcheck"))
        command = spec.get("command")
        image = spec["image"]
        if command is None:
            return [*args, image]
        return [*args, image, *([command] if isinstance(command, str) else command)]

    def start(self, service: str, index: int = 1) -> str:
        name = self.container(service, index)
        podman(*self.run_args(self.services[service], index))
        if name not in self.started:
            self.started.append(name)
        return name

    # -- up, with depends_on's conditions ------------------------------------------------------

    def order(self) -> list[str]:
        """The services, each after those it depends on."""
        done: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in done:
                return
            if name in path:
                raise ComposeError(f"a dependency cycle: {' -> '.join((*path, name))}")
            for dependency in self.services[name].depends_on:
                visit(dependency, (*path, name))
            done.append(name)

        for name in self.services:
            visit(name, ())
        return done

    def up(self, scale: Mapping[str, int] | None = None, *, timeout: float = 240) -> None:
        """Every service, in order, each once what it depends on meets its condition."""
        for name in self.order():
            for dependency, condition in self.services[name].depends_on.items():
                self.wait_for(dependency, condition, timeout=timeout)
            count = (scale or {}).get(name, 1)
            for index in range(1, count + 1):
                self.start(name, index)

    def wait_for(self, service: str, condition: str, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for name in self.instances(service):
            if condition == "service_completed_successfully":
                code = podman("wait", name, timeout=timeout).stdout.strip().splitlines()[-1]
                if code != "0":
                    raise ComposeError(f"{name} exited with {code}:\n{self.logs(name)[-4000:]}")
            elif condition == "service_healthy":
                while podman("healthcheck", "run", name, check=False).returncode != 0:
                    if time.monotonic() > deadline:
                        raise ComposeError(
                            f"{name} not healthy after {timeout:g} s:\n{self.logs(name)[-4000:]}"
                        )
                    time.sleep(1)

    # -- the running containers ----------------------------------------------------------------

    def logs(self, name: str) -> str:
        done = podman("logs", name, check=False)
        return done.stdout + done.stderr

    def state(self, name: str) -> dict[str, Any]:
        return dict(json.loads(podman("inspect", "--format", "{{json .State}}", name).stdout))

    def memory_bytes(self, name: str) -> int:
        """The container's memory now, as its cgroup counts it (`podman stats`)."""
        done = podman("stats", "--no-stream", "--format", "json", name)
        (stats,) = json.loads(done.stdout)
        used = str(stats["mem_usage"]).split("/")[0].strip()
        number, unit = re.fullmatch(r"([\d.]+)\s*([kMG]?i?B)", used).groups()  # type: ignore[union-attr]
        return int(float(number) * UNITS[unit])

    def alive(self, name: str) -> bool:
        """The container's processes run (podman says `stopping`, not running, while they shut down)."""
        state = self.state(name)
        return state["Status"] in ("running", "stopping") and int(state["Pid"]) > 0

    def stop(self, name: str, timeout_s: int | None = None) -> None:
        """`compose stop`: SIGTERM (the image's STOPSIGNAL), SIGKILL after the grace period."""
        service = name[len(self.name) + 1 :].rsplit("-", 1)[0]
        grace = self.services[service].stop_timeout_s if timeout_s is None else timeout_s
        podman("stop", "--time", str(grace), name, timeout=grace + 60)

    def down(self, keep_logs_in: Path | None = None) -> None:
        """Every container removed (its output kept in `keep_logs_in`), then the volumes."""
        for name in reversed(self.started):
            if keep_logs_in is not None:
                keep_logs_in.mkdir(parents=True, exist_ok=True)
                (keep_logs_in / f"{name}.log").write_text(self.logs(name))
            podman("rm", "--force", "--time", "0", name, check=False)
        self.started.clear()
        for volume in self.volumes:
            podman("volume", "rm", "--force", self.volume(volume), check=False)


def services_of(compose_file: Path) -> Sequence[str]:
    return list(yaml.safe_load(compose_file.read_text())["services"])
