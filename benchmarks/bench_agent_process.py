"""Per-trial overhead of running the harness's agent in a child process (issue 13 item 2), with and
without the bubblewrap sandbox.

    python benchmarks/bench_agent_process.py [--tasks N] [--repeats R]

The simulated model (a server thread of each measuring process, 127.0.0.1) plays agent and user; the
example harness runs the first N airline train tasks, one trial each, in a fresh process per mode:

- `in-process`: the harness in the trial process (`ECDYSIS_AGENT_PROCESS=0`, the layout before issue 13);
- `child`: the harness in a child process behind the JSON protocol (the default);
- `child+sandbox`: the same child under bubblewrap (`ECDYSIS_SANDBOX=1`; skipped without `bwrap`).

Each mode runs every task once to warm up (the child and the scorer start, imports, database loads),
then R timed passes; the figure is the median over passes of the mean wall-clock per trial, and the
overhead is relative to `in-process`. Target: under 5 %. The first-trial start-up of the child is
printed apart (it is paid once per worker).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MEASURE = """
import json, os, sys, time
from pathlib import Path
from pytest_ecdysis.core.harness import harness_id
from pytest_ecdysis.sim.server import start_background
from task_suites.tau2.runner import TrialSpec, run_trial
from task_suites.tau2.suite import split_ids
server = start_background()
h = Path(sys.argv[1]).resolve()
tasks, repeats = split_ids("airline", "train")[: int(sys.argv[2])], int(sys.argv[3])
def one_pass(run):
    walls, rewards = [], []
    for task_id in tasks:
        spec = TrialSpec(domain="airline", task_id=task_id, trial=0, run_id=f"bench{run}", model="sim",
                         user_model="sim", harness_dir=h, harness_id=harness_id(h), sim_url=server.url)
        t = time.perf_counter()
        r = run_trial(spec)
        walls.append(time.perf_counter() - t)
        rewards.append((r.reward, r.termination_reason))
    return walls, rewards
t = time.perf_counter()
first, _ = one_pass(0)
warm = [one_pass(k + 1) for k in range(repeats)]
print(json.dumps({"first_trial_s": first[0], "warmup_s": time.perf_counter() - t,
                  "per_trial_s": [sum(w) / len(w) for w, _ in warm], "rewards": warm[-1][1]}))
server.stop()
"""


def measure(mode: str, tasks: int, repeats: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECDYSIS_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", ECDYSIS_SIM_NONCE="bench",
               ECDYSIS_AGENT_PROCESS="0" if mode == "in-process" else "1",
               ECDYSIS_SANDBOX="1" if mode == "child+sandbox" else "0")
    out = subprocess.run([sys.executable, "-c", MEASURE, str(REPO / "example_harness"), str(tasks), str(repeats)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    modes = ["in-process", "child"] + (["child+sandbox"] if shutil.which("bwrap") else [])
    results = {m: measure(m, args.tasks, args.repeats) for m in modes}
    base = statistics.median(results["in-process"]["per_trial_s"])
    print(f"{args.tasks} airline train tasks x {args.repeats} timed passes (simulated model), per mode:")
    for mode, r in results.items():
        per = statistics.median(r["per_trial_s"])
        same = r["rewards"] == results["in-process"]["rewards"]
        print(f"  {mode:<14} {per * 1000:8.1f} ms per trial  overhead {100 * (per - base) / base:+6.1f} %  "
              f"first trial {r['first_trial_s']:.2f} s  same rewards as in-process: {same}")
    if "child+sandbox" not in results:
        print("  child+sandbox  skipped: bwrap not installed (apt-get install bubblewrap)")


if __name__ == "__main__":
    main()
