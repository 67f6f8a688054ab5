"""Trials per minute and peak memory with many trials in flight.

Runs the τ² airline suite through pytest (`--pyargs pytest_ecdysis_tau2.test_airline`) on the simulated model
(not a real LLM) with a fixed delay per completion (`--ecdysis-sim-latency`, default 2 s) and a fixed nonce,
at each level of trials in flight: 1 is `-n 0`, a level L > 1 is `-n 2 --ecdysis-concurrency L/2`. Each
level runs enough trials to fill it (`ceil(L / tasks)` per task, at least `--trials`). Prints per level:
trials, wall-clock of the pytest run (process start to end), trials per minute, peak resident memory of
the whole process tree (pytest, xdist workers, scorer processes; sampled every 0.2 s with psutil), and
the ratio of the wall-clock to the ideal `trials x calls per trial x latency / in flight`, where calls per
trial are the model completions the records show (agent and user-simulator messages, less τ²'s fixed
greeting). Memory is the peak of the summed proportional set size (PSS, /proc/<pid>/smaps_rollup) of the
process tree: the harness's trial processes are forks sharing their server's pages, which a sum of RSS
would count once per fork.

`--round C` instead runs one evolution round (`--ecdysis-evolve --ecdysis-rounds 1`, the sim editor, no
test scoring, a fixed nonce, or a fresh one with `--fresh-nonce`; the default acceptance rule either way,
with its incumbent re-run and looks) with `-n 2 --ecdysis-concurrency C` in a `git clone --local` of this
repository, and prints its wall-clock against the physical limit at that latency: every suite run the round
made at the endpoint's concurrency (2C: each the longer of the longest trial's calls x latency and all its
calls x latency / 2C; the starting run, the validation sub-run, and per look the longer of its candidate
and incumbent sub-runs, which run side by side), plus the round's diagnosis and editor calls x latency
(3K+1 and 1 for ecdysis).

    .venv/bin/python benchmarks/bench_concurrency.py [--tasks 30] [--levels 1,8,32,64] [--latency 2]
    .venv/bin/python benchmarks/bench_concurrency.py --tasks 16 --round 32 [--breakdown] [--fresh-nonce]

`--rev COMMIT` runs the round on that commit (two of these started together compare before and after a
change under the same load). `--breakdown` also prints where each pytest session's time went
(`breakdown_trace.py`: start-up, worker spawn, collection, fork server, trials, scoring, teardown), the
validation sub-run's included, each trial's steps per worker thread (`breakdown_trace.steps`), and CPU
seconds by kind of process.
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


def _descendants(root: psutil.Process) -> list[psutil.Process]:
    """`root`'s descendants now; empty when one vanished while they were listed (the next sample retries)."""
    try:
        return root.children(recursive=True)
    except psutil.Error:
        return []


