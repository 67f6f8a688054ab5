"""The `adaptive` rule in the loop: the starting comparison, the looks it asks for, the decision.

The statistics are `gate/adaptive.py`'s; this module runs the trials they ask for. Per decision:

1. *Budget* (`plan_budget`, once per evolution, after the starting run, before the first candidate's trial):
   ini `ecdysis_accept_budget` trials per decision (both harnesses, the starting comparison included), else
   `gate.adaptive.default_budget` of the suite's tasks; with `--ecdysis-max-cost` / `--ecdysis-max-tokens`
   at most what the budget leaves a round after the starting run, the test split, diagnosis and editor calls
   (`evolve.budget.project`'s figures, `affordable_trials`). Recorded in `evolution.json` (`adaptive`) with
   the projection of what it can detect (`gate.adaptive.project`, from the starting run's per-task outcomes),
   which is printed. A budget that cannot detect a gain below +30 points is a usage error before any trial
   (`check_before_trials`, on a suite whose task rates are unknown: uniform) and said after the starting run.
2. *Starting comparison*: the candidate's validation and the incumbent's run (re-run beside it unless
   ini `ecdysis_rescore = never`). When it holds fewer than `gate.adaptive.START_TRIALS` trials per task and
   side and the budget allows them, a first look tops every task up to that (`start_plan`).
3. *Looks*: while the test says `continue`, its `next_trials` (the same count on every unsettled task, or
   one trial on the first tasks that fit) for both harnesses: one sub-run per side, started together
   (`evolve.paired.together`, `--ecdysis-tasks <tasks> --ecdysis-trials <k> --ecdysis-trial-offset <i>`),
   in `<round or step dir>/looks/<j>/` (`<run-id>a<j>`) and `looks/<j>/incumbent/` (`<run-id>ia<j>`).
   Each look's trials take trial indices after every earlier one's (`--ecdysis-trial-offset`), so with a
   fixed simulated-model nonce they are fresh draws of it and the rule is the same as without one; no
   response cache. Each look is checkpointed (`looks/<j>.json`); a broken look, or one with infrastructure
   errors, ends the looks (`inconclusive`, said).
4. *Retry*: a candidate validated again on the same incumbent (`reused_validation`, any strategy: rounds,
   self-evolution steps, proposals) pools every earlier attempt's looks first (`earlier_looks`). When the
   pooled test is still undecided and shows a gain (`gate.adaptive.more_trials`), the retry buys at most
   one more budget of trials, decided by the interim bound alone (`final_test=False`: the final sign
   test's α was spent at the first budget), so one candidate gets one level, however often it is retried.
   Otherwise the decision stays `inconclusive` and the round is marked `retry: false` (diagnosis sees
   it as tried: `evolve.stages.diagnose_stage`).

Only the controller runs this; harness code is imported only in sub-runs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import UsageError, shown
from pytest_ecdysis.core.rundir import read_json
from pytest_ecdysis.evolve.paired import (
    by_trial,
    pair_outcome,
    paired_trials,
)
from pytest_ecdysis.gate.acceptance import (
    Decision,
    outcome_lists,
    paired_differences,
    paired_test,
    task_means,
)
from pytest_ecdysis.validate.results import read_run

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext

#: the smallest gain (points) a budget must detect with 80% power, else it is bad input.
WORST_GAIN_POINTS = 30


def configured_budget(cfg: EcdysisConfig, n_tasks: int) -> int:
    """Trials per decision: ini `ecdysis_accept_budget`, else `gate.adaptive.default_budget(n_tasks)`."""
    from pytest_ecdysis.gate.adaptive import default_budget

    return int(getattr(cfg, "accept_budget", 0) or default_budget(max(1, n_tasks)))


def strict_alternative() -> str:
    """`--ecdysis-accept strict (measured on the simulated model: false acceptance ...)`: the rule a budget
    too small for the adaptive rule is pointed to, with its measured error rates."""
    from pytest_ecdysis.gate.rates import rule_rates

    return f"--ecdysis-accept strict ({rule_rates({'rule': 'strict', 'level': 0.05})})"


def check_before_trials(cfg: EcdysisConfig, n_tasks: int) -> None:
    """Before any trial: the adaptive budget must detect a gain below +30 points with 80% power on a suite of
    `n_tasks` whose per-task rates are unknown (each uniform on [0, 1]: `gate.adaptive.project` of one
    half-solved trial a task).

    Raises:
        UsageError: it cannot; names the budget, a larger one to try and `--ecdysis-accept strict`.
    """
    from pytest_ecdysis.gate.adaptive import project

    if not getattr(cfg, "evolve", False) or cfg.accept != "adaptive" or n_tasks < 1:
        return
    budget = configured_budget(cfg, n_tasks)
    if project([(0.5, 1)] * n_tasks, budget, gains=()).min_gain is not None:
        return
    raise UsageError(
        f"the adaptive acceptance budget of {budget:,} trials a decision ({n_tasks} task(s)) cannot detect a "
        f"gain below +{WORST_GAIN_POINTS} points with 80% power: every candidate would end inconclusive. "
        f"Raise ini ecdysis_accept_budget (e.g. {20 * n_tasks:,}: 20 trials a task), select more tasks, or "
        f"choose {strict_alternative()}"
    )


def affordable_trials(cfg: EcdysisConfig, projection: Mapping[str, Any]) -> int | None:
    """Trials per decision that `--ecdysis-max-tokens` / `--ecdysis-max-cost` leave (None without a cap):
    (cap - starting run - test split - rounds x (diagnosis + editor)) / rounds / candidates per round, in
    trials at the starting run's tokens (or USD) per trial (`evolve.budget.project`'s figures)."""
    start = projection.get("start_run") or {}
    n_start = int(projection.get("start_trials") or 0)
    rounds = max(1, int(projection.get("rounds") or 1))
    per_round = projection.get("per_round") or {}
    candidates = max(1, int(projection.get("candidates") or 1))
    out: list[int] = []
    for cap, key in ((cfg.max_tokens, "tokens"), (cfg.max_cost_usd, "usd")):
        if cap is None or not n_start or not start.get(key):
            continue
        parts = [start.get(key), (projection.get("test") or {}).get(key)] + [
            (per_round.get(k) or {}).get(key) for k in ("diagnosis", "editor")
        ]
        if any(x is None for x in parts):
            continue
        fixed = [float(x or 0.0) for x in parts]
        left = cap - fixed[0] - fixed[1] - rounds * (fixed[2] + fixed[3])
        per_trial = start[key] / n_start
        out.append(max(0, int(left / rounds / candidates / per_trial)))
    return min(out) if out else None


def plan_budget(ev: RoundContext) -> dict[str, Any]:
    """The decision budget of this evolution and what it can detect (module docstring, 1.); kept on resume.
    Shape: `{budget, configured, affordable, n_tasks, start_trials_per_task, min_gain, trials_for, line}`."""
    from pytest_ecdysis.gate.adaptive import project

    if ev.doc.get("adaptive"):
        return dict(ev.doc["adaptive"])
    _, trials = read_run(Path(ev.doc["start"]["run_path"]))
    counts: dict[str, list[float]] = {}
    for t in trials:
        if t.get("reward") is None:
            continue
        key = f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"])
        c = counts.setdefault(key, [0.0, 0])
        c[0] += float(t["reward"])
        c[1] += 1
    n_tasks = len(counts) or int(ev.summary.get("n_tasks") or 0)
    configured = configured_budget(ev.cfg, n_tasks)
    affordable = affordable_trials(ev.cfg, ev.doc.get("projection") or {})
    budget = configured if affordable is None else max(2, min(configured, affordable))
    proj = project([(s, int(n)) for s, n in counts.values()], budget) if counts else None
    k = round(sum(n for _, n in counts.values()) / max(1, len(counts)), 1)
    line = proj.line() if proj else "no scored trial to project from"
    said = (
        f"acceptance: adaptive rule, {budget:,} trials a decision"
        + (
            f" (--ecdysis-max-tokens / --ecdysis-max-cost leave {affordable:,})"
            if affordable is not None
            else ""
        )
        + f"; on this suite ({len(counts)} tasks, {k:g} trial(s) each in the starting run) it {line}"
    )
    if proj is not None and proj.min_gain is None:
        said += f"; or choose {strict_alternative()}"
    ev.say(said)
    plan = {
        "budget": budget,
        "configured": configured,
        "affordable": affordable,
        "n_tasks": len(counts),
        "start_trials_per_task": k,
        "min_gain": proj.min_gain if proj else None,
        "trials_for": {f"{g:.2f}": t for g, t in proj.trials_for.items()} if proj else {},
        "line": said,
    }
    ev.doc["adaptive"] = plan
    return plan


def earlier_looks(ev: RoundContext, reused: str | None, here: Path) -> list[dict[str, Any]]:
    """The finished looks of earlier attempts at the same candidate on the same incumbent (`reused`: the
    `reused_validation` directory, relative to the run): the origin's `looks/<j>.json` and those of every
    round, step or proposal directory (other than `here`) whose validation reused it, in directory order.
    [] for a first attempt. Self-evolution steps and proposals are found like rounds: by their files."""
    if not reused:
        return []
    dirs = [ev.dir / reused]
    for vpath in sorted((ev.dir / "rounds").glob("**/validation.json"), key=_numeric):
        if vpath.parent == here or vpath.parent == ev.dir / reused:
            continue
        try:
            doc = read_json(vpath, ev.ledger)
        except Exception:  # an unreadable checkpoint is not an earlier attempt
            continue
        if doc.get("reused_validation") == reused:
            dirs.append(vpath.parent)
    out = []
    for d in dirs:
        for path in sorted((d / "looks").glob("*.json"), key=_numeric):
            doc = read_json(path, ev.ledger)
            if doc.get("runs") and not doc.get("problem"):
                out.append(doc)
    return out


def _numeric(path: Path) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in path.with_suffix("").parts)


def adaptive_decide(
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
    """The adaptive decision on a validated candidate (module docstring). Returns (the decision, the row's
    `looks` record: `budget`, `limit` (this attempt's trial limit), `start_trials`, `looks` (per look:
    tasks, trials per side, trial offset, wall_s, wins/losses after it), `trials` (spent by this attempt's
    looks), `wall_s`, `continued` (earlier looks pooled), `final_test`, `stopped`, `first`, `more_trials`,
    `retry`)."""
    from pytest_ecdysis.gate.adaptive import adaptive_test, more_trials, start_plan

    cfg = ev.cfg
    level = cfg.accept_level
    plan = plan_budget(ev)
    budget = int(plan["budget"])
    before, after = by_trial(before), by_trial(after)
    outcomes = outcome_lists(before, after)
    start_spent = sum(len(a) + len(b) for a, b in outcomes.values())
    next_index = cfg.trial_offset + cfg.trials
    earlier = earlier_looks(ev, reused, adir)
    for doc in earlier:
        before, after = _pool(doc, before, after)
        next_index = max(next_index, int(doc["trial_offset"]) + int(doc["per_side"]))
    outcomes = outcome_lists(before, after)
    record: dict[str, Any] = {
        "budget": budget,
        "start_trials": start_spent,
        "looks": [],
        "trials": 0,
        "wall_s": 0.0,
        "final_test": not earlier,
    }
    limit, final_test = budget, not earlier
    test = adaptive_test(outcomes, budget=max(2, limit), level=level, final_test=final_test)
    record["first"] = test.line()
    if earlier:
        record["continued"] = len(earlier)
        spent = test.trials
        need = more_trials(test, outcomes) if test.state in ("continue", "inconclusive") else 0
        limit = spent + min(budget, need or 0)
        test = adaptive_test(outcomes, budget=max(2, limit), level=level, final_test=False)
        ev.say(
            f"{label}: continuing the adaptive test of the earlier attempt(s) at this candidate "
            f"({len(earlier)} look(s) pooled, {spent:,} trials): "
            + (
                f"buying up to {limit - spent:,} more trial(s), decided by the interim bound alone"
                if limit > spent
                else "no gain visible in the pooled trials: no more trials bought"
            )
        )
    else:
        ev.say(f"{label}: starting comparison: {test.line()}")
    record["limit"] = limit
    stopped = ""
    j = 0
    top_up = {} if earlier else _top_up(outcomes, start_plan(sorted(outcomes), budget), test.trials, limit)
    while test.state == "continue" or top_up:
        j += 1
        wanted = top_up or dict(test.next_trials)
        top_up = {}
        per = max(wanted.values())
        doc = ev.stage_json(
            adir / "looks" / f"{j}.json",
            functools.partial(
                _look, ev, candidate_dir, adir, run_id, label, base, j, sorted(wanted), per, next_index
            ),
        )
        doc.pop("fresh", None)
        next_index = int(doc["trial_offset"]) + int(doc["per_side"])
        record["wall_s"] += float(doc.get("wall_s") or 0.0)
        if doc.get("problem"):
            stopped = f"look {j} not used: {doc['problem']}"
            ev.say(f"{label}: looks stopped: {stopped}")
            break
        before, after = _pool(doc, before, after)
        outcomes = outcome_lists(before, after)
        test = adaptive_test(outcomes, budget=max(2, limit), level=level, final_test=final_test)
        record["trials"] += int(doc["budget_trials"])
        record["looks"].append({**doc, "wins": test.wins, "losses": test.losses})
        ev.say(f"{label}: look {j}: {test.line()}")
    need = more_trials(test, outcomes) if test.state not in ("accept", "reject") else 0
    record["more_trials"] = need
    record["stopped"] = stopped or f"{test.state} after {j} look(s), {test.trials:,} of {limit:,} trials"
    record["wall_s"] = round(record["wall_s"], 2)
    info = paired_test(paired_differences(task_means(before), task_means(after)), method="sign", level=level)
    scores = (
        f"suite score {_fmt(score_before)} -> {_fmt(score_after)}; {test.line()}; {record['trials']:,} look "
        "trial(s)"
    )
    if test.state == "accept":
        return Decision(True, scores, "adaptive", info, outcome="accepted", adaptive=test), record
    if test.state == "reject":
        return Decision(
            False,
            f"{scores}: rejected (the candidate is not better: the futility bound was reached)",
            "adaptive",
            info,
            outcome="rejected",
            adaptive=test,
        ), record
    retry = bool(need) and not earlier and not stopped
    record["retry"] = retry
    more = (
        f"about {need:,} more trial(s) would decide it"
        if need
        else "no gain is visible in its trials: more trials are unlikely to decide it"
    )
    nxt = (
        "a later round that proposes it again buys them (pooled with these)"
        if retry
        else "marked tried: diagnosis moves on to another change"
    )
    return Decision(
        False,
        f"{scores}: inconclusive ({record['stopped']}): neither accepted nor rejected; {more}; {nxt}",
        "adaptive",
        info,
        outcome="inconclusive",
        adaptive=test,
    ), record


def _top_up(
    outcomes: Mapping[str, tuple[list[float], list[float]]], start: Mapping[str, int], spent: int, limit: int
) -> dict[str, int]:
    """The starting run's top-up: `start` trials per task and side (`gate.adaptive.start_plan`) less those
    the starting comparison has, when the same count is missing on every task and fits the limit; {}
    otherwise (the looks then go on from what is there)."""
    missing = {
        t: k - min(len(outcomes.get(t, ([], []))[0]), len(outcomes.get(t, ([], []))[1]))
        for t, k in start.items()
    }
    missing = {t: k for t, k in missing.items() if k > 0}
    if not missing or len(set(missing.values())) != 1 or len(missing) != len(start):
        return {}
    if spent + 2 * sum(missing.values()) > limit:
        return {}
    return missing


def _pool(
    doc: Mapping[str, Any], before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    (_, cand), (_, inc) = (read_run(Path(doc["runs"][k]["run_path"])) for k in ("candidate", "incumbent"))
    return [*before, *by_trial(inc)], [*after, *by_trial(cand)]


def _look(
    ev: RoundContext,
    candidate_dir: Path,
    adir: Path,
    run_id: str,
    label: str,
    base: Mapping[str, Any],
    j: int,
    tasks: list[str],
    per: int,
    offset: int,
) -> dict[str, Any]:
    """Look `j`: `per` trials of each of `tasks` per harness at trial indices `offset`.. (one sub-run each)."""
    budget = 2 * per * len(tasks)
    ev.say(
        f"{label}: look {j}: {len(tasks)} task(s) x {per} trial(s) x 2 harnesses = {budget} trial(s) "
        f"(sub-runs {run_id}a{j}, {run_id}ia{j}): {shown(tasks, 10)}"
    )
    started = time.monotonic()
    cand, inc = paired_trials(
        ev,
        candidate_dir,
        base,
        tasks,
        trials=per,
        offset=offset,
        where=adir / "looks" / str(j),
        run_ids=(f"{run_id}a{j}", f"{run_id}ia{j}"),
        label="adaptive look",
    )
    doc: dict[str, Any] = {
        "look": j,
        "tasks": tasks,
        "per_side": per,
        "trial_offset": offset,
        "budget_trials": budget,
        "wall_s": round(time.monotonic() - started, 2),
    }
    return pair_outcome(doc, cand, inc, "the look's runs")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{float(x):.3f}"
