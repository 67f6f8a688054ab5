"""Using pytest-ecdysis from another repository: the GitHub Action's run script and `ecdysis init`.

- `inputs`: the action's inputs (`action.yml` passes each as an `INPUT_*` variable) read and checked into
  one frozen `ActionInputs`; bad input is one line saying what to set (`ActionInputError`);
- `action`: what the action's main step does (`python -m pytest_ecdysis.ci.action`): runs pytest (or merges
  shards and gates them), writes the HTML page, the step's outputs and the job summary;
- `template`: `ecdysis init DIR`, the smallest repository that gates and evolves a harness of its own.

This package sits under `cli` and above `run` (pyproject `[tool.importlinter]`); it never imports tau2 or
a suite: pytest and the `ecdysis` command run in subprocesses, as a workflow runs them.
"""
