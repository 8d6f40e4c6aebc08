#!/usr/bin/env bash
# Create the project's virtualenv and install the package into it, from the lock.
#   scripts/bootstrap.sh VENV EXTRAS      e.g. scripts/bootstrap.sh .venv test,dev,embedded,bench
# On a fresh Debian machine (as root) it first installs Python's venv support with apt.
#
# The dependencies come from the lock file that holds EXTRAS (requirements/*.txt, written by
# `make lock`), installed with --require-hashes; then the broker and the application
# themselves, editable and without dependencies. MI_UNLOCKED=1 installs instead the newest
# versions setup.cfg's and broker/pyproject.toml's ranges allow (`make test-latest`).
set -euo pipefail
venv=${1:-.venv}
extras=${2:-}
case ",$extras," in
  ,,) lock=requirements.txt ;;
  ,embedded,) lock=requirements/run.txt ;;
  *) lock=requirements/test.txt ;;  # the superset: every extra
esac

# Debian packages (Python, what the tests use) are installed as scripts/servers.py installs
# servers: one apt-get at a time (the same lock file), waiting for apt's own lock, and with
# no service started by a package's postinst (policy-rc.d): the tests start the servers
# they need, on ports of their own.
apt_install_quietly() {
  mkdir -p /var/lock
  (
    flock 9
    created=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && created=1
    fi
    status=0
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" ||
      status=$?
    [ "$created" = 1 ] && rm -f /usr/sbin/policy-rc.d
    exit $status
  ) 9>>/var/lock/mi-assessment-apt.lock
}

python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      python=$candidate; break
    fi
  done
fi

need_apt=0
if [ -z "$python" ]; then need_apt=1
elif ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then need_apt=1
fi
if [ "$need_apt" = 1 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "Python >= 3.11 with venv is needed: install python3 and python3-venv" >&2; exit 1
  fi
  echo "[bootstrap] installing python3 and python3-venv with apt-get" >&2
  apt_install_quietly python3 python3-venv python3-pip
  python=python3
fi

if [[ ",$extras," == *",test,"* ]]; then
  # The browser tests drive Debian's Chromium (a browser that downloads itself cannot be
  # fetched here), with a font that has the pages' Chinese glyphs. The scale-out tests start
  # Redis Clusters and Sentinels of their own (Debian's redis-server, redis-cli and
  # redis-sentinel) and a PgBouncer; the fresh-machine tests bring up a network namespace's
  # loopback with iproute2's `ip`. Only what is missing is installed.
  missing=""
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium fonts-wqy-microhei"
  command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
  command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
  command -v redis-sentinel >/dev/null 2>&1 || [ -x /usr/bin/redis-sentinel ] || missing="$missing redis-sentinel"
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing="$missing pgbouncer"
  command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing="$missing iproute2"
  # The container tests (tests/containers/): Debian's podman with runc, pods' catatonit, and
  # debootstrap for the base image (no image registry is reached).
  command -v podman >/dev/null 2>&1 || missing="$missing podman"
  command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing="$missing runc"
  command -v catatonit >/dev/null 2>&1 || [ -x /usr/libexec/podman/catatonit ] || missing="$missing catatonit"
  command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing="$missing debootstrap"
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "[bootstrap] installing$missing with apt-get (browser, scale-out, fresh-machine and container tests)" >&2
      apt_install_quietly $missing
    else
      echo "[bootstrap]$missing not found: the tests that need them fail under make test (install them; plain pytest skips them)" >&2
    fi
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "[bootstrap] creating $venv with $("$python" --version)" >&2
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
spec=.
[ -n "$extras" ] && spec=".[$extras]"
if [ "${MI_UNLOCKED:-0}" = 1 ]; then
  echo "[bootstrap] MI_UNLOCKED=1: the newest versions the ranges allow, not the lock" >&2
  "${pip[@]}" --upgrade pip setuptools wheel
  "${pip[@]}" --upgrade --upgrade-strategy eager -e ./broker -e "$spec"
else
  # The broker library is no package of PyPI's but a distribution of its own in broker/; both
  # it and the application are built here with the locked setuptools (no build isolation,
  # which would fetch whatever setuptools is newest).
  echo "[bootstrap] pip install --require-hashes -r $lock, then -e ./broker -e . (the first time: downloads, about half a minute)" >&2
  "${pip[@]}" --require-hashes -r "$lock"
  "${pip[@]}" --no-deps --no-build-isolation -e ./broker -e .
fi
# A lock that no longer holds what setup.cfg requires (a dependency added without `make lock`)
# shows here, not later as an ImportError.
"$venv/bin/python" -m pip check --disable-pip-version-check >&2
