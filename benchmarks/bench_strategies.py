"""Benchmark: evolution strategies side by side (the paper's Table of strategies and wall-clock).

Two modes:

    # diagnosis only, on the failure records of an existing run directory (fast: seconds)
    python benchmarks/bench_strategies.py diagnosis .ecdysis/runs/<run-id> [--evidence failure-aware:5]

    # whole evolution runs, one per strategy, in a temporary clone of this repository (slow: minutes each)
    python benchmarks/bench_strategies.py evolve [--strategies ecdysis,ecdysis-nofdcr,self-evolution]
        [--evidence all,failure-aware:5] [--rounds 3] [--suite pytest_ecdysis_tau2/test_airline.py] [-n 2]

`diagnosis` runs each strategy's diagnosis against the simulated server (started in-process, real HTTP,
the openai client) and prints per strategy: calls, tokens, wall seconds, evidence size, and the knobs of
the spec. `evolve` runs `pytest <suite> --ecdysis-evolve --ecdysis-strategy S` per (strategy, evidence)
in a `git clone --local` of this repository (so no branch is created here, and what runs is the
committed HEAD: `python -m pytest` in the clone imports the clone's `pytest_ecdysis`) and prints, from each
`evolution.json`: rounds accepted, train score before/after, test score of the start and frozen harness,
diagnosis and editor calls, validation sub-runs, tokens and wall-clock (`self-evolution` makes one editor
call and one validation per spec, at most ini `ecdysis_self_evolution_cap` a round, printed in the row). Figures are what the runs
produce with the simulated model; nothing is tuned to match the paper.
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
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = ("ecdysis", "ecdysis-nofdcr", "self-evolution", "harnessfix", "self-harness")


def _evidence_limit(value: str) -> int | None:
    return None if value == "all" else int(value.partition(":")[2])


def bench_diagnosis(run_dir: Path, strategies: list[str], evidence: list[str], passes: int) -> list[dict]:
    from pytest_ecdysis.core.records import FailureRecord, PatternGroup
    from pytest_ecdysis.diagnose.round import diagnose
    from pytest_ecdysis.endpoint.role_client import RoleClient
    from pytest_ecdysis.sim.server import start_background

    records = [
        FailureRecord.model_validate_json(line)
        for line in (run_dir / "failures.jsonl").read_text().splitlines()
        if line.strip()
    ]
    groups = [
        PatternGroup.model_validate(g) for g in json.loads((run_dir / "groups.json").read_text())["groups"]
    ]
    trials = [
        json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines() if line.strip()
    ]
    failed = {t["task_id"] for t in trials if (t.get("reward") or 0) < 1.0}
    solved = sorted({t["task_id"] for t in trials} - failed)
    harness = REPO / "pytest_ecdysis_tau2" / "example_harness"
    server = start_background(knowledge={})
    os.environ["ECDYSIS_SIM_URL"] = server.url
    rows = []
    try:
        for strategy in strategies:
            for ev in evidence:
                cfg = SimpleNamespace(
                    fdcr_passes=passes,
                    evidence_limit=_evidence_limit(ev),
                    diagnosis_model="sim",
                    base_url=None,
                )
                with tempfile.TemporaryDirectory() as tmp:
                    d = diagnose(
                        records=records,
                        groups=groups,
                        harness_dir=harness,
                        history=[],
                        solved_tasks=solved,
                        cfg=cfg,
                        round_dir=Path(tmp),
                        strategy=strategy,
                        client=RoleClient("sim"),
                    )
                specs = d.specs or []
                rows.append(
                    {
                        "strategy": strategy,
                        "evidence": ev,
                        "records": d.n_records,
                        "calls": d.calls,
                        "tokens": d.tokens["total"],
                        "wall_s": round(d.wall_s, 3),
                        "evidence_chars": d.evidence_chars,
                        "specs": len(specs),
                        "knobs": sorted({c.parameters.get("knob", "?") for s in specs for c in s.changes}),
                        "reason": d.reason,
                    }
                )
    finally:
        server.stop()
    return rows


def bench_evolve(
    strategies: list[str], evidence: list[str], rounds: int, suite: str, workers: str, extra: list[str]
) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="ecdysis-bench-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "--quiet", "--local", str(REPO), str(clone)], check=True)
        for strategy in strategies:
            for ev in evidence:
                run_dir = Path(tmp) / "runs" / f"{strategy}-{ev.replace(':', '')}"
                cmd = [
                    sys.executable,
                    "-m",
                    "pytest",
                    suite,
                    "-q",
                    "-n",
                    workers,
                    "--ecdysis-evolve",
                    "--ecdysis-strategy",
                    strategy,
                    "--ecdysis-evidence",
                    ev,
                    "--ecdysis-rounds",
                    str(rounds),
                    "--ecdysis-run-dir",
                    str(run_dir),
                    *extra,
                ]
                env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
                env.pop("ECDYSIS_SIM_URL", None)
                start = time.monotonic()
                proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)
                wall = time.monotonic() - start
                evo = sorted(run_dir.glob("*/evolution.json"))
                if not evo:
                    rows.append(
                        {
                            "strategy": strategy,
                            "evidence": ev,
                            "error": proc.stdout[-800:] + proc.stderr[-800:],
                        }
                    )
                    continue
                doc = json.loads(evo[-1].read_text())
                rdirs = sorted(evo[-1].parent.glob("rounds/*/transcript.jsonl"))
                calls = sum(len(p.read_text().splitlines()) for p in rdirs)
                test = doc.get("test") or {}
                rows.append(
                    {
                        "strategy": strategy,
                        "evidence": ev,
                        "exit": proc.returncode,
                        "wall_s": round(wall, 1),
                        "rounds": len(doc.get("rounds", [])),
                        "accepted": sum(bool(r.get("accepted")) for r in doc.get("rounds", [])),
                        "train_first": (doc.get("rounds") or [{}])[0].get("score_before"),
                        "train_best": max(
                            [r.get("score_after") or 0 for r in doc.get("rounds", []) if r.get("accepted")]
                            or [(doc.get("rounds") or [{}])[0].get("score_before")]
                        ),
                        "test_start": (test.get("start") or {}).get("suite_score")
                        if isinstance(test.get("start"), dict)
                        else test.get("start"),
                        "test_frozen": (test.get("frozen") or {}).get("suite_score")
                        if isinstance(test.get("frozen"), dict)
                        else test.get("frozen"),
                        "diagnosis_calls": calls,
                        "editor_calls": sum(r.get("editor_calls", 0) for r in doc.get("rounds", [])),
                        # validation sub-runs: one per round that produced a candidate, one per step for
                        # instance-level strategies (self-evolution patches its specs one by one)
                        "validations": len(list(evo[-1].parent.glob("rounds/*/validation.json")))
                        + len(list(evo[-1].parent.glob("rounds/*/steps/*/validation.json"))),
                        "tokens": sum((r.get("tokens") or {}).get("total", 0) for r in doc.get("rounds", [])),
                        # self-evolution's cost depends on its cap (ecdysis_self_evolution_cap): print it beside
                        "self_evolution_cap": doc.get("self_evolution_cap")
                        if strategy == "self-evolution"
                        else "",
                        "outcomes": [r.get("outcome") for r in doc.get("rounds", [])],
                    }
                )
    return rows


def _table(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = [" | ".join(keys), " | ".join("---" for _ in keys)]
    lines += [" | ".join(str(r.get(k, "")) for k in keys) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("diagnosis", help="diagnosis only, on an existing run directory")
    d.add_argument("run_dir", type=Path)
    d.add_argument("--passes", type=int, default=2)
    e = sub.add_parser("evolve", help="whole evolution runs in a temporary clone")
    e.add_argument("--rounds", type=int, default=3)
    e.add_argument("--suite", default="pytest_ecdysis_tau2/test_airline.py")
    e.add_argument("-n", dest="workers", default="2")
    e.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    for p in (d, e):
        p.add_argument("--strategies", default="ecdysis,ecdysis-nofdcr,self-evolution")
        p.add_argument("--evidence", default="all", help="comma-separated: all, failure-aware:N")
        p.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    evidence = [x for x in args.evidence.split(",") if x]
    if args.mode == "diagnosis":
        if not (args.run_dir / "failures.jsonl").is_file():
            parser.error(
                f"{args.run_dir} has no failures.jsonl: pass a run directory (.ecdysis/runs/<run-id>)"
            )
        rows = bench_diagnosis(args.run_dir, strategies, evidence, args.passes)
    else:
        rows = bench_evolve(strategies, evidence, args.rounds, args.suite, args.workers, args.extra)
    print(_table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
