"""Per-task outcomes of one harness over k trials on the simulated model, in process, with ground truth.

Plays every task of a τ² split `--trials` times (trial 0..k-1) under one fixed run nonce through the
suite's own `run_trial` (real τ² environment, orchestrator and scorer; the harness in this process,
`ECDYSIS_AGENT_PROCESS=0`, which changes no draw), fetches each trial's ground truth from the server
(`pytest_ecdysis.sim.client.fetch_ground_truth`, with the calls τ² executed) and prints one JSON summary:

- `pass_hat`: τ²'s pass^k for k = 1..trials (mean over tasks of C(c, k) / C(n, k), c the trials solved);
- `mixed_share`: the share of tasks solved in some but not all trials (the leaderboard's band, in
  `tau2-leaderboard-trials.md`: airline 0.14-0.60, retail 0.21-0.55, telecom 0.06-0.53 at 4 trials);
- `causes`: the failed trials counted by the ground truth's `cause` and by its origin.

`--paired A B` compares two such files (B minus A per task, with a 95% bootstrap interval over tasks).
`--rule TEXT` adds a rule to the harness's prompt (the forbid-writes rule's cost: run with and without).
`--near-miss` adds the generic near-miss check to a copy of the harness (`near_miss_harness.py`).
`--out FILE` also writes every trial's line (reward, cause, entries). Two runs with the same `--nonce`,
harness and code are identical, so a before/after comparison runs both on the same nonce.

    nice -n 10 python benchmarks/sim_trials.py --domain airline --split train --trials 4 --nonce world-1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from math import comb
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _play(
    domain: str,
    task_ids: list[str],
    trials: int,
    nonce: str,
    harness: str,
    profile: str,
    profile_dir: str | None,
) -> list[dict]:
    """One worker: every (task, trial) of `task_ids`; a line per trial."""
    os.environ["ECDYSIS_AGENT_PROCESS"] = "0"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["ECDYSIS_SIM_NONCE"] = nonce
    if profile_dir:
        os.environ["ECDYSIS_SIM_PROFILES"] = profile_dir
    from pytest_ecdysis.sim.client import fetch_ground_truth
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis.sim.truth.repairs import executed_calls
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    handle = start_background(default_profile=profile)
    lines = []
    try:
        for task_id in task_ids:
            for trial in range(trials):
                spec = TrialSpec(
                    domain=domain,
                    task_id=task_id,
                    trial=trial,
                    run_id="trials",
                    model=f"sim/{profile}",
                    user_model=f"sim/{profile}",
                    harness_dir=Path(harness),
                    harness_id=Path(harness).name,
                    sim_url=handle.url,
                )
                result = run_trial(spec)
                truth = fetch_ground_truth(
                    handle.url, spec.header, executed=executed_calls(result.messages or [])
                )
                lines.append(
                    {
                        "task_id": task_id,
                        "trial": trial,
                        "reward": result.reward,
                        "termination": result.termination_reason,
                        "cause": truth.get("cause"),
                        "entries": [
                            {k: q.get(k) for k in ("kind", "origin", "cured", "effect", "by", "arg", "wrong")}
                            for q in truth.get("quirks", [])
                        ],
                    }
                )
    finally:
        handle.stop()
    return lines


def _with_rule(harness: Path, rule: str) -> str:
    """A temporary copy of `harness` whose `prompts.RULES` ends with `- <rule>` (the example's layout)."""
    import shutil
    import tempfile

    target = Path(tempfile.mkdtemp(prefix="ecdysis-rule-")) / harness.name
    shutil.copytree(harness, target, ignore=shutil.ignore_patterns("__pycache__"))
    with (target / "prompts.py").open("a") as f:
        f.write(f"\nRULES += {chr(10) + '- ' + rule!r}\n")
    return str(target)


def summarise(lines: list[dict], trials: int) -> dict:
    """pass^1..k, the mixed share and the failed trials by cause and origin."""
    from pytest_ecdysis.sim.profiles import GROUND_TRUTH_ORIGINS

    solved: dict[str, int] = Counter()
    tasks = sorted({ln["task_id"] for ln in lines}, key=lambda t: (len(t), t))
    for ln in lines:
        solved[ln["task_id"]] += int((ln["reward"] or 0.0) >= 1.0)
    pass_hat = {
        k: round(sum(comb(solved[t], k) / comb(trials, k) for t in tasks) / len(tasks), 4)
        for k in range(1, trials + 1)
    }
    mixed = sum(1 for t in tasks if 0 < solved[t] < trials)
    failed = [ln for ln in lines if (ln["reward"] or 0.0) < 1.0]
    kinds = [(ln["cause"] or {}).get("kind", "none") for ln in failed]
    causes = Counter(kinds)
    origins = Counter(GROUND_TRUTH_ORIGINS.get(k, "none") for k in kinds)
    return {
        "tasks": len(tasks),
        "trials": trials,
        "pass_hat": pass_hat,
        "mixed_share": round(mixed / len(tasks), 4),
        "always": sum(1 for t in tasks if solved[t] == trials),
        "never": sum(1 for t in tasks if solved[t] == 0),
        "failed_trials": len(failed),
        "causes": dict(causes.most_common()),
        "origins": dict(origins),
        "load": [round(x, 1) for x in os.getloadavg()],
    }


def paired(a_path: Path, b_path: Path, resamples: int = 10_000, seed: int = 0) -> dict:
    """B minus A on the same tasks (two `--out` files of the same nonce and split): the mean per-task
    difference in solved share and its 95% percentile bootstrap interval over tasks (`resamples` draws
    with `seed`), and the trials A failed that B passed, by A's cause."""
    import random

    def load(path: Path) -> dict[tuple[str, int], dict]:
        return {(d["task_id"], d["trial"]): d for d in map(json.loads, path.read_text().splitlines())}

    a, b = load(a_path), load(b_path)
    keys = sorted(set(a) & set(b))
    tasks = sorted({t for t, _ in keys})
    diff = []
    for task in tasks:
        ks = [k for k in keys if k[0] == task]
        diff.append(sum(((b[k]["reward"] or 0) >= 1) - ((a[k]["reward"] or 0) >= 1) for k in ks) / len(ks))
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(diff) for _ in diff) / len(diff) for _ in range(resamples))
    cured = Counter(
        (a[k]["cause"] or {}).get("kind", "none")
        for k in keys
        if (a[k]["reward"] or 0) < 1 and (b[k]["reward"] or 0) >= 1
    )
    broken = Counter(
        (b[k]["cause"] or {}).get("kind", "none")
        for k in keys
        if (a[k]["reward"] or 0) >= 1 and (b[k]["reward"] or 0) < 1
    )
    return {
        "tasks": len(tasks),
        "trials": len(keys),
        "difference": round(sum(diff) / len(diff), 4),
        "interval_95": [round(means[int(0.025 * resamples)], 4), round(means[int(0.975 * resamples) - 1], 4)],
        "a_failed_b_passed_by_a_cause": dict(cured),
        "a_passed_b_failed_by_b_cause": dict(broken),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="airline")
    parser.add_argument("--split", default="train")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=0, help="the first N tasks of the split (0: all)")
    parser.add_argument("--nonce", default="world-1")
    parser.add_argument("--profile", default="default")
    parser.add_argument(
        "--harness",
        default=str(ROOT / "pytest_ecdysis_tau2" / "example_harness"),
        help="harness directory (default: the example harness)",
    )
    parser.add_argument(
        "--rule",
        default="",
        help="add this rule to the harness's prompt (a temporary copy whose prompts.py appends it to RULES)",
    )
    parser.add_argument(
        "--near-miss",
        action="store_true",
        help="add the generic near-miss check to a temporary copy of the harness (benchmarks/near_miss_harness.py)",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, help="also write every trial's line (JSON lines) here")
    parser.add_argument(
        "--paired",
        nargs=2,
        type=Path,
        metavar=("A", "B"),
        help="no run: compare two --out files of the same nonce (B minus A, with a bootstrap interval)",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.paired:
        print(json.dumps(paired(*args.paired)))
        return 0
    from pytest_ecdysis_tau2.tasks import suite

    harness = args.harness
    if args.near_miss:
        from near_miss_harness import build

        harness = str(build(base=Path(harness)))
    if args.rule:
        harness = _with_rule(Path(harness), args.rule)
    task_ids = suite.select_task_ids(args.domain, args.split, None)
    task_ids = task_ids[: args.tasks] if args.tasks else task_ids
    chunks = [task_ids[i :: args.jobs] for i in range(args.jobs) if task_ids[i :: args.jobs]]
    with ProcessPoolExecutor(len(chunks)) as pool:
        futures = [
            pool.submit(
                _play,
                args.domain,
                c,
                args.trials,
                args.nonce,
                harness,
                args.profile,
                os.environ.get("ECDYSIS_SIM_PROFILES"),
            )
            for c in chunks
        ]
        lines = [ln for f in futures for ln in f.result()]
    if args.out:
        args.out.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    summary = {
        "domain": args.domain,
        "split": args.split,
        "nonce": args.nonce,
        "profile": args.profile,
        "harness": Path(harness).name,
        **summarise(lines, args.trials),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
