"""Trials per minute and peak memory with many trials in flight (issue 18 item 1's measurement).

Runs the τ² airline suite through pytest (`--pyargs task_suites.tau2.test_airline`) on the simulated model
(not a real LLM) with a fixed delay per completion (`--ecdysis-sim-latency`, default 2 s) and a fixed nonce,
at each level of trials in flight: 1 is `-n 0`, a level L > 1 is `-n 2 --ecdysis-concurrency L/2`. Each
level runs enough trials to fill it (`ceil(L / tasks)` per task, at least `--trials`). Prints per level:
trials, wall-clock of the pytest run (process start to end), trials per minute, peak resident memory of
the whole process tree (pytest, xdist workers, scorer processes; sampled every 0.2 s with psutil), and
the ratio of the wall-clock to the ideal `trials x calls per trial x latency / in flight`, where calls per
trial are the model completions the records show (agent and user-simulator messages).

    .venv/bin/python benchmarks/bench_concurrency.py [--tasks 30] [--levels 1,8,32,64] [--latency 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def tree_rss(root: psutil.Process) -> int:
    """Bytes resident in `root` and all its descendants (processes that vanish are skipped)."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_level(level: int, tasks: list[str], trials: int, latency: float, workdir: Path) -> dict:
    run_dir = workdir / f"runs-{level}"
    xdist = ["-n", "0"] if level == 1 else ["-n", "2", "--ecdysis-concurrency", str(level // 2)]
    command = [sys.executable, "-m", "pytest", "--pyargs", "task_suites.tau2.test_airline", "-q", "-p",
               "no:cacheprovider", "--ecdysis-split", "all", "--ecdysis-tasks", ",".join(tasks),
               "--ecdysis-trials", str(trials), "--ecdysis-sim-latency", str(latency), "--ecdysis-sim-nonce",
               "bench", "--ecdysis-run-dir", str(run_dir), *xdist]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    started = time.monotonic()
    proc = psutil.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    wall_s = time.monotonic() - started
    done.set()
    sampler.join()
    (path,) = run_dir.iterdir()
    rows = [json.loads(line) for line in (path / "trials.jsonl").read_text().splitlines()]
    calls = sum(sum(m["role"] in ("assistant", "user") for m in r["messages"]) for r in rows)
    ideal_s = calls * latency / level
    return {"level": level, "trials": len(rows), "exit": proc.returncode, "wall_s": wall_s,
            "per_min": len(rows) / wall_s * 60, "peak_mb": peak / 2**20, "calls": calls, "ideal_s": ideal_s,
            "ratio": wall_s / ideal_s if ideal_s else float("nan"), "tail": out.decode(errors="replace")[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30, help="first N tasks of the airline train split")
    parser.add_argument("--trials", type=int, default=1, help="trials per task at least")
    parser.add_argument("--levels", default="1,8,32,64", help="trials in flight in all (1, or even numbers)")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per simulated completion")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from task_suites.tau2.suite import split_ids

    levels = [int(x) for x in args.levels.split(",")]
    if any(level < 1 or (level > 1 and level % 2) for level in levels):
        parser.error(f"--levels must be 1 or even numbers (two workers share a level), got {args.levels}")
    tasks = list(split_ids("airline", "train"))[: args.tasks]
    print(f"simulated model (not a real LLM), latency {args.latency:g} s per completion; airline train split, "
          f"{len(tasks)} task(s); machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'in flight':>9} {'trials':>6} {'wall s':>8} {'trials/min':>10} {'peak MB':>8} {'calls':>6} "
          f"{'ideal s':>8} {'x ideal':>7}")
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp:
        for level in levels:
            trials = max(args.trials, math.ceil(level / len(tasks)))
            r = run_level(level, tasks, trials, args.latency, Path(tmp))
            print(f"{r['level']:>9} {r['trials']:>6} {r['wall_s']:>8.1f} {r['per_min']:>10.1f} {r['peak_mb']:>8.0f} "
                  f"{r['calls']:>6} {r['ideal_s']:>8.1f} {r['ratio']:>7.2f}", flush=True)
            if r["exit"] not in (0, 1):
                print(f"  pytest exit status {r['exit']}: {r['tail']}")


if __name__ == "__main__":
    main()
