"""The decision benchmark's `leaderboard` world: per-task success rates with real τ² run-to-run noise.

`benchmarks/data/tau2-leaderboard-trials.csv` (its `.md` says how it was derived and from where) gives, per
leaderboard submission and domain, the share of the domain's tasks the model solved in exactly c of its 4
trials. One *world draw* (one decision) picks one submission of the domain at random (so the decisions see
the spread across models), then per task a count c from that row's shares and the incumbent's rate
p0 ~ Beta(c + 0.5, 4.5 - c) (the Jeffreys posterior of c of 4: a task solved 4 of 4 times is not certain).

The candidate's rates p1 for a mean gain g (points / 100 on the split's mean rate):

- `spread`: every task's failure shrinks in proportion, p1 = p0 + s·(1 - p0), s = g / mean(1 - p0);
- `concentrated`: a few failing tasks (p0 < 0.5, in random order) go to mostly solved (0.9) until the
  mean has risen by g (the last one only part of the way); if too few tasks fail, the rest comes spread.

Pure numpy over arrays of shape (decisions, tasks); no project imports.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "tau2-leaderboard-trials.csv"
#: the τ² suites' train split sizes (`pytest_ecdysis_tau2/tasks/suite.py`: airline 30, retail 74, telecom 74).
TRAIN_TASKS = {"airline": 30, "retail": 74, "telecom": 74}
EFFECTS = ("spread", "concentrated")
#: a cured task's rate under the `concentrated` effect.
CURED_RATE = 0.9


def histograms(domain: str) -> np.ndarray:
    """(rows, 5): the shares of tasks solved 0..4 of 4 times, one row per submission of `domain`
    (clipped at 0, renormalised)."""
    rows = [r for r in csv.DictReader(DATA.open()) if r["domain"] == domain]
    if not rows:
        raise ValueError(f"no leaderboard rows for domain {domain!r}")
    h = np.clip(np.array([[float(r[f"tasks_{c}_of_4"]) for c in range(5)] for r in rows]), 0.0, None)
    return h / h.sum(axis=1, keepdims=True)


def draw_rates(rng: np.random.Generator, domain: str, n_decisions: int, n_tasks: int) -> np.ndarray:
    """(decisions, tasks) incumbent rates: one submission per decision, Jeffreys rates per task."""
    h = histograms(domain)
    model = rng.integers(0, len(h), n_decisions)
    cum = np.cumsum(h[model], axis=1)  # (D, 5)
    u = rng.random((n_decisions, n_tasks))
    c = (u[:, :, None] > cum[:, None, :]).sum(axis=2).clip(0, 4)
    return rng.beta(c + 0.5, 4.5 - c)


def candidate_rates(rng: np.random.Generator, p0: np.ndarray, gain: float, effect: str) -> np.ndarray:
    """The candidate's rates for a mean gain `gain` (in rate units) of shape `effect`."""
    if effect not in EFFECTS:
        raise ValueError(f"unknown effect {effect!r}; choose from {', '.join(EFFECTS)}")
    if gain <= 0:
        return p0.copy()
    n_tasks = p0.shape[1]
    if effect == "spread":
        s = np.minimum(1.0, gain / (1.0 - p0).mean(axis=1, keepdims=True))
        return p0 + s * (1.0 - p0)
    p1 = p0.copy()
    need = np.full(p0.shape[0], gain * n_tasks)  # in task-rate units
    order = np.argsort(rng.random(p0.shape), axis=1)
    for j in range(n_tasks):
        t = order[:, j]
        rows = np.arange(p0.shape[0])
        cur = p0[rows, t]
        room = np.where(cur < 0.5, np.maximum(CURED_RATE - cur, 0.0), 0.0)
        add = np.minimum(room, need)
        p1[rows, t] = cur + add
        need -= add
    left = need > 1e-12  # too few failing tasks: the rest spread over every task
    if left.any():
        s = np.minimum(1.0, need[left, None] / n_tasks / (1.0 - p1[left]).mean(axis=1, keepdims=True))
        p1[left] = p1[left] + s * (1.0 - p1[left])
    return p1


