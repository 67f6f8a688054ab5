"""`bench_decisions.py --world leaderboard`: every acceptance rule and the gate on real τ² noise.

World (`leaderboard_world.py`): per decision one leaderboard submission of the domain and per-task rates from
its histogram (Beta(c + 0.5, 4.5 - c) given c of 4), the train split's task count (airline 30, retail 74,
telecom 74); the candidate's rates after a mean gain of 0, +3, +5, +10 or +15 points, `spread` or
`concentrated`. Rules: `adaptive` (the new default, `pytest_ecdysis/gate/adaptive.py`, at its default
budget) and the shipped ones (`leaderboard_world.old_rule`). One line per cell:

    decision world=leaderboard domain=airline tasks=30 effect=spread gain=+0.05 rule=adaptive default=yes
        accept=0.812 reject=0.041 inconclusive=0.147 trials=512.3

The gate (`pytest_ecdysis/gate/noninferiority.py`, margin 5 points): per decision a committed baseline of
the harness, the trials per task and side planned from a 4-trial pilot of the baseline (`plan_trials`:
an unchanged harness passes with >= 95%), then baseline and run at that many trials; the run unchanged
(drop 0) or 10 points worse (every task's success shrunk in proportion). `gate=sign` is the shipped gate
(one trial a side, sign test at 0.05 fails the run). One line per cell:

    gate world=leaderboard domain=airline tasks=30 drop=-0.10 gate=noninferiority default=yes margin=0.05
        fail=0.91 undecided=0.30 trials=17.0 catches=0.041 shows=0.143

(`fail` counts `undecided` too; `trials` are per task and side; `catches`/`shows`: the mean of
`smallest_drop`, the drop failed / shown beyond the margin with 80% power at the planned trials.)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from leaderboard_world import (
    ACCEPT,
    EFFECTS,
    REJECT,
    TRAIN_TASKS,
    candidate_rates,
    draw_rates,
    old_rule,
    regression_rates,
)

from pytest_ecdysis.gate import adaptive, noninferiority

DEFAULT_RULE = "adaptive"
LEADERBOARD_RULES = (
    DEFAULT_RULE,
    "strict",
    "paired/sign",
    "paired/wilcoxon",
    "paired/sign+extra",
    "sequential",
)
GAINS = (0.0, 0.03, 0.05, 0.10, 0.15)
RATES = Path(__file__).resolve().parents[1] / "pytest_ecdysis" / "gate" / "leaderboard_rates.json"


def decisions(
    rule: str, rng: np.random.Generator, p0: np.ndarray, p1: np.ndarray, looks: int
) -> tuple[np.ndarray, np.ndarray]:
    if rule == DEFAULT_RULE:
        return adaptive.simulate(p0, p1, rng, adaptive.default_budget(p0.shape[1]))
    return old_rule(rule, rng, p0, p1, looks=looks)


def gate_cells(rng: np.random.Generator, domain: str, n: int, drop: float) -> list[dict]:
    n_tasks = TRAIN_TASKS[domain]
    p0 = draw_rates(rng, domain, n, n_tasks)
    p_run = regression_rates(p0, drop)
    rows = []
    fails = undecided = 0
    ks, catches, shows = [], [], []
    for d in range(n):
        pilot = rng.random((n_tasks, 4)) < p0[d][:, None]
        est = noninferiority.pilot_rates({str(t): pilot[t].tolist() for t in range(n_tasks)})
        k = noninferiority.plan_trials(est)
        c, s = noninferiority.smallest_drop(est, k)
        base = rng.random((n_tasks, k)) < p0[d][:, None]
        run = rng.random((n_tasks, k)) < p_run[d][:, None]
        v = noninferiority.noninferiority(
            {str(t): base[t].tolist() for t in range(n_tasks)},
            {str(t): run[t].tolist() for t in range(n_tasks)},
        )
        fails += not v.passed
        undecided += v.state == "undecided"
        ks.append(k)
        catches.append(c)
        shows.append(s)
    rows.append(
        {
            "gate": "noninferiority",
            "default": True,
            "fail": fails / n,
            "undecided": undecided / n,
            "trials": float(np.mean(ks)),
            "catches": float(np.mean(catches)),
            "shows": float(np.mean(shows)),
        }
    )
    a = (rng.random(p0.shape) < p_run).astype(int)  # the shipped gate: one trial a side, sign test
    b = (rng.random(p0.shape) < p0).astype(int)
    from leaderboard_world import _sign_p

    sign_fail = (_sign_p((b > a).sum(1), (a > b).sum(1)) <= 0.05) & ((a - b).sum(1) < 0)
    rows.append(
        {
            "gate": "sign",
            "default": False,
            "fail": float(sign_fail.mean()),
            "undecided": 0.0,
            "trials": 1.0,
            "catches": None,
            "shows": None,
        }
    )
    return rows


def leaderboard_main(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    rules = args.rules.split(",") if args.rules else list(LEADERBOARD_RULES)
    domains = args.domains.split(",") if args.domains else list(TRAIN_TASKS)
    for r in rules:
        if r not in LEADERBOARD_RULES:
            ap.error(f"unknown rule {r!r}; choose from {', '.join(LEADERBOARD_RULES)}")
    for d in domains:
        if d not in TRAIN_TASKS:
            ap.error(f"unknown domain {d!r}; choose from {', '.join(TRAIN_TASKS)}")
    n = args.decisions or 200
    started = time.monotonic()
    rows: list[dict] = []
    for domain in domains:
        n_tasks = TRAIN_TASKS[domain]
        for effect in EFFECTS:
            for gain in GAINS:
                for rule in rules:
                    rng = np.random.default_rng(
                        [
                            args.seed,
                            domains.index(domain),
                            EFFECTS.index(effect),
                            int(round(gain * 100)),
                            LEADERBOARD_RULES.index(rule),
                        ]
                    )
                    p0 = draw_rates(rng, domain, n, n_tasks)
                    p1 = candidate_rates(rng, p0, gain, effect)
                    state, spent = decisions(rule, rng, p0, p1, args.looks)
                    row = {
                        "domain": domain,
                        "tasks": n_tasks,
                        "effect": effect,
                        "gain": gain,
                        "rule": rule,
                        "default": rule == DEFAULT_RULE,
                        "accept": float((state == ACCEPT).mean()),
                        "reject": float((state == REJECT).mean()),
                        "inconclusive": float(((state != ACCEPT) & (state != REJECT)).mean()),
                        "trials": float(spent.mean()),
                        "decisions": n,
                    }
                    rows.append(row)
                    print(
                        f"decision world=leaderboard domain={domain} tasks={n_tasks} effect={effect} "
                        f"gain={gain:+.2f} rule={rule} default={'yes' if row['default'] else 'no'} "
                        f"accept={row['accept']:.3f} reject={row['reject']:.3f} "
                        f"inconclusive={row['inconclusive']:.3f} trials={row['trials']:.1f}",
                        flush=True,
                    )
    gates: list[dict] = []
    for domain in domains:
        for drop in (0.0, 0.10):
            rng = np.random.default_rng([args.seed, 99, domains.index(domain), int(round(drop * 100))])
            for g in gate_cells(rng, domain, n, drop):
                g.update(domain=domain, tasks=TRAIN_TASKS[domain], drop=-drop, decisions=n)
                gates.append(g)
                extra = (
                    f" catches={g['catches']:.3f} shows={g['shows']:.3f}" if g["catches"] is not None else ""
                )
                print(
                    f"gate world=leaderboard domain={domain} tasks={g['tasks']} drop={-drop:+.2f} "
                    f"gate={g['gate']} default={'yes' if g['default'] else 'no'} "
                    f"margin={noninferiority.DEFAULT_MARGIN:.2f} fail={g['fail']:.3f} "
                    f"undecided={g['undecided']:.3f} trials={g['trials']:.1f}{extra}",
                    flush=True,
                )
    wall = time.monotonic() - started
    print(f"wall {wall:.0f} s, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "leaderboard.json").write_text(
        json.dumps({"rows": rows, "gate": gates, "wall_s": wall, "seed": args.seed}, indent=1)
    )
    if args.write_rates:
        out = {
            "source": f"benchmarks/bench_decisions.py --world leaderboard --decisions {n} --seed {args.seed} "
            "(docs/benchmarks.md): τ² leaderboard noise, train splits, gains spread / concentrated",
            "default": DEFAULT_RULE,
            "budget": {d: adaptive.default_budget(t) for d, t in TRAIN_TASKS.items()},
            "rows": [r for r in rows if r["rule"] in rules],
            "gate": gates,
        }
        head = json.dumps({k: v for k, v in out.items() if k not in ("rows", "gate")}, indent=1)[:-2]
        body = ",\n".join(
            f' "{k}": [\n' + ",\n".join("  " + json.dumps(r) for r in out[k]) + "\n ]"
            for k in ("rows", "gate")
        )
        RATES.write_text(f"{head},\n{body}\n}}\n")  # one row a line
        print(f"wrote {RATES}")
    return 0
