"""The acceptance rule: is the candidate kept? Pure functions over scores and per-task rewards.

Rules (`--ecdysis-accept`, docs/evolution.md "Acceptance"; `adaptive`, the default, and `sequential` make
more trials in the loop, `evolve/looks.py` and `evolve/confirm.py`; here they decide on the trials given):

- `strict` (the paper's rule, Ecdysis §3): accept iff the suite score strictly rises; single
  tasks may drop. Its false-acceptance rate is not controlled: with a noisy model an unchanged harness
  is "better" about half the time.
- `paired`: accept only when a one-sided paired test over tasks rejects "no improvement" at the level
  ini `ecdysis_accept_level` (α, default 0.05), so a candidate that changes nothing is accepted with
  probability at most about α. The pairs are the per-task mean rewards of the incumbent's and the
  candidate's runs (tasks scored in both); the method is ini `ecdysis_accept_method`:
  `sign` (exact binomial sign test on the tasks that changed, `scipy.stats.binomtest`; conservative,
  the default), `wilcoxon` (signed-rank test, `scipy.stats.wilcoxon`, zeros dropped; exact without tied
  magnitudes, else a seeded permutation test, about 1 s; with a single magnitude, e.g. ±1 differences of
  one trial per task, it is the sign test and computed as one), or `bootstrap`
  (percentile bootstrap over tasks of the mean difference, `scipy.stats.bootstrap`; p is the share of
  resampled means <= 0; approximate for few tasks).

Every decision reports the effect (mean per-task difference, candidate - incumbent), a two-sided
(1 - 2α) percentile-bootstrap interval of it over tasks (its lower end is the one-sided α lower bound;
fixed seed, so a decision is reproducible) and the method's one-sided p-value; under `strict` these are
reported too, for information. The gate (`gate/baseline.py`) uses the same test the other way round: "the run
is worse than the baseline".

Other rules (e.g. rejecting on infrastructure drift) belong here as further pure functions.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_ecdysis.core.config_values import METHODS, RULES
from pytest_ecdysis.core.errors import shown
from pytest_ecdysis.gate.adaptive import AdaptiveTest, adaptive_test
from pytest_ecdysis.gate.sequential import SequentialTest, sequential_test, trial_pairs

#: Scores closer than this are equal (float sums of rewards over trials).
EPSILON = 1e-12
#: Resamples of the bootstrap interval and of the `bootstrap` method; its seed (reproducible decisions).
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class PairedTest:
    """A one-sided paired test of "after is better than before" over tasks.

    `effect` and `interval` are in reward units (mean over tasks of the per-task mean-reward difference,
    in [-1, 1]); `interval` is None with fewer than 2 tasks.
    """

    method: str  #: `sign`, `wilcoxon` or `bootstrap`
    n_tasks: int  #: tasks scored in both runs
    wins: int  #: tasks whose mean reward rose
    losses: int  #: tasks whose mean reward fell
    effect: float  #: mean per-task difference (after - before)
    interval: tuple[float, float] | None  #: two-sided (1 - 2·level) bootstrap interval of `effect`
    p_value: float  #: one-sided p-value of "no improvement"
    level: float  #: α the interval was made for

    def line(self) -> str:
        """`sign test over 30 tasks (+3/-1): effect +0.067, 90% interval [+0.000, +0.133], p=0.312`."""
        iv = (
            f", {100 * (1 - 2 * self.level):.0f}% interval [{self.interval[0]:+.3f}, {self.interval[1]:+.3f}]"
            if self.interval
            else ""
        )
        return (
            f"{self.method} test over {self.n_tasks} task(s) (+{self.wins}/-{self.losses}): effect "
            f"{self.effect:+.3f}{iv}, p={self.p_value:.3g}"
        )


@dataclass(frozen=True)
class Decision:
    """The verdict on one validated candidate, with the figures `decision.json` records."""

    accepted: bool  #: keep the candidate (it becomes the incumbent)
    reason: str  #: one line for the round's `reason`, e.g. `suite score 0.400 -> 0.500`
    rule: str = "strict"  #: `strict`, `paired` or `sequential`
    test: PairedTest | None = None  #: the paired test (None when no per-task rewards were given)
    sequential: SequentialTest | None = None  #: the `sequential` rule's test (`gate/sequential.py`)
    outcome: str | None = (
        None  #: `accepted`, `rejected` or (sequential, adaptive) `inconclusive`; None: by `accepted`
    )
    adaptive: AdaptiveTest | None = None  #: the `adaptive` rule's test (`gate/adaptive.py`)

    @property
    def inconclusive(self) -> bool:
        """Neither accepted nor rejected: the confirmation's budget ran out before a clear decision."""
        return self.outcome == "inconclusive"

    def fields(self) -> dict[str, Any]:
        """`{rule, method, effect, interval, p_value, level, n_tasks, wins, losses}` (None where unknown).

        Under `sequential`: `method` is `sprt`, `p_value` the anytime-valid p of the sequential test,
        `wins`/`losses` its discordant trial pairs, plus `sequential` (`lr`, `looks`, `pairs`, `state`).
        Under `adaptive`: `method` is `adaptive`, `p_value` the final sign test's p (at the budget), else
        min(1, 1/e) of the interim wealth e (an anytime-valid p-value), `wins`/`losses` the discordant trial
        pairs, plus `adaptive` (`e`, `final_p`, `pairs`, `trials`, `budget`, `state`, `outcome`)."""
        t, s, a = self.test, self.sequential, self.adaptive
        out: dict[str, Any] = {
            "rule": self.rule,
            "method": t.method if t else None,
            "effect": t.effect if t else None,
            "interval": list(t.interval) if t and t.interval else None,
            "p_value": t.p_value if t else None,
            "level": t.level if t else None,
            "n_tasks": t.n_tasks if t else 0,
            "wins": t.wins if t else 0,
            "losses": t.losses if t else 0,
        }
        if s is not None:
            out.update(
                method="sprt",
                p_value=s.p_value,
                level=s.level,
                wins=s.wins,
                losses=s.losses,
                sequential={
                    "lr": round(math.exp(s.log_lr), 6),
                    "looks": s.looks,
                    "pairs": s.pairs,
                    "state": s.state,
                    "outcome": self.outcome,
                },
            )
        if a is not None:
            e = math.exp(min(a.log_e, 700.0))
            out.update(
                method="adaptive",
                p_value=a.final_p if a.final_p is not None else min(1.0, 1.0 / e),
                level=a.level,
                wins=a.wins,
                losses=a.losses,
                adaptive={
                    "e": round(e, 6),
                    "final_p": a.final_p,
                    "pairs": a.pairs,
                    "trials": a.trials,
                    "budget": a.budget,
                    "state": a.state,
                    "outcome": self.outcome,
                },
            )
        return out


