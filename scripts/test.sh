#!/usr/bin/env bash
# Set up (if needed) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True
export PYTHONUNBUFFERED=1  # progress lines appear when printed, also when the output is piped or captured
# The oracle check replays all 50 airline + 114 retail tasks (about 10 min of the run on 2 cores);
# ECDYSIS_FULL_ORACLE=0 replays a fixed sample for quick local runs.
export ECDYSIS_FULL_ORACLE=${ECDYSIS_FULL_ORACLE:-1}
# Arguments that name test paths (an existing file or directory, maybe with ::test) replace the default
# `tests`: ./scripts/test.sh tests/test_x.py runs that file only; no path (or options only) runs everything.
# The value after an option that takes one (-k tests, -m slow, -n 0) is never taken for a path.
targets=(tests)
prev=
for arg in "$@"; do
  case "$prev" in -k|-m|-n|-p|-o|-c|-W|--deselect|--ignore|--ignore-glob|--rootdir|--confcutdir) prev=$arg; continue ;; esac
  prev=$arg
  case "$arg" in -*) continue ;; esac
  if [ -e "${arg%%::*}" ]; then targets=(); break; fi
done
# The whole suite starts with the static checks (formatter, linter, import contracts, mypy: scripts/checks.sh);
# a run of named test paths skips them, as does ECDYSIS_CHECKS=0.
if [ ${#targets[@]} -gt 0 ] && [ "${ECDYSIS_CHECKS:-1}" != 0 ]; then ./scripts/checks.sh; fi
.venv/bin/python -m pytest ${targets[@]+"${targets[@]}"} -n 2 -q "$@"
