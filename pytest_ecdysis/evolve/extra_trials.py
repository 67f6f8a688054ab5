"""Extra trials for the tasks that flipped, before a `paired` decision (ini `ecdysis_accept_extra_trials = K`).

Under `--ecdysis-accept paired`, after the candidate's validation and the incumbent's run, the tasks whose
mean reward differs between the two runs (the *flipped* tasks: the only ones the paired test counts) get
K more trials each, for both harnesses: two sub-runs started together (`evolve.paired.together`,
`--ecdysis-tasks <flipped> --ecdysis-trials K`), in `<round or step dir>/extra/` (`<run-id>x`) and
`extra/incumbent/` (`<run-id>ix`). The decision is then taken once, on all trials of both runs pooled per
task (`acceptance.decide`, with each side's score the mean over tasks of its per-task mean rewards, so the
tasks given more trials do not weigh more). One step, not a sequential test: the budget is fixed before
it starts, 2 x K x (flipped tasks) trials, and printed.

Under "no improvement" both harnesses draw each task's outcomes alike, so pooling more trials of the
tasks that flipped keeps the test's level; what it buys: a task that flipped by noise moves toward a tie
(a noise loss no longer hides a real gain, a noise win no longer makes one). With the sign test a task
counts only by its sign, so extra trials can turn wins into ties but never add a win; `wilcoxon` and
`bootstrap` also weigh how much each task moved.

Skipped (said, recorded): K = 0 (the default); no task flipped; no task rose (nothing can become
significant). The extra trials take the trial indices after the validation's (`--ecdysis-trial-offset`), so
with a fixed simulated-model nonce they are fresh draws of it, not replays; the extra sub-runs do not use the
response cache either.
An extra run that is broken or has infrastructure errors leaves the first decision in force (said).
Only the controller runs this; harness code is imported only in sub-runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import shown
from pytest_ecdysis.evolve.paired import (
    pair_outcome,
    paired_trials,
)
from pytest_ecdysis.gate.acceptance import Decision, decide, task_means

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext


def flipped_tasks(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """Task keys (`<suite>/<task_id>`) scored in both runs whose mean reward differs, sorted."""
    b, a = task_means(before), task_means(after)
    return sorted(k for k in set(b) & set(a) if abs(a[k] - b[k]) > 1e-12)


def task_score(trials: list[dict[str, Any]]) -> float | None:
    """Mean over tasks of the per-task mean reward (None without a scored trial)."""
    means = task_means(trials)
    return sum(means.values()) / len(means) if means else None


def skip_reason(cfg: EcdysisConfig, env: Any, flipped: list[str], first: Decision) -> str | None:
    """Why no extra trials are run (None: run them)."""
    if not getattr(cfg, "accept_extra_trials", 0) or cfg.accept != "paired":
        return "off"
    if not flipped:
        return "no task flipped"
    if first.test is not None and first.test.wins == 0:
        return "no task rose: more trials cannot make the candidate significantly better"
    return None


def extra_trials(
    ev: RoundContext,
    candidate_dir: Path,
    adir: Path,
    run_id: str,
    label: str,
    base: Mapping[str, Any],
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    first: Decision,
) -> tuple[Decision, dict[str, Any] | None]:
    """The decision after extra trials of the flipped tasks (checkpoint `adir/extra_trials.json`), or `first`
    unchanged when they are skipped (the record then says why; None when the option is off).

    Returns (the decision, the round's `extra_trials` record: `tasks`, `trials_per_task`, `budget_trials`,
    `runs`, `decision_before` (the first decision's fields), `skipped`).
    """
    cfg = ev.cfg
    flipped = flipped_tasks(before, after)
    why = skip_reason(cfg, os.environ, flipped, first)
    if why == "off":
        return first, None
    if why:
        ev.say(f"{label}: extra trials skipped: {why}")
        return first, {"skipped": why, "tasks": flipped}
    doc = ev.stage_json(
        adir / "extra_trials.json", lambda: _run(ev, candidate_dir, adir, run_id, label, base, flipped)
    )
    doc.pop("fresh", None)
    if doc.get("problem"):
        ev.say(f"{label}: extra trials not used: {doc['problem']}")
        return first, {**doc, "decision_before": first.fields()}
    from pytest_ecdysis.validate.results import read_run

    (_, cand), (_, inc) = (read_run(Path(doc["runs"][k]["run_path"])) for k in ("candidate", "incumbent"))
    pooled_before, pooled_after = [*before, *inc], [*after, *cand]
    decision = decide(
        cfg.accept,
        task_score(pooled_before),
        task_score(pooled_after),
        pooled_before,
        pooled_after,
        method=cfg.accept_method,
        level=cfg.accept_level,
    )
    reason = (
        f"{decision.reason} (with {cfg.accept_extra_trials} extra trial(s) on {len(flipped)} flipped task(s))"
    )
    decision = Decision(decision.accepted, reason, decision.rule, decision.test)
    return decision, {**doc, "decision_before": first.fields()}


def _run(
    ev: RoundContext,
    candidate_dir: Path,
    adir: Path,
    run_id: str,
    label: str,
    base: Mapping[str, Any],
    flipped: list[str],
) -> dict[str, Any]:
    k = ev.cfg.accept_extra_trials
    budget = 2 * k * len(flipped)
    ev.say(
        f"{label}: extra trials: {len(flipped)} flipped task(s) x {k} trial(s) x 2 harnesses = {budget} "
        f"trial(s) (sub-runs {run_id}x, {run_id}ix): {shown(flipped, 10)}"
    )
    started = time.monotonic()
    cand, inc = paired_trials(  # after the validation's trial indices
        ev,
        candidate_dir,
        base,
        flipped,
        trials=k,
        offset=ev.cfg.trial_offset + ev.cfg.trials,
        where=adir / "extra",
        run_ids=(f"{run_id}x", f"{run_id}ix"),
        label="extra trials",
    )
    doc: dict[str, Any] = {
        "tasks": flipped,
        "trials_per_task": k,
        "budget_trials": budget,
        "wall_s": round(time.monotonic() - started, 2),
    }
    return pair_outcome(doc, cand, inc, "the extra runs")
