"""Benchmark: size and render time of the HTML page of a run (a 3-round airline run).

    python benchmarks/bench_report.py RUN_DIR            # an existing run directory
    python benchmarks/bench_report.py --evolve [--rounds 3] [--test-trials 1]
        # first runs the main job's evolution (airline train split, simulated model) in a temporary clone
        # of this checkout, then measures its page; takes as long as the run (about 20-30 min on 2 cores)

Prints the page size (bytes and KiB), its gzip size, the render time (best of 3) and what the page holds
(rounds, failure groups, records shown). The page is written next to nothing: a temporary file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_ecdysis.report import html as html_report
from pytest_ecdysis.report import html_view

ROOT = Path(__file__).resolve().parents[1]


def evolve(rounds: int, test_trials: int) -> Path:
    """A fresh evolution run of the main job in a temporary clone; returns its run directory."""
    clone = Path(tempfile.mkdtemp(prefix="ecdysis-bench-report-")) / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for key, value in (("user.email", "bench@example.com"), ("user.name", "bench")):
        subprocess.run(["git", "config", key, value], cwd=clone, check=True)
    env = {**os.environ, "ECDYSIS_RUN_ID": "bench-report", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("ECDYSIS_SIM_URL", None)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "pytest_ecdysis_tau2/test_airline.py",
            "-n",
            "2",
            "-q",
            "-p",
            "no:cacheprovider",
            "--ecdysis-evolve",
            "--ecdysis-rounds",
            str(rounds),
            "--ecdysis-test-trials",
            str(test_trials),
        ],
        cwd=clone,
        env=env,
        check=False,
    )
    return clone / ".ecdysis" / "runs" / "bench-report"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, nargs="?")
    parser.add_argument("--evolve", action="store_true", help="make a fresh airline evolution run first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--test-trials", type=int, default=1)
    args = parser.parse_args()
    if args.evolve == bool(args.run_dir):
        parser.error("pass either RUN_DIR or --evolve")
    run = evolve(args.rounds, args.test_trials) if args.evolve else args.run_dir
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        page = html_report.render(run)
        times.append(time.perf_counter() - t0)
    view = html_view.gather(run)
    size = len(page.encode("utf-8"))
    evo = view["evolution"] or {}
    shown = sum(len(g["shown"]) for g in view["groups"])
    print(f"run: {run}")
    print(
        f"rounds: {len(evo.get('rounds', []))}  failure groups: {len(view['groups'])}  records shown: {shown}  "
        f"missing notes: {len(view['missing'])}"
    )
    print(
        f"page size: {size} bytes ({size / 1024:.1f} KiB), gzip {len(gzip.compress(page.encode())) / 1024:.1f} KiB"
    )
    print(f"render time: {min(times) * 1000:.0f} ms (best of 3)")
    evo_file = run / "evolution.json"
    if evo_file.is_file():
        doc = json.loads(evo_file.read_text())
        print(
            "scores per round: start "
            + f"{doc['start']['score']:.3f}; "
            + "; ".join(
                f"round {r['round']} {r['outcome']} {r.get('score_after')}" for r in doc.get("rounds", [])
            )
        )
    if args.evolve:
        shutil.rmtree(run.parents[2].parent, ignore_errors=True)


if __name__ == "__main__":
    main()
