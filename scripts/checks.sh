#!/usr/bin/env bash
# The static checks the test command runs before pytest (and pre-commit runs before a commit): the
# formatter, the linter, the import contracts and the type checker, each with its own line of output.
# Exits non-zero on the first check that fails, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."
# the project's venv; a git worktree without one names another with ECDYSIS_VENV (e.g. the main checkout's)
bin=${ECDYSIS_VENV:-.venv}/bin
echo "checks: ruff format --check"; "$bin/ruff" format --check --quiet . || { echo "checks: the formatter would change the files above: run .venv/bin/ruff format"; exit 1; }
echo "checks: ruff check"; "$bin/ruff" check --quiet . || { echo "checks: lint errors above"; exit 1; }
echo "checks: lint-imports"; "$bin/lint-imports" --no-cache | tail -n 3
echo "checks: mypy"; "$bin/mypy"
