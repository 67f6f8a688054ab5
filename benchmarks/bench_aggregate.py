"""Benchmark: aggregate and group 10,000 synthetic trial records.

Measures what `session.finish` does with the results of a large run, without pytest: validating the
TrialResult JSON the reports carry, suite score / pass^k / per-task counts, failure records, pattern
groups, and writing the run directory's files. Targets: under 2 s and under 300 MB peak.

    python benchmarks/bench_aggregate.py [--trials 10000] [--seed 0]

Peak memory is the process's maximum resident set size (ru_maxrss, includes the interpreter and imports)
and, separately, the peak of Python allocations during the measured section (tracemalloc, run apart so
its overhead does not distort the time).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
import tracemalloc
import zlib
from pathlib import Path

from pytest_ecdysis.core import metrics
from pytest_ecdysis.run import files as run_files

TOOLS = [
    "get_user_details",
    "get_reservation_details",
    "update_reservation_flights",
    "cancel_reservation",
    "book_reservation",
    "get_order_details",
    "modify_pending_order_items",
    "return_delivered_order_items",
]
ERRORS = [
    "Error: reservation {x} not found",
    "Error: invalid payment method",
    "Error: order {x} is not pending",
    "Error: insufficient gift card balance",
    "Expecting value: line 1 column 1 (char 0)",
]
REASONS = ["user_stop", "agent_stop", "max_steps", "too_many_errors"]


def synthetic(n: int, seed: int) -> list[dict]:
    """n trial-result dicts as reports carry them: 2 suites, 5 trials per task, ~45% failures."""
    rng = random.Random(seed)
    out = []
    trials_per_task = 5
    for i in range(n):
        suite = "tau2-airline" if i % 2 else "tau2-retail"
        task, trial = str(i // (2 * trials_per_task)), (i // 2) % trials_per_task
        difficulty = (zlib.crc32(f"{suite}/{task}".encode()) % 100) / 100
        failed = rng.random() < 0.2 + 0.5 * difficulty
        if rng.random() < 0.01:
            out.append(
                {
                    "suite": suite,
                    "task_id": task,
                    "trial": trial,
                    "termination_reason": "infrastructure_error",
                    "error": "HTTP 503",
                }
            )
            continue
        calls = [
            {
                "name": rng.choice(TOOLS),
                "arguments": {"id": f"X{rng.randrange(1000)}"},
                "result": "{}",
                "step": s,
            }
            for s in range(1, rng.randrange(2, 12))
        ]
        if failed and rng.random() < 0.7:
            c = calls[rng.randrange(len(calls))]
            c["error"], c["result"] = True, rng.choice(ERRORS).format(x="ABC")
        msgs = [
            {"role": ("user", "assistant", "tool")[s % 3], "content": "x" * rng.randrange(20, 400)}
            for s in range(rng.randrange(6, 30))
        ]
        out.append(
            {
                "suite": suite,
                "task_id": task,
                "trial": trial,
                "nodeid": f"t.py::test[{suite}-{task}-t{trial}]",
                "reward": 0.0 if failed else 1.0,
                "components": {
                    "db": 0.0 if failed and rng.random() < 0.6 else 1.0,
                    "communicate": 0.0 if failed and rng.random() < 0.5 else 1.0,
                },
                "termination_reason": rng.choice(REASONS) if failed else "user_stop",
                "tool_calls": calls,
                "steps": len(msgs),
                "messages": msgs,
                "tokens": {"prompt": 3000, "completion": 300, "total": 3300},
                "wall_s": 2.0,
            }
        )
    return out


def work(raw: dict[str, dict], out_dir: Path) -> dict:
    problems: list[str] = []
    trials = run_files._parse_trials(raw, problems)
    summary, tri, groups = run_files.aggregate(
        trials, threshold=1.0, trials_per_task=5, model="gpt-4o-mini", prices=metrics.load_prices()
    )
    run_files.write_run_dir(out_dir, summary, trials, tri, groups, [], 1.0)
    return {"summary": summary, "n_records": len(tri.records), "n_groups": len(groups)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    data = synthetic(args.trials, args.seed)
    raw = {d.get("nodeid") or f"t.py::test[{d['suite']}-{d['task_id']}-t{d['trial']}]": d for d in data}
    payload_mb = len(json.dumps(data)) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.perf_counter()
        out = work(raw, Path(tmp) / "run")
        total_s = time.perf_counter() - t0
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        # aggregation + grouping alone (no validation, no files), on the validated trials
        trials = run_files._parse_trials(raw, [])
        t_agg0 = time.perf_counter()
        run_files.aggregate(
            trials, threshold=1.0, trials_per_task=5, model="gpt-4o-mini", prices=metrics.load_prices()
        )
        agg_s = time.perf_counter() - t_agg0
        tracemalloc.start()
        work(raw, Path(tmp) / "run2")
        _, py_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    s = out["summary"]
    print(
        f"trials {args.trials} (payload {payload_mb:.1f} MB of JSON)  tasks {s['n_tasks']}  "
        f"failure records {out['n_records']}  groups {out['n_groups']} ({s['n_cross_task_groups']} cross-task)"
    )
    print(f"validate + aggregate + group + write run dir: {total_s:.2f} s   (target < 2 s)")
    print(f"aggregate + group only:                       {agg_s:.2f} s")
    print(
        f"peak RSS of the process: {rss_after:.0f} MB (before the measured section {rss_before:.0f} MB; "
        f"target < 300 MB)"
    )
    print(f"peak Python allocations in the measured section (tracemalloc): {py_peak / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
