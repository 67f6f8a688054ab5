"""Per-trial overhead of running the harness's agent in a child process, and of the
default mode (`--ecdysis-sandbox auto`: the child under bubblewrap) against `off`.

    python benchmarks/bench_agent_process.py [--tasks N] [--repeats R]

The simulated model (a server thread of each measuring process, 127.0.0.1) plays agent and user; the
example harness runs the first N airline train tasks, one trial each, in a fresh process per mode:

- `in-process`: the harness in the trial process (`ECDYSIS_AGENT_PROCESS=0`, the former layout);
- `child`: the harness in a child process behind the JSON protocol, no sandbox (`--ecdysis-sandbox off`);
- `child+sandbox`: the same child under bubblewrap (`ECDYSIS_SANDBOX=1`, the default wherever bwrap
  starts; skipped without `bwrap`).

Each mode runs every task once to warm up (the child and the scorer start, imports, database loads),
then R timed passes; the figure is the median over passes of the mean wall-clock per trial, and the
overhead is relative to `in-process` and, for the sandbox, to `child`. Target: under 5 %. The
first-trial start-up of the child is printed apart (it is paid once per worker). The machine's 1-minute
load average is printed before and after each mode: on a shared machine it swings more than the
boundary costs, so modes run interleaved, one pass each in turn (`--rounds`). `--startup N` also times
N starts of the fork server (to its `ready`, τ² imported) with and without bubblewrap, interleaved: the
sandbox's one cost that is not per trial (once per worker and harness).
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
from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial
from pytest_ecdysis_tau2.tasks.suite import split_ids
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


STARTUP = """
import json, sys, time
from pathlib import Path
from pytest_ecdysis_tau2.harness_process.agent_wire import AgentProcess
walls = []
for _ in range(int(sys.argv[2])):
    server = AgentProcess(Path(sys.argv[1]))
    t = time.perf_counter()
    server.ensure()
    walls.append(time.perf_counter() - t)
    server.close()
print(json.dumps(walls))
"""


def startup(sandboxed: bool, repeats: int) -> list[float]:
    """Seconds from starting the harness's fork server to its `ready` (τ² imported), `repeats` times."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECDYSIS_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", ECDYSIS_SANDBOX="1" if sandboxed else "0")
    out = subprocess.run(
        [sys.executable, "-c", STARTUP, str(REPO / "pytest_ecdysis_tau2" / "example_harness"), str(repeats)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise SystemExit(f"start-up failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(mode: str, tasks: int, repeats: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECDYSIS_")}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        ECDYSIS_SIM_NONCE="bench",
        ECDYSIS_AGENT_PROCESS="0" if mode == "in-process" else "1",
        ECDYSIS_SANDBOX="1" if mode == "child+sandbox" else "0",
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURE,
            str(REPO / "pytest_ecdysis_tau2" / "example_harness"),
            str(tasks),
            str(repeats),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per mode and round")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of all modes, interleaved")
    parser.add_argument(
        "--startup", type=int, default=0, help="also time N starts of the fork server per mode"
    )
    args = parser.parse_args()
    if args.startup:
        modes_on = [False] + ([True] if shutil.which("bwrap") else [])
        times: dict[bool, list[float]] = {m: [] for m in modes_on}
        for _ in range(args.startup):  # interleaved, one start each in turn
            for on in modes_on:
                times[on] += startup(on, 1)
        for on, walls in times.items():
            print(
                f"  fork server start ({'sandbox' if on else 'off'}): median {statistics.median(walls):.2f} s "
                f"of {len(walls)} ({', '.join(f'{w:.2f}' for w in walls)}), load {os.getloadavg()[0]:.1f}"
            )
    modes = ["in-process", "child"] + (["child+sandbox"] if shutil.which("bwrap") else [])
    results: dict[str, dict] = {m: {"per_trial_s": [], "first_trial_s": [], "load": []} for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            load_before = os.getloadavg()[0]
            r = measure(mode, args.tasks, args.repeats)
            results[mode]["per_trial_s"] += r["per_trial_s"]
            results[mode]["first_trial_s"].append(r["first_trial_s"])
            results[mode]["load"] += [load_before, os.getloadavg()[0]]
            results[mode]["rewards"] = r["rewards"]
    median = {m: statistics.median(r["per_trial_s"]) for m, r in results.items()}
    print(
        f"{args.tasks} airline train tasks x {args.repeats} timed passes x {args.rounds} round(s) (simulated "
        f"model), per mode; {os.cpu_count()} cores:"
    )
    for mode, r in results.items():
        per = median[mode]
        same = r["rewards"] == results["in-process"]["rewards"]
        vs_child = (
            f"  vs child {100 * (per - median['child']) / median['child']:+6.1f} %"
            if mode == "child+sandbox"
            else ""
        )
        print(
            f"  {mode:<14} {per * 1000:8.1f} ms per trial (median of {len(r['per_trial_s'])}; passes "
            f"{', '.join(f'{x * 1000:.0f}' for x in r['per_trial_s'])} ms)  overhead "
            f"{100 * (per - median['in-process']) / median['in-process']:+6.1f} %{vs_child}  first trial "
            f"{statistics.median(r['first_trial_s']):.2f} s  load {min(r['load']):.1f}-{max(r['load']):.1f}  "
            f"same rewards as in-process: {same}"
        )
    if "child+sandbox" not in results:
        print("  child+sandbox  skipped: bwrap not installed (apt-get install bubblewrap)")


if __name__ == "__main__":
    main()
