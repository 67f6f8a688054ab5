"""The gate's non-inferiority test, and the train-test gap judgement (pure functions; no loop import).

Non-inferiority: Δ = mean over tasks of (run's mean reward - baseline's mean reward), tasks scored in both.
Its standard error comes from each task's pooled Jeffreys rate p~ = (s + 0.5) / (n + 1) over both sides
(the null "the run is the baseline's harness"; a task solved in every trial still gets a little variance):
SE² = Σ p~(1 - p~)(1/k_base + 1/k_run) / T². With z = z(1 - level) (one-sided):

- `pass` when Δ - z·SE > -margin (the data show the drop, if any, is within the margin);
- `fail` when Δ + z·SE < -margin (a drop beyond the margin is shown);
- otherwise `undecided`, with the trials per task and side that would decide it at the estimate; it fails
  by default (the change was not shown safe).

DEFAULT_MARGIN is 5 points. `plan_trials` gives the trials per task (both sides) at which an unchanged
harness passes with probability >= 95% on these rates; `smallest_drop` the drops the gate catches.
This is a one-shot normal-approximation test, not anytime-valid: run it once on the trials planned.

Train-test gap (`train_test_gap`): gain_train = mean over train tasks of (frozen - start), gain_test the
same on test; their difference has variance s²_train / T_train + s²_test / T_test (s²: the sample variance
over tasks of the per-task differences; the splits are independent task sets), and the gap is *said* when
the one-sided lower bound gap - z·SE is above 0: the train gain is beyond the test gain by more than the
noise of both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

_Z = NormalDist()

#: the default tolerance: a drop of the suite score of at most this many rate units passes.
DEFAULT_MARGIN = 0.05


def _rates(outcomes: Mapping[str, Sequence[float]]) -> dict[str, tuple[float, int]]:
    return {t: (sum(float(x) for x in xs), len(xs)) for t, xs in outcomes.items() if xs}


@dataclass(frozen=True)
class NonInferiority:
    """The gate's verdict on a run against a baseline."""

    state: str  #: `pass`, `fail` or `undecided`
    effect: float  #: Δ, run - baseline, in rate units
    se: float  #: its standard error
    lower: float  #: Δ - z·SE
    upper: float  #: Δ + z·SE
    margin: float  #: the tolerated drop
    n_tasks: int
    more_trials: int | None  #: `undecided`: trials per task and side that would decide (else None)

    @property
    def passed(self) -> bool:
        """`pass` only: `undecided` fails (the change was not shown safe)."""
        return self.state == "pass"

    def line(self) -> str:
        """`non-inferiority (margin 5 points) over 30 tasks: effect -0.083, 95% bound [-0.151, -0.015]:
        undecided: 12 trials per task and side would decide`."""
        tail = (
            f": {self.more_trials} trials per task and side would decide" if self.state == "undecided" else ""
        )
        return (
            f"non-inferiority (margin {100 * self.margin:g} points) over {self.n_tasks} task(s): effect "
            f"{self.effect:+.3f}, one-sided bounds [{self.lower:+.3f}, {self.upper:+.3f}]: {self.state}{tail}"
        )


def _se(
    base: dict[str, tuple[float, int]],
    run: dict[str, tuple[float, int]],
    tasks: list[str],
    k_base: float | None = None,
    k_run: float | None = None,
) -> float:
    tot = 0.0
    for t in tasks:
        s = base[t][0] + run[t][0]
        n = base[t][1] + run[t][1]
        p = (s + 0.5) / (n + 1)
        tot += p * (1 - p) * (1 / (k_base or base[t][1]) + 1 / (k_run or run[t][1]))
    return math.sqrt(tot) / len(tasks)


def noninferiority(
    baseline: Mapping[str, Sequence[float]],
    run: Mapping[str, Sequence[float]],
    *,
    margin: float = DEFAULT_MARGIN,
    level: float = 0.05,
) -> NonInferiority:
    """The test on per-task rewards (task -> rewards of its trials) of the baseline and of the run.

    Raises:
        ValueError: no task scored on both sides, a margin below 0 or a level outside (0, 1).
    """
    if not 0 < level < 1 or margin < 0:
        raise ValueError(f"level must be in (0, 1) and margin >= 0, got {level}, {margin}")
    b, r = _rates(baseline), _rates(run)
    tasks = sorted(set(b) & set(r))
    if not tasks:
        raise ValueError("no task was scored in both the baseline and the run")
    effect = sum(r[t][0] / r[t][1] - b[t][0] / b[t][1] for t in tasks) / len(tasks)
    se, z = _se(b, r, tasks), _Z.inv_cdf(1 - level)
    lower, upper = effect - z * se, effect + z * se
    state = "pass" if lower > -margin else "fail" if upper < -margin else "undecided"
    more = None
    if state == "undecided":
        gap = abs(effect + margin)
        k = max(max(b[t][1], r[t][1]) for t in tasks)
        need = k * (z * se / gap) ** 2 if gap > 1e-9 else float("inf")
        more = None if math.isinf(need) else max(1, math.ceil(need) - k)
    return NonInferiority(
        state=state,
        effect=effect,
        se=se,
        lower=lower,
        upper=upper,
        margin=margin,
        n_tasks=len(tasks),
        more_trials=more,
    )