#: The `decision.json` fields of a round (or step) without a validated candidate.
NO_DECISION: dict[str, Any] = {
    "rule": None,
    "method": None,
    "effect": None,
    "interval": None,
    "p_value": None,
    "level": None,
}


def decision_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level `decision.json` fields of a round or step row: its `decision` (see `Decision.fields`),
    or `NO_DECISION` when no candidate was validated."""
    return dict(row.get("decision") or NO_DECISION)


def task_means(trials: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per-task mean reward of `trials.jsonl` lines, keyed `<suite>/<task_id>` (the task id without a suite).

    Trials without a reward (infrastructure errors) are left out; a task with none is absent.
    """
    sums: dict[str, list[float]] = {}
    for t in trials:
        if t.get("reward") is None:
            continue
        key = f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"])
        sums.setdefault(key, []).append(float(t["reward"]))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def paired_differences(before: Mapping[str, float], after: Mapping[str, float]) -> list[float]:
    """`after[k] - before[k]` for the tasks in both, in task-key order."""
    return [after[k] - before[k] for k in sorted(set(before) & set(after))]


def paired_test(diffs: list[float], *, method: str = "sign", level: float = 0.05) -> PairedTest:
    """One-sided test of "mean per-task difference > 0" (H0: no improvement) on `diffs`.

    Raises:
        ValueError: unknown method, or level outside (0, 1).
    """
    if method not in METHODS:
        raise ValueError(f"unknown paired-test method {method!r}; use one of {', '.join(METHODS)}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    import numpy as np
    from scipy import stats

    d = np.asarray([0.0 if abs(x) <= EPSILON else float(x) for x in diffs], dtype=float)
    n = len(d)
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    effect = float(d.mean()) if n else 0.0
    interval, dist = _bootstrap(d, level)
    if wins == 0:  # nothing rose: no test can call this an improvement
        p = 1.0
    elif method == "sign":
        p = float(stats.binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue)
    elif method == "wilcoxon":
        nz = d[d != 0]  # zeros dropped; exact distribution without ties, a seeded permutation test with them
        if np.all(np.abs(nz) == abs(nz[0])):  # one magnitude (±1: one trial per task): the sign test, exactly
            p = float(stats.binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue)
        else:
            tied = len(np.unique(np.abs(nz))) < len(nz)
            how = stats.PermutationMethod(rng=np.random.default_rng(BOOTSTRAP_SEED)) if tied else "exact"
            p = float(stats.wilcoxon(nz, alternative="greater", method=how).pvalue)
    else:
        p = 1.0 if dist is None else float((np.sum(dist <= 0) + 1) / (len(dist) + 1))
    return PairedTest(
        method=method,
        n_tasks=n,
        wins=wins,
        losses=losses,
        effect=effect,
        interval=interval,
        p_value=min(1.0, p),
        level=level,
    )


def _bootstrap(d: Any, level: float) -> tuple[tuple[float, float] | None, Any]:
    """(two-sided (1 - 2·level) percentile interval of the mean, the bootstrap distribution) over tasks."""
    import numpy as np
    from scipy import stats

    if len(d) < 2:
        return None, None
    if np.all(d == d[0]):  # degenerate: every resample has the same mean
        return (float(d[0]), float(d[0])), np.full(BOOTSTRAP_RESAMPLES, float(d[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (d,),
            np.mean,
            confidence_level=1 - 2 * level,
            method="percentile",
            n_resamples=BOOTSTRAP_RESAMPLES,
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (low, high), res.bootstrap_distribution


def regression_test(
    baseline: Mapping[str, float], run: Mapping[str, float], *, method: str = "sign", level: float = 0.05
) -> PairedTest:
    """The gate's test: one-sided paired test of "the run is worse than the baseline" over the tasks in both.

    `effect` and `interval` are run - baseline (negative: a drop); `wins`/`losses` count tasks the run
    raised/lowered; `p_value` is that of "no drop". Raises ValueError like `paired_test`.
    """
    t = paired_test(paired_differences(run, baseline), method=method, level=level)
    iv = None if t.interval is None else (0.0 - t.interval[1], 0.0 - t.interval[0])  # 0.0 - x: no -0.0
    return dataclasses.replace(t, effect=0.0 - t.effect, interval=iv, wins=t.losses, losses=t.wins)


def decide_strict(before: float | None, after: float | None, test: PairedTest | None = None) -> Decision:
    """Accept iff `after > before` (strictly); an unknown score (None) is never accepted.

    Args:
        before: the incumbent's suite score in [0, 1] (mean reward over all trials), or None.
        after: the candidate's suite score on the same split and trials, or None.
        test: the paired test of the same runs, recorded for information (does not change the verdict).
    """
    line = f"suite score {_fmt(before)} -> {_fmt(after)}" + (f"; {test.line()}" if test else "")
    if after is not None and before is not None and after > before + EPSILON:
        return Decision(True, line, "strict", test)
    return Decision(False, f"{line}: not strictly higher", "strict", test)


def decide_paired(before: float | None, after: float | None, test: PairedTest) -> Decision:
    """Accept iff the paired test rejects "no improvement" at its level and the suite score rose."""
    line = f"suite score {_fmt(before)} -> {_fmt(after)}; {test.line()}"
    rose = after is not None and before is not None and after > before + EPSILON
    if rose and test.p_value <= test.level:
        return Decision(True, f"{line} <= {test.level:g}", "paired", test)
    why = "not strictly higher" if not rose else f"not significant at level {test.level:g}"
    need = sign_min_wins(test.level)
    if test.method == "sign" and test.n_tasks < need:
        why = f"no test was possible ({test.n_tasks} tasks: at least {need} wins needed)"
    return Decision(False, f"{line}: {why}", "paired", test)


def sign_min_wins(level: float) -> int:
    """The fewest tasks that can make the one-sided sign test significant at `level` (all wins, no loss):
    ceil(log2(1 / level)); 5 at 0.05."""
    return math.ceil(math.log2(1 / level) - 1e-12)


def decide(
    rule: str,
    before: float | None,
    after: float | None,
    before_trials: Iterable[Mapping[str, Any]],
    after_trials: Iterable[Mapping[str, Any]],
    *,
    method: str = "sign",
    level: float = 0.05,
) -> Decision:
    """The decision under `rule` (`strict` or `paired`) for two runs' suite scores and `trials.jsonl` lines.

    Raises:
        ValueError: unknown rule or method, or level outside (0, 1).
    """
    if rule not in RULES:
        raise ValueError(f"unknown acceptance rule {rule!r}; use one of {', '.join(RULES)}")
    before_trials, after_trials = list(before_trials), list(after_trials)
    test = paired_test(
        paired_differences(task_means(before_trials), task_means(after_trials)),
        method=method if rule != "sequential" else "sign",
        level=level,
    )
    if (
        rule == "adaptive"
    ):  # these trials only (the looks are `evolve/looks.py`'s): the final sign test on them
        ada = adaptive_test(
            outcome_lists(before_trials, after_trials),
            budget=max(2, len(before_trials) + len(after_trials)),
            level=level,
        )
        line = f"suite score {_fmt(before)} -> {_fmt(after)}; {ada.line()}"
        outcome = {"accept": "accepted", "reject": "rejected"}.get(ada.state, "inconclusive")
        return Decision(
            ada.state == "accept",
            line if ada.state == "accept" else f"{line}: {outcome}",
            "adaptive",
            test,
            outcome=outcome,
            adaptive=ada,
        )
    if rule == "sequential":  # one look only (no confirmation runs here: `evolve/confirm.py` makes them)
        seq = sequential_test(trial_pairs(before_trials, after_trials), level=level, can_confirm=False)
        line = f"suite score {_fmt(before)} -> {_fmt(after)}; {seq.line()}"
        outcome = {"accept": "accepted", "reject": "rejected"}.get(seq.state, "inconclusive")
        return Decision(
            seq.state == "accept",
            line if seq.state == "accept" else f"{line}: {outcome}",
            "sequential",
            test,
            sequential=seq,
            outcome=outcome,
        )
    return decide_strict(before, after, test) if rule == "strict" else decide_paired(before, after, test)


def outcome_lists(
    before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]]
) -> dict[str, tuple[list[float], list[float]]]:
    """`{task key: (incumbent rewards, candidate rewards)}` in the order given (trial order within a run,
    look order across runs), trials without a reward left out; tasks scored on both sides only (keys as
    `task_means`). The data of `gate.adaptive.adaptive_test`."""
    pairs = trial_pairs(before, after)
    return {k: ([a for a, _ in ps], [b for _, b in ps]) for k, ps in pairs.items()}


def accept_text(accept: dict[str, Any]) -> str:
    """`strict rule (sign test recorded, level 0.05)`, `paired sign test at level 0.05`, `sequential ...` or
    `adaptive ...`."""
    if accept.get("rule") == "adaptive":
        budget = accept.get("budget")
        return (
            f"adaptive betting test on paired trials at level {accept.get('level')} (looks add trials to every "
            "task whose outcomes vary"
            + (f", up to {budget:,} trials a decision" if isinstance(budget, int) else "")
            + ", then a final sign test)"
        )
    if accept.get("rule") == "sequential":
        return (
            f"sequential sign test of discordant trial pairs at level {accept.get('level')} (confirmation: "
            "more trials until the decision is clear)"
        )
    if accept.get("rule") == "paired":
        return f"paired {accept.get('method')} test at level {accept.get('level')}"
    return f"strict rule (score strictly rises; {accept.get('method')} test recorded, level {accept.get('level')})"


def _fmt(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):.3f}"


def decide_no_regression(strict: Decision, solved_to_failed: list[str]) -> Decision:
    """Regression-aware acceptance (HarnessFix, Self-Harness): the strict verdict, and no task the incumbent
    solved (in every trial) may fail with the candidate. A candidate that raises the score but breaks a solved
    task is rejected, its reason naming the broken tasks.

    Args:
        strict: the verdict of the score rule on the same candidate (`decide_strict`, or a successor).
        solved_to_failed: task ids the incumbent solved and the candidate did not (`validate.results.flips`).
    """
    if not strict.accepted or not solved_to_failed:
        return strict
    broken = shown(solved_to_failed)
    return dataclasses.replace(
        strict,
        accepted=False,
        reason=f"{strict.reason}, but it breaks "
        f"{len(solved_to_failed)} task(s) the incumbent solved: {broken}: regression",
    )


def choose_best(candidates: list[tuple[bool, float | None, int]]) -> int | None:
    """The index of the candidate to keep among alternatives validated from the same incumbent.

    Args:
        candidates: per candidate `(passed, score_after, n_changes)`; `passed` is its own verdict.
    Returns:
        the index of the passing candidate with the highest score (ties: fewer changes, then the earlier
        one, so the minimal modification wins), or None when none passed.
    """
    passing = [(i, s, c) for i, (ok, s, c) in enumerate(candidates) if ok and s is not None]
    if not passing:
        return None
    best = max(passing, key=lambda x: (round(float(x[1]), 12), -x[2], -x[0]))
    return best[0]
