"""The held-out check of a candidate the train decision accepted, before it is committed.

Whatever route put gold data into a candidate (an editor's answer table, a copied data file), its train gain
must also show on tasks the editor never saw evidence for. `heldout_stage` scores the candidate (the
snapshot's bytes) and its incumbent on the test split, `--ecdysis-test-trials` trials per task, side by
side (`evolve.paired.together`), and applies `gate.heldout.heldout_check` to the per-task rewards: train
from the trials the decision judged (the two validation runs and its looks or extra runs:
`decision_trials`), held-out from these two runs. A refused candidate is
recorded as `rejected` with the check's line as the reason (`evolve.accept`); no commit, no branch.

Runs go to `<round or step dir>/heldout/` (the candidate's, sub-run `<run-id>h`) and `heldout/incumbent/`
(sub-run `<run-id>hi`); the incumbent's held-out run is made once per incumbent and reused (`evolution.json`
`heldout_runs`, by harness id), and so is a check of the same candidate on the same incumbent
(`heldout_checks`). `evolve.testsplit` reuses these runs for the start's and the frozen harness's test
score when the bytes match. The check is not made (said in one line, recorded with `made: false`) under
ini `ecdysis_heldout = off`, with `--ecdysis-test-trials 0`, when a split has fewer than 2 tasks scored by
both harnesses, or when the incumbent's held-out run fails; a candidate whose own held-out run fails or
drifts in infrastructure errors is refused. Only the controller runs this; harness code runs in sub-runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.evolve.paired import INCUMBENT_LABEL, Job, together
from pytest_ecdysis.gate.heldout import heldout_check
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.validate.results import infra_drift, read_run
from pytest_ecdysis.validate.subrun import BrokenCandidate, SubRun

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext


def rewards_by_task(trials: list[dict[str, Any]]) -> dict[str, list[float]]:
    """task id -> the rewards of its scored trials (infrastructure errors, reward None, left out)."""
    out: dict[str, list[float]] = {}
    for t in trials:
        if t.get("reward") is not None:
            out.setdefault(str(t["task_id"]), []).append(float(t["reward"]))
    return out


def decision_trials(
    row: Mapping[str, Any], before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The train trials the decision judged: the validation runs' (`before`: the incumbent's, `after`: the
    candidate's) plus those of every usable look or extra run the round made (`looks.looks`,
    `confirmation.looks`, `extra_trials`: docs with `runs` and no `problem`)."""
    docs = [
        *((row.get("looks") or {}).get("looks") or []),
        *((row.get("confirmation") or {}).get("looks") or []),
        *([row["extra_trials"]] if isinstance(row.get("extra_trials"), dict) else []),
    ]
    before, after = list(before), list(after)
    for doc in docs:
        runs = doc.get("runs") or {}
        if doc.get("problem") or not runs.get("candidate") or not runs.get("incumbent"):
            continue
        after += read_run(Path(runs["candidate"]["run_path"]))[1]
        before += read_run(Path(runs["incumbent"]["run_path"]))[1]
    return before, after


def not_made(why: str) -> dict[str, Any]:
    """The record of a check that could not be made."""
    return {"made": False, "refused": False, "why": why, "line": f"held-out check not made: {why}"}


def _run_doc(run: SubRun, harness_id: str | None) -> dict[str, Any]:
    s = run.summary
    return {
        "run_path": str(run.run_path),
        "harness_id": harness_id or s.get("harness_id"),
        "suite_score": s.get("suite_score"),
        "pass_hat_k": s.get("pass_hat_k"),
        "pass_at_k": s.get("pass_at_k"),
        "n_trials": s.get("n_trials"),
        "n_tasks": s.get("n_tasks"),
        "trials": None,  # filled by the caller: the test trials per task it was run with
    }


