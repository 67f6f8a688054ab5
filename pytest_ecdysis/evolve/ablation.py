"""Minimal accepted edits (ini `ecdysis_ablate`): an accepted candidate made of several changes is
re-validated without each change in turn; a change whose removal loses nothing is dropped.

*A change* is one hunk of the candidate's diff against its base, with zero lines of context (a run of
added, removed or replaced lines; `difflib.SequenceMatcher` opcodes over the file's lines); a file the
candidate adds or deletes, or a symlink, is one change. Not the spec's changes: the diff is what was
validated and is committed (whatever the editor says it did), taking a hunk out needs no editor call,
and its bytes are known. Above `MAX_CHANGES` hunks, one change per changed file; above `MAX_CHANGES`
files the candidate is not ablated (said). A spec change made of two dependent hunks (a helper and its
caller) is two changes here: without one of them the harness may not import, which counts as a loss.

Greedy, in diff order (files by path, hunks top to bottom), while at least two changes are kept:
`kept` without change i is validated (one sub-run, `rounds/<n>/ablation/<i>/`, beside nothing: it is
compared with the run of `kept`). Change i is dropped when (`removal_loses` is None)

- the run's acceptance rule (`--ecdysis-accept`) does not prefer `kept` to `kept` without i (strict: its
  score is not strictly higher; paired: the paired test does not reject "no improvement"), and
- `kept` without i is still accepted against the incumbent (the same rule, the incumbent's run the
  candidate was compared with);

it is kept when the reduced harness is broken, has other infrastructure errors (not comparable), or
either test above says it loses. The kept harness is the last validated one, so its score, run and
harness id are its own. Under `paired` a change stays only when it is a significant gain on its own:
a real but small contributor can be dropped (stated in docs/evolution.md).

The response cache (`response_cache`) makes this cheap: a removed change that never alters what the
model is sent replays the candidate's responses and costs no model call. `cache_env` says when it is on.

Files: `rounds/<n>/ablation.json` (`{"changes": [...], "kept": [i], "dropped": [i], "cache": ...}`, each
change with `file`, `hunk`, `diff`, `validation`, `kept`, `why`), per step `rounds/<n>/ablation/<i>/
validation.json` and the sub-run. Only the controller runs this; harness code runs only in sub-runs.
How a candidate is cut into changes and taken back without some is `ablation_changes`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.records import RoundRecord
from pytest_ecdysis.evolve.ablation_changes import MAX_CHANGES, changes_of, without
from pytest_ecdysis.gate.acceptance import decide
from pytest_ecdysis.git import snapshot as gitsnapshot
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.report.evolution import fmt
from pytest_ecdysis.validate.results import infra_drift, read_run
from pytest_ecdysis.validate.subrun import BrokenCandidate

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext


def removal_loses(
    rule: str,
    *,
    method: str,
    level: float,
    inc: tuple[float, list],
    kept: tuple[float, list],
    reduced: tuple[float, list],
) -> str | None:
    """Why taking a change out of `kept` loses something under `rule` (None: it loses nothing).

    Each argument is (suite score, `trials.jsonl` lines) of a run: the incumbent's, the kept harness's and
    the kept harness without the change.
    """
    better = decide(rule, reduced[0], kept[0], reduced[1], kept[1], method=method, level=level)
    if better.accepted:
        return f"without it the {rule} rule prefers keeping it: {better.reason}"
    still = decide(rule, inc[0], reduced[0], inc[1], reduced[1], method=method, level=level)
    if not still.accepted:
        return f"without it the candidate is no longer accepted against the incumbent: {still.reason}"
    return None


def cache_env(cfg: EcdysisConfig, adir: Path, env: Any = None) -> tuple[dict[str, str] | None, str]:
    """(extra environment of the candidate's validation and the ablation sub-runs, the line that says it).

    ini `ecdysis_response_cache = on`: the run's cache is already in the environment (None, said). Not given:
    `<adir>/ablation_cache`, for the candidate's sub-run (all misses: it only records) and its ablation runs.
    `off`, or the task model marked ini `ecdysis_uncacheable`: no cache (None, said).
    """
    from pytest_ecdysis.endpoint.response_cache import ENV_DIR, ENV_UNCACHEABLE, uncacheable

    env = os.environ if env is None else env
    if cfg.response_cache == "off":
        return None, "response cache off (ecdysis_response_cache = off): every re-validation calls the model"
    if uncacheable(cfg.model, cfg.base_url, cfg.uncacheable):
        return None, f"response cache off: {cfg.model} is marked ecdysis_uncacheable"
    if cfg.response_cache == "on" and env.get(ENV_DIR):
        return None, f"response cache on ({env[ENV_DIR]})"
    directory = str(adir.resolve() / "ablation_cache")
    extra = {ENV_DIR: directory}
    if cfg.uncacheable:
        extra[ENV_UNCACHEABLE] = ",".join(cfg.uncacheable)
    return extra, (
        f"response cache turned on for the ablation ({directory}; ecdysis_response_cache = off turns it off)"
    )


def ablate(
    ev: RoundContext,
    worktree: gitworktree.Worktree,
    adir: Path,
    run_id: str,
    label: str,
    inc_run: dict[str, Any],
    val: dict[str, Any],
) -> dict[str, Any]:
    """Ablate the accepted candidate `ev.snapshot` (validated as `val`, compared with `inc_run`).

    Returns the `ablation.json` document; `kept` lists the change indices kept. The caller rebuilds the
    kept harness with `without` and takes its figures from `result` (`score`, `run_path`, `harness_id`,
    `pass_hat_k`, `cache`). Raises what `Evolution.subrun` raises (IntegrityError).
    """
    from pytest_ecdysis.endpoint.response_cache import ENV_DIR

    assert ev.snapshot is not None
    snap, cfg = ev.snapshot, ev.cfg
    changes = changes_of(snap)
    doc: dict[str, Any] = {
        "unit": "hunk" if any(c.hunk is not None for c in changes) else "file",
        "changes": [dataclasses.asdict(c) for c in changes],
        "kept": list(range(len(changes))),
        "dropped": [],
        "rule": cfg.accept,
        "result": None,
    }
    if len(changes) < 2:
        doc["skipped"] = "a single change: nothing to ablate"
        return doc
    if len(changes) > MAX_CHANGES:
        doc["skipped"] = f"{len(changes)} changed files (more than {MAX_CHANGES}): not ablated"
        ev.say(f"{label}: ablation: {doc['skipped']}")
        return doc
    extra, cache_line = cache_env(cfg, adir)
    directory = (extra or {}).get(ENV_DIR) or (
        os.environ.get(ENV_DIR) if cfg.response_cache == "on" else None
    )
    ev.say(
        f"{label}: ablation of {len(changes)} changes ({doc['unit']}s of the diff), one re-validation each "
        f"while two or more are kept; {cache_line}"
    )
    _, inc_trials = read_run(Path(inc_run["run_path"]))
    inc = (inc_run["score"], inc_trials)
    current = {
        "score": val["score"],
        "run_path": val["run_path"],
        "harness_id": val["harness_id"],
        "pass_hat_k": val.get("pass_hat_k"),
    }
    kept_summary, kept_trials = read_run(Path(current["run_path"]))
    dropped: set[int] = set()
    totals = {"hits": 0, "misses": 0, "tokens_saved": 0}
    for i, change in enumerate(changes):
        entry = doc["changes"][i]
        if len(changes) - len(dropped) < 2:
            entry.update(kept=True, why="the last change left: without it there is no candidate")
            continue
        reduced = without(snap, changes, dropped | {i})
        sdir = adir / "ablation" / str(i + 1)
        step = ev.stage_json(
            sdir / "validation.json",
            functools.partial(
                _validate,
                ev,
                worktree,
                reduced,
                sdir,
                f"{run_id}a{i + 1}",
                f"{label} ablation {i + 1}/{len(changes)}",
                extra,
            ),
        )
        step.pop("fresh", None)
        entry["validation"] = step
        for key in totals:
            totals[key] += (step.get("cache") or {}).get(key, 0)
        why: str | None
        if step["outcome"]:
            why = f"without it the harness is broken: {step['reason']}"
        else:
            ev.ledger.verify_run(Path(step["run_path"]))
            red_summary, red_trials = read_run(Path(step["run_path"]))
            drift = infra_drift(kept_summary, red_summary)
            why = (
                f"{drift}: not compared"
                if drift
                else removal_loses(
                    cfg.accept,
                    method=cfg.accept_method,
                    level=cfg.accept_level,
                    inc=inc,
                    kept=(current["score"], kept_trials),
                    reduced=(step["score"], red_trials),
                )
            )
        if why:
            entry.update(kept=True, why=why)
        else:
            dropped.add(i)
            entry.update(
                kept=False,
                why=f"removal lost nothing under the {cfg.accept} rule (suite score "
                f"{fmt(current['score'])} with it, {fmt(step['score'])} without)",
            )
            current = {k: step.get(k) for k in ("score", "run_path", "harness_id", "pass_hat_k")}
            kept_summary, kept_trials = red_summary, red_trials
        ev.say(
            f"{label}: ablation {i + 1}/{len(changes)} {change.file} {change.header}: "
            f"{'kept' if entry['kept'] else 'dropped'}: {entry['why']}"
        )
    if directory:
        doc["cache"] = {"dir": directory, **totals}
    doc["kept"] = [i for i in range(len(changes)) if i not in dropped]
    doc["dropped"] = sorted(dropped)
    doc["result"] = current
    ev.say(
        f"{label}: ablation kept {len(doc['kept'])} of {len(changes)} change(s)"
        + (
            f"; response cache {totals['hits']} hit(s) / {totals['misses']} miss(es), {totals['tokens_saved']} "
            "tokens saved"
            if directory
            else ""
        )
    )
    gitsnapshot.reset_to_snapshot(worktree, snap)
    return doc


def _validate(
    ev: RoundContext,
    worktree: gitworktree.Worktree,
    reduced: gitsnapshot.Snapshot,
    sdir: Path,
    run_id: str,
    label: str,
    extra: dict[str, str] | None,
) -> dict[str, Any]:
    """One ablation sub-run of `reduced`: `{"outcome", "reason", "score", "run_path", "harness_id",
    "pass_hat_k", "wall_s", "cache"}`."""
    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis.endpoint.response_cache import ENV_DIR, run_stats

    started = time.monotonic()
    gitsnapshot.reset_to_snapshot(worktree, reduced)
    hid = harness_id(worktree.harness_dir, ev.harness_dir.name)
    ev.say(f"{label}: validating {hid} (sub-run {run_id})")
    try:
        sub = ev.subrun(worktree.harness_dir, sdir, run_id, files=reduced.files, env=extra)
    except BrokenCandidate as exc:
        return {
            "outcome": "broken_candidate",
            "reason": str(exc),
            "harness_id": hid,
            "wall_s": round(time.monotonic() - started, 2),
        }
    directory = (extra or {}).get(ENV_DIR) or os.environ.get(ENV_DIR)
    cache = run_stats(Path(directory), str(sub.summary.get("run_id"))) if directory else None
    return {
        "outcome": None,
        "reason": "",
        "score": sub.summary.get("suite_score"),
        "run_path": str(sub.run_path),
        "harness_id": hid,
        "pass_hat_k": sub.summary.get("pass_hat_k"),
        "wall_s": round(time.monotonic() - started, 2),
        **({"cache": cache} if cache else {}),
    }


def commit_lines(doc: dict[str, Any]) -> str:
    """The commit message's ablation paragraph: what was kept and what dropped, and why."""
    if doc.get("skipped"):
        return f"ablation (ecdysis_ablate): {doc['skipped']}\n"
    n = len(doc["changes"])
    lines = [
        f"ablation (ecdysis_ablate, {doc['rule']} rule): kept {len(doc['kept'])} of {n} change(s) "
        f"({doc['unit']}s of the diff); dropped {len(doc['dropped'])}"
    ]
    for c in doc["changes"]:
        lines.append(
            f"- {'kept' if c.get('kept', True) else 'dropped'}: {c['file']} {c['header']}"
            + (f": {c['why']}" if c.get("why") else "")
        )
    return "\n".join(lines) + "\n"


def ablate_accepted(
    ev: RoundContext,
    worktree: gitworktree.Worktree,
    adir: Path,
    run_id: str,
    label: str,
    *,
    inc_run: dict[str, Any],
    val: dict[str, Any],
    before_trials: list,
    out: RoundRecord,
) -> tuple[dict[str, Any], Any]:
    """The loop's hook after a candidate is accepted: ablate it (checkpoint `adir/ablation.json`), make
    `ev.snapshot` the kept harness and update the round fields in `out` (`score_after`, `harness_id_after`,
    `pass_hat_k_after`, `flips`, `decision`, `ablation`; the full candidate's score in `candidate_score`).

    Returns (the `ablation.json` document, the decision on the kept harness against the incumbent, or
    None when nothing was dropped).
    """
    from pytest_ecdysis.validate.results import flips

    doc = ev.stage_json(
        adir / "ablation.json", lambda: ablate(ev, worktree, adir, run_id, label, inc_run, val)
    )
    doc.pop("fresh", None)
    out["ablation"] = {
        "changes": len(doc["changes"]),
        "kept": len(doc["kept"]),
        "dropped": len(doc["dropped"]),
        "unit": doc["unit"],
        "file": "ablation.json",
        **({"skipped": doc["skipped"]} if doc.get("skipped") else {}),
    }
    if not doc["dropped"]:
        return doc, None
    assert ev.snapshot is not None
    ev.snapshot = without(ev.snapshot, changes_of(ev.snapshot), set(doc["dropped"]))
    kept = doc["result"]
    _, after_trials = read_run(Path(kept["run_path"]))
    cfg = ev.cfg
    decision = decide(
        cfg.accept,
        inc_run["score"],
        kept["score"],
        before_trials,
        after_trials,
        method=cfg.accept_method,
        level=cfg.accept_level,
    )
    out.update(
        {
            "candidate_score": out.get("score_after"),
            "score_after": kept["score"],
            "harness_id_after": kept["harness_id"],
            "pass_hat_k_after": kept.get("pass_hat_k"),
            "flips": flips(before_trials, after_trials, cfg.threshold),
            "decision": decision.fields(),
        }
    )
    return doc, decision
