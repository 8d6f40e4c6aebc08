"""The container engine of the container tests: Debian's podman, and the images they run.

No image registry can be reached here, so every image is built on this machine:

- the base, `debian:bookworm-slim`, from Debian's packages (`debootstrap --variant=minbase`,
  trimmed as the official slim image is: no manuals, documentation or translations), imported
  under the official name so that the Containerfiles' `FROM debian:bookworm-slim` finds it;
- the product's image from the checkout's Containerfile, its Python packages from the index
  (a build with the host's network, pip given the machine's CA bundle where TLS is intercepted);
- the stand-ins for the official PostgreSQL and Redis images (deploy/images/).

podman keeps them in its store (/var/lib/containers), and debootstrap's downloads stay in
CACHE: a second run finds the base, and every build is a layer-cache hit while nothing it
copies changed. Builds take a lock, so the suite's shards build each image once between them.
podman runs with this folder's containers.conf (runc, explicit ulimits).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONF = Path(__file__).with_name("containers.conf")
#: Outside the checkout, kept between runs (debootstrap's downloads, the build lock).
CACHE = Path(os.environ.get("MI_CONTAINER_CACHE", "/var/cache/mi-assessment"))
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
APP_IMAGE = "localhost/mi-assessment:test"
POSTGRES_IMAGE = "localhost/mi-assessment-postgres:15"
REDIS_IMAGE = "localhost/mi-assessment-redis:7"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: What the official slim image leaves out (its dpkg excludes), kept out of later installs too.
SLIM_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
"""
#: The official image's apt configuration: no downloaded package or cache kept in a layer.
_CLEAN = (
    "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"
)
DOCKER_CLEAN = f"""\
DPkg::Post-Invoke {{ "{_CLEAN}"; }};
APT::Update::Post-Invoke {{ "{_CLEAN}"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""
SOURCES = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
#: A cold build downloads Debian's and PyPI's packages.
BUILD_TIMEOUT_S = 1800
TOOLS = ("podman", "runc", "debootstrap", "ip", "catatonit")


def unavailable() -> str | None:
    """Why the container tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "the container tests need root (podman with runc, network namespaces)"
    missing = [tool for tool in TOOLS if not _found(tool)]
    if missing:
        return f"no {', '.join(missing)} (make test's bootstrap installs them with apt on Debian)"
    return None


def _found(tool: str) -> bool:
    return shutil.which(tool) is not None or any(
        Path(folder, tool).exists() for folder in ("/usr/sbin", "/sbin", "/usr/libexec/podman")
    )


