"""Error rates of the held-out refusal rule (`pytest_ecdysis/gate/heldout.py`) on the `leaderboard` world.

World (`leaderboard_world.py`): per decision one leaderboard submission of the domain, per-task incumbent
rates from its histogram, drawn separately for the train tasks and the held-out (test) tasks (airline 30 /
20, retail 74 / 40, telecom 74 / 40). The candidate:

- `honest`: a real fix of +g points on both splits (`candidate_rates`, `spread`);
- `memorised`: an answer table of the train tasks, +30 points on train (`concentrated`: failing train tasks
  go to mostly solved) and +0 on the held-out tasks.

Per decision: train trials of incumbent and candidate (`--train-trials`, the loop's `--ecdysis-trials`,
default 1), the train decision (`--decide`: `sign`, the paired sign test at 0.05 the shipped `paired`
rule applies, or `none`: every candidate goes on), then, only for a candidate the train decision accepted,
`--test-trials` trials of both on the held-out tasks (the loop's `--ecdysis-test-trials`, default 3) and the
rule on those rewards. `refuse` is the share of the train-accepted candidates the rule refused; `decisions`
is how many were train-accepted. One line per cell:

    heldout world=leaderboard domain=airline train=30 test=20 train_gain=+0.050 test_gain=+0.050
        refuse=0.012 decisions=412 kind=honest accepted=0.206 level=0.01

Run: `python benchmarks/bench_heldout.py --decisions 2000 --seed 0` (numpy and scipy; about a second).
"""

from __future__ import annotations

import argparse

import numpy as np
from leaderboard_world import candidate_rates, draw_rates
from scipy.stats import binom, norm

from pytest_ecdysis.gate.heldout import HELDOUT_LEVEL

SPLITS = {"airline": (30, 20), "retail": (74, 40), "telecom": (74, 40)}
CASES = (("honest", 0.05, 0.05), ("honest", 0.10, 0.10), ("memorised", 0.30, 0.0))


def _means(rng: np.random.Generator, p: np.ndarray, k: int) -> np.ndarray:
    return (rng.random((*p.shape, k)) < p[..., None]).mean(axis=2)


def _mean_var(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return d.mean(axis=1), d.var(axis=1, ddof=1)


def cell(
    rng: np.random.Generator,
    domain: str,
    kind: str,
    g_train: float,
    g_test: float,
    *,
    n: int,
    train_trials: int,
    test_trials: int,
    decide: str,
    level: float,
) -> dict[str, float]:
    """Refusal share among the train-accepted decisions of one case (the rule vectorised as in
    `gate.heldout.heldout_check`)."""
    t_train, t_test = SPLITS[domain]
    p0 = draw_rates(rng, domain, n, t_train + t_test)  # one submission per decision for both splits
    p0_tr, p0_te = p0[:, :t_train], p0[:, t_train:]
    effect = "concentrated" if kind == "memorised" else "spread"
    p1_tr = candidate_rates(rng, p0_tr, g_train, effect)
    p1_te = candidate_rates(rng, p0_te, g_test, "spread")
    a, b = _means(rng, p0_tr, train_trials), _means(rng, p1_tr, train_trials)
    if decide == "sign":
        wins, losses = (b > a).sum(1), (a > b).sum(1)
        p = np.where(wins + losses > 0, binom.sf(wins - 1, np.maximum(wins + losses, 1), 0.5), 1.0)
        accepted = (p <= 0.05) & (b.mean(1) > a.mean(1))
    else:
        accepted = np.ones(n, dtype=bool)
    c, d = _means(rng, p0_te, test_trials), _means(rng, p1_te, test_trials)
    (g_tr, v_tr), (g_te, v_te) = _mean_var(b - a), _mean_var(d - c)
    se = np.sqrt(v_tr / t_train + v_te / t_test)
    refused = (g_tr - g_te) - norm.ppf(1 - level) * se > 1e-12
    n_acc = int(accepted.sum())
    return {
        "refuse": float(refused[accepted].mean()) if n_acc else float("nan"),
        "decisions": n_acc,
        "accepted": n_acc / n,
        "train_obs": float(g_tr[accepted].mean()) if n_acc else float("nan"),
        "test_obs": float(g_te[accepted].mean()) if n_acc else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decisions", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--domains", default="airline,retail")
    ap.add_argument("--train-trials", type=int, default=1)
    ap.add_argument("--test-trials", type=int, default=3)
    ap.add_argument("--decide", choices=("sign", "none"), default="sign")
    ap.add_argument("--levels", default=str(HELDOUT_LEVEL))
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    for level in (float(x) for x in args.levels.split(",")):
        for domain in args.domains.split(","):
            t_train, t_test = SPLITS[domain]
            for kind, g_tr, g_te in CASES:
                r = cell(
                    rng,
                    domain,
                    kind,
                    g_tr,
                    g_te,
                    n=args.decisions,
                    train_trials=args.train_trials,
                    test_trials=args.test_trials,
                    decide=args.decide,
                    level=level,
                )
                print(
                    f"heldout world=leaderboard domain={domain} train={t_train} test={t_test} "
                    f"train_gain={g_tr:+.3f} test_gain={g_te:+.3f} refuse={r['refuse']:.3f} "
                    f"decisions={r['decisions']} kind={kind} accepted={r['accepted']:.3f} level={level:g} "
                    f"observed_train={r['train_obs']:+.3f} observed_test={r['test_obs']:+.3f} "
                    f"train_trials={args.train_trials} test_trials={args.test_trials} decide={args.decide}"
                )


if __name__ == "__main__":
    main()
