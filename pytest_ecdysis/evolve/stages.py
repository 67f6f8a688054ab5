"""The stages of one evolution round: diagnosis, the editor call, validation.

Each stage returns the dict the loop checkpoints as `rounds/<n>/{diagnosis,edit,validation}.json`; an
`outcome` other than None ends the round with that outcome (`no_failures`, `no_spec`, `no_change`,
`guard_rejected`, `broken_candidate`) and a `reason`. The loop (`evolve.loop.Evolution`) decides what runs
when; these functions do the work. Only the controller runs them; harness code is imported only in sub-runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.errors import shown
from pytest_ecdysis.core.records import ModificationSpec
from pytest_ecdysis.core.rundir import load_evidence, spec_of, write_json
from pytest_ecdysis.core.secrets import secrets_in
from pytest_ecdysis.evolve.lineage import lineage_of
from pytest_ecdysis.git import snapshot as gitsnapshot
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.report.evolution import fmt, shorten
from pytest_ecdysis.validate.results import read_run, solved_tasks
from pytest_ecdysis.validate.subrun import BrokenCandidate

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext


def why_no_evidence(records: list) -> str:
    """Why a round has nothing to diagnose: no failure record at all, or each record kept out and why
    (a failed incumbent whose replies were all unusable must not read as one with nothing failing)."""
    if not records:
        return "the incumbent has no failure records"
    why: dict[str, int] = {}
    for r in records:
        if r.endpoint_problem or r.termination_reason == "endpoint_format_error":
            key = "endpoint_format_error (the endpoint's replies could not be used: check the server's chat format and tool calling)"
        elif r.suspect:
            key = "of a suspect task"
        elif r.termination_reason in ("infrastructure_error", "time_budget_exceeded"):
            key = r.termination_reason
        else:
            key = str(
                r.kept_out
                or ("user_stop_after_confirmation" if r.user_stop_after_confirmation else "kept out")
            )
        why[key] = why.get(key, 0) + 1
    return f"none of the incumbent's {len(records)} failure record(s) is usable evidence: " + "; ".join(
        f"{count} {key}" for key, count in why.items()
    )


def _without_suspects(
    ev: RoundContext, n: int, records: list, groups: list, inc_run: Path
) -> tuple[list, list]:
    """Records and groups with the tasks that failed identically under every configuration run so far (the
    incumbent's run and every sub-run under `rounds/`: candidates, re-runs) kept out (`evidence.suspects`),
    unless that would leave no evidence at all (then they stay, and the loop says so)."""
    from pytest_ecdysis.evidence.patterns import group
    from pytest_ecdysis.evidence.suspects import across_run_dirs, keep_out

    runs = [inc_run, ev.dir, *(p.parent for p in sorted((ev.dir / "rounds").glob("**/trials.jsonl")))]
    suspects = across_run_dirs([p for p in runs if (p / "trials.jsonl").is_file()], ev.cfg.threshold)
    if not suspects:
        return records, groups
    kept = keep_out(records, suspects)
    said = "; ".join(f"{k}: {why}" for k, why in sorted(suspects.items()))
    if not any(r.is_evidence() for r in kept):  # nothing else to learn from: diagnose them, said so
        ev.say(
            f"round {n}: every failing task failed identically under every configuration run so far "
            f"({said}); kept as evidence, as nothing else is left",
            n,
        )
        return records, groups
    ev.say(
        f"round {n}: {len(suspects)} task(s) failed identically under every configuration run so far, kept out "
        f"of the evidence as suspect: {said}",
        n,
    )
    return kept, group(kept)


def tried_outcome(row: Mapping[str, Any]) -> str:
    """A round's outcome as diagnosis sees it: `tried_inconclusive` for an inconclusive round whose
    candidate is not to be retried (`evolve.looks`: no gain visible, or already retried, or its looks
    broke), so the same candidate is never proposed again on the same evidence; its outcome otherwise (an
    `inconclusive` one may be proposed again: its retry buys the trials it needs, pooled)."""
    if row.get("outcome") == "inconclusive" and (row.get("looks") or {}).get("retry") is False:
        return "tried_inconclusive"
    return str(row.get("outcome"))


def diagnose_stage(ev: RoundContext, n: int, rdir: Path, incumbent_dir: Path) -> dict[str, Any]:
    """Records and groups of the incumbent's run -> the strategy's diagnosis -> `spec.json`.

    Returns `{"outcome", "reason", "spec", "tokens", "wall_s"}` (plus `instance_level` and `specs` for
    instance-level strategies, `alternatives`, `regression_aware` and `specs` for alternatives strategies); `outcome` is `no_failures` or `no_spec` when there is nothing to edit.
    """
    from pytest_ecdysis.diagnose import round as diagnosis

    cfg = ev.cfg
    inc = ev.doc["incumbent"]
    ev.ledger.verify_run(Path(inc["run_path"]))
    records, groups = load_evidence(Path(inc["run_path"]))
    records, groups = _without_suspects(ev, n, records, groups, Path(inc["run_path"]))
    usable = [r for r in records if r.is_evidence()]
    if not usable:
        reason = why_no_evidence(records)
        ev.say(f"round {n}: {reason}: nothing to repair", n)
        return {"outcome": "no_failures", "reason": reason, "spec": None}
    _, trials = read_run(Path(inc["run_path"]))
    solved = sorted(solved_tasks(trials, cfg.threshold))
    tools_by_task = {
        key.split("/", 1)[-1]: sorted(
            {
                c["name"]
                for t in trials
                for c in t.get("tool_calls", [])
                if f"{t.get('suite')}/{t['task_id']}" == key
            }
        )
        for key in solved
    }
    t0 = time.monotonic()
    history = [
        {
            "round": r["round"],
            "outcome": tried_outcome(r),
            "score_before": r["score_before"],
            "score_after": r["score_after"],
            "spec": spec_of(ev.dir / "rounds" / str(r["round"])),
            **lineage_of(ev.dir / "rounds" / str(r["round"]), r),
        }  # `evolve/lineage.py`
        for r in ev.doc["rounds"]
    ]
    result = diagnosis.diagnose(
        records=records,
        groups=groups,
        harness_dir=incumbent_dir,
        history=history,
        solved_tasks=tools_by_task,
        weak_passes=read_run(Path(inc["run_path"]))[0].get("weak_passes") or [],
        cfg=cfg,
        round_dir=rdir,
        strategy=cfg.strategy,
    )
    spec = getattr(result, "spec", None)
    tokens = dict(getattr(result, "tokens", None) or {})
    wall = float(getattr(result, "wall_s", None) or (time.monotonic() - t0))
    reason = str(getattr(result, "detail", "") or getattr(result, "reason", "") or "")
    budget = f" [{wall:.1f} s of the {getattr(cfg, 'diagnosis_budget_s', 0):g} s diagnosis budget]"
    if spec is None:
        ev.say(
            f"round {n}: diagnosis of {len(usable)} record(s) in {len(groups)} group(s): no spec: "
            f"{reason or 'no reason given'}{budget}",
            n,
        )
        return {
            "outcome": "no_spec",
            "reason": reason or "diagnosis produced no spec",
            "spec": None,
            "tokens": tokens,
            "wall_s": wall,
        }
    spec_doc = spec.model_dump(mode="json") if hasattr(spec, "model_dump") else dict(spec)
    write_json(rdir / "spec.json", spec_doc, ev.ledger)
    ev.say(
        f"round {n}: diagnosis of {len(usable)} record(s) in {len(groups)} group(s): spec with "
        f"{len(spec_doc.get('changes', []))} change(s): {shorten(spec_doc.get('summary', ''), 90)}{budget}",
        n,
    )
    doc = {"outcome": None, "reason": reason, "spec": spec_doc, "tokens": tokens, "wall_s": wall}
    if getattr(result, "instance_level", False):  # one spec per failure, patched one by one
        specs = list(getattr(result, "specs", None) or [spec])
        doc.update(
            instance_level=True,
            specs=[x.model_dump(mode="json") if hasattr(x, "model_dump") else dict(x) for x in specs],
        )
    elif getattr(result, "alternatives", False):  # proposals from the same incumbent, the best kept
        specs = list(getattr(result, "specs", None) or [spec])
        doc.update(
            alternatives=True,
            regression_aware=bool(getattr(result, "regression_aware", False)),
            specs=[x.model_dump(mode="json") if hasattr(x, "model_dump") else dict(x) for x in specs],
        )
    return doc


def edit_stage(
    ev: RoundContext, spec: ModificationSpec, worktree: gitworktree.Worktree, rdir: Path, label: str
) -> dict[str, Any]:
    """Exactly one editor call in `worktree`, the candidate snapshot, then the guard.

    The candidate is the snapshot of the harness directory against the worktree's base commit, whatever
    the editor committed (`git.snapshot.snapshot`); the worktree is then reset to exactly those bytes, which are
    the ones checked, validated and committed (`ev.snapshot`). The guard, in order: the editor failed ->
    `no_change`; files outside the harness changed (committed or not) -> `guard_rejected`; nothing changed
    -> `no_change`; a file over the size caps -> `guard_rejected`; no `__init__.py` left ->
    `broken_candidate`; static-check findings (`validate.static`) -> `guard_rejected`. After the editor the
    protected files are checked (`ev.check_integrity`).

    Writes `rdir/candidate.diff`. Returns `{"editor", "ok", "detail", "tokens", "wall_s", "calls", "prompt", "changed",
    "outside_harness", "gold_data_flags", "static_findings", "not_implementable", "outcome", "reason"}`
    (`gold_data_flags` is kept for readers of older runs: the static findings as text).
    """
    from pytest_ecdysis.validate.static import check_candidate

    result = ev.editor.edit(spec, worktree.harness_dir, spec_path=rdir / "spec.json")
    ev.check_integrity(f"the editor call (--ecdysis-editor {ev.cfg.editor})")
    snap = gitsnapshot.snapshot(worktree, worktree.commit)
    gitsnapshot.reset_to_snapshot(worktree, snap)
    ev.snapshot = snap
    changed = snap.changed
    written = [
        p
        for p in changed
        if (worktree.path / p).exists() or any(p.endswith("/" + b) or p == b for b in snap.base_files)
    ]
    diff = worktree.diff(written)  # symlinks are never written, so never in the diff
    ev.ledger.write(rdir / "candidate.diff", diff.encode())
    outside = snap.outside
    findings = [str(f) for f in check_candidate(snap.files, snap.base_files)]
    leaked = secrets_in({p: b for p, b in snap.files.items() if snap.base_files.get(p) != b})
    doc: dict[str, Any] = {
        "editor": ev.cfg.editor,
        "ok": result.ok,
        "detail": result.detail,
        "tokens": result.tokens,
        "wall_s": round(result.wall_s, 2),
        "changed": changed,
        "outside_harness": outside,
        "gold_data_flags": findings,
        "static_findings": findings,
        "not_implementable": result.not_implementable,
        "secrets": leaked,
        "calls": int(getattr(result, "calls", 1)),
        "prompt": getattr(result, "prompt", {}),
    }
    if not result.ok:
        doc.update(outcome="no_change", reason=f"the editor failed: {result.detail}")
    elif outside:
        doc.update(
            outcome="guard_rejected",
            reason="the edit changed files outside the harness directory "
            "(committed or not): " + shown(outside, 10),
        )
    elif not changed:
        doc.update(outcome="no_change", reason=f"the editor changed no harness file ({result.detail})")
    elif snap.too_large:
        doc.update(
            outcome="guard_rejected",
            reason="the candidate is over the size caps: " + "; ".join(snap.too_large),
        )
    elif not snap.files.get("__init__.py"):
        doc.update(
            outcome="broken_candidate",
            reason="the candidate has no __init__.py: the editor deleted the "
            "harness package (or its entry point)",
        )
    elif leaked:
        doc.update(
            outcome="guard_rejected",
            reason="the candidate carries a secret of this environment into its "
            "source (it would be committed and shown in a pull request): " + shown(leaked, 5, "; "),
        )
    elif findings:
        doc.update(
            outcome="guard_rejected",
            reason=f"the static check flagged {len(findings)} construct(s) a "
            "harness must not use: " + shown(findings, 5, "; "),
        )
    else:
        doc.update(outcome=None, reason=result.detail)
    ev.say(
        f"{label}: editor {ev.cfg.editor} ({doc['calls']} call{'' if doc['calls'] == 1 else 's'}, {result.wall_s:.1f} s of the "
        f"{getattr(ev.cfg, 'editor_budget_s', 0):g} s editor budget): {len(changed)} file(s) changed"
        + (f"; {doc['reason']}" if doc["outcome"] else f": {', '.join(changed)}")
    )
    return doc


def validate_stage(
    ev: RoundContext,
    worktree: gitworktree.Worktree,
    rdir: Path,
    run_id: str,
    label: str,
    base: Mapping[str, Any],
) -> dict[str, Any]:
    """The validation sub-run of the same suite on the candidate in `worktree`, started together with a
    re-run of the incumbent `base` when ini `ecdysis_rescore` asks for one (`evolve.paired`).

    Returns `{"outcome", "reason", "score", "harness_id", "run_path", "run_id", "exit_code", "wall_s",
    "pass_hat_k", "incumbent"}` (`incumbent`: the run the candidate is compared with, see
    `evolve.paired.score_pair`); `outcome` is `broken_candidate` when the sub-run produced no scores.
    A candidate whose harness id was already validated on the same incumbent in this run reuses that
    validation (`reused_validation`: the round or step directory it was made in; no sub-run).
    """
    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis.evolve.paired import rescore_plan, score_pair

    started = time.monotonic()
    hid = harness_id(worktree.harness_dir, ev.harness_dir.name)  # the worktree holds the snapshot's bytes
    key = f"{base['harness_id']}>{hid}"
    earlier = (ev.doc.get("validations") or {}).get(key)
    if earlier:  # the same candidate on the same incumbent: never validated twice in one run
        where = earlier["where"]
        ev.say(
            f"{label}: candidate {hid} was already validated on incumbent {base['harness_id']} in this run "
            f"({where}): its validation is reused, not run again"
        )
        return {**earlier["validation"], "reused_validation": where, "wall_s": 0.0}
    rescore, _ = rescore_plan(ev.cfg, os.environ)
    ev.say(
        f"{label}: validating candidate {hid} (sub-run {run_id})"
        + (f" beside a re-run of the incumbent {base['harness_id']} (sub-run {run_id}i)" if rescore else "")
    )
    extra = None
    if getattr(
        ev.cfg, "ablate", False
    ):  # record the candidate's responses for its ablation runs (`ablation`)
        from pytest_ecdysis.evolve.ablation import cache_env

        extra, _ = cache_env(ev.cfg, rdir)
    sub, incumbent = score_pair(
        ev,
        worktree.harness_dir,
        rdir,
        run_id,
        base,
        files=ev.snapshot.files if ev.snapshot else None,
        env=extra,
    )
    if isinstance(sub, BrokenCandidate):
        ev.say(f"{label}: broken candidate: {sub}")
        return _remember(
            ev,
            key,
            rdir,
            {
                "outcome": "broken_candidate",
                "reason": str(sub),
                "harness_id": hid,
                "wall_s": round(time.monotonic() - started, 2),
                "incumbent": incumbent,
            },
        )
    cache = _cache_stats(ev, label, sub, incumbent, (extra or {}).get("ECDYSIS_RESPONSE_CACHE"))
    how = "re-scored beside it" if incumbent["rescored"] else f"earlier run: {incumbent['why']}"
    overridden = _model_overrides(sub.run_path)
    ev.say(
        f"{label}: candidate scored {fmt(sub.score)}, incumbent {fmt(incumbent['score'])} ({how}) "
        f"in {time.monotonic() - started:.1f} s"
        + (
            f"; the candidate asked for another model than the configured one in {overridden} trial(s) "
            "(its calls were made with the configured model)"
            if overridden
            else ""
        )
    )
    return _remember(
        ev,
        key,
        rdir,
        {
            "outcome": None,
            "reason": "",
            "score": sub.summary.get("suite_score"),
            "harness_id": hid,
            "run_path": str(sub.run_path),
            "run_id": run_id,
            "exit_code": sub.exit_code,
            "wall_s": round(time.monotonic() - started, 2),
            "pass_hat_k": sub.summary.get("pass_hat_k"),
            "incumbent": incumbent,
            **({"cache": cache} if cache else {}),
            **({"model_overridden": overridden} if overridden else {}),
        },
    )


def _model_overrides(run_path: Path) -> int:
    """Trials of a sub-run whose harness asked for another model (`validate.results.model_overrides`)."""
    from pytest_ecdysis.core.errors import RunDirError
    from pytest_ecdysis.validate.results import model_overrides, read_run

    try:
        return model_overrides(read_run(run_path)[1])
    except RunDirError:
        return 0


def _cache_stats(
    ev: RoundContext, label: str, sub: Any, incumbent: dict[str, Any], own: str | None = None
) -> dict[str, Any] | None:
    """With the response cache on: hits, misses and tokens saved of the candidate's sub-run and of the
    incumbent's re-run (by their run ids), printed as one stage line; None without a cache. `own`: a cache
    directory of the candidate's sub-run alone (it records for the ablation, `ablation.cache_env`)."""
    from pytest_ecdysis.endpoint.response_cache import ENV_DIR, run_stats

    directory = own or os.environ.get(ENV_DIR)
    if not directory:
        return None
    out = {"candidate": run_stats(Path(directory), str(sub.summary.get("run_id")))}
    if incumbent.get("rescored") and not own:
        from pytest_ecdysis.validate.results import read_run as _read

        inc_summary, _ = _read(Path(incumbent["run_path"]))
        out["incumbent"] = run_stats(Path(directory), str(inc_summary.get("run_id")))
    ev.say(
        f"{label}: response cache: "
        + "; ".join(
            f"{who} {st['hits']} hit(s) / {st['misses']} miss(es), {st['tokens_saved']} tokens saved"
            for who, st in out.items()
        )
    )
    return out


def _remember(ev: RoundContext, key: str, rdir: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """Note `doc` in `evolution.json` under `validations["<incumbent id>><candidate id>"]` (with the round
    or step directory it was made in), so the same candidate on the same incumbent is not validated again."""
    where = rdir.relative_to(ev.dir).as_posix() if rdir.is_relative_to(ev.dir) else str(rdir)
    ev.doc.setdefault("validations", {})[key] = {"where": where, "validation": doc}
    return doc
