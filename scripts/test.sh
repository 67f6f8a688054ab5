#!/usr/bin/env bash
# Set up (if needed) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True
.venv/bin/python -m pytest tests -n 2 -q "$@"