def pilot_rates(outcomes: Mapping[str, Sequence[float]]) -> list[float]:
    """Each task's Jeffreys rate (s + 0.5) / (n + 1) from a pilot (e.g. the baseline's own trials): the
    rates `plan_trials` and `smallest_drop` take (measured: an unchanged harness then fails 1.5-3.7%)."""
    return [(s + 0.5) / (n + 1) for s, n in _rates(outcomes).values()]


def plan_trials(
    rates: Sequence[float], *, margin: float = DEFAULT_MARGIN, level: float = 0.05, pass_power: float = 0.95
) -> int:
    """Trials per task and side at which an unchanged harness passes with probability >= `pass_power`:
    SE(k) <= margin / (z(1 - level) + z(pass_power)), SE(k)² = Σ p(1 - p)·2/k / T² over the tasks' rates."""
    z = _Z.inv_cdf(1 - level) + _Z.inv_cdf(pass_power)
    var1 = sum(p * (1 - p) * 2 for p in rates) / len(rates) ** 2  # SE² at k = 1
    return max(1, math.ceil(var1 * (z / margin) ** 2))


def smallest_drop(
    rates: Sequence[float], k: int, *, margin: float = DEFAULT_MARGIN, level: float = 0.05, power: float = 0.8
) -> tuple[float, float]:
    """(the smallest drop the gate fails with probability >= `power` (not shown safe), the smallest drop it
    *shows* beyond the margin with that probability), at k trials per task and side on these rates."""
    se = math.sqrt(sum(p * (1 - p) * 2 / k for p in rates)) / len(rates)
    z, zp = _Z.inv_cdf(1 - level), _Z.inv_cdf(power)
    return max(0.0, margin - (z - zp) * se), margin + (z + zp) * se


@dataclass(frozen=True)
class TrainTestGap:
    """Is the train gain beyond the test gain by more than the noise of both?"""

    train_gain: float
    test_gain: float
    gap: float  #: train_gain - test_gain
    lower: float  #: gap - z·SE
    said: bool  #: lower > 0
    tasks: tuple[str, ...]  #: train tasks whose mean rose by more than the test gain, largest rise first

    def line(self) -> str:
        """`train gain +0.700 vs test gain +0.050: beyond the noise of both (gap +0.650, lower bound
        +0.410); train tasks: a, b, c`."""
        verdict = "beyond the noise of both" if self.said else "within the noise"
        names = f"; train tasks: {', '.join(self.tasks[:10])}" if self.said and self.tasks else ""
        return (
            f"train gain {self.train_gain:+.3f} vs test gain {self.test_gain:+.3f}: {verdict} (gap "
            f"{self.gap:+.3f}, lower bound {self.lower:+.3f}){names}"
        )


def _diffs(start: Mapping[str, Sequence[float]], frozen: Mapping[str, Sequence[float]]) -> dict[str, float]:
    a, b = _rates(start), _rates(frozen)
    return {t: b[t][0] / b[t][1] - a[t][0] / a[t][1] for t in sorted(set(a) & set(b))}


def train_test_gap(
    train_start: Mapping[str, Sequence[float]],
    train_frozen: Mapping[str, Sequence[float]],
    test_start: Mapping[str, Sequence[float]],
    test_frozen: Mapping[str, Sequence[float]],
    *,
    level: float = 0.05,
) -> TrainTestGap:
    """The gap judgement on per-task rewards of start and frozen harness on train and on test.

    Raises:
        ValueError: fewer than 2 tasks scored on both harnesses in a split.
    """
    tr, te = _diffs(train_start, train_frozen), _diffs(test_start, test_frozen)
    if len(tr) < 2 or len(te) < 2:
        raise ValueError("the gap needs at least 2 tasks scored by both harnesses on train and on test")

    def mean_var(d: dict[str, float]) -> tuple[float, float]:
        m = sum(d.values()) / len(d)
        return m, sum((x - m) ** 2 for x in d.values()) / (len(d) - 1)

    (g_tr, v_tr), (g_te, v_te) = mean_var(tr), mean_var(te)
    se = math.sqrt(v_tr / len(tr) + v_te / len(te))
    gap = g_tr - g_te
    lower = gap - _Z.inv_cdf(1 - level) * se
    tasks = tuple(t for t, x in sorted(tr.items(), key=lambda kv: (-kv[1], kv[0])) if x > g_te + 1e-12)
    return TrainTestGap(train_gain=g_tr, test_gain=g_te, gap=gap, lower=lower, said=lower > 0, tasks=tasks)
