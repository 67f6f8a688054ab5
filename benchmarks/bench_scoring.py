"""Scoring speed: time to score one trial with the suite's scorer against τ²'s own path.

    python benchmarks/bench_scoring.py [--tasks N] [--domains airline,retail] [--trials K]

Both paths score the same gold replays (`tests/gold_replay.py`: gold actions with the results a fresh
environment returns, the communicate values stated, the user's stop), in separate fresh processes:

- `tau2`: τ²'s `evaluate_simulation(..., EvaluationType.ALL, solo_mode=False, domain=...)` with its
  default environment construction (the registry's constructor reads the database from disk);
- `ecdysis`: the suite's scorer process as trials use it (`ScorerClient.score` over its JSON-lines
  protocol): τ²'s evaluator in a forked child over environments built once (`cow_scoring`).

Prints per domain the mean seconds per trial of each path (the replays are built before timing), the
speed-up, the same in CPU seconds (τ²'s path: its process; the scorer: its process and its scoring
children; CPU does not move with the machine's load as wall-clock does), and whether every reward and
component is identical. Goal: at least 4x, identical.
With `--trials K > 1` every replay is scored K times in turn (task by task, as k trials of a suite), and
the figures are printed for the first trial of each task and for the later ones apart: the scorer reuses
the gold environment's hashes from a task's first trial (`cow_scoring`). The warm-up scores a task
outside the sample where there is one; with all tasks it is the first task, whose scoring in the sample
then counts as a later trial.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def worker(path: str, domain: str, ids: list[str]) -> None:
    """Score the gold replays of `ids` by `path` (`ids[0]` is the warm-up); print one JSON line
    {"<task_id>#<n>": [reward, components, s]}, n counting the repeats of a task id."""
    from gold_replay import gold_simulation

    from pytest_ecdysis_tau2.scoring import scorer, scorer_client
    from pytest_ecdysis_tau2.tasks import suite
    from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2

    t = load_tau2()
    sims = {i: gold_simulation(domain, i) for i in set(ids)}
    client = scorer_client.ScorerClient()
    if path == "ecdysis":
        client.score(domain, ids[0], json.dumps(sims[ids[0]]))  # warm: start-up and the one-time build
    else:
        t.evaluate_simulation(
            simulation=t.SimulationRun.model_validate(sims[ids[0]]),
            task=suite.get_task(domain, ids[0]),
            evaluation_type=t.EvaluationType.ALL,
            solo_mode=False,
            domain=domain,
        )
    out = {}
    for i in ids[1:]:
        t0 = time.perf_counter()
        c0 = _cpu(client.proc.pid) if path == "ecdysis" else time.process_time()
        if path == "ecdysis":
            r = client.score(domain, i, json.dumps(sims[i]))
            reward, comps = r["reward"], r["components"]
        else:
            info = t.evaluate_simulation(
                simulation=t.SimulationRun.model_validate(sims[i]),
                task=suite.get_task(domain, i),
                evaluation_type=t.EvaluationType.ALL,
                solo_mode=False,
                domain=domain,
            )
            reward = float(info.reward)
            comps = {
                scorer.COMPONENTS[getattr(k, "value", str(k)).upper()]: float(v)
                for k, v in (info.reward_breakdown or {}).items()
                if getattr(k, "value", str(k)).upper() in scorer.COMPONENTS
            }
        wall = time.perf_counter() - t0
        cpu = (_cpu(client.proc.pid) if path == "ecdysis" else time.process_time()) - c0
        n = sum(key.startswith(f"{i}#") for key in out) + (i == ids[0])  # the warm-up was the task's first
        out[f"{i}#{n}"] = [reward, comps, wall, cpu]
    peak = {"self_mb": _peak_mb(os.getpid())}
    if client.proc is not None:
        peak["scorer_mb"] = _peak_mb(client.proc.pid)
    client.close()
    print(json.dumps({"trials": out, "peak": peak}))


def _cpu(pid: int) -> float:
    """CPU seconds of process `pid` and its reaped children (the scoring children) so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _peak_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of process `pid` in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=0, help="tasks per domain (0: all 50 airline + 114 retail)")
    ap.add_argument("--domains", default="airline,retail")
    ap.add_argument("--trials", type=int, default=1, help="times each replay is scored (k trials of a task)")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.worker[2].split(","))
        return
    from pytest_ecdysis_tau2.tasks import suite

    print(f"scoring gold replays, one fresh process per path and domain; load {os.getloadavg()[0]:.1f}")
    for domain in args.domains.split(","):
        every = sorted(suite.all_tasks(domain), key=lambda x: int(x) if x.isdigit() else x)
        ids = every[: args.tasks] if args.tasks else every
        warm = next((i for i in every if i not in ids), ids[0])
        order = [warm, *(i for i in ids for _ in range(args.trials))]
        res, peaks = {}, {}
        for path in ("tau2", "ecdysis"):
            proc = subprocess.run(
                [sys.executable, __file__, "--worker", path, domain, ",".join(order)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=True,
            )
            doc = json.loads(proc.stdout.strip().splitlines()[-1])
            res[path], peaks[path] = doc["trials"], doc["peak"]
        keys = list(res["tau2"])
        same = [k for k in keys if res["tau2"][k][:2] == res["ecdysis"][k][:2]]
        ones = sum(res["ecdysis"][k][0] == 1.0 for k in keys)
        for label, part in (
            ("first trials", [k for k in keys if k.endswith("#0")]),
            ("later trials", [k for k in keys if not k.endswith("#0")]),
        ):
            if not part:
                continue
            mean = {p: sum(r[k][2] for k in part) / len(part) for p, r in res.items()}
            cpu = {p: sum(r[k][3] for k in part) / len(part) for p, r in res.items()}
            print(
                f"{domain:8} {label}: {len(part):3}  tau2 {mean['tau2']:.3f} s/trial  ecdysis {mean['ecdysis']:.3f} "
                f"s/trial  speed-up {mean['tau2'] / mean['ecdysis']:.2f}x;  CPU tau2 {cpu['tau2']:.3f} s  ecdysis "
                f"{cpu['ecdysis']:.3f} s  {cpu['tau2'] / max(cpu['ecdysis'], 1e-9):.2f}x"
            )
        print(f"{'':8} identical rewards+components {len(same)}/{len(keys)}  reward 1.0: {ones}/{len(keys)}")
        print(
            f"{'':8} peak memory: tau2 path {peaks['tau2']['self_mb']:.0f} MB; ecdysis scorer process "
            f"{peaks['ecdysis'].get('scorer_mb', 0):.0f} MB (its worker {peaks['ecdysis']['self_mb']:.0f} MB)"
        )


if __name__ == "__main__":
    main()
