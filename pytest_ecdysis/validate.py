"""Validation sub-runs: score a harness by running the user's own suite in a `pytest` subprocess.

A sub-run is started from the user's checkout (the trusted suite and plugin, cwd = the directory pytest
was invoked from), with the same suite arguments and xdist settings as the session
(`config.invocation_params.args`), minus the options that belong to the outer run (evolution, gate,
baseline, resume, run dir, harness, junit), plus `--ecdysis-harness <candidate>` and
`--ecdysis-run-dir <round dir>`. Env: the session's without the user's repository-local git variables
(`gitenv.child_env`), `ECDYSIS_SIM_URL` of the running simulated server (no second
server), a fresh `ECDYSIS_RUN_ID`, `PYTHONDONTWRITEBYTECODE=1` (no bytecode in the candidate's tree).
Never in-process: an imported harness module would be reused (DESIGN.md §5).

Its results are read back from its own run directory (`summary.json`, `trials.jsonl`).
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .edit import import_check
from .errors import RunDirError
from .gitenv import child_env

#: Outer-run options a sub-run must not inherit: name -> takes a value.
STRIPPED_OPTIONS: dict[str, bool] = {
    "--ecdysis-evolve": False,
    "--ecdysis-gate": False,
    "--ecdysis-resume": True,
    "--ecdysis-save-baseline": True,
    "--ecdysis-baseline": True,
    "--ecdysis-gate-tolerance": True,
    "--ecdysis-gate-max-regressions": True,
    "--ecdysis-rounds": True,
    "--ecdysis-harness": True,
    "--ecdysis-run-dir": True,
    "--ecdysis-test-model": True,
    "--ecdysis-html": True,
    "--junitxml": True,
    "--junit-xml": True,
    "--lf": False,
    "--last-failed": False,
    "--ff": False,
    "--failed-first": False,
    "-x": False,
    "--exitfirst": False,
    "--maxfail": True,
    "--sw": False,
    "--stepwise": False,
}


@dataclass
class SubRun:
    """A finished sub-run: its run directory and what it wrote there."""

    run_id: str
    run_path: Path
    exit_code: int
    summary: dict[str, Any]
    trials: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    log_path: Path | None = None

    @property
    def score(self) -> float:
        return float(self.summary["suite_score"])


class BrokenCandidate(Exception):
    """The candidate does not import, or its sub-run produced no scores (the round ends `broken_candidate`)."""


def strip_args(args: list[str] | tuple[str, ...], drop: dict[str, bool] | None = None) -> list[str]:
    """`args` without the options in `drop` (default `STRIPPED_OPTIONS`), in `--opt v` and `--opt=v` forms."""
    drop = STRIPPED_OPTIONS if drop is None else drop
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in drop:
            skip = drop[name] and "=" not in arg
            continue
        out.append(arg)
    return out


def subrun_args(base_args: list[str] | tuple[str, ...], *, harness_dir: Path, run_dir: Path,
                overrides: dict[str, str | None] | None = None) -> list[str]:
    """The sub-run's pytest arguments: the suite arguments, the candidate, the run dir, and overrides
    (e.g. `{"--ecdysis-split": "test", "--ecdysis-trials": "3", "--ecdysis-tasks": None}`), which replace
    any given value (None: drop the option)."""
    overrides = overrides or {}
    args = strip_args(base_args, {**STRIPPED_OPTIONS, **{k: True for k in overrides}})
    args += ["--ecdysis-harness", str(harness_dir), "--ecdysis-run-dir", str(run_dir)]
    for name, value in overrides.items():
        if value is not None:
            args += [name, value]
    return args


def run_suite(*, base_args: list[str] | tuple[str, ...], cwd: Path, harness_dir: Path, run_dir: Path,
              run_id: str, sim_url: str | None, overrides: dict[str, str | None] | None = None,
              check_import: bool = True) -> SubRun:
    """Run the suite on `harness_dir` in a subprocess and read its run directory `<run_dir>/<run_id>`.

    Output goes to `<run_dir>/pytest.log`. Ctrl-C stops the subprocess and propagates.

    Raises:
        BrokenCandidate: the harness does not import, or the sub-run wrote no `summary.json` or scored no trial.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    if check_import:
        problem = import_check(harness_dir)
        if problem:
            raise BrokenCandidate(f"the candidate does not import: {problem}")
    args = subrun_args(base_args, harness_dir=harness_dir, run_dir=run_dir, overrides=overrides)
    env = {k: v for k, v in child_env().items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env.update(ECDYSIS_RUN_ID=run_id, PYTHONDONTWRITEBYTECODE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    if env.get("PYTEST_ADDOPTS"):  # an outer --ecdysis-evolve there would make every sub-run evolve too
        env["PYTEST_ADDOPTS"] = shlex.join(strip_args(shlex.split(env["PYTEST_ADDOPTS"])))
    if sim_url:
        env["ECDYSIS_SIM_URL"] = sim_url
    log_path = run_dir / "pytest.log"
    started = time.monotonic()
    with log_path.open("w") as log:
        log.write("$ " + " ".join([sys.executable, "-m", "pytest", *args]) + "\n\n")
        log.flush()
        proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            raise
    wall = time.monotonic() - started
    run_path = run_dir / run_id
    try:
        summary, trials = read_run(run_path)
    except RunDirError as exc:
        raise BrokenCandidate(f"the sub-run (exit status {code}) wrote no results: {exc}; see {log_path}") from None
    if not summary.get("n_trials"):
        raise BrokenCandidate(f"the sub-run (exit status {code}) scored no trial; see {log_path}")
    return SubRun(run_id=run_id, run_path=run_path, exit_code=code, summary=summary, trials=trials,
                  wall_s=wall, log_path=log_path)


def read_run(run_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`(summary.json, trials.jsonl lines)` of a run directory.

    Raises:
        RunDirError: `summary.json` missing or unreadable.
    """
    try:
        summary = json.loads((run_path / "summary.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RunDirError(f"cannot read {run_path / 'summary.json'}: {exc}") from None
    trials_path = run_path / "trials.jsonl"
    trials = []
    if trials_path.is_file():
        trials = [json.loads(line) for line in trials_path.read_text().splitlines() if line.strip()]
    return summary, trials


def solved_tasks(trials: list[dict[str, Any]], threshold: float) -> set[str]:
    """Tasks whose trials all reached `threshold` (DESIGN.md §4: *solved*); infrastructure errors do not
    count as solved. Keys are `<suite>/<task_id>` when trials carry a suite, else the task id."""
    by_task: dict[str, list[bool]] = {}
    for t in trials:
        key = f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"])
        reward = t.get("reward")
        by_task.setdefault(key, []).append(reward is not None and reward >= threshold)
    return {k for k, oks in by_task.items() if all(oks)}


def flips(before: list[dict[str, Any]], after: list[dict[str, Any]], threshold: float) -> dict[str, list[str]]:
    """Per-task changes between two runs of the same tasks: `solved_to_failed`, `failed_to_solved`."""
    tasks = {f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"]) for t in before}
    a, b = solved_tasks(before, threshold), solved_tasks(after, threshold)
    return {"solved_to_failed": sorted(t for t in tasks if t in a and t not in b),
            "failed_to_solved": sorted(t for t in tasks if t not in a and t in b)}
