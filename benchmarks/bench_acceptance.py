"""Benchmark: how often each acceptance rule accepts a candidate that changes nothing.

    python benchmarks/bench_acceptance.py sim [--decisions 20] [--chain] [--profile noop] [--tasks 0,1,...] [-n 2]
    python benchmarks/bench_acceptance.py scripted [--decisions 2000]
    python benchmarks/bench_acceptance.py rounds [--train 10 | --tasks 0,1,...] [--rounds 2] [--test-trials 1]

`sim`: 2 x `--decisions` plain runs of τ² airline (train split or the `--tasks` ids of it, 1 trial per
task, `example_harness`) on
the simulated model's no-op profile (`sim/noop`: no harness-curable quirk, run-to-run noise on), each
with its own ini `ecdysis_sim_nonce`, so every run is an independent draw of the same harness. Decision k
compares run 2k (the incumbent) with run 2k+1 (a "candidate" identical to it: a no-op by construction)
through `pytest_ecdysis.gate.acceptance.decide`, exactly as a round does, under `strict` and under `paired`
with each method at level 0.05. Prints each decision and the share accepted per rule; every acceptance
is a false one. Also prints the share over all pairs of runs (more pairs, not independent). `--chain`
halves the cost: `--decisions` + 1 runs, decision k compares run k-1 with run k (each decision has its
own two nonces; neighbouring decisions share a run, so they are not independent).

`rounds`: two evolution runs on the simulated model's default profile started together in a `git clone
--local` of this repository (its committed HEAD), same train tasks (`--tasks`, default the first
`--train` train ids), `--rounds`, test scoring at `--test-trials`: one under `--ecdysis-accept strict`
(response cache off), one under `--ecdysis-accept paired` with ini `ecdysis_response_cache = on` (or off:
`--paired-cache off`, to compare the rules alone). Prints per
round each run's outcome, scores, p-value and validation wall-clock, the paired run's cache hits, misses
and tokens saved, and both runs' test scores (start and frozen). The incumbent is re-scored beside each
candidate in both (ini `ecdysis_rescore = auto`, nonce not fixed).

`scripted`: the same decisions on scripted paired results: 30 tasks whose success chance is drawn per
task (uniform 0.3-1.0), two independent draws per decision; no pytest, seconds.

Figures are the simulated model's (or scripted), not a real model's; nothing here is tuned to a target.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from suite_session import pytest_command, session_env  # noqa: E402

from pytest_ecdysis.gate.acceptance import METHODS, decide  # noqa: E402

SUITE = "pytest_ecdysis_tau2/test_airline.py"
RULES = [("strict", "sign")] + [("paired", m) for m in METHODS]


def run_once(
    run_dir: Path, nonce: str, profile: str, workers: str, tasks: str | None
) -> tuple[float, list[dict], float]:
    """One plain run of the airline train split; returns (suite score, trials.jsonl lines, wall s)."""
    env = session_env()
    cmd = [
        *pytest_command(SUITE),
        "-n",
        workers,
        "--ecdysis-model",
        f"sim/{profile}",
        "-o",
        f"ecdysis_sim_nonce={nonce}",
        "--ecdysis-sim-latency",
        "0",
        "--ecdysis-run-dir",
        str(run_dir),
        *(["--ecdysis-tasks", tasks] if tasks else []),
    ]
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    (path,) = list(run_dir.glob("*/summary.json"))
    trials = [json.loads(x) for x in (path.parent / "trials.jsonl").read_text().splitlines() if x.strip()]
    return json.loads(path.read_text())["suite_score"], trials, wall


def judge(before: tuple[float, list[dict]], after: tuple[float, list[dict]]) -> dict[str, tuple[bool, float]]:
    """{rule label: (accepted, p-value)} for one decision."""
    out = {}
    for rule, method in RULES:
        d = decide(rule, before[0], after[0], before[1], after[1], method=method, level=0.05)
        out[rule if rule == "strict" else f"paired/{method}"] = (
            d.accepted,
            d.test.p_value if d.test else None,
        )
    return out


def report(decisions: list[dict[str, tuple[bool, float]]], title: str) -> None:
    n = len(decisions)
    print(f"\n{title}: {n} decision(s) on no-op candidates (every acceptance is false)")
    for label in decisions[0]:
        k = sum(d[label][0] for d in decisions)
        print(f"  {label:<18} accepted {k:>4} / {n}  = {k / n:.1%}")


def sim(args: argparse.Namespace) -> None:
    runs: list[tuple[float, list[dict]]] = []
    n_runs = args.decisions + 1 if args.chain else 2 * args.decisions
    with tempfile.TemporaryDirectory(prefix="ecdysis-accept-") as tmp:
        for k in range(n_runs):
            nonce = f"{args.nonce_prefix}-{k}"
            score, trials, wall = run_once(Path(tmp) / str(k), nonce, args.profile, args.workers, args.tasks)
            runs.append((score, trials))
            failed = sorted((t["task_id"] for t in trials if (t.get("reward") or 0) < 1), key=str)
            print(
                f"run {k}: nonce {nonce}, suite score {score:.3f}, {len(trials)} trials, failed "
                f"{','.join(map(str, failed)) or '-'}, {wall:.0f} s, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            if k % 2 == 1 or (args.chain and k > 0):
                d = judge(runs[k - 1], runs[k])
                print(
                    f"  decision {k if args.chain else k // 2 + 1}: {runs[k - 1][0]:.3f} -> {score:.3f}: "
                    + ", ".join(
                        f"{lab} {'ACCEPT' if a else 'reject'} (p={p:.3g})" for lab, (a, p) in d.items()
                    ),
                    flush=True,
                )
    if args.chain:  # decision k: run k-1 (incumbent) vs run k; neighbouring decisions share a run
        report(
            [judge(runs[i], runs[i + 1]) for i in range(args.decisions)],
            f"sim/{args.profile}, consecutive pairs of runs (each decision its own two nonces)",
        )
    else:
        report(
            [judge(runs[2 * i], runs[2 * i + 1]) for i in range(args.decisions)],
            f"sim/{args.profile}, disjoint pairs of runs",
        )
    report(
        [judge(runs[i], runs[j]) for i, j in itertools.permutations(range(len(runs)), 2)],
        f"sim/{args.profile}, all ordered pairs of the {len(runs)} runs (not independent)",
    )


def evolve_run(clone: Path, out: Path, rule: str, args: argparse.Namespace, results: dict) -> None:
    """One evolution run in `clone`; `results[rule]` = (evolution.json as a dict or None, wall s, tail)."""
    env = session_env()
    cmd = [
        *pytest_command(SUITE),
        "-n",
        args.workers,
        "--ecdysis-evolve",
        "--ecdysis-model",
        "sim",
        "--ecdysis-rounds",
        str(args.rounds),
        "--ecdysis-tasks",
        args.tasks,
        "--ecdysis-test-trials",
        str(args.test_trials),
        "--ecdysis-run-dir",
        str(out),
        "--ecdysis-accept",
        rule,
        *(["-o", "ecdysis_response_cache=on"] if rule == "paired" and args.paired_cache == "on" else []),
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)
    found = sorted(out.glob("*/evolution.json"))
    doc = json.loads(found[-1].read_text()) if found else None
    results[rule] = (doc, time.monotonic() - start, (proc.stdout[-600:] + proc.stderr[-600:]).strip())


def rounds(args: argparse.Namespace) -> None:
    import threading

    if not args.tasks:
        from pytest_ecdysis_tau2.tasks.suite import split_ids  # the benchmark may import the suite

        args.tasks = ",".join(list(split_ids("airline", "train"))[: args.train])
    with tempfile.TemporaryDirectory(prefix="ecdysis-rounds-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "--quiet", "--local", str(REPO), str(clone)], check=True)
        print(
            f"train tasks {args.tasks}; {args.rounds} round(s); test trials {args.test_trials}; -n {args.workers}; "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        results: dict = {}
        threads = [
            threading.Thread(target=evolve_run, args=(clone, Path(tmp) / rule, rule, args, results))
            for rule in ("strict", "paired")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"load {os.getloadavg()[0]:.1f} at the end", flush=True)
        for rule in ("strict", "paired"):
            doc, wall, tail = results[rule]
            print(f"\n{rule}: {wall:.0f} s" + ("" if doc else f": no evolution.json\n{tail}"))
            if not doc:
                continue
            print(f"  start train score {doc['start']['score']}")
            for r in doc["rounds"]:
                d, val = r.get("decision") or {}, {}
                vpath = Path(doc["run_path"]) / "rounds" / str(r["round"]) / "validation.json"
                if vpath.is_file():
                    val = json.loads(vpath.read_text())
                cache = val.get("cache") or {}
                print(
                    f"  round {r['round']}: {r['outcome']}: {r['score_before']} -> {r['score_after']}, "
                    f"p={d.get('p_value')}, wins/losses {d.get('wins')}/{d.get('losses')}, validation "
                    f"{val.get('wall_s')} s (incumbent re-run {(val.get('incumbent') or {}).get('wall_s')} s), "
                    f"round {r.get('wall_s')} s; {r.get('spec_summary') or r.get('reason', '')[:80]}"
                    + "".join(f"\n    cache {who}: {st}" for who, st in cache.items())
                )
            test = doc.get("test") or {}
            print(
                "  test: "
                + ", ".join(
                    f"{k} {v.get('suite_score')}"
                    for k, v in test.items()
                    if isinstance(v, dict) and "suite_score" in v
                )
            )


def scripted(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    decisions = []
    for _ in range(args.decisions):
        p_task = [rng.uniform(0.3, 1.0) for _ in range(30)]
        runs = []
        for _side in range(2):
            rewards = [float(rng.random() < p) for p in p_task]
            runs.append(
                (
                    sum(rewards) / 30,
                    [{"suite": "s", "task_id": str(i), "reward": r} for i, r in enumerate(rewards)],
                )
            )
        decisions.append(judge(*runs))
    report(decisions, f"scripted, 30 tasks, success chance per task uniform in [0.3, 1], seed {args.seed}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("sim", "scripted", "rounds"))
    parser.add_argument(
        "--chain",
        action="store_true",
        help="sim: decisions+1 runs, decision k = run k-1 vs run k (half the runs; not independent)",
    )
    parser.add_argument(
        "--train", type=int, default=10, help="rounds: the first N train ids (without --tasks)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--paired-cache",
        choices=("on", "off"),
        default="on",
        help="rounds: the paired run's ecdysis_response_cache (the strict run's is off)",
    )
    parser.add_argument("--test-trials", type=int, default=1)
    parser.add_argument("--decisions", type=int, default=20)
    parser.add_argument("--profile", default="noop")
    parser.add_argument("--tasks", default=None, help="sim: only these train task ids (comma-separated)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument(
        "--nonce-prefix",
        default="bench-accept",
        help="sim: run k uses nonce PREFIX-k (another prefix: fresh draws for more decisions)",
    )
    parser.add_argument("-n", dest="workers", default="2")
    args = parser.parse_args(argv)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout
    print(f"bench_acceptance {args.mode} at commit {head.strip()}", flush=True)
    {"sim": sim, "scripted": scripted, "rounds": rounds}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
