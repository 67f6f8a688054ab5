"""A 50-task airline run against a realistic endpoint, for `--ecdysis-concurrency auto` and fixed 1, 8, 32.

The endpoint is the simulated model with `pytest_ecdysis.sim.realism` on (not a real LLM): each completion
takes a latency drawn from 1-8 s (triangular, mode 2 s) times `--scale`, the rate limit allows `--rpm`
requests and `--tpm` tokens per window of 60 s x scale (past it HTTP 429 with Retry-After and
`x-ratelimit-*` headers), and 1% of calls are HTTP 503. A fresh server per setting (its counts are the
setting's). Fixed N is N trials in flight in all: `-n 2 --ecdysis-concurrency N/2` (N = 1: `-n 0`); `auto`
is `-n 2 --ecdysis-concurrency auto` (one limiter for both workers). Prints one line per setting:

    endpoint-bench concurrency=<auto|N> tasks=<T> wall_s=<s> limit_s=<s> ratio=<wall/limit> r429=<count> lost=<trials lost>

`limit_s`: the wall-clock the rate limit permits at best for the completions the setting was served,
`max(served / rpm, tokens / tpm) x window`; `lost`: trials that ended as infrastructure errors or over
their budget (not the harness's outcome), plus cases that reported no trial.

    python benchmarks/bench_endpoint.py [--quick] [--tasks 50] [--scale 1] [--settings auto,1,8,32]

`--quick`: 12 tasks, latency x 0.1 (under 10 minutes on 2 cores). One untimed one-task session first (the
first session of a checkout pays its bytecode and the page cache).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from suite_session import pytest_command, session_env  # noqa: E402

LOST = ("infrastructure_error", "time_budget_exceeded")


def run_setting(setting: str, task_ids: list[str], scale: float, rpm: int, tpm: int, out: Path) -> str:
    from pytest_ecdysis.sim.realism import Realism
    from pytest_ecdysis.sim.server import start_background

    realism = Realism(latency=(1.0, 8.0), scale=scale, rpm=rpm, tpm=tpm, p503=0.01, seed=7)
    server = start_background(nonce="bench-endpoint", realism=realism)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / f"runs-{setting}"
    if setting == "auto":
        head = ["-n", "2", "--ecdysis-concurrency", "auto"]
    elif int(setting) == 1:
        head = ["-n", "0", "--ecdysis-concurrency", "1"]
    else:
        head = ["-n", "2", "--ecdysis-concurrency", str(max(int(setting) // 2, 1))]
    command = [
        *pytest_command("--pyargs", "pytest_ecdysis_tau2.test_airline"),
        *head,
        "--ecdysis-model",
        "sim",
        "--ecdysis-split",
        "all",
        "--ecdysis-tasks",
        ",".join(task_ids),
        "--ecdysis-sandbox",
        "off",
        "--ecdysis-run-dir",
        str(run_dir),
        "-o",
        "ecdysis_progress=10",
    ]
    env = session_env(
        PYTHONPATH=str(ROOT),
        ECDYSIS_SIM_URL=server.url,
        ECDYSIS_SIM_TOKEN=server.token,
        ECDYSIS_SIM_NONCE="bench-endpoint",
    )
    env.pop("ECDYSIS_LIMITER", None)
    started = time.monotonic()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=out)
    wall = time.monotonic() - started
    server.stop()
    (out / f"log-{setting}.txt").write_text(proc.stdout + proc.stderr)
    stats = realism.stats()
    trials = []
    for path in run_dir.glob("*/trials.jsonl"):
        trials += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lost = sum(1 for t in trials if t.get("termination_reason") in LOST) + max(len(task_ids) - len(trials), 0)
    limit = max(stats["served"] / rpm, stats["tokens"] / tpm if tpm else 0.0) * stats["window_s"]
    return (
        f"endpoint-bench concurrency={setting} tasks={len(task_ids)} wall_s={wall:.1f} limit_s={limit:.1f} "
        f"ratio={wall / limit if limit else float('nan'):.2f} r429={stats['r429']} lost={lost}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 tasks, latency x 0.1")
    parser.add_argument("--tasks", type=int, default=None, help="airline tasks (default 50, quick 12)")
    parser.add_argument("--scale", type=float, default=None, help="time scale (default 1, quick 0.1)")
    parser.add_argument("--rpm", type=int, default=60, help="requests per window (default 60)")
    parser.add_argument("--tpm", type=int, default=100000, help="tokens per window (default 100000)")
    parser.add_argument("--settings", default="auto,1,8,32")
    args = parser.parse_args()
    tasks = args.tasks or (12 if args.quick else 50)
    scale = args.scale or (0.1 if args.quick else 1.0)
    task_ids = [str(i) for i in range(tasks)]
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with tempfile.TemporaryDirectory(prefix="ecdysis-bench-endpoint-") as tmp:
        # untimed: the first session pays the bytecode and the page cache (measured: 13 s more at load 9)
        run_setting("1", task_ids[:1], scale, args.rpm, args.tpm, Path(tmp) / "warm-up")
        for setting in args.settings.split(","):
            print(run_setting(setting.strip(), task_ids, scale, args.rpm, args.tpm, Path(tmp)), flush=True)
        if os.environ.get("BENCH_KEEP"):
            subprocess.run(["cp", "-r", tmp, os.environ["BENCH_KEEP"]], check=False)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
