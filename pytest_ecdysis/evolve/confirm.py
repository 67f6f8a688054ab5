"""The confirmation stage of the `sequential` rule: more trials for both harnesses until the decision is clear.

After the candidate's validation beside the incumbent's run (the *first comparison*, which may only
reject: `gate/sequential.py`), each *look* runs one more trial of the tasks that flipped so far (a
discordant trial pair; all tasks when none did) for both harnesses, two sub-runs started together
(`evolve.paired.together`, `--ecdysis-tasks <tasks> --ecdysis-trials 1`, fresh nonces, no response
cache) in `<round or step dir>/confirm/<j>/` (`<run-id>c<j>`) and `confirm/<j>/incumbent/` (`<run-id>ic<j>`).
After each look the sequential test is taken again on all trial pairs; it stops at acceptance
(LR >= 1/α), rejection (LR <= β/(1 - α)) or when ini `ecdysis_accept_extra_trials` looks (default
`DEFAULT_LOOKS`) are spent: then the outcome is `inconclusive`. Each look is checkpointed
(`confirm/<j>.json`): Ctrl-C during a look and `--ecdysis-resume` redo only the unfinished look.

A look's trials take the trial indices after the ones compared so far (`--ecdysis-trial-offset`), so with a
fixed simulated-model nonce they are fresh draws of it: the rule is the same with or without a fixed nonce.
A broken look, or one with infrastructure errors, ends the confirmation (`inconclusive`,
said). Only the controller runs this; harness code is imported only in sub-runs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import shown
from pytest_ecdysis.core.rundir import read_json
from pytest_ecdysis.evolve.paired import (
    by_trial,
    pair_outcome,
    paired_trials,
)
from pytest_ecdysis.gate.acceptance import Decision, paired_differences, paired_test, task_means
from pytest_ecdysis.gate.sequential import discordant_tasks, sequential_test, trial_pairs
from pytest_ecdysis.validate.results import read_run

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext

#: confirmation looks when ini `ecdysis_accept_extra_trials` is 0 (each look: one trial per chosen task and side).
DEFAULT_LOOKS = 3


def looks_allowed(cfg: EcdysisConfig) -> int:
    """The most confirmation looks: ini `ecdysis_accept_extra_trials`, else `DEFAULT_LOOKS`."""
    return int(getattr(cfg, "accept_extra_trials", 0) or DEFAULT_LOOKS)


def earlier_looks(ev: RoundContext, reused: str | None) -> list[dict[str, Any]]:
    """The finished looks of earlier attempts at the same candidate on the same incumbent (`reused`: the
    `reused_validation` directory, relative to the run): the origin's `confirm/<j>.json` and those of every
    round that reused that validation before, in order. [] for a first attempt."""
    if not reused:
        return []
    dirs = [ev.dir / reused] + [
        ev.dir / "rounds" / str(r["round"])
        for r in ev.doc.get("rounds") or []
        if r.get("reused_validation") == reused
    ]
    out = []
    for d in dirs:
        for path in sorted(
            (d / "confirm").glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0
        ):
            doc = read_json(path, ev.ledger)
            if doc.get("runs") and not doc.get("problem"):
                out.append(doc)
    return out


def confirm(
    ev: RoundContext,
    candidate_dir: Path,
    adir: Path,
    run_id: str,
    label: str,
    base: Mapping[str, Any],
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    score_before: float | None,
    score_after: float | None,
    reused: str | None = None,
) -> tuple[Decision, dict[str, Any]]:
    """The sequential decision on a validated candidate. Returns (the decision, the round's `confirmation`
    record: `looks` (per look: tasks, trials, run paths, wins/losses after it), `trials` spent, `max_looks`,
    `stopped` (why), `first` (the first comparison's test line), `continued` (earlier looks pooled)).

    A retry of an inconclusive candidate (`reused`: its validation was reused) continues the same test: the
    earlier attempts' looks are pooled first (`earlier_looks`), then this round's budget of looks is spent;
    Ville's bound holds over all looks of the one test, so the level is kept."""
    cfg = ev.cfg
    level = cfg.accept_level
    before, after = by_trial(before), by_trial(after)
    test = sequential_test(trial_pairs(before, after), level=level)
    record: dict[str, Any] = {
        "max_looks": looks_allowed(cfg),
        "looks": [],
        "trials": 0,
        "first": test.line(),
    }
    ev.say(f"{label}: first comparison (may only reject): {test.line()}")
    done = 0
    for doc in [] if test.state != "continue" else earlier_looks(ev, reused):
        (_, cand), (_, inc) = (read_run(Path(doc["runs"][k]["run_path"])) for k in ("candidate", "incumbent"))
        before, after = [*before, *by_trial(inc)], [*after, *by_trial(cand)]
        done += 1
        test = sequential_test(
            trial_pairs(before, after), level=level, looks=done, max_log_lr=test.max_log_lr
        )
    if done:
        record["continued"] = done
        ev.say(
            f"{label}: continuing the test of the earlier attempt(s) at this candidate ({done} look(s) "
            f"pooled): {test.line()}"
        )
    stopped = ""
    for j in range(1, record["max_looks"] + 1):
        if test.state != "continue":
            break
        pairs = trial_pairs(before, after)
        tasks = discordant_tasks(pairs) or sorted(pairs)
        doc = ev.stage_json(
            adir / "confirm" / f"{j}.json",
            functools.partial(_look, ev, candidate_dir, adir, run_id, label, base, j, tasks, done + j),
        )
        doc.pop("fresh", None)
        if doc.get("problem"):
            stopped = f"look {j} not used: {doc['problem']}"
            ev.say(f"{label}: confirmation stopped: {stopped}")
            break
        (_, cand), (_, inc) = (read_run(Path(doc["runs"][k]["run_path"])) for k in ("candidate", "incumbent"))
        before, after = [*before, *by_trial(inc)], [*after, *by_trial(cand)]
        test = sequential_test(
            trial_pairs(before, after), level=level, looks=done + j, max_log_lr=test.max_log_lr
        )
        record["trials"] += doc["budget_trials"]
        record["looks"].append({**doc, "wins": test.wins, "losses": test.losses})
        ev.say(f"{label}: confirmation look {j}/{record['max_looks']}: {test.line()}")
    if test.state == "continue" and not stopped and record["max_looks"]:
        stopped = f"budget spent ({record['max_looks']} look(s), {record['trials']} trial(s))"
    record["stopped"] = stopped or f"decided after {test.looks} look(s)"
    info = paired_test(paired_differences(task_means(before), task_means(after)), method="sign", level=level)
    scores = (
        f"suite score {_fmt(score_before)} -> {_fmt(score_after)}; {test.line()}; {record['trials']} "
        "confirmation trial(s)"
    )
    if test.state == "accept":
        return Decision(True, scores, "sequential", info, sequential=test, outcome="accepted"), record
    if test.state == "reject":
        return Decision(
            False,
            f"{scores}: rejected (the candidate is not better)",
            "sequential",
            info,
            sequential=test,
            outcome="rejected",
        ), record
    return Decision(
        False,
        f"{scores}: inconclusive ({record['stopped']}): neither accepted nor rejected; a later "
        "round may try it again",
        "sequential",
        info,
        sequential=test,
        outcome="inconclusive",
    ), record


def _look(
    ev: RoundContext,
    candidate_dir: Path,
    adir: Path,
    run_id: str,
    label: str,
    base: Mapping[str, Any],
    j: int,
    tasks: list[str],
    index: int = 1,
) -> dict[str, Any]:
    """Look `j`: one more trial of `tasks` per harness, at trial index `--ecdysis-trials` + `index` - 1
    after the configured offset (the `index`-th look of this test, earlier attempts' looks counted)."""
    budget = 2 * len(tasks)
    ev.say(
        f"{label}: confirmation look {j}: {len(tasks)} task(s) x 1 trial x 2 harnesses = {budget} trial(s) "
        f"(sub-runs {run_id}c{j}, {run_id}ic{j}): {shown(tasks, 10)}"
    )
    started = time.monotonic()
    cand, inc = paired_trials(
        ev,
        candidate_dir,
        base,
        tasks,
        trials=1,
        offset=ev.cfg.trial_offset + ev.cfg.trials + index - 1,
        where=adir / "confirm" / str(j),
        run_ids=(f"{run_id}c{j}", f"{run_id}ic{j}"),
        label="confirmation",
    )
    doc: dict[str, Any] = {
        "look": j,
        "tasks": tasks,
        "budget_trials": budget,
        "wall_s": round(time.monotonic() - started, 2),
    }
    return pair_outcome(doc, cand, inc, "the look's runs")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{float(x):.3f}"
