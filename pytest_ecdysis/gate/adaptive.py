"""The `adaptive` acceptance rule: a betting test on paired trials that spends its looks on every task whose
outcomes vary, and a final sign test at a budget fixed before the first trial (pure functions and numpy; the
loop runs the trials it asks for; no loop, run or suite import).

Data: per task, the incumbent's and the candidate's rewards in trial order; trial i of one side is paired with
trial i of the other. A pair's difference is d = candidate - incumbent in [-1, 1].

Null hypothesis H0 ("no improvement"): on every task both harnesses draw their trials from one and the same
distribution, trials independent. Then every pair is exchangeable, E[d | the past] = 0, whatever tasks were
chosen for more trials from earlier outcomes, and these hold:

1. *Interim looks (any number).* The wealth of a bettor staking LAMBDA on every pair,
   E = prod(1 + LAMBDA·d), is a non-negative martingale of mean 1, so by Ville's inequality
   P(E ever >= 1 / α1) <= α1 (α1 = INTERIM_SHARE·α). With 0/1 rewards it is Wald's likelihood ratio of
   "the candidate wins a discordant pair with probability (1 + LAMBDA) / 2" against 1/2.
2. *The final look, at the budget.* Which tasks get more trials depends only on each task's pooled outcomes
   (both sides together: a task is *settled* once all its trials so far, of both sides, agree), never on
   which side won; the budget and the look sizes are fixed before the first trial. So the discordant pairs
   the run would reach at its budget are a number N that does not depend on the signs, and their wins are
   Binomial(N, 1/2) under H0: a one-sided exact sign test at level α2 = α - α1 there is exact. By
   Bonferroni, P(false acceptance) <= α1 + α2 = α, whatever looks and early stops happened.
3. *Rejection (futility).* prod 1 / (1 + FUTILITY_LAMBDA·d) is a supermartingale whenever the candidate
   wins a discordant pair with probability >= (1 + FUTILITY_LAMBDA) / 2, so rejecting when it reaches
   1 / BETA rejects such a real gain with probability <= BETA; a smaller or no gain is rejected more often.
   Otherwise, at the budget, the decision is `inconclusive` (neither kept nor recorded as rejected).

Looks: a starting run of START_TRIALS trials per task and side; then each look adds LOOK_TRIALS trials per
side to every unsettled task (not only to those that flipped), the last look cut to fit the budget
(fewer trials per task; if not even one per unsettled task fits, as many tasks as fit, in task order). The
default budget is `default_budget`: 20 trials per task (both sides) and at most MAX_TRIALS a decision.

Measured on real τ² noise (the leaderboard world of `benchmarks/bench_decisions.py`; docs/benchmarks.md).
`project` predicts, from a starting run's own per-task outcomes, what the rule can detect at a budget by
simulating it (`simulate`) on rates drawn from each task's Jeffreys posterior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy (and scipy) are imported where used: the verdict imports this module cheaply
    import numpy as np

#: the bettor's stake on a pair (0/1 rewards: the alternative "wins a discordant pair with p = 0.625").
LAMBDA = 0.25
#: the share of α the interim looks may spend (the rest is the final sign test's).
INTERIM_SHARE = 0.2
#: the futility alternative's stake (p = 0.6 of a discordant pair) and the chance of rejecting such a gain.
FUTILITY_LAMBDA = 0.2
BETA = 0.1
#: trials per task and side of the starting run, and added per unsettled task and side at each look.
START_TRIALS = 2
LOOK_TRIALS = 2
#: the default budget: trials per task (both sides together) and per decision.
MAX_TRIALS_PER_TASK = 20
MAX_TRIALS = 1200
EPS = 1e-12


def default_budget(n_tasks: int) -> int:
    """Trials per decision (both sides): min(MAX_TRIALS_PER_TASK · tasks, MAX_TRIALS)."""
    return min(MAX_TRIALS_PER_TASK * n_tasks, MAX_TRIALS)


@dataclass(frozen=True)
class AdaptiveTest:
    """The rule's state after a look, and the next look it asks for (empty unless `continue`)."""

    state: str  #: `accept`, `reject`, `continue` or `inconclusive`
    wins: int  #: pairs the candidate won (d > 0)
    losses: int  #: pairs the candidate lost (d < 0)
    pairs: int  #: pairs compared
    trials: int  #: trials spent so far, both sides
    budget: int  #: trials the decision may spend, both sides
    log_e: float  #: log of the betting wealth (accept at >= log(1 / α1))
    log_futility: float  #: log of the futility ratio (reject at >= log(1 / BETA))
    final_p: float | None  #: the final sign test's one-sided p-value (None before the budget is reached)
    level: float  #: α
    unsettled: tuple[str, ...]  #: tasks whose pooled outcomes still vary
    next_trials: dict[str, int] = field(default_factory=dict)  #: task -> trials per side at the next look

    def line(self) -> str:
        """`adaptive sign test, 212 pairs (+31/-12): e 6.1 (accept at >= 100), 180 of 600 trials, next look:
        2 trial(s) per side on 14 unsettled task(s)`."""
        a1 = INTERIM_SHARE * self.level
        end = (
            f", final sign test p={self.final_p:.3g} (accept at <= {self.level - a1:g})"
            if self.final_p is not None
            else ""
        )
        nxt = (
            f", next look: {max(self.next_trials.values())} trial(s) per side on {len(self.next_trials)} "
            f"unsettled task(s)"
            if self.next_trials
            else ""
        )
        return (
            f"adaptive sign test, {self.pairs} pairs (+{self.wins}/-{self.losses}): e {math.exp(self.log_e):.3g}"
            f" (accept at >= {1 / a1:g}){end}, {self.trials} of {self.budget} trials{nxt}"
        )


