"""Measured validity of accepted edits under the simulated model.

For every accepted edit, the tasks it flipped from failed to solved are joined with the ground truth of
the run before and the run after (`sim/ground_truth.jsonl`, one line per trial with `failed`, `quirks`
and `cause`, see `sim/truth/causes.py`):

- each failed trial before contributes its cause (`kind`, `origin`);
- after the edit, that cause is `cured` (an entry of that kind marked cured; for a harness-origin cause,
  no such entry any more: the harness now shows the value, or its limit no longer ends the trial), and the
  kind is in the edit's **reach** (below); `incumbent_cure` (cured, but the edit's own runs do not show it
  curing that kind any more than the incumbent did: not its change); `not_drawn` (a model quirk that
  simply did not fire this time: the flip came from the draws, not the edit), or `still_present`.
  A cure is `by` `code` when every cured entry behind it was repaired or refused by the harness before
  execution (`cured_by: "harness"`, `sim/truth/repairs.py`), else `information`.

**Reach** (`edit_reach`): the kinds an edit's own change cures, measured on its own pair of runs (the
incumbent's trials the decision compared with, and its validation run): a kind whose entries carry a cure
flag is reached when the share of its entries marked cured is strictly higher after than before, with at
least one cured after (cure decisions are a function of what the harness sends at the site, so a harness
change that does not touch the kind leaves the share where the draws put it); a harness-origin kind
(`unseen_value`, `harness_limit`), whose entries disappear when cured, when its damaging entries per trial
(unclosed failed trials for `harness_limit`) strictly fell. A kind absent from the run before is not reached
(nothing to compare).

An edit is a **systematic fix** when it cured a harness-curable cause (origin `systematic` or `harness`, or
a model slip cured in code; never a reasoning error, `sim.profiles.REASONING_KINDS`) on at least two
tasks, or when one of its flipped tasks had failed on a curable kind that its **own held-out kinds** contain, whether that cause was cured or `not_drawn` in the validation
run (with a fresh nonce per sub-run, the validation run redraws every quirk, so a cause it did not draw
again says nothing either way; the held-out split decides). The held-out kinds are those the frozen
harness cured on the held-out test split (start -> frozen); they are an edit's own when it is the only
accepted edit (the frozen harness is that edit: start -> frozen is its own before/after on test), and
otherwise only those in the edit's reach (a completion check accepted in round 1 is not credited with the
repeat-loop cures a round-2 repeat guard made on test). An **accommodation** when it cured something but
only a model-origin cause by information or on one task; **noise** when no cure of its own stands behind
any of its flips. The accommodation ratio `t` is the share of accepted edits that are not systematic
fixes. On a profile with no harness-curable quirk kind, every accepted edit that is not a systematic fix
(of a harness-origin defect) is a **false acceptance**.

Pure functions over ground-truth lines, plus `evolution_validity`, which reads an evolution's run
directory (`evolution.json` as a dict, round and step `validation.json` files). Only the controller's
report calls it, after the run; nothing here feeds back into diagnosis or acceptance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_ecdysis.sim.client import read_ground_truth
from pytest_ecdysis.sim.profiles import GROUND_TRUTH_ORIGINS, QUIRK_ORIGINS, REASONING_KINDS, load_profile

#: Origins a harness change can cure (`sim/profiles.py`: profile quirks and harness-made failures).
CURABLE_ORIGINS = ("systematic", "harness")
SYSTEMATIC_MIN_TASKS = 2


def task_key(line: dict[str, Any]) -> str:
    """`<suite>/<task_id>`, the key `validate.results.flips` uses."""
    return f"{line['suite']}/{line['task_id']}" if line.get("suite") else str(line["task_id"])


def failure_causes(lines: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Task key -> the causes (`kind`, `origin`) of its failed trials, one per kind. A line without a
    `cause` field (older ground truth) falls back to its uncured entries."""
    out: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if not line.get("failed"):
            continue
        if "cause" in line:
            found = [line["cause"]] if line["cause"] else []
        else:
            found = [q for q in line.get("quirks", []) if not q.get("cured")]
        bucket = out.setdefault(task_key(line), [])
        for c in found:
            if c["kind"] not in {b["kind"] for b in bucket}:
                bucket.append({"kind": c["kind"], "origin": c["origin"]})
    return out


def _cured_by_code(entries: list[dict[str, Any]]) -> bool:
    cured = [q for q in entries if q.get("cured")]
    return bool(cured) and all(q.get("cured_by") == "harness" for q in cured)


def cure_status(cause: dict[str, Any], after: list[dict[str, Any]]) -> str:
    """`cured`, `not_drawn` or `still_present`: what became of a cause in the task's trials after the edit
    (whatever made the cure: `edit_cures` checks it was the edit's)."""
    kind, origin = cause["kind"], cause["origin"]
    if kind == "harness_limit":
        return "cured" if after and all(line.get("closed", True) for line in after) else "still_present"
    entries = [q for line in after for q in line.get("quirks", []) if q["kind"] == kind]
    if any(q.get("cured") for q in entries):
        return "cured"
    if not entries:
        return "cured" if origin == "harness" else "not_drawn"
    if any(q.get("effect") for q in entries):
        return "still_present"  # it still did harm, and the trial passed anyway: not the edit's doing
    return "not_drawn"  # it fired and did no harm this time: the draws, not the edit


