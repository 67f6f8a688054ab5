"""A sub-run's results read back from its run directory, and what two runs' results say of each other.

`read_run` parses `summary.json` and `trials.jsonl` (a malformed line is a `RunDirError`); `disagreement`
says why the two do not agree (trial count, infrastructure errors, mean reward: the candidate is then
broken, `validate.subrun.BrokenCandidate`); `infra_drift` why a candidate's run is not comparable with the
incumbent's; `solved_tasks` and `flips` compare two runs task by task. This module must not import tau2,
task suites or harness code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.records import Flips


def read_run(run_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`(summary.json, trials.jsonl lines)` of a run directory.

    Raises:
        RunDirError: `summary.json` missing or unreadable, or a line of `trials.jsonl` that is not a JSON
            object with `task_id` and `termination_reason`.
    """
    try:
        summary = json.loads((run_path / "summary.json").read_text())
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read {run_path / 'summary.json'}: {exc}") from None
    trials_path = run_path / "trials.jsonl"
    trials = []
    if trials_path.is_file():
        for n, line in enumerate(trials_path.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                trial = json.loads(line)
                if not isinstance(trial, dict) or "task_id" not in trial or "termination_reason" not in trial:
                    raise ValueError("not a trial result (no task_id or termination_reason)")
            except ValueError as exc:
                raise RunDirError(f"{trials_path} line {n} is malformed: {exc}") from None
            trials.append(trial)
    return summary, trials


def disagreement(summary: dict[str, Any], trials: list[dict[str, Any]]) -> str | None:
    """Why `summary.json` does not match `trials.jsonl` (trial count, infrastructure errors, mean reward),
    or None. A summary edited after the fact, or trials dropped, shows here."""
    from pytest_ecdysis.core.records import INFRA_REASONS

    scored = [t.get("reward") for t in trials if t.get("termination_reason") not in INFRA_REASONS]
    rewards: list[float] = [r for r in scored if isinstance(r, int | float)]
    if len(rewards) != len(scored):
        return "a scored trial has no numeric reward"
    infra = len(trials) - len(scored)
    if summary.get("n_trials") != len(trials):
        return f"summary says {summary.get('n_trials')} trials, trials.jsonl has {len(trials)}"
    if summary.get("n_infra_errors") is not None and summary.get("n_infra_errors") != infra:
        return f"summary says {summary.get('n_infra_errors')} infrastructure errors, trials.jsonl has {infra}"
    mean = sum(rewards) / len(rewards) if rewards else None
    got = summary.get("suite_score")
    if (mean is None) != (got is None) or (
        mean is not None and got is not None and abs(float(got) - mean) > 1e-9
    ):
        return f"summary score {got} is not the mean reward of trials.jsonl ({mean})"
    return None


def infra_drift(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """Why the candidate's run is not comparable with the incumbent's (more infrastructure errors, fewer
    scored trials, more missing cases), or None. `before`/`after` are run summaries (`summary.json`)."""

    def n(summary: dict[str, Any], key: str) -> int:
        value = summary.get(key)
        return len(value) if isinstance(value, list) else int(value or 0)

    if n(after, "n_infra_errors") > n(before, "n_infra_errors"):
        return (
            f"infrastructure drift: {n(after, 'n_infra_errors')} infrastructure error(s) against the "
            f"incumbent's {n(before, 'n_infra_errors')}"
        )
    if n(after, "n_scored") < n(before, "n_scored"):
        return f"infrastructure drift: {n(after, 'n_scored')} scored trial(s) against the incumbent's {n(before, 'n_scored')}"
    if n(after, "missing") > n(before, "missing"):
        return (
            f"infrastructure drift: {n(after, 'missing')} case(s) never reported against the incumbent's "
            f"{n(before, 'missing')}"
        )
    return None


def solved_tasks(trials: list[dict[str, Any]], threshold: float) -> set[str]:
    """Tasks whose trials all reached `threshold` (*solved*); infrastructure errors do not
    count as solved. Keys are `<suite>/<task_id>` when trials carry a suite, else the task id."""
    by_task: dict[str, list[bool]] = {}
    for t in trials:
        key = f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"])
        reward = t.get("reward")
        by_task.setdefault(key, []).append(reward is not None and reward >= threshold)
    return {k for k, oks in by_task.items() if all(oks)}


def flips(before: list[dict[str, Any]], after: list[dict[str, Any]], threshold: float) -> Flips:
    """Per-task changes between two runs of the same tasks: `solved_to_failed`, `failed_to_solved`."""
    tasks = {f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"]) for t in before}
    a, b = solved_tasks(before, threshold), solved_tasks(after, threshold)
    return {
        "solved_to_failed": sorted(t for t in tasks if t in a and t not in b),
        "failed_to_solved": sorted(t for t in tasks if t not in a and t in b),
    }


#: The note kind the trusted side writes when harness code asked for another model than the configured one
#: (`pytest_ecdysis_tau2.harness_process.request_guard`; the call was made with the configured model).
MODEL_OVERRIDDEN = "model_overridden"


def model_overrides(trials: list[dict[str, Any]]) -> int:
    """How many trials (`trials.jsonl` lines) carry a `MODEL_OVERRIDDEN` note in their `harness_notes` or
    `endpoint_notes`: the candidate asked for another model there."""

    def asked(trial: dict[str, Any]) -> bool:
        notes = [*(trial.get("harness_notes") or []), *(trial.get("endpoint_notes") or [])]
        return any(isinstance(n, dict) and n.get("kind") == MODEL_OVERRIDDEN for n in notes)

    return sum(1 for t in trials if asked(t))