def tree_pss(root: psutil.Process) -> int:
    """Bytes of proportional set size of `root` and all its descendants (processes that vanish are skipped)."""
    total = 0
    for proc in [root, *_descendants(root)]:
        try:
            with open(f"/proc/{proc.pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
        except (psutil.Error, OSError, StopIteration):
            pass
    return total


#: process kinds of a run's tree, by a part of their command line (first match), for the CPU table
KINDS = (
    ("agent_child", "harness fork servers (+ their trial processes)"),
    ("pytest_ecdysis_tau2.scoring", "scorers (+ their scoring children)"),
    ("sys.stdin.readline", "xdist workers (trials, orchestrator)"),
    ("pytest", "pytest controllers (+ sim server, evolution)"),
)


def tree_cpu(root: psutil.Process, seen: dict[int, tuple[str, float]]) -> None:
    """Record in `seen` each process's CPU seconds so far (user + system), by kind (`KINDS`). A fork server
    or scorer counts its reaped children too (trial processes, scoring children: too short-lived to sample);
    their children are therefore not counted again."""
    for proc in [root, *_descendants(root)]:
        try:
            argv = proc.cmdline()
            if argv and os.path.basename(argv[0]) == "bwrap":
                continue  # the sandbox's launcher: its python child is counted (same command line after `--`)
            line = " ".join(argv)
            kind = next((label for part, label in KINDS if part in line), None)
            if not argv and proc.pid in seen:  # made non-dumpable since (`limits.protect_this_process`): its
                kind = seen[proc.pid][0]  # command line reads empty now; keep what it was
            elif not argv and proc.name().startswith("python"):
                kind = "pytest controllers or xdist workers (command line hidden)"
            if kind is None:
                kind = f"other: {os.path.basename(argv[0]) if argv else '?'}" + (
                    f" {argv[1]}" if len(argv) > 1 and not argv[1].startswith("-") else ""
                )
            parent = proc.parent()
            pline = " ".join(parent.cmdline()) if parent else ""
            if (
                parent is not None
                and os.path.basename((parent.cmdline() or ["?"])[0]) != "bwrap"
                and ("agent_child" in pline or "pytest_ecdysis_tau2.scoring" in pline)
            ):
                continue  # a trial process or scoring child: counted with its parent (reaped children)
            t = proc.cpu_times()
            cpu = (
                t.user
                + t.system
                + (t.children_user + t.children_system if "fork" in kind or "scor" in kind else 0)
            )
            seen[proc.pid] = (kind, max(cpu, seen.get(proc.pid, ("", 0.0))[1]))
        except (psutil.Error, OSError, IndexError):
            pass


def cpu_table(seen: dict[int, tuple[str, float]]) -> str:
    """CPU seconds per kind of process, sampled (a process's last half second before it ends is missed)."""
    by: dict[str, list[float]] = {}
    for kind, cpu in seen.values():
        by.setdefault(kind, []).append(cpu)
    lines = [f"  {kind:50} {len(v):3} process(es) {sum(v):8.1f} CPU s" for kind, v in sorted(by.items())]
    total = sum(cpu for _, cpu in seen.values())
    return "\n".join(
        [
            "CPU seconds by kind of process (sampled every 0.5 s):",
            *lines,
            f"  {'total':50} {'':16}{total:8.1f} CPU s",
        ]
    )


def calls_of(rows: list[dict]) -> tuple[int, int]:
    """(all model completions, the most of one trial): agent and user messages less τ²'s fixed greeting."""
    per = [sum(m["role"] in ("assistant", "user") for m in r["messages"]) - 1 for r in rows]
    return sum(per), max(per, default=0)


def measured(
    command: list[str], cwd: Path, trace: Path | None = None
) -> tuple[psutil.Popen, bytes, float, int]:
    """Run `command`; (process, output, wall seconds, peak PSS bytes of its tree sampled every 0.5 s).
    With `trace`, the run's pytest sessions write their phases there (`breakdown_trace`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ECDYSIS_SIM_URL", "ECDYSIS_RUN_ID")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    if trace is not None:
        command = [*command, "-p", "benchmarks.breakdown_trace"]
        env["ECDYSIS_BENCH_TRACE"] = str(trace)
    started = time.monotonic()
    proc = psutil.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = 0
    done = threading.Event()
    proc.cpu_seen = {}  # pid -> (kind, CPU seconds): `cpu_table`

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_pss(proc))
            tree_cpu(proc, proc.cpu_seen)
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    wall_s = time.monotonic() - started
    done.set()
    sampler.join()
    return proc, out, wall_s, peak


def run_level(
    level: int, tasks: list[str], trials: int, latency: float, workdir: Path, breakdown: bool = False
) -> dict:
    run_dir = workdir / f"runs-{level}"
    xdist = ["-n", "0"] if level == 1 else ["-n", "2", "--ecdysis-concurrency", str(level // 2)]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "pytest_ecdysis_tau2.test_airline",
        "-q",
        "-p",
        "no:cacheprovider",
        "--ecdysis-split",
        "all",
        "--ecdysis-tasks",
        ",".join(tasks),
        "--ecdysis-trials",
        str(trials),
        "--ecdysis-sim-latency",
        str(latency),
        "-o",
        "ecdysis_sim_nonce=bench",
        "--ecdysis-run-dir",
        str(run_dir),
        *xdist,
    ]
    trace = workdir / f"trace-{level}.jsonl" if breakdown else None
    proc, out, wall_s, peak = measured(command, ROOT if breakdown else workdir, trace)
    if trace is not None:
        from breakdown_trace import report, steps

        report(trace)
        steps(trace)
        print(cpu_table(proc.cpu_seen))
    (path,) = run_dir.iterdir()
    rows = [json.loads(line) for line in (path / "trials.jsonl").read_text().splitlines()]
    calls, _ = calls_of(rows)
    ideal_s = calls * latency / level
    return {
        "level": level,
        "trials": len(rows),
        "exit": proc.returncode,
        "wall_s": wall_s,
        "per_min": len(rows) / wall_s * 60,
        "peak_mb": peak / 2**20,
        "calls": calls,
        "ideal_s": ideal_s,
        "ratio": wall_s / ideal_s if ideal_s else float("nan"),
        "tail": out.decode(errors="replace")[-300:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30, help="first N tasks of the airline train split")
    parser.add_argument("--trials", type=int, default=1, help="trials per task at least")
    parser.add_argument("--levels", default="1,8,32,64", help="trials in flight in all (1, or even numbers)")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per simulated completion")
    parser.add_argument(
        "--round",
        type=int,
        default=0,
        metavar="C",
        help="instead: one evolution round at -n 2 --ecdysis-concurrency C",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="also print where each pytest session's time went"
    )
    parser.add_argument("--rev", help="with --round: run this commit of the repository instead of HEAD")
    parser.add_argument(
        "--fresh-nonce",
        action="store_true",
        help="with --round: no fixed simulated-model nonce (a fresh one per run, as a user's run gets)",
    )
    args = parser.parse_args()
    if args.fresh_nonce and not args.round:
        parser.error("--fresh-nonce goes with --round C")
    sys.path.insert(0, str(ROOT))
    from pytest_ecdysis_tau2.tasks.suite import split_ids

    levels = [int(x) for x in args.levels.split(",")]
    if any(level < 1 or (level > 1 and level % 2) for level in levels):
        parser.error(f"--levels must be 1 or even numbers (two workers share a level), got {args.levels}")
    tasks = list(split_ids("airline", "train"))[: args.tasks]
    if args.round:
        return bench_round(args.round, tasks, args.latency, args.breakdown, args.rev, args.fresh_nonce)
    print(
        f"simulated model (not a real LLM), latency {args.latency:g} s per completion; airline train split, "
        f"{len(tasks)} task(s); machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'in flight':>9} {'trials':>6} {'wall s':>8} {'trials/min':>10} {'PSS MB':>8} {'calls':>6} "
        f"{'ideal s':>8} {'x ideal':>7}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp:
        for level in levels:
            trials = max(args.trials, math.ceil(level / len(tasks)))
            r = run_level(level, tasks, trials, args.latency, Path(tmp), args.breakdown)
            print(
                f"{r['level']:>9} {r['trials']:>6} {r['wall_s']:>8.1f} {r['per_min']:>10.1f} {r['peak_mb']:>8.0f} "
                f"{r['calls']:>6} {r['ideal_s']:>8.1f} {r['ratio']:>7.2f}",
                flush=True,
            )
            if r["exit"] not in (0, 1):
                print(f"  pytest exit status {r['exit']}: {r['tail']}")
            print(f"  (load average {os.getloadavg()[0]:.1f} at {time.strftime('%H:%M:%S')})", flush=True)


def bench_round(
    concurrency: int,
    tasks: list[str],
    latency: float,
    breakdown: bool = False,
    rev: str | None = None,
    fresh_nonce: bool = False,
) -> None:
    """One evolution round against its physical limit (module docstring)."""
    in_flight = 2 * concurrency
    print(
        f"one evolution round, simulated model (not a real LLM), latency {latency:g} s; airline train, "
        f"{len(tasks)} task(s); -n 2 --ecdysis-concurrency {concurrency}; "
        f"{'a fresh nonce' if fresh_nonce else 'nonce bench'}; load average {os.getloadavg()[0]:.1f}"
    )
    tmp = tempfile.mkdtemp(prefix="bench-round-")  # kept: the run directories are the evidence
    print(f"clone and run directories under {tmp}", flush=True)
    clone, run_dir = Path(tmp) / "repo", Path(tmp) / "runs"
    subprocess.run(["git", "clone", "--quiet", "--local", str(ROOT), str(clone)], check=True)
    if rev:  # an earlier commit, e.g. to compare before and after a change under the same load
        subprocess.run(["git", "checkout", "--quiet", "-B", "bench-rev", rev], cwd=clone, check=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "pytest_ecdysis_tau2.test_airline",
        "-q",
        "-n",
        "2",
        "--ecdysis-concurrency",
        str(concurrency),
        "--ecdysis-tasks",
        ",".join(tasks),
        "--ecdysis-sim-latency",
        str(latency),
        *(() if fresh_nonce else ("-o", "ecdysis_sim_nonce=bench")),
        "--ecdysis-evolve",
        "--ecdysis-rounds",
        "1",
        "--ecdysis-editor",
        "sim",
        "--ecdysis-test-trials",
        "0",
        "-o",
        "ecdysis_rescore=never",
        "--ecdysis-run-dir",
        str(run_dir),
    ]
    trace = Path(tmp) / "trace.jsonl" if breakdown else None
    proc, out, wall_s, peak = measured(command, clone, trace)
    evo = sorted(run_dir.glob("*/evolution.json"))
    if not evo:
        print(f"no evolution.json (exit {proc.returncode}): {out.decode(errors='replace')[-1500:]}")
        return
    doc = json.loads(evo[-1].read_text())
    top = evo[-1].parent
    # every suite run the round made, by stage: the starting run, each validation sub-run, and each look's
    # candidate and incumbent sub-runs (run side by side: the longer of the two counts)
    stages_runs: list[list[Path]] = [[top]]
    stages_runs += [
        [Path(json.loads(p.read_text())["run_path"])] for p in top.glob("rounds/*/validation.json")
    ]
    for look in sorted(top.glob("rounds/*/looks/*/")):
        stages_runs.append([t.parent for t in sorted(look.glob("**/trials.jsonl"))])
    runs = [path for stage in stages_runs for path in stage]
    suite_limit, suite_calls = 0.0, []
    for stage in stages_runs:
        limits = []
        for path in stage:
            rows = [json.loads(line) for line in (path / "trials.jsonl").read_text().splitlines()]
            calls, longest = calls_of(rows)
            suite_calls.append(calls)
            limits.append(max(longest * latency, calls * latency / in_flight))
        suite_limit += max(limits, default=0.0)
    transcripts = list(evo[-1].parent.glob("rounds/*/transcript.jsonl"))
    diagnosis = sum(len(p.read_text().splitlines()) for p in transcripts)
    editor = sum(r.get("editor_calls", 0) for r in doc.get("rounds", []))
    limit = suite_limit + (diagnosis + editor) * latency
    stages = [{k: r.get(k) for k in ("outcome", "wall_s")} for r in doc.get("rounds", [])]
    print(
        f"exit {proc.returncode}; suite runs {len(runs)} with {suite_calls} model calls; diagnosis calls "
        f"{diagnosis}, editor calls {editor}; rounds {stages}"
    )
    if not stages:
        print(out.decode(errors="replace")[-3000:])
    print(
        f"wall-clock {wall_s:.1f} s (pytest start to end), physical limit {limit:.1f} s "
        f"(suite runs {suite_limit:.1f} s + {diagnosis + editor} calls x {latency:g} s): "
        f"{wall_s / limit:.2f}x the limit (goal 1.3x); peak PSS {peak / 2**20:.0f} MB; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if trace is not None:
        from breakdown_trace import report, steps

        report(trace)
        steps(trace)
    print(cpu_table(proc.cpu_seen))


if __name__ == "__main__":
    main()
