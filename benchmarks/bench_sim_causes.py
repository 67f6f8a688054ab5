"""Causes by replay against the recorded rule, on τ² with the simulated model.

    nice -n 10 python benchmarks/bench_sim_causes.py [--profile default] [--domain airline]
        [--split train] [--tasks 15] [--trials 1] [--nonce causes] [--harness example_harness]

In one process: a simulated server, the first `--tasks` tasks of the split at `--trials` trials with the
harness (the suite's own `run_trial`: real τ² environment, orchestrator and scorer; the harness in this
process, `ECDYSIS_AGENT_PROCESS=0`). Every failed trial is then replayed (`pytest_ecdysis.sim.truth.replay`):
once with nothing off (it must fail again), once per quirk kind that fired with that kind switched off.
Printed: per failed trial the rule's cause (`sim/truth/causes.py`, what every run records) and the replay's;
how often they agree; the replays run per failed trial and their wall time against the run's, which is
what doing it in every run would cost; the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default="default")
    parser.add_argument("--domain", default="airline")
    parser.add_argument("--split", default="train")
    parser.add_argument("--tasks", type=int, default=15, help="the first N tasks of the split")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--nonce", default="causes", help="the run's nonce (its run id)")
    parser.add_argument("--harness", default="example_harness")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ["ECDYSIS_AGENT_PROCESS"] = "0"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ.pop("ECDYSIS_SIM_NONCE", None)
    from pytest_ecdysis.sim.client import fetch_ground_truth
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis.sim.truth.replay import replay_cause
    from pytest_ecdysis_tau2.tasks import suite
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    handle = start_background(default_profile=args.profile)
    model = f"sim/{args.profile}"

    def trial(run_id: str, task_id: str, k: int):
        spec = TrialSpec(
            domain=args.domain,
            task_id=task_id,
            trial=k,
            run_id=run_id,
            model=model,
            user_model=model,
            harness_dir=ROOT / args.harness,
            harness_id=args.harness,
            sim_url=handle.url,
        )
        return spec, run_trial(spec)

    rows, n_replays = [], 0
    try:
        started = time.monotonic()
        failed = []
        for task_id in suite.select_task_ids(args.domain, args.split, None)[: args.tasks]:
            for k in range(args.trials):
                spec, result = trial(args.nonce, task_id, k)
                if (result.reward or 0.0) < 1.0:
                    failed.append((task_id, k, fetch_ground_truth(handle.url, spec.header)))
        run_s = time.monotonic() - started
        started = time.monotonic()
        for task_id, k, truth in failed:

            def replay(off: frozenset[str], task_id=task_id, k=k, truth=truth) -> float | None:
                nonlocal n_replays
                n_replays += 1
                run_id = f"replay{n_replays}"
                handle.model.replay(run_id, nonce=truth["nonce"], off=off)
                return trial(run_id, task_id, k)[1].reward

            found = replay_cause(truth, replay)
            rule = (truth.get("cause") or {}).get("kind")
            by_replay = (found["cause"] or {}).get("kind")
            rows.append(
                {
                    "task": task_id,
                    "trial": k,
                    "rule": rule,
                    "replay": by_replay,
                    "by": found["by"],
                    "sufficient": found["sufficient"],
                    "replays": found["replays"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        replay_s = time.monotonic() - started
    finally:
        handle.stop()
    n_trials = args.tasks * args.trials
    summary = {
        "profile": args.profile,
        "domain": args.domain,
        "split": args.split,
        "trials": n_trials,
        "failed": len(rows),
        "agree": sum(r["rule"] == r["replay"] for r in rows),
        "not_reproduced": sum(r["by"] == "not_reproduced" for r in rows),
        "replays": n_replays,
        "run_s": round(run_s, 1),
        "replay_s": round(replay_s, 1),
        "replay_cost_vs_run": round(replay_s / run_s, 2) if run_s else None,
        "load": os.getloadavg(),
    }
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
