#!/usr/bin/env bash
# Create the project's virtualenv and install the package into it.
#   scripts/bootstrap.sh VENV EXTRAS      e.g. scripts/bootstrap.sh .venv test,dev
# On a fresh Debian machine (as root) it first installs Python's venv support with apt.
set -euo pipefail
venv=${1:-.venv}
extras=${2:-}

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
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3 python3-venv python3-pip
  python=python3
fi

# The browser tests drive Debian's Chromium (a browser that downloads itself cannot be fetched
# here), with a font that has the pages' Chinese glyphs.
if [[ ",$extras," == *",test,"* ]] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[bootstrap] installing chromium and a CJK font with apt-get (browser tests)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-wqy-microhei
  else
    echo "[bootstrap] chromium not found: the browser tests will be skipped (install Debian's chromium)" >&2
  fi
fi

# The scale-out tests start their own Redis Sentinels and PgBouncer (Debian's packages);
# only what is missing is installed.
if [[ ",$extras," == *",test,"* ]]; then
  missing=""
  command -v redis-sentinel >/dev/null 2>&1 || [ -x /usr/bin/redis-sentinel ] || missing="$missing redis-sentinel"
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing="$missing pgbouncer"
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "[bootstrap] installing$missing with apt-get (scale-out tests)" >&2
      DEBIAN_FRONTEND=noninteractive apt-get update -q
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
    else
      echo "[bootstrap]$missing not found: the Sentinel / PgBouncer tests will be skipped" >&2
    fi
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "[bootstrap] creating $venv with $("$python" --version)" >&2
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
spec=.
[ -n "$extras" ] && spec=".[$extras]"
echo "[bootstrap] pip install -e '$spec' (the first time: downloads and builds, about half a minute)" >&2
"$venv/bin/python" -m pip install -q -e "$spec"
