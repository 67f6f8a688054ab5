"""The `sequential` acceptance rule: Wald's sequential probability ratio test on the sign of discordant
trial pairs, with an anytime-valid level (pure functions; the confirmation runs are `evolve/confirm.py`).

Pairs: trial i of a task in the candidate's run against trial i of the same task in the incumbent's run
(in trial order; each confirmation look adds one more trial of each chosen task to both sides). A pair is
*discordant* when the two rewards differ; the candidate *wins* it when its reward is the higher.

Under "no improvement" (H0: on every task both harnesses draw their outcomes from the same distribution,
trials independent), each discordant pair is a win with probability 1/2, whatever tasks are chosen for
more trials from earlier outcomes. The likelihood ratio of "wins with probability P1" against 1/2,

    LR = (2·P1)^wins · (2·(1 - P1))^losses,

is then a non-negative martingale of mean 1, so by Ville's inequality P(LR ever >= 1/α) <= α, however
often it is looked at and whenever the looks stop (Ville 1939, *Étude critique de la notion de collectif*;
the test is Wald's SPRT, Wald 1945, "Sequential tests of statistical hypotheses", Ann. Math. Statist.
16(2):117-186, with his boundaries A = 1/α for accepting the candidate and B = β/(1 - α) for rejecting
it). Hence:

- accept when LR >= 1/α (false acceptance <= α: Ville, exact bound, not Wald's approximation);
- reject when LR <= β/(1 - α) (the candidate is clearly not better: more losses than a real fix makes);
- otherwise look again (more trials), and when the budget of looks is spent: `inconclusive` (neither
  accepted nor recorded as rejected; a later round may try the spec again).

The first comparison (the validation run beside the incumbent) may only reject: an acceptance needs at
least one confirmation look, unless no look is possible (deterministic models: a rerun is identical).
The anytime-valid p-value is min(1, 1 / max LR over the looks) (Ville: P(p <= α) <= α under H0).

P1 = 0.75 and β = 0.2 are this module's design choices, measured (not tuned to a target) by
`benchmarks/bench_decisions.py` (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: the alternative: the chance a real fix wins a discordant pair.
P1 = 0.75
#: Wald's nominal chance of rejecting a fix of that size (the lower boundary B = BETA / (1 - level)).
BETA = 0.2


@dataclass(frozen=True)
class SequentialTest:
    """The state of the sequential test after a look. `log_lr` in natural-log units."""

    wins: int  #: discordant pairs the candidate won
    losses: int  #: discordant pairs the candidate lost
    pairs: int  #: trial pairs compared (discordant or not)
    n_tasks: int  #: tasks with at least one pair
    looks: int  #: confirmation looks made so far (0: the first comparison only)
    log_lr: float  #: log likelihood ratio now
    max_log_lr: float  #: the largest log LR over the looks (the p-value's)
    level: float  #: α
    state: str  #: `accept`, `reject` or `continue`

    @property
    def p_value(self) -> float:
        """Anytime-valid one-sided p-value: min(1, 1 / max LR)."""
        return min(1.0, math.exp(-self.max_log_lr))

    def bounds(self) -> tuple[float, float]:
        """(reject at LR <=, accept at LR >=)."""
        return BETA / (1 - self.level), 1 / self.level

    def line(self) -> str:
        """`sequential sign test over 47 trial pair(s) on 30 task(s) (+9/-2 discordant): LR 14.2 (accept at
        >= 20, reject at <= 0.211), p<=0.0704, after 2 confirmation look(s)`."""
        low, high = self.bounds()
        return (
            f"sequential sign test over {self.pairs} trial pair(s) on {self.n_tasks} task(s) (+{self.wins}/"
            f"-{self.losses} discordant): LR {math.exp(self.log_lr):.3g} (accept at >= {high:g}, reject at "
            f"<= {low:.3g}), p<={self.p_value:.3g}, after {self.looks} confirmation look(s)"
        )


def trial_pairs(
    before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]]
) -> dict[str, list[tuple[float, float]]]:
    """`{task key: [(incumbent reward, candidate reward), ...]}`: the i-th scored trial of a task on each side
    (in the order given, which is trial order within a run and look order across runs) paired; unpaired
    trials and trials without a reward are left out. Keys as `acceptance.task_means`."""
    sides: list[dict[str, list[float]]] = [{}, {}]
    for side, trials in zip(sides, (before, after), strict=True):
        for t in trials:
            if t.get("reward") is None:
                continue
            key = f"{t['suite']}/{t['task_id']}" if t.get("suite") else str(t["task_id"])
            side.setdefault(key, []).append(float(t["reward"]))
    both = sorted(set(sides[0]) & set(sides[1]))
    return {k: list(zip(sides[0][k], sides[1][k], strict=False)) for k in both}  # unpaired trials dropped


def discordant_tasks(pairs: Mapping[str, list[tuple[float, float]]]) -> list[str]:
    """Tasks with at least one discordant pair (the *flipped* tasks the confirmation gives more trials)."""
    return sorted(k for k, ps in pairs.items() if any(abs(a - b) > 1e-12 for a, b in ps))


def log_lr(wins: int, losses: int, p1: float = P1) -> float:
    """log((2·p1)^wins · (2·(1 - p1))^losses)."""
    return wins * math.log(2 * p1) + losses * math.log(2 * (1 - p1))


def sequential_test(
    pairs: Mapping[str, list[tuple[float, float]]],
    *,
    level: float = 0.05,
    looks: int = 0,
    max_log_lr: float = 0.0,
    can_confirm: bool = True,
) -> SequentialTest:
    """The test after `looks` confirmation looks on all `pairs` so far.

    Args:
        pairs: `trial_pairs` of everything compared so far (first comparison and every look).
        level: α in (0, 1).
        looks: confirmation looks made (0: the first comparison, which may only reject when `can_confirm`).
        max_log_lr: the largest log LR at the earlier looks (for the p-value).
        can_confirm: False when no look will be made (deterministic models): the first comparison decides.
    Raises:
        ValueError: level outside (0, 1).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    wins = sum(1 for ps in pairs.values() for a, b in ps if b > a + 1e-12)
    losses = sum(1 for ps in pairs.values() for a, b in ps if a > b + 1e-12)
    llr = log_lr(wins, losses)
    low, high = math.log(BETA / (1 - level)), math.log(1 / level)
    may_accept = looks > 0 or not can_confirm
    state = "accept" if may_accept and llr >= high - 1e-12 else "reject" if llr <= low + 1e-12 else "continue"
    return SequentialTest(
        wins=wins,
        losses=losses,
        pairs=sum(len(ps) for ps in pairs.values()),
        n_tasks=len(pairs),
        looks=looks,
        log_lr=llr,
        max_log_lr=max(max_log_lr, llr if may_accept else 0.0),
        level=level,
        state=state,
    )


def min_wins(level: float = 0.05) -> int:
    """The fewest discordant wins (with no loss) that can reach acceptance: ceil(log(1/α) / log(2·P1))."""
    return math.ceil(math.log(1 / level) / math.log(2 * P1) - 1e-12)
