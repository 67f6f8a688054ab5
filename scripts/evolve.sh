#!/usr/bin/env bash
# Set up (if needed) and run the main job: the evolution loop on real τ²-bench airline tasks with the
# simulated model (not a real LLM). Extra arguments go to pytest, e.g. --ecdysis-rounds 2.
# Prints a progress line at least every 20 s; ends with the "ecdysis verdict" section: the branch
# ecdysis/<run-id> made in this repository and how to see it, or why no branch was made.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True
export PYTHONUNBUFFERED=1  # progress lines appear when printed, also when the output is piped or captured
exec .venv/bin/python -m pytest pytest_ecdysis_tau2/test_airline.py -n 2 --ecdysis-evolve "$@"