# -- the shipped rules on 0/1 trials, vectorised over decisions (as `pytest_ecdysis/gate/acceptance.py`,
# -- `gate/sequential.py` and the `sim` world's `one_decision` in `bench_decisions.py` decide them) ------------
ACCEPT, REJECT, INCONCLUSIVE = 1, 2, 3


def _trial(rng: np.random.Generator, p: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    x = rng.random(p.shape) < p
    return x if mask is None else x & mask


def _sign_p(wins: np.ndarray, losses: np.ndarray) -> np.ndarray:
    from scipy.stats import binom

    return np.where(wins + losses > 0, binom.sf(wins - 1, np.maximum(wins + losses, 1), 0.5), 1.0)


def old_rule(
    rule: str, rng: np.random.Generator, p0: np.ndarray, p1: np.ndarray, looks: int = 3, level: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """(state per decision, trials spent) of a shipped rule: `strict`, `paired/sign`, `paired/wilcoxon`
    (one trial a task: one magnitude, so the sign test, as acceptance.py computes it), `paired/sign+extra`
    and `sequential` (`looks` confirmation looks on the tasks with a discordant pair)."""
    import math

    from pytest_ecdysis.gate.sequential import BETA, P1

    n_dec, n_tasks = p0.shape
    a, b = _trial(rng, p0).astype(int), _trial(rng, p1).astype(int)
    spent = np.full(n_dec, 2.0 * n_tasks)
    if rule == "strict":
        return np.where(b.sum(1) > a.sum(1), ACCEPT, REJECT), spent
    wins, losses = (b > a).sum(1), (a > b).sum(1)
    if rule in ("paired/sign", "paired/wilcoxon"):
        return np.where(_sign_p(wins, losses) <= level, ACCEPT, REJECT), spent
    if rule == "paired/sign+extra":
        flipped = a != b
        extra = flipped & (wins > 0)[:, None]
        sa, sb = a.astype(float), b.astype(float)
        for _ in range(looks):
            sa += _trial(rng, p0, extra)
            sb += _trial(rng, p1, extra)
        n = 1 + looks * extra
        ma, mb = sa / n, sb / n
        spent += 2 * looks * extra.sum(1)
        w2, l2 = (mb > ma + 1e-12).sum(1), (ma > mb + 1e-12).sum(1)
        rose = mb.mean(1) > ma.mean(1) + 1e-12  # `decide_paired` also wants the suite score to rise
        return np.where((_sign_p(w2, l2) <= level) & rose, ACCEPT, REJECT), spent
    if rule != "sequential":
        raise ValueError(f"unknown rule {rule!r}")
    lw, ll = math.log(2 * P1), math.log(2 * (1 - P1))
    low, high = math.log(BETA / (1 - level)), math.log(1 / level)
    disc = a != b
    llr = wins * lw + losses * ll
    state = np.where(llr <= low + 1e-12, REJECT, 0)
    for _ in range(looks):
        live = state == 0
        chosen = np.where(disc.any(1, keepdims=True), disc, True) & live[:, None]
        x, y = _trial(rng, p0, chosen), _trial(rng, p1, chosen)
        wins = wins + (y & ~x).sum(1)
        losses = losses + (x & ~y).sum(1)
        disc |= x != y
        spent += 2 * chosen.sum(1)
        llr = wins * lw + losses * ll
        state = np.where(
            live & (llr >= high - 1e-12), ACCEPT, np.where(live & (llr <= low + 1e-12), REJECT, state)
        )
    return np.where(state == 0, INCONCLUSIVE, state), spent


def regression_rates(p0: np.ndarray, drop: float) -> np.ndarray:
    """The run's rates after a regression of `drop` (rate units) on the mean: every task's success shrinks in
    proportion."""
    if drop <= 0:
        return p0.copy()
    return p0 * (1.0 - np.minimum(1.0, drop / p0.mean(axis=1, keepdims=True)))
