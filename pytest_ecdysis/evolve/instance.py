"""Instance-level rounds (`self-evolution`): one spec per failure, patched one by one.

Step k (1-based, at most ini `ecdysis_self_evolution_cap`, default `MAX_INSTANCE_STEPS`) makes one editor call on the current incumbent in its own
worktree, then guard, validation and acceptance, in `rounds/<n>/steps/<k>/` (`spec.json`, `edit.json`,
`candidate.diff`, `validation.json`, the sub-run `<run-id>-r<n>s<k>/`, `decision.json`). An accepted step
is committed and is the base of the next step. A step whose `decision.json` exists is read back, not redone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.records import HarnessPoint, ModificationSpec, RoundRecord
from pytest_ecdysis.core.rundir import add_tokens, read_json, write_json
from pytest_ecdysis.gate.acceptance import decision_fields
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.report.evolution import OUTCOME_TEXT, fmt
from pytest_ecdysis.validate.results import flips, read_run

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext

#: The default of ini `ecdysis_self_evolution_cap`: an instance-level round patches at most this many of its
#: specs, in order (each costs an editor call and a validation sub-run), so a suite with many failures
#: cannot run for hours; the round's reason says when specs were dropped.
MAX_INSTANCE_STEPS = 5


def instance_round(
    ev: RoundContext, n: int, rdir: Path, row: RoundRecord, diag: dict[str, Any]
) -> RoundRecord:
    """Run the steps of round `n` and return its row for `evolution.json`.

    The round is `accepted` when any step was; otherwise `rejected` when a candidate was validated, else
    the first of `broken_candidate`, `guard_rejected`, `no_change` among its steps. `score_after` is the
    incumbent's score after the round when accepted, else the best validated candidate's (null when none).
    """
    start = ev.doc["incumbent"]
    specs = [ModificationSpec.model_validate(s) for s in diag["specs"]]
    cap = getattr(ev.cfg, "self_evolution_cap", MAX_INSTANCE_STEPS)
    todo = specs[:cap]
    current: HarnessPoint = HarnessPoint(**start)
    steps: list[dict[str, Any]] = []
    ev.say(
        f"round {n}: instance level: {len(specs)} spec(s), patched one by one"
        + (f" (the first {len(todo)}: ecdysis_self_evolution_cap = {cap})" if len(todo) < len(specs) else ""),
        n,
    )
    for k, spec in enumerate(todo, start=1):
        sdir = rdir / "steps" / str(k)
        if (sdir / "decision.json").is_file():  # finished before an interruption
            decision = read_json(sdir / "decision.json", ev.ledger)
            steps.append(decision["step"])
            current = decision["incumbent"]
            continue
        if not (sdir / "spec.json").is_file():
            write_json(sdir / "spec.json", spec.model_dump(mode="json"), ev.ledger)
        step: dict[str, Any] = {
            "step": k,
            "spec_summary": spec.summary,
            "score_before": current["score"],
            "score_after": None,
            "harness_id_before": current["harness_id"],
        }
        worktree = gitworktree.add_worktree(ev.harness_dir, current["commit"])
        try:
            out, new_incumbent = ev.attempt(
                spec,
                worktree,
                sdir,
                current,
                label=f"round {n} step {k}/{len(todo)}",
                run_id=f"{ev.state.run_id}-r{n}s{k}",
                title=f"ecdysis round {n} step {k}",
            )
        finally:
            worktree.remove()
        step.update(out)
        step["wall_s"] = round(step["wall_s"], 2)
        if new_incumbent is not None:
            current = {**new_incumbent, "round": n, "step": k}
        write_json(
            sdir / "decision.json", {**decision_fields(step), "step": step, "incumbent": current}, ev.ledger
        )
        ev.say(
            f"round {n} step {k}/{len(todo)}: {OUTCOME_TEXT[step['outcome']]}"
            + (f" ({step['reason']})" if step.get("reason") else ""),
            n,
        )
        steps.append(step)
        if ev.stop_error is not None:  # a protected file changed: no further step
            break

    for step in steps:
        row["editor_calls"] += step.get("editor_calls", 0)
        add_tokens(row["tokens"], step.get("tokens", {}))
        row["wall_s"] += step.get("wall_s", 0.0)
    row["steps"] = steps
    row["spec_summary"] = f"{len(todo)} instance-level spec(s): " + " | ".join(
        s.summary.strip() for s in todo
    )
    accepted = [s["step"] for s in steps if s.get("accepted")]
    validated = [s for s in steps if s.get("score_after") is not None]
    decided = [s for s in steps if s.get("decision")]
    if decided:  # the round's figures: those of its last accepted step, else of its best validated one
        chosen = [s for s in decided if s.get("accepted")] or sorted(decided, key=lambda s: s["score_after"])
        row["decision"] = chosen[-1]["decision"]
    if accepted:
        row.update(
            {
                "outcome": "accepted",
                "accepted": True,
                "commit": current["commit"],
                "score_after": current["score"],
                "harness_id_after": current["harness_id"],
                "pass_hat_k_before": start.get("pass_hat_k"),
                "pass_hat_k_after": current.get("pass_hat_k"),
                "reason": f"step(s) {', '.join(map(str, accepted))} of {len(steps)} accepted: "
                f"suite score {fmt(start['score'])} -> {fmt(current['score'])}",
            }
        )
        for path in (start["run_path"], current["run_path"]):
            ev.ledger.verify_run(Path(path))
        _, before_trials = read_run(Path(start["run_path"]))
        _, after_trials = read_run(Path(current["run_path"]))
        row["flips"] = flips(before_trials, after_trials, ev.cfg.threshold)
        ev.doc["incumbent"] = current
    elif validated:
        best = max(validated, key=lambda s: s["score_after"])
        # every validated candidate inconclusive (`sequential`): the round is too, not "tried and rejected"
        row.update(
            {
                "outcome": "inconclusive"
                if all(x["outcome"] == "inconclusive" for x in validated)
                else "rejected",
                "score_after": best["score_after"],
                "flips": best["flips"],
                "harness_id_after": best["harness_id_after"],
                "pass_hat_k_before": start.get("pass_hat_k"),
                "pass_hat_k_after": best.get("pass_hat_k_after"),
                "reason": f"no step was accepted (best: step {best['step']}, {fmt(start['score'])} -> "
                f"{fmt(best['score_after'])}: {best.get('reason', '')})",
            }
        )
    else:
        outcomes = [s["outcome"] for s in steps]
        row["outcome"] = next(o for o in ("broken_candidate", "guard_rejected", "no_change") if o in outcomes)
        row["reason"] = "; ".join(f"step {s['step']}: {s['reason']}" for s in steps)
    if len(todo) < len(specs):
        row["reason"] += (
            f"; cap: {len(todo)} of {len(specs)} specs patched (ecdysis_self_evolution_cap = "
            f"{cap}), the other {len(specs) - len(todo)} dropped"
        )
    return ev.finish_round(row, rdir)
