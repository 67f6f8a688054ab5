#!/usr/bin/env bash
# Create .venv and install pytest-ecdysis with the τ² suites and dev tools (idempotent).
# The install is editable: code changes need no reinstall, so it is skipped (in well under a second)
# while pyproject.toml and the Python are the ones of the last install and this checkout is what
# .venv imports. FORCE_INSTALL=1 reinstalls anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
# The OS sandbox of harness code (--ecdysis-sandbox, default auto) needs bubblewrap: Debian's package is its
# trusted source (docs/evolution.md, threat model). Installed here when missing and this runs as root with
# apt-get (as CI does); otherwise said once: runs then go on without the sandbox, and say so.
if ! command -v bwrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian's bubblewrap (the OS sandbox of harness code)"
    apt-get install -y -q bubblewrap >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1; } \
      || echo "setup: apt-get install bubblewrap failed: harness code will run without the OS sandbox"
  else
    echo "setup: no bwrap: harness code runs without the OS sandbox; install it with: sudo apt-get install bubblewrap"
  fi
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
STAMP=.venv/.ecdysis-install
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $(.venv/bin/python -c 'import sys; print(sys.version.split()[0])') $PWD"
if [ "${FORCE_INSTALL:-0}" != 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
   && .venv/bin/python -c 'import pathlib, sys, pytest_ecdysis, pytest_ecdysis_tau2
sys.exit(pathlib.Path(pytest_ecdysis.__file__).resolve().parents[1] != pathlib.Path.cwd().resolve())' 2>/dev/null; then
  exit 0
fi
echo "setup: installing pytest-ecdysis and the τ² suites into .venv (about 15 s, minutes on a fresh machine)"
rm -f "$STAMP"
# pip -q is silent for minutes on a fresh machine: a line every 20 s says the install is still going
( while sleep 20; do echo "setup: still installing ($SECONDS s)"; done ) &
trap 'kill $! 2>/dev/null' EXIT
.venv/bin/python -m pip install -q --upgrade pip
# setuptools prints an "editable installation" notice box (a UserWarning) on every editable install
PYTHONWARNINGS=ignore::UserWarning .venv/bin/python -m pip install -q -e '.[dev]'
echo "$want" > "$STAMP"
