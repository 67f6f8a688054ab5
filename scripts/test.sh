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
.venv/bin/python -m pytest tests -n 2 -q "$@"
