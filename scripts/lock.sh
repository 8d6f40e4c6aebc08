#!/usr/bin/env bash
# Write the lock files: every dependency pinned to one version, with the hashes of its files.
#
#   scripts/lock.sh UV [uv pip compile options]     (`make lock`, `make lock ARGS=--upgrade`)
#
# Inputs are requirements/*.in (which distributions and extras each install needs); the
# ranges themselves stay in setup.cfg and broker/pyproject.toml. requirements/test.txt, the
# superset, is resolved first; every other lock is resolved within its versions
# (`--constraint`), so one package has one version in every file. Without options, uv keeps
# each version already locked that still fits the ranges; `--upgrade` takes the newest the
# ranges allow, `--upgrade-package NAME` one package's.
#
# The locks are universal (markers for every platform and Python >= 3.11) so one file
# serves Debian 12's Python 3.11 and newer ones alike.
set -euo pipefail
uv=$1
shift
cd "$(dirname "$0")/.."

header() {
  # What uv writes is kept as it is; this says, above it, what the file is and how to use it.
  local out=$1 install=$2 body
  body=$(sed '/^# A lock: /,/^# Install: /d' "$out")
  {
    echo "# A lock: every dependency at one version, with its files' hashes. Do not edit by hand:"
    echo "# \`make lock\` writes it from $3 (README, \"Dependencies\")."
    echo "# Install: $install"
    printf '%s\n' "$body"
  } > "$out"
}

compile() {
  local input=$1 output=$2
  shift 2
  "$uv" pip compile "$input" --quiet --universal --python-version 3.11 --generate-hashes \
    --no-emit-package mi-assessment --no-emit-package dramatiq-listbroker \
    --custom-compile-command "make lock" --output-file "$output" "$@"
}

compile requirements/test.in requirements/test.txt "$@"
for pair in run.in:requirements/run.txt deploy.in:requirements.txt broker-test.in:requirements/broker-test.txt; do
  compile "requirements/${pair%%:*}" "${pair#*:}" --constraint requirements/test.txt "$@"
done

header requirements/test.txt \
  "pip install --require-hashes -r requirements/test.txt, then pip install --no-deps --no-build-isolation -e ./broker -e . (scripts/bootstrap.sh)" \
  requirements/test.in
header requirements/run.txt \
  "pip install --require-hashes -r requirements/run.txt, then pip install --no-deps --no-build-isolation -e ./broker -e . (scripts/bootstrap.sh)" \
  requirements/run.in
header requirements.txt \
  "pip install --require-hashes -r requirements.txt, then pip install --no-deps --no-build-isolation ./broker . (deploy/README.md)" \
  requirements/deploy.in
header requirements/broker-test.txt \
  "pip install --require-hashes -r requirements/broker-test.txt, then the broker with --no-deps (scripts/broker_suite.py)" \
  requirements/broker-test.in