def podman(
    *args: str, check: bool = True, timeout: float = 120, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """One podman command with the tests' configuration; its output captured."""
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    done = subprocess.run(
        ["podman", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        input=input_text,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done


def inspect(kind: str, name: str) -> dict[str, Any]:
    """`podman KIND inspect NAME` as a dict."""
    return dict(json.loads(podman(kind, "inspect", name).stdout)[0])


#: The pid of the test run that started a container or pod; theirs are removed once it is gone.
OWNER_LABEL = "org.mi-assessment.test-owner"
#: The compose tests' project name is this and the run's pid (so are its volumes' names).
PROJECT_PREFIX = "mi-ct"


def remove_orphans() -> None:
    """Containers and pods of earlier test runs that ended without removing them (killed)."""
    for kind in ("pod", "container"):
        listed = podman(
            kind, "ps", "--all", "--filter", f"label={OWNER_LABEL}", "--format", "json", check=False
        )
        for item in json.loads(listed.stdout or "[]"):
            owner = str((item.get("Labels") or {}).get(OWNER_LABEL, ""))
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                podman(
                    kind, "rm", "--force", "--time", "0", str(item.get("Id") or item.get("ID")), check=False
                )
    # The compose tests' named volumes: `mi-ct<pid>_<volume>` (tests/containers/test_compose.py).
    for volume in json.loads(podman("volume", "ls", "--format", "json", check=False).stdout or "[]"):
        match = re.match(rf"^{PROJECT_PREFIX}(\d+)_", str(volume.get("Name", "")))
        if match and not Path(f"/proc/{match.group(1)}").exists():
            podman("volume", "rm", "--force", str(volume["Name"]), check=False)


def healthy(container: str) -> bool:
    """The container's health check passes now (`podman healthcheck run`: podman schedules
    checks with systemd timers, and this machine has no systemd)."""
    return podman("healthcheck", "run", container, check=False).returncode == 0


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """One builder at a time on the machine (the suite's shards, other checkouts)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "container-build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


#: The label that says which recipe made the base: a base of another recipe is made again.
RECIPE_LABEL = "org.mi-assessment.base-recipe"


def base_recipe() -> str:
    return hashlib.sha256("\0".join((SLIM_EXCLUDES, DOCKER_CLEAN, SOURCES)).encode()).hexdigest()[:16]


def build_base() -> None:
    """debian:bookworm-slim from Debian's packages, unless podman has it already (same recipe)."""
    if (
        image_exists(BASE_IMAGE)
        and inspect("image", BASE_IMAGE)["Config"].get("Labels", {}).get(RECIPE_LABEL) == base_recipe()
    ):
        return
    debs = CACHE / "debootstrap"
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=CACHE) as folder:
        rootfs = Path(folder) / "rootfs"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--cache-dir={debs}",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            check=True,
            capture_output=True,
            timeout=BUILD_TIMEOUT_S,
        )
        (rootfs / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(SLIM_EXCLUDES)
        (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(DOCKER_CLEAN)
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(SOURCES)
        for folder_name in (
            "usr/share/man",
            "usr/share/groff",
            "usr/share/info",
            "usr/share/locale",
            "usr/share/lintian",
            "usr/share/linda",
            "var/lib/apt/lists",
            "var/cache/apt",
        ):
            target = rootfs / folder_name
            if target.is_dir():
                for child in target.iterdir():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        for doc in (rootfs / "usr/share/doc").glob("*"):
            for child in doc.iterdir() if doc.is_dir() and not doc.is_symlink() else ():
                if child.name != "copyright":
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        # The archive whole before the import: a failed tar must not leave an empty image behind.
        archive = Path(folder) / "rootfs.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."],
            check=True, capture_output=True, timeout=BUILD_TIMEOUT_S,
        )  # fmt: skip
        podman(
            "import",
            "--change", "ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--change", 'CMD=["bash"]',
            "--change", f"LABEL={RECIPE_LABEL}={base_recipe()}",
            str(archive), BASE_IMAGE,
            timeout=BUILD_TIMEOUT_S,
        )  # fmt: skip


def host_ca_bundle() -> Path | None:
    """The CA bundle pip trusts on this machine, when it is not pip's own (TLS intercepted)."""
    for candidate in (os.environ.get("PIP_CERT", ""), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


#: The label of a test build: the digest of what the build reads (see `inputs_digest`).
INPUTS_LABEL = "org.mi-assessment.test-inputs"


def context_files(containerfile: Path, context: Path) -> list[Path]:
    """The files of `context` the build may read: the Containerfile, the .dockerignore and
    what its `!path` lines let in (all of `context` without one)."""
    ignore = context / ".dockerignore"
    if not ignore.exists():
        roots = [context]
    else:
        lines = [line.strip() for line in ignore.read_text().splitlines()]
        roots = [context / line[1:] for line in lines if line.startswith("!")] + [ignore]
    files = {containerfile}
    for root in roots:
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        files.update(
            f for f in candidates
            if f.is_file() and "__pycache__" not in f.parts and not f.name.endswith(".pyc")
            and not any(part.endswith(".egg-info") for part in f.parts)
        )  # fmt: skip
    return sorted(files)


def inputs_digest(containerfile: Path, context: Path, args: Sequence[str]) -> str:
    """What a build of `containerfile` reads: its files' paths and contents, its arguments, the base."""
    digest = hashlib.sha256("\0".join([*args, base_recipe()]).encode())
    for path in context_files(containerfile, context):
        digest.update(str(path.relative_to(context) if path.is_relative_to(context) else path).encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:32]


def build(tag: str, containerfile: Path, context: Path, build_args: Sequence[str] = ()) -> float:
    """`podman build` of `tag` (docker format: keeps HEALTHCHECK); the seconds it took. Not run
    when `tag` was built from the same inputs (podman's own layer cache would hit on every step,
    but still hashes the copied trees, ~30 s on this machine)."""
    digest = inputs_digest(containerfile, context, build_args)
    if image_exists(tag) and inspect("image", tag)["Config"].get("Labels", {}).get(INPUTS_LABEL) == digest:
        return 0.0
    args = [
        "build", "--format", "docker", "--network", "host", "--layers", "--pull=never",
        "-f", str(containerfile), "-t", tag,
    ]  # fmt: skip
    bundle = host_ca_bundle()
    if bundle is not None:
        args += ["-v", f"{bundle}:/etc/ssl/host-ca.crt:ro", "--build-arg", "PIP_CERT=/etc/ssl/host-ca.crt"]
    for build_arg in build_args:
        args += ["--build-arg", build_arg]
    args += ["--label", f"{INPUTS_LABEL}={digest}"]
    started = time.monotonic()
    podman(*args, str(context), timeout=BUILD_TIMEOUT_S)
    return time.monotonic() - started


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def app_version() -> str:
    for line in (ROOT / "setup.cfg").read_text().splitlines():
        if line.startswith("version = "):
            return line.split("=", 1)[1].strip()
    raise AssertionError("setup.cfg has no version")


def build_images() -> dict[str, float]:
    """Every image the container tests use, built (or found in the cache); seconds per image."""
    timings: dict[str, float] = {}
    with build_lock():
        started = time.monotonic()
        build_base()
        timings["base"] = time.monotonic() - started
        timings[APP_IMAGE] = build(
            APP_IMAGE,
            ROOT / "Containerfile",
            ROOT,
            [
                f"VERSION={app_version()}",
                f"REVISION={_git('rev-parse', 'HEAD')}",
                f"SOURCE={_git('remote', 'get-url', 'origin')}",
            ],
        )
        for tag, folder in ((POSTGRES_IMAGE, "postgres"), (REDIS_IMAGE, "redis")):
            images = ROOT / "deploy" / "images" / folder
            timings[tag] = build(tag, images / "Containerfile", images)
    return timings


if __name__ == "__main__":
    reason = unavailable()
    if reason:
        raise SystemExit(reason)
    for image, seconds in build_images().items():
        print(f"{image}: {seconds:.1f} s")
