"""The acceptance stage of a round: a validated candidate against the incumbent's run, decided and committed.

`accept_stage(ev, ...)` is the last part of `Evolution.attempt`, after `evolve.stages.validate_stage`:
it reads the two runs compared (the incumbent's re-run or earlier run, the candidate's; both checked
against the ledger), refuses a comparison the candidate's infrastructure errors would skew
(`validate.results.infra_drift`), applies the run's rule (`acceptance.decide`; ini
`ecdysis_accept_extra_trials` through `evolve.extra_trials`), minimises an accepted candidate (ini
`ecdysis_ablate`, `ablation`) and commits exactly the validated bytes in the candidate's worktree
(`git.ops`), checking the commit holds them. Between the decision and the commit, an accepted candidate is
scored on held-out tasks (`evolve.heldout`) and refused (`rejected`, the check's line as reason) when its
train gain is not matched there beyond the noise of both (`gate.heldout`).
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.errors import IntegrityError
from pytest_ecdysis.core.records import HarnessPoint, ModificationSpec, RoundRecord
from pytest_ecdysis.evolve.ablation import ablate_accepted, commit_lines
from pytest_ecdysis.evolve.confirm import confirm
from pytest_ecdysis.evolve.extra_trials import extra_trials
from pytest_ecdysis.evolve.heldout import decision_trials, heldout_stage
from pytest_ecdysis.evolve.looks import adaptive_decide
from pytest_ecdysis.gate.acceptance import decide
from pytest_ecdysis.gate.rates import leaderboard_short, rates_short
from pytest_ecdysis.git import snapshot as gitsnapshot
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.validate.results import flips, infra_drift, read_run

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext


def accept_stage(
    ev: RoundContext,
    spec: ModificationSpec,
    worktree: gitworktree.Worktree,
    adir: Path,
    base: HarnessPoint,
    val: dict[str, Any],
    out: RoundRecord,
    *,
    label: str,
    run_id: str,
    title: str,
) -> tuple[RoundRecord, HarnessPoint | None]:
    """Decide on a validated candidate (`val`: its `validation.json`) against `base` (the incumbent) and
    commit it when accepted. Returns `Evolution.attempt`'s `(round-row fields, new incumbent or None)`.

    Raises:
        IntegrityError: the commit does not hold the validated candidate's bytes (the evolution stops).
    """
    inc_run = val.get("incumbent") or {
        "rescored": False,
        "run_path": base["run_path"],
        "score": base["score"],
        "pass_hat_k": base.get("pass_hat_k"),
    }
    for path in (inc_run["run_path"], val["run_path"]):
        ev.ledger.verify_run(Path(path))
    before_summary, before_trials = read_run(Path(inc_run["run_path"]))
    after_summary, after_trials = read_run(Path(val["run_path"]))
    if before_summary.get("suite_score") != inc_run["score"]:  # the score of the trials compared, always
        inc_run = {**inc_run, "recorded_score": inc_run["score"], "score": before_summary.get("suite_score")}
    before, after = inc_run["score"], val["score"]
    out["incumbent_run"] = inc_run
    out["score_before"] = before
    out["score_after"] = after
    out["pass_hat_k_before"] = inc_run.get("pass_hat_k")
    out["pass_hat_k_after"] = val.get("pass_hat_k")
    out["harness_id_after"] = val["harness_id"]
    out["flips"] = flips(before_trials, after_trials, ev.cfg.threshold)

    drift = infra_drift(before_summary, after_summary)
    if drift:  # not comparable: a candidate must not gain by turning failures into infrastructure errors
        return {**out, "outcome": "rejected", "reason": f"{drift}: not compared"}, None
    if ev.cfg.accept == "adaptive":  # the starting comparison, then looks on every unsettled task
        decision, out["looks"] = adaptive_decide(
            ev,
            worktree.harness_dir,
            adir,
            run_id,
            label,
            base,
            before_trials,
            after_trials,
            before,
            after,
            val.get("reused_validation"),
        )
        out["wall_s"] = out.get("wall_s", 0.0) + out["looks"]["wall_s"]
    elif ev.cfg.accept == "sequential":  # the first comparison may only reject; then confirmation looks
        decision, out["confirmation"] = confirm(
            ev,
            worktree.harness_dir,
            adir,
            run_id,
            label,
            base,
            before_trials,
            after_trials,
            before,
            after,
            val.get("reused_validation"),
        )
        looked = sum(float(x.get("wall_s") or 0.0) for x in (out["confirmation"] or {}).get("looks") or [])
        out["wall_s"] = out.get("wall_s", 0.0) + looked
    else:
        decision = decide(
            ev.cfg.accept,
            before,
            after,
            before_trials,
            after_trials,
            method=ev.cfg.accept_method,
            level=ev.cfg.accept_level,
        )
        # paired: more trials of the flipped tasks for both harnesses before deciding (`evolve.extra_trials`)
        decision, extra = extra_trials(
            ev, worktree.harness_dir, adir, run_id, label, base, before_trials, after_trials, decision
        )
        if extra is not None:
            out["extra_trials"] = extra
            out["wall_s"] = out.get("wall_s", 0.0) + float(extra.get("wall_s") or 0.0)
    out["decision"] = decision.fields()
    verb = "accept" if decision.accepted else "inconclusive" if decision.inconclusive else "reject"
    cfg = ev.cfg
    rates = rates_short(
        {
            "rule": cfg.accept,
            "method": cfg.accept_method,
            "level": cfg.accept_level,
            "extra_trials": getattr(cfg, "accept_extra_trials", 0),
        }
    ) or (leaderboard_short(cfg.accept) if cfg.accept == "adaptive" else "")
    ev.say(
        f"{label}: {decision.rule} rule{f' [{rates}]' if rates else ''}: {verb}: {compared(inc_run)}: "
        f"{decision.reason}"
    )
    if not decision.accepted:
        return {
            **out,
            "outcome": "inconclusive" if decision.inconclusive else "rejected",
            "reason": decision.reason,
        }, None
    # the train gain must show on tasks the editor never saw evidence for (`evolve.heldout`)
    judged = decision_trials(out, before_trials, after_trials)  # with the looks' and extra runs' trials
    held = ev.stage_json(
        adir / "heldout.json",
        lambda: heldout_stage(
            ev, worktree.harness_dir, adir, run_id, label, base, val["harness_id"], *judged
        ),
    )
    held.pop("fresh", None)
    out["heldout"] = held
    ev.say(f"{label}: {held['line']}")
    if held.get("refused"):
        return {**out, "outcome": "rejected", "reason": held["line"]}, None
    ablated = ""
    if ev.cfg.ablate:  # minimal accepted edit: changes whose removal loses nothing are dropped
        ablation, kept = ablate_accepted(
            ev, worktree, adir, run_id, label, inc_run=inc_run, val=val, before_trials=before_trials, out=out
        )
        ablated = commit_lines(ablation)
        if kept is not None:
            decision, after = kept, out["score_after"]
            val = {**val, **ablation["result"]}
    message = (
        f"{title}: {spec.summary.strip()}\n\nsuite score {before:.4f} -> "
        f"{after:.4f} ({ev.cfg.split} split, {ev.cfg.trials} trial(s) per task)\n"
        f"acceptance: {decision.rule} rule; "
        f"{_test_line(decision)}\n"
        f"{ablated}run {ev.state.run_id}, editor {ev.cfg.editor}, strategy {ev.cfg.strategy}\n"
    )
    assert ev.snapshot is not None
    gitsnapshot.reset_to_snapshot(worktree, ev.snapshot)  # exactly the validated bytes, whatever ran since
    sha = worktree.commit_paths(ev.snapshot.changed, message)
    committed = gitsnapshot.committed_files(worktree, sha)
    if committed != {k: v for k, v in ev.snapshot.files.items() if v is not None}:
        raise IntegrityError(
            f"the commit {sha[:12]} does not hold the validated candidate's bytes; the "
            "evolution stops (no branch is made from it)"
        )
    out.update({"outcome": "accepted", "accepted": True, "commit": sha, "reason": decision.reason})
    return out, {
        "commit": sha,
        "harness_id": val["harness_id"],
        "score": after,
        "pass_hat_k": val.get("pass_hat_k"),
        "run_path": val["run_path"],
    }


def _test_line(decision: Any) -> str:
    """The deciding test's line for the commit message."""
    for t in (decision.adaptive, decision.sequential, decision.test):
        if t is not None:
            return str(t.line())
    return ""


def compared(inc_run: dict[str, Any]) -> str:
    """What the candidate was compared with: `against the incumbent re-run beside it` or `against the
    incumbent's earlier run (why)`."""
    if inc_run.get("rescored"):
        return "against the incumbent re-run beside it"
    return f"against the incumbent's earlier run ({inc_run.get('why') or 'not re-run'})"
