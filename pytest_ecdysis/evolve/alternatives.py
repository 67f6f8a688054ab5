"""Alternatives rounds (`self-harness`, `harnessfix`): candidates from the same incumbent, the best kept.

The strategy's diagnosis returns several specs (`Diagnosis.alternatives`, e.g. Self-Harness's >= 3 diverse
minimal proposals; HarnessFix's one scoped repair). Each proposal k is edited (exactly one editor call) on
the round's incumbent in its own worktree, guarded and validated against the whole suite (the tasks the
incumbent solves are the regression tests), in `rounds/<n>/proposals/<k>/` (`spec.json`, `edit.json`,
`candidate.diff`, `validation.json`, the sub-run `<run-id>-r<n>p<k>/`, `decision.json`). A proposal passes
when the score rule accepts it (`Evolution.attempt`) and, for a regression-aware strategy, it breaks no task
the incumbent solved (`acceptance.decide_no_regression`). The passing proposal with the highest score is
kept (`acceptance.choose_best`) and becomes the incumbent; the others stay recorded. A proposal whose
`decision.json` exists is read back on `--ecdysis-resume`, not redone.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.records import HarnessPoint, ModificationSpec, RoundRecord
from pytest_ecdysis.core.rundir import add_tokens, read_json, write_json
from pytest_ecdysis.gate.acceptance import Decision, choose_best, decide_no_regression, decision_fields
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.report.evolution import OUTCOME_TEXT, fmt

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext


def alternatives_round(
    ev: RoundContext, n: int, rdir: Path, row: RoundRecord, diag: dict[str, Any]
) -> RoundRecord:
    """Validate every proposal of round `n` from the same incumbent, keep the best that passes; the round row.

    The round is `accepted` when a proposal was kept (`row["chosen"]` is its number); otherwise `rejected`
    when a candidate was validated, else the first of `broken_candidate`, `guard_rejected`, `no_change`.
    `row["proposals"]` lists every proposal's outcome, scores, flips and editor calls; `editor_calls` is their
    sum (one per proposal that reached the editor).
    """
    start = ev.doc["incumbent"]
    specs = [ModificationSpec.model_validate(s) for s in diag["specs"]]
    regression_aware = bool(diag.get("regression_aware"))
    detail = f" ({diag['reason']})" if diag.get("reason") else ""  # the strategy's account of them
    ev.say(
        f"round {n}: {len(specs)} proposal(s) from the same incumbent{detail}, each edited and validated"
        + (
            " (regression-aware: a proposal may not break a task the incumbent solves)"
            if regression_aware
            else ""
        ),
        n,
    )
    entries: list[dict[str, Any]] = []
    candidates: list[HarnessPoint | None] = []
    for k, spec in enumerate(specs, start=1):
        pdir = rdir / "proposals" / str(k)
        if (pdir / "decision.json").is_file():  # finished before an interruption
            decision = read_json(pdir / "decision.json", ev.ledger)
            entries.append(decision["proposal"])
            candidates.append(decision["candidate"])
            continue
        if not (pdir / "spec.json").is_file():
            write_json(pdir / "spec.json", spec.model_dump(mode="json"), ev.ledger)
        entry: dict[str, Any] = {
            "proposal": k,
            "spec_summary": spec.summary,
            "n_changes": len(spec.changes),
            "score_before": start["score"],
            "score_after": None,
        }
        worktree = gitworktree.add_worktree(ev.harness_dir, start["commit"])
        try:
            out, cand = ev.attempt(
                spec,
                worktree,
                pdir,
                start,
                label=f"round {n} proposal {k}/{len(specs)}",
                run_id=f"{ev.state.run_id}-r{n}p{k}",
                title=f"ecdysis round {n} proposal {k}",
            )
        finally:
            worktree.remove()
        entry.update(out)
        entry["wall_s"] = round(entry["wall_s"], 2)
        if cand is not None and regression_aware:
            verdict = decide_no_regression(
                Decision(True, entry.get("reason", "")), entry.get("flips", {}).get("solved_to_failed", [])
            )
            if not verdict.accepted:
                entry.update(outcome="rejected", accepted=False, reason=verdict.reason, regression=True)
                entry.pop("commit", None)
                cand = None
        write_json(
            pdir / "decision.json",
            {**decision_fields(entry), "proposal": entry, "candidate": cand},
            ev.ledger,
        )
        ev.say(
            f"round {n} proposal {k}/{len(specs)}: {OUTCOME_TEXT[entry['outcome']]}"
            + (f" ({entry['reason']})" if entry.get("reason") else ""),
            n,
        )
        entries.append(entry)
        candidates.append(cand)
        if ev.stop_error is not None:  # a protected file changed: no further proposal
            break

    for entry in entries:
        row["editor_calls"] += entry.get("editor_calls", 0)
        add_tokens(row["tokens"], entry.get("tokens", {}))
        row["wall_s"] += entry.get("wall_s", 0.0)
    best = choose_best(
        [
            (c is not None, e.get("score_after"), e.get("n_changes", 0))
            for e, c in zip(entries, candidates, strict=True)
        ]
    )
    for i, entry in enumerate(entries):
        entry["chosen"] = i == best
    row["proposals"] = entries
    row["spec_summary"] = f"{len(specs)} proposal(s): " + " | ".join(s.summary.strip() for s in specs)
    validated = [e for e in entries if e.get("score_after") is not None]
    decided = [e for e in entries if e.get("decision")]
    if decided:  # the round's figures: those of the proposal kept, else of the best validated one
        row["decision"] = (
            entries[best]
            if best is not None and entries[best].get("decision")
            else max(decided, key=lambda e: e["score_after"])
        )["decision"]
    if best is not None:
        chosen, cand = entries[best], candidates[best]
        assert cand is not None
        ev.doc["incumbent"] = {**cand, "round": n}
        row.update(
            {
                "outcome": "accepted",
                "accepted": True,
                "commit": cand["commit"],
                "score_after": cand["score"],
                "harness_id_after": chosen["harness_id_after"],
                "flips": chosen["flips"],
                "chosen": chosen["proposal"],
                "pass_hat_k_before": start.get("pass_hat_k"),
                "pass_hat_k_after": cand.get("pass_hat_k"),
                "reason": f"proposal {chosen['proposal']} of {len(entries)} kept (the best that passed): "
                f"{chosen['reason']}",
            }
        )
    elif validated:
        top = max(validated, key=lambda e: e["score_after"])
        # every validated candidate inconclusive (`sequential`): the round is too, not "tried and rejected"
        row.update(
            {
                "outcome": "inconclusive"
                if all(x["outcome"] == "inconclusive" for x in validated)
                else "rejected",
                "score_after": top["score_after"],
                "flips": top["flips"],
                "harness_id_after": top["harness_id_after"],
                "pass_hat_k_before": start.get("pass_hat_k"),
                "pass_hat_k_after": top.get("pass_hat_k_after"),
                "reason": f"no proposal passed (best: proposal {top['proposal']}, "
                f"{fmt(start['score'])} -> {fmt(top['score_after'])}: {top['reason']})",
            }
        )
    else:
        outcomes = [e["outcome"] for e in entries]
        row["outcome"] = next(
            (o for o in ("broken_candidate", "guard_rejected", "no_change") if o in outcomes), "no_change"
        )
        row["reason"] = (
            "; ".join(f"proposal {e['proposal']}: {e['reason']}" for e in entries) or "no proposal"
        )
    return ev.finish_round(row, rdir)
