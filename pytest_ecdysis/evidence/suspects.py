"""Tasks that fail the same way under every configuration: suspect, kept out of the evidence.

A task whose gold contradicts its own description (tau2-bench 316) or whose user simulator invents facts
(tau2-bench 172) fails whatever the harness does, and each such failure, read as evidence, pushes
diagnosis to "fix" the harness for it. Nothing in a single run tells such a task apart; two
configurations of the same task do. The rule (no LLM, no statistics):

- a trial's *failure signature* is its termination reason and its failed reward components
  (`user_stop|db+communicate`); a passed trial and an infrastructure error have none;
- a task is suspect when at least two configurations (harness id, model) ran it, every trial of it that was
  scored failed (at least one per configuration), and all those failures share one signature;
- a single trial that passes under any configuration clears it.

`suspect_across(runs, threshold)` applies it to runs (the incumbent's and candidates' of an evolution, a
run and its re-run); `suspect_against_baseline(trials, baseline, ...)` to a run and a gate baseline, whose
tasks carry the signature of the baseline run's failures (`identical_failures`, saved as `failure`).
`keep_out(records, reasons)` marks the failure records of suspect tasks `kept_out: "suspect_task"`;
`across_run_dirs(run_paths, threshold)` reads runs' `trials.jsonl` and applies `suspect_across` (the
evolution loop: the incumbent's run and every sub-run of the rounds). No pytest here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.metrics import is_success, task_key
from pytest_ecdysis.core.records import INFRA_REASONS, FailureRecord, TrialResult
from pytest_ecdysis.evidence.failures import failed_components


def failure_signature(trial: TrialResult, threshold: float) -> str | None:
    """`<termination_reason>|<failed components joined by + or none>`, None for a pass or an infra error."""
    if (
        trial.termination_reason in INFRA_REASONS
        or trial.reward is None
        or is_success(trial.reward, threshold)
    ):
        return None
    return f"{trial.termination_reason}|{'+'.join(failed_components(trial.components)) or 'none'}"


def identical_failures(trials: Iterable[TrialResult], threshold: float) -> dict[str, str]:
    """`{task key: signature}` for each task every scored trial of which failed with one signature."""
    by_task: dict[str, set[str | None]] = {}
    for t in trials:
        if t.termination_reason in INFRA_REASONS or t.reward is None:
            continue
        by_task.setdefault(task_key(t), set()).add(failure_signature(t, threshold))
    return {k: sig for k, s in by_task.items() if len(s) == 1 and (sig := next(iter(s))) is not None}


def _reason(signature: str, n_trials: int, configs: set[tuple[str, str]]) -> str:
    reason, components = signature.split("|", 1)
    harnesses = ", ".join(sorted({h or "?" for h, _ in configs}))
    models = ", ".join(sorted({m or "?" for _, m in configs}))
    return (
        f"every trial failed identically under {len(configs)} configurations ({n_trials} trials; harness "
        f"{harnesses}; model {models}): {reason}, failed components {components}; the task's gold data or "
        "user simulator is suspect until a configuration passes it"
    )


def suspect_across(runs: Iterable[Iterable[TrialResult]], threshold: float) -> dict[str, str]:
    """`{task key: reason}` of the tasks the module rule makes suspect, over the trials of `runs`."""
    signatures: dict[str, set[str | None]] = {}
    configs: dict[str, set[tuple[str, str]]] = {}
    counts: dict[str, int] = {}
    for trials in runs:
        for t in trials:
            if t.termination_reason in INFRA_REASONS or t.reward is None:
                continue
            key = task_key(t)
            signatures.setdefault(key, set()).add(failure_signature(t, threshold))
            configs.setdefault(key, set()).add((t.harness_id, t.model))
            counts[key] = counts.get(key, 0) + 1
    return {
        key: _reason(sig, counts[key], configs[key])
        for key, sigs in signatures.items()
        if len(sigs) == 1 and (sig := next(iter(sigs))) is not None and len(configs[key]) >= 2
    }


def suspect_against_baseline(
    trials: list[TrialResult], baseline: Mapping[str, Any], threshold: float, harness_id: str | None
) -> dict[str, str]:
    """`{task key: reason}`: tasks this run fails with the signature the baseline's run failed them with
    (baseline `tasks[key]["failure"]`), when the baseline was made with another harness."""
    if not baseline or baseline.get("harness_id") in (None, harness_id):
        return {}
    now = identical_failures(trials, threshold)
    out = {}
    for key, signature in now.items():
        before = (baseline.get("tasks") or {}).get(key) or {}
        if before.get("failure") == signature:
            configs = {
                (str(baseline.get("harness_id")), str(baseline.get("model") or "")),
                (harness_id or "", str(baseline.get("model") or "")),
            }
            n = sum(1 for t in trials if task_key(t) == key and t.reward is not None) + int(
                before.get("n") or 0
            )
            out[key] = _reason(signature, n, configs)
    return out


def keep_out(records: Iterable[FailureRecord], reasons: Mapping[str, str]) -> list[FailureRecord]:
    """The records, those of tasks in `reasons` marked `kept_out: "suspect_task"` (an earlier reason stays)."""
    out = []
    for r in records:
        if f"{r.suite}/{r.task_id}" in reasons and not r.kept_out:
            r = r.model_copy(update={"kept_out": "suspect_task"})
        out.append(r)
    return out


def read_trials(run_path: Path) -> list[TrialResult]:
    """The trials of a run directory (`trials.jsonl`); [] when it has none or a line is not a trial."""
    path = run_path / "trials.jsonl"
    try:
        return [
            TrialResult.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()
        ]
    except (OSError, ValueError):
        return []


def across_run_dirs(run_paths: Iterable[Path], threshold: float) -> dict[str, str]:
    """`suspect_across` over the trials of these run directories (each read once)."""
    seen = dict.fromkeys(Path(p).resolve() for p in run_paths)
    return suspect_across([read_trials(p) for p in seen], threshold)