def _pairs(outcomes: Mapping[str, tuple[Sequence[float], Sequence[float]]]) -> dict[str, list[float]]:
    return {
        t: [float(b) - float(a) for a, b in zip(inc, cand, strict=False)]
        for t, (inc, cand) in outcomes.items()
    }


def unsettled(outcomes: Mapping[str, tuple[Sequence[float], Sequence[float]]]) -> list[str]:
    """Tasks whose trials so far (both sides pooled) do not all agree, in sorted order."""
    out = []
    for t, (inc, cand) in sorted(outcomes.items()):
        pooled = [float(x) for x in (*inc, *cand)]
        if pooled and max(pooled) - min(pooled) > EPS:
            out.append(t)
    return out


def start_plan(tasks: Sequence[str], budget: int) -> dict[str, int]:
    """The starting run: START_TRIALS trials per task and side, fewer if the budget is smaller (at least
    one; if not even one per task fits, one trial of each of the first tasks in sorted order that fit)."""
    names = sorted(tasks)
    per = min(START_TRIALS, budget // (2 * max(len(names), 1)))
    if per >= 1:
        return dict.fromkeys(names, per)
    return dict.fromkeys(names[: budget // 2], 1)


def plan_look(
    outcomes: Mapping[str, tuple[Sequence[float], Sequence[float]]], budget: int, trials: int | None = None
) -> dict[str, int]:
    """The next look: LOOK_TRIALS per side on every unsettled task, cut to fit the budget (fewer per task,
    else as many tasks as fit, in sorted order). Depends on pooled outcomes only (never on who won)."""
    spent = trials if trials is not None else sum(len(a) + len(b) for a, b in outcomes.values())
    tasks = unsettled(outcomes)
    left = budget - spent
    if not tasks or left < 2:
        return {}
    per = min(LOOK_TRIALS, left // (2 * len(tasks)))
    if per >= 1:
        return dict.fromkeys(tasks, per)
    return dict.fromkeys(tasks[: left // 2], 1)


def sign_p(wins: int, losses: int) -> float:
    """The exact one-sided sign test's p-value: P(Binomial(wins + losses, 1/2) >= wins)."""
    n = wins + losses
    return sum(math.comb(n, j) for j in range(wins, n + 1)) / 2**n if n else 1.0


def adaptive_test(
    outcomes: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    budget: int,
    level: float = 0.05,
    final_test: bool = True,
) -> AdaptiveTest:
    """The rule on everything compared so far.

    Args:
        outcomes: task -> (incumbent rewards, candidate rewards), each in trial order (the starting run's
            trials, then every look's); unpaired trials count as spent but are not compared.
        budget: trials the decision may spend (both sides), fixed before the first trial
            (`default_budget`).
        level: α in (0, 1).
        final_test: False for trials bought beyond the budget of a first attempt (a retry of an
            inconclusive decision, pooled with it): the final sign test's α2 was spent at that budget, so
            only the interim bound (anytime-valid over every pooled trial, Ville) may accept; `budget` is
            then the retry's own limit.
    Returns:
        the state; `continue` comes with `next_trials`. Stop at the first `accept` or `reject`.
    Raises:
        ValueError: level outside (0, 1) or a budget below 2.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if budget < 2:
        raise ValueError(f"budget must be at least 2 trials, got {budget}")
    diffs = [d for ds in _pairs(outcomes).values() for d in ds]
    wins, losses = sum(d > EPS for d in diffs), sum(d < -EPS for d in diffs)
    log_e = sum(math.log1p(LAMBDA * d) for d in diffs)
    log_fut = -sum(math.log1p(FUTILITY_LAMBDA * d) for d in diffs)
    spent = sum(len(a) + len(b) for a, b in outcomes.values())
    a1 = INTERIM_SHARE * level
    nxt = plan_look(outcomes, budget, spent)
    final_p = sign_p(wins, losses) if final_test and not nxt and wins + losses else None
    if log_e >= math.log(1 / a1) - EPS or (final_p is not None and final_p <= level - a1 + EPS):
        state = "accept"
    elif log_fut >= math.log(1 / BETA) - EPS:
        state = "reject"
    elif not nxt:
        state = "inconclusive"
    else:
        state = "continue"
    return AdaptiveTest(
        state=state,
        wins=wins,
        losses=losses,
        pairs=len(diffs),
        trials=spent,
        budget=budget,
        log_e=log_e,
        log_futility=log_fut,
        final_p=final_p,
        level=level,
        unsettled=tuple(unsettled(outcomes)),
        next_trials=nxt if state == "continue" else {},
    )


def simulate(
    p0: np.ndarray, p1: np.ndarray, rng: np.random.Generator, budget: int, level: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """The rule on (decisions, tasks) arrays of per-task success rates (incumbent `p0`, candidate `p1`),
    0/1 trials: (state per decision: 1 accept, 2 reject, 3 inconclusive; trials spent per decision).
    The same looks, cuts and bounds as `adaptive_test` (a unit test checks they agree)."""
    import numpy as np
    from scipy.stats import binom

    n_dec, n_tasks = p0.shape
    wins, losses = np.zeros(n_dec), np.zeros(n_dec)
    succ, n = np.zeros((n_dec, n_tasks)), np.zeros((n_dec, n_tasks))
    spent, state = np.zeros(n_dec), np.zeros(n_dec, int)
    a1 = INTERIM_SHARE * level
    order = np.arange(n_tasks)
    plan = np.full((n_dec, n_tasks), min(START_TRIALS, budget // (2 * n_tasks)))
    if budget // (2 * n_tasks) < 1:  # not even one trial per task: the first tasks only
        plan[:] = (order < budget // 2)[None, :]
    while True:
        live = state == 0
        plan[~live] = 0
        for i in range(int(plan.max(initial=0))):
            go = plan > i
            a = (rng.random(p0.shape) < p0) & go
            b = (rng.random(p0.shape) < p1) & go
            wins += (b & ~a).sum(1)
            losses += (a & ~b).sum(1)
            succ += a.astype(float) + b
            n += 2 * go
            spent += 2 * go.sum(1)
        unset = (succ > 0) & (succ < n)
        left = budget - spent
        k = unset.sum(1)
        per = np.minimum(LOOK_TRIALS, left // np.maximum(2 * k, 1))
        rank = np.cumsum(unset, axis=1)  # 1-based rank of an unsettled task, in task order
        plan = np.where(
            per[:, None] >= 1, unset * per[:, None], unset & (rank <= (left // 2)[:, None])
        ).astype(int)
        plan[(k == 0) | (left < 2)] = 0
        final = live & (plan.sum(1) == 0)
        log_e = wins * math.log1p(LAMBDA) + losses * math.log1p(-LAMBDA)
        log_fut = -wins * math.log1p(FUTILITY_LAMBDA) - losses * math.log1p(-FUTILITY_LAMBDA)
        p_final = np.where(wins + losses > 0, binom.sf(wins - 1, np.maximum(wins + losses, 1), 0.5), 1.0)
        accept = live & ((log_e >= math.log(1 / a1) - EPS) | (final & (p_final <= level - a1 + EPS)))
        reject = live & ~accept & (log_fut >= math.log(1 / BETA) - EPS)
        state[accept] = 1
        state[reject] = 2
        state[live & ~accept & ~reject & final] = 3
        if not (state == 0).any():
            return state, spent


def jeffreys_rates(counts: Sequence[tuple[float, int]], rng: np.random.Generator, draws: int) -> np.ndarray:
    """(draws, tasks) rates from each task's Jeffreys posterior Beta(s + 0.5, n - s + 0.5) (s successes of
    n trials; a fractional reward counts as its value)."""
    import numpy as np

    s = np.array([c[0] for c in counts], float)
    n = np.array([c[1] for c in counts], float)
    return rng.beta(s + 0.5, n - s + 0.5, size=(draws, len(counts)))


def spread(p0: np.ndarray, gain: float) -> np.ndarray:
    """Rates after a mean gain `gain` spread over every task's failures in proportion."""
    import numpy as np

    s = np.minimum(1.0, gain / np.maximum((1.0 - p0).mean(axis=1, keepdims=True), EPS))
    return p0 + s * (1.0 - p0)


def power(
    counts: Sequence[tuple[float, int]],
    gain: float,
    budget: int,
    *,
    level: float = 0.05,
    draws: int = 400,
    seed: int = 0,
) -> float:
    """The share of `draws` simulated decisions that accept a `spread` gain of `gain` at `budget`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p0 = jeffreys_rates(counts, rng, draws)
    state, _ = simulate(p0, spread(p0, gain), rng, budget, level)
    return float((state == 1).mean())


@dataclass(frozen=True)
class Projection:
    """What the rule can see on this suite, from a starting run's per-task outcomes."""

    budget: int  #: trials per decision projected
    min_gain: float | None  #: smallest gain (rate units) accepted with >= 80% power at `budget`; None: > 0.30
    trials_for: dict[float, int | None]  #: gain -> trials per decision for 80% power (None: beyond the cap)

    def line(self) -> str:
        """`detects a +9 point gain with 80% power at about 600 trials a decision; +5 points needs about
        1,150` (or that it cannot detect anything below +30 points at this budget)."""
        if self.min_gain is None:
            return (
                f"at {self.budget:,} trials a decision the rule cannot detect a gain below +30 points with "
                "80% power: raise the budget or choose --ecdysis-accept strict"
            )
        parts = [
            f"+{100 * g:.0f} points needs about {t:,}"
            if t
            else f"+{100 * g:.0f} points needs more than {MAX_TRIALS * 4:,}"
            for g, t in sorted(self.trials_for.items())
            if g < self.min_gain - EPS
        ]
        return (
            f"detects a +{100 * self.min_gain:.0f} point gain with 80% power at about {self.budget:,} trials "
            f"a decision" + ("; " + "; ".join(parts) if parts else "")
        )


def project(
    counts: Sequence[tuple[float, int]],
    budget: int,
    *,
    gains: Sequence[float] = (0.05, 0.10),
    level: float = 0.05,
    draws: int = 400,
    seed: int = 0,
) -> Projection:
    """From a starting run's per-task (successes, trials) (k >= 1 trials a task; k >= 2 is better), the
    smallest gain on a one-point grid up to +30 points detected with 80% power at `budget`, and for each of
    `gains` the trials per decision that reach 80% (bisection over budgets in steps of 2 trials per task,
    up to 4 · MAX_TRIALS)."""

    def ok(g: float, b: int) -> bool:
        return power(counts, g, b, level=level, draws=draws, seed=seed) >= 0.8

    lo, hi = 1, 30  # points; power rises with the gain: bisect
    if not ok(hi / 100, budget):
        min_gain = None
    else:
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid / 100, budget) else (mid + 1, hi)
        min_gain = hi / 100
    step, cap = 2 * len(counts), 4 * MAX_TRIALS
    trials_for: dict[float, int | None] = {}
    for g in gains:
        if not ok(g, cap):
            trials_for[g] = None
            continue
        a, b = 1, cap // step  # in steps of 2 trials per task
        while a < b:
            m = (a + b) // 2
            a, b = (a, m) if ok(g, m * step) else (m + 1, b)
        trials_for[g] = a * step
    return Projection(budget=budget, min_gain=min_gain, trials_for=trials_for)


def more_trials(
    test: AdaptiveTest, outcomes: Mapping[str, tuple[Sequence[float], Sequence[float]]]
) -> int | None:
    """For an `inconclusive` (or `continue`) decision: about how many more trials (both sides) would take
    the interim wealth to its bound at the rate the pairs of the unsettled tasks move it now
    (drift per pair mu = mean of log(1 + LAMBDA·d) over those pairs; 2 trials a pair); None when the
    pairs so far do not move it up (no gain visible). Only the interim bound can decide trials bought beyond
    the budget: the final sign test's α2 was spent at the budget."""
    if test.state in ("accept", "reject"):
        return 0
    diffs = [float(b) - float(a) for t in test.unsettled for a, b in zip(*outcomes[t], strict=False)]
    if not diffs:
        return None
    mu = sum(math.log1p(LAMBDA * d) for d in diffs) / len(diffs)
    if mu <= EPS:
        return None
    left = math.log(1 / (INTERIM_SHARE * test.level)) - test.log_e
    return 2 * math.ceil(max(0.0, left) / mu)
