"""Direct vs the example harness (and any other harness directory) on τ² test splits, in process.

    python benchmarks/bench_harness_gap.py [--domains airline,retail] [--split test] [--trials 3]
        [--profile default] [--nonce gap] [--harness DIR ...] [--jobs 2] [--json out.json]

Each harness plays every task of the split `--trials` times through the suite's own `run_trial` (real τ²
environment, orchestrator and scorer; the harness in this process, `ECDYSIS_AGENT_PROCESS=0`, which changes
no draw) against one in-process simulated server; the run id, and so the nonce of the noisy draws, is
`--nonce` for every harness (a paired comparison: the same draws where the harnesses send the same
requests). Printed per harness and domain: the score (share of trials with reward 1), pass^k, and the
failures' causes from the ground truth; then the gap example - Direct per domain. Figures are the
simulated model's (not a real LLM's). Published: Direct 38.17% vs a human-configured harness 51.67%
(Ecdysis paper), 13.5 points.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _play(
    harness: str, domain: str, task_ids: list[str], trials: int, profile: str, nonce: str
) -> list[dict]:
    """One row per trial: task, trial, reward, ground-truth cause (one worker process)."""
    os.environ["ECDYSIS_AGENT_PROCESS"] = "0"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ.pop("ECDYSIS_SIM_NONCE", None)
    from pytest_ecdysis.sim.client import fetch_ground_truth
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    handle = start_background(default_profile=profile)
    harness_dir = Path(harness) if Path(harness).is_absolute() else ROOT / harness
    rows = []
    try:
        for task_id in task_ids:
            for trial in range(trials):
                spec = TrialSpec(
                    domain=domain,
                    task_id=task_id,
                    trial=trial,
                    run_id=nonce,
                    model=f"sim/{profile}",
                    user_model=f"sim/{profile}",
                    harness_dir=harness_dir,
                    harness_id=harness_dir.name,
                    sim_url=handle.url,
                )
                result = run_trial(spec)
                truth = fetch_ground_truth(handle.url, spec.header, token=handle.token)
                rows.append(
                    {
                        "task": task_id,
                        "trial": trial,
                        "reward": float(result.reward or 0.0),
                        "cause": (truth.get("cause") or {}).get("kind")
                        if isinstance(truth.get("cause"), dict)
                        else truth.get("cause"),
                        "cured": sorted({q["kind"] for q in truth.get("quirks", []) if q.get("cured")}),
                    }
                )
    finally:
        handle.stop()
    return rows


def measure(
    harness: str,
    domain: str,
    split: str,
    trials: int,
    profile: str,
    nonce: str,
    jobs: int,
    n_tasks: int | None = None,
) -> dict:
    from pytest_ecdysis_tau2.tasks import suite

    task_ids = suite.select_task_ids(domain, split, None)[:n_tasks]
    chunks = [task_ids[i::jobs] for i in range(jobs) if task_ids[i::jobs]]
    start = time.monotonic()
    with ProcessPoolExecutor(len(chunks)) as pool:
        parts = [
            f.result()
            for f in [pool.submit(_play, harness, domain, c, trials, profile, nonce) for c in chunks]
        ]
    rows = [r for part in parts for r in part]
    solved = [r for r in rows if r["reward"] >= 1.0]
    by_task = collections.defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r["reward"] >= 1.0)
    causes = collections.Counter(str(r["cause"]) for r in rows if r["reward"] < 1.0)
    cured = collections.Counter(k for r in rows for k in r["cured"])
    return {
        "harness": harness,
        "domain": domain,
        "split": split,
        "trials": trials,
        "profile": profile,
        "nonce": nonce,
        "score": round(len(solved) / len(rows), 4),
        "pass_k": round(sum(all(v) for v in by_task.values()) / len(by_task), 4),
        "failure_causes": dict(causes.most_common()),
        "cured_kinds": dict(cured.most_common()),
        "seconds": round(time.monotonic() - start, 1),
        "load": os.getloadavg(),
        "per_task": {t: sum(v) for t, v in by_task.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", default="airline,retail")
    parser.add_argument("--split", default="test")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--nonce", default="gap")
    parser.add_argument(
        "--harness",
        action="append",
        default=None,
        help="harness directory (repeatable; default: Direct and example_harness)",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=None, help="only the first N tasks of the split")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    harnesses = args.harness or ["pytest_ecdysis_tau2/harnesses/direct", "example_harness"]
    out = []
    for domain in args.domains.split(","):
        for harness in harnesses:
            row = measure(
                harness, domain, args.split, args.trials, args.profile, args.nonce, args.jobs, args.tasks
            )
            out.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "per_task"}), flush=True)
        scores = {r["harness"]: r["score"] for r in out if r["domain"] == domain}
        if len(scores) >= 2:
            first, *rest = harnesses
            for other in rest:
                print(f"{domain}: {other} - {first} = {scores[other] - scores[first]:+.3f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
