#!/usr/bin/env bash
# Set up (if needed) and run the main job: the evolution loop on real τ²-bench airline tasks with the
# simulated model (not a real LLM). Extra arguments go to pytest, e.g. --ecdysis-rounds 2.
# Ends with a branch ecdysis/<run-id> in this repository when a round was accepted.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True
exec .venv/bin/python -m pytest task_suites/tau2/test_airline.py -n 2 --ecdysis-evolve "$@"