def _kind_figures(lines: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """kind -> (entries, cured entries, damaging entries) over a run's lines; `harness_limit` counts the
    failed trials the model never closed."""
    out: dict[str, list[int]] = {}
    for line in lines:
        for q in line.get("quirks", []):
            row = out.setdefault(q["kind"], [0, 0, 0])
            row[0] += 1
            row[1] += bool(q.get("cured"))
            row[2] += bool(q.get("effect")) and not q.get("cured")
        if line.get("failed") and not line.get("closed", True):
            row = out.setdefault("harness_limit", [0, 0, 0])
            row[0] += 1
            row[2] += 1
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def edit_reach(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> set[str]:
    """The kinds an edit's own change cures, from its own pair of runs (module docstring, "Reach")."""
    fb, fa = _kind_figures(before), _kind_figures(after)
    tb, ta = max(len(before), 1), max(len(after), 1)
    reach = set()
    for kind, (n_b, c_b, d_b) in fb.items():
        n_a, c_a, d_a = fa.get(kind, (0, 0, 0))
        if GROUND_TRUTH_ORIGINS.get(kind, "harness") == "harness":
            if d_b and d_a / ta < d_b / tb:
                reach.add(kind)
        elif c_a and n_a and c_a / n_a > c_b / n_b:
            reach.add(kind)
    return reach


def edit_cures(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    gained: Iterable[str],
    reach: set[str] | None = None,
) -> list[dict[str, Any]]:
    """For each task the edit flipped from failed to solved, each cause of its failures before and what
    became of it after: `[{"task", "kind", "origin", "status", "by"}]`. `reach`: the kinds the edit's own
    change cures (default: `edit_reach(before, after)`); a cure of another kind is `incumbent_cure`."""
    causes = failure_causes(before)
    reach = edit_reach(before, after) if reach is None else reach
    by_task: dict[str, list[dict[str, Any]]] = {}
    for line in after:
        by_task.setdefault(task_key(line), []).append(line)
    out = []
    for task in sorted(gained):
        lines = by_task.get(task, [])
        for cause in causes.get(task, []):
            status = cure_status(cause, lines)
            if status == "cured" and cause["kind"] not in reach:
                status = "incumbent_cure"
            entries = [q for line in lines for q in line.get("quirks", []) if q["kind"] == cause["kind"]]
            by = "code" if status == "cured" and _cured_by_code(entries) else "information"
            out.append({"task": task, **cause, "status": status, "by": by})
    return out


def _curable(cure: dict[str, Any]) -> bool:
    """A cause a harness change can cure for good: harness-curable origins, or a model slip the harness's
    code repaired; never a reasoning error (`REASONING_KINDS`: a valid but wrong value, which no generic
    check can see through, so a gain on it is an accommodation or luck)."""
    if cure["kind"] in REASONING_KINDS:
        return False
    return cure["origin"] in CURABLE_ORIGINS or cure.get("by") == "code"


def classify(cures: list[dict[str, Any]], held_out_kinds: Iterable[str] = ()) -> str:
    """`systematic_fix`, `accommodation` or `noise` for one accepted edit (module docstring); `held_out_kinds`
    are the edit's own held-out kinds."""
    cured = [c for c in cures if c["status"] == "cured"]
    curable = [c for c in cured if _curable(c)]
    # a curable cause that was not redrawn in the validation run (a fresh nonce) is confirmed by the held-out
    # split: the edit's own change cured that kind there
    held = {c["kind"] for c in cures if _curable(c) and c["status"] in ("cured", "not_drawn")}
    if len({c["task"] for c in curable}) >= SYSTEMATIC_MIN_TASKS or held & set(held_out_kinds):
        return "systematic_fix"
    return "accommodation" if cured else "noise"


def ratio(classes: list[str]) -> float | None:
    """The accommodation ratio t: accepted edits that are not systematic fixes / accepted edits (None
    without an accepted edit)."""
    return None if not classes else round(sum(c != "systematic_fix" for c in classes) / len(classes), 4)


def has_curable_quirks(profile: str | None) -> bool | None:
    """Whether a profile has any systematic quirk kind at a rate above 0 (None when unknown)."""
    if not profile:
        return None
    try:
        p = load_profile(profile)
    except Exception:  # a profile not installed here: unknown, not an error of the report
        return None
    return any(p.rate(k) > 0 for k, origin in QUIRK_ORIGINS.items() if origin == "systematic")


def summarise(
    edits: list[dict[str, Any]], profile: str | None, curable: bool | None, held_out_kinds: Iterable[str] = ()
) -> dict[str, Any]:
    """The `validity` object of `evolution.json` from the classified edits."""
    classes = [e["class"] for e in edits]
    false = None if curable is None else (0 if curable else sum(c != "systematic_fix" for c in classes))
    return {
        "source": "simulated model ground truth",
        "profile": profile,
        "profile_has_curable_quirks": curable,
        "accepted_edits": len(edits),
        "systematic_fixes": classes.count("systematic_fix"),
        "accommodations": classes.count("accommodation"),
        "noise": classes.count("noise"),
        "t": ratio(classes),
        "false_acceptances": false,
        "held_out_kinds": sorted(set(held_out_kinds)),
        "edits": edits,
    }


def summary_line(validity: dict[str, Any]) -> str:
    """One printed line: counts, t and false acceptances."""
    t = validity.get("t")
    fa = validity.get("false_acceptances")
    return (
        f"validity (simulated ground truth, profile {validity.get('profile')}): "
        f"{validity['accepted_edits']} accepted edit(s): {validity['systematic_fixes']} systematic fix(es), "
        f"{validity['accommodations']} accommodation(s), {validity['noise']} on noise; "
        f"accommodation ratio t (accepted edits that are not systematic fixes) = {'-' if t is None else f'{t:.2f}'}"
        + ("" if fa is None else f"; false acceptances {fa}")
    )


# --- reading an evolution run ------------------------------------------------------------------------


def _run_path(path: Path) -> str | None:
    try:
        return json.loads(path.read_text()).get("run_path")
    except (OSError, ValueError):
        return None


def accepted_edits(doc: dict[str, Any], run_dir: Path) -> list[dict[str, Any]]:
    """`[{"round", "step", "before", "after", "gained"}]` for every accepted round, self-evolution step or
    kept proposal of an alternatives round (`step` None unless a self-evolution step), in order, with the
    run paths of the incumbent's trials the decision compared with (its re-run beside the candidate, when
    the round recorded one under `incumbent_run`, else its earlier run) and of the validated candidate."""
    current = doc["start"]["run_path"]
    out = []
    for row in doc.get("rounds", []):
        n = row["round"]
        units = (
            [(st, run_dir / "rounds" / str(n) / "steps" / str(st["step"])) for st in row["steps"]]
            if row.get("steps")
            # alternatives (self-harness, harnessfix): only the proposal kept is an accepted edit
            else [
                (p, run_dir / "rounds" / str(n) / "proposals" / str(p["proposal"]))
                for p in row["proposals"]
                if p.get("chosen")
            ]
            if row.get("proposals")
            else [(row, run_dir / "rounds" / str(n))]
        )
        for unit, udir in units:
            if not unit.get("accepted"):
                continue
            after = _run_path(udir / "validation.json")
            if after is None:
                continue
            # the trials the decision compared with: a re-run of the incumbent beside the candidate when there
            # was one (its quirks, not those of the incumbent's earlier run, are what the edit met)
            inc = unit.get("incumbent_run") or row.get("incumbent_run")
            before = inc["run_path"] if isinstance(inc, dict) and inc.get("run_path") else current
            out.append(
                {
                    "round": n,
                    "step": unit.get("step") if row.get("steps") else None,
                    "before": before,
                    "after": after,
                    "gained": (unit.get("flips") or {}).get("failed_to_solved", []),
                }
            )
            current = after
    return out


def evolution_validity(doc: dict[str, Any], run_dir: str | Path) -> dict[str, Any] | None:
    """The `validity` object of an evolution run, or None when its start run has no simulated ground truth
    (a real model: nothing to measure against)."""
    run_dir = Path(run_dir)
    start = read_ground_truth(doc["start"]["run_path"])
    if not start:
        return None
    profile = next((line.get("profile") for line in start if line.get("profile")), None)
    held_out: set[str] = set()
    test = doc.get("test") or {}
    if (test.get("start") or {}).get("run_path") and (test.get("frozen") or {}).get("run_path"):
        t_before, t_after = (
            read_ground_truth(test["start"]["run_path"]),
            read_ground_truth(test["frozen"]["run_path"]),
        )
        failed_before = set(failure_causes(t_before))
        failing_after = {task_key(x) for x in t_after if x.get("failed")}
        held_out = {
            c["kind"]
            for c in edit_cures(
                t_before, t_after, failed_before - failing_after, edit_reach(t_before, t_after)
            )
            if c["status"] == "cured" and _curable(c)
        }
    accepted = accepted_edits(doc, run_dir)
    edits = []
    for e in accepted:
        before, after = read_ground_truth(e["before"]), read_ground_truth(e["after"])
        reach = edit_reach(before, after)
        own = set(held_out) if len(accepted) == 1 else held_out & reach
        cures = edit_cures(before, after, e["gained"], reach)
        edits.append(
            {
                "round": e["round"],
                "step": e["step"],
                "class": classify(cures, own),
                "gained": e["gained"],
                "reach": sorted(reach),
                "held_out_kinds": sorted(own),
                "cures": cures,
            }
        )
    return summarise(edits, profile, has_curable_quirks(profile), held_out)