def heldout_stage(
    ev: RoundContext,
    candidate_dir: Path,
    adir: Path,
    run_id: str,
    label: str,
    base: Mapping[str, Any],
    candidate_id: str,
    before_trials: list[dict[str, Any]],
    after_trials: list[dict[str, Any]],
) -> dict[str, Any]:
    """Score candidate and incumbent `base` on held-out tasks and decide. Returns the `heldout` record:
    `gate.heldout.HeldOutCheck.fields()` plus `train_trials` (the scored train trials of both sides it
    judged: `decision_trials`) and `runs` ({candidate, incumbent}: run path, score), or
    `not_made(why)`; a refused candidate has `refused: true`. Ctrl-C stops the sub-runs and propagates."""
    cfg = ev.cfg
    if getattr(cfg, "heldout", "refuse") == "off":
        return not_made("ini ecdysis_heldout = off")
    if cfg.test_trials == 0:
        return not_made("--ecdysis-test-trials 0: no held-out tasks are scored")
    key = f"{base['harness_id']}>{candidate_id}"
    earlier = (ev.doc.get("heldout_checks") or {}).get(key)
    if earlier:
        ev.say(
            f"{label}: held-out check of candidate {candidate_id} on this incumbent reused: {earlier['line']}"
        )
        return dict(earlier)
    overrides: dict[str, str | None] = {
        "--ecdysis-split": "test",
        "--ecdysis-trials": str(cfg.test_trials),
        "--ecdysis-tasks": None,
    }
    runs = ev.doc.setdefault("heldout_runs", {})
    cached = runs.get(str(base["harness_id"]))
    if cached and cached.get("trials") != cfg.test_trials:
        cached = None
    ev.say(
        f"{label}: held-out check: scoring the candidate{'' if cached else ' and the incumbent'} on the test "
        f"split ({cfg.test_trials} trial(s) per task; tasks the diagnosis and the editor never saw)"
    )
    jobs = [
        Job(
            candidate_dir,
            adir / "heldout",
            f"{run_id}h",
            ev.snapshot.files if ev.snapshot else None,
            None,
            overrides,
        )
    ]
    worktree = None if cached else gitworktree.add_worktree(ev.harness_dir, str(base["commit"]))
    try:
        if worktree is not None:
            jobs.append(
                Job(
                    worktree.harness_dir,
                    adir / "heldout" / "incumbent",
                    f"{run_id}hi",
                    None,
                    None,
                    overrides,
                    label=f"{label}: held-out check: {INCUMBENT_LABEL}",
                )
            )
        results = together(ev, jobs)
    finally:
        if worktree is not None:
            worktree.remove()
    cand = results[0]
    if worktree is not None:
        inc = results[1]
        if isinstance(inc, BrokenCandidate):
            return not_made(f"the incumbent's held-out run failed ({inc})")
        runs[str(base["harness_id"])] = {**_run_doc(inc, str(base["harness_id"])), "trials": cfg.test_trials}
        ev.checkpoint()
    inc_doc = runs[str(base["harness_id"])]
    if isinstance(cand, BrokenCandidate):
        doc = {
            "made": True,
            "refused": True,
            "why": f"the candidate could not be scored on held-out tasks ({cand})",
        }
        doc["line"] = f"held-out check: refused: {doc['why']}"
        return _remember(ev, key, doc)
    runs[candidate_id] = {**_run_doc(cand, candidate_id), "trials": cfg.test_trials}
    for path in (inc_doc["run_path"], cand.run_path):  # both written by the controller's sub-runs
        ev.ledger.verify_run(Path(path))
    inc_summary, inc_trials = read_run(Path(inc_doc["run_path"]))
    drift = infra_drift(inc_summary, cand.summary)
    run_pair = {
        "candidate": {"run_path": str(cand.run_path), "score": cand.summary.get("suite_score")},
        "incumbent": {"run_path": inc_doc["run_path"], "score": inc_doc.get("suite_score")},
    }
    if drift:
        doc = {"made": True, "refused": True, "why": f"{drift} on held-out tasks", "runs": run_pair}
        doc["line"] = f"held-out check: refused: {doc['why']}"
        return _remember(ev, key, doc)
    try:
        check = heldout_check(
            rewards_by_task(before_trials),
            rewards_by_task(after_trials),
            rewards_by_task(inc_trials),
            rewards_by_task(read_run(cand.run_path)[1]),
        )
    except ValueError as exc:
        return not_made(str(exc))
    train_trials = sum(t.get("reward") is not None for t in [*before_trials, *after_trials])
    return _remember(ev, key, {**check.fields(), "train_trials": train_trials, "runs": run_pair})


def _remember(ev: RoundContext, key: str, doc: dict[str, Any]) -> dict[str, Any]:
    ev.doc.setdefault("heldout_checks", {})[key] = doc
    return doc
