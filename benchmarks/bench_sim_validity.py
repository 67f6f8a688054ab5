"""Benchmark: what evolution buys under the open-world simulated model, and how much of it is valid.

    python benchmarks/bench_sim_validity.py default   # start vs frozen test score, t per strategy
    python benchmarks/bench_sim_validity.py noop      # accepted edits per strategy on the no-op profile

`default`: on τ² airline, the default profile (noise on, the nonce fresh per run and sub-run), each
strategy evolves on the train split (`--rounds`, self-evolution capped by `--cap`) and the loop scores the
start and the frozen harness on the test split (`--test-trials`, 3); Direct is scored on test too. Prints
per strategy: test start and frozen, Direct, accepted edits, systematic fixes / accommodations / noise,
the accommodation ratio t (from `evolution.json`'s `validity`, sim/truth/validity.py), and the cap.

`noop`: the no-op profile (no harness-curable quirk, noise on), `--repeats` evolution runs per strategy,
each with its own run ids and therefore its own nonces; test scoring skipped. Prints per strategy the
accepted edits of every repeat and how many were false acceptances (not a systematic fix of a
harness-made failure, by the ground truth).

Every run is `pytest pytest_ecdysis_tau2/test_airline.py --ecdysis-evolve ...` in a `git clone --local` of
this repository's HEAD, with `--ecdysis-sim-latency 0`. Figures are the simulated model's, not a real
model's; nothing here is tuned to reach a target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from suite_session import pytest_command, session_env

REPO = Path(__file__).resolve().parents[1]
SUITE = "pytest_ecdysis_tau2/test_airline.py"


def pytest_run(clone: Path, run_dir: Path, args: list[str]) -> tuple[int, float, str]:
    """One pytest session in the clone; returns (exit status, wall s, tail of its output)."""
    env = session_env()
    cmd = [
        *pytest_command(SUITE),
        "--ecdysis-run-dir",
        str(run_dir),
        "--ecdysis-sim-latency",
        "0",
        *args,
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)
    return proc.returncode, time.monotonic() - start, (proc.stdout[-1500:] + proc.stderr[-800:])


def evolution(run_dir: Path) -> dict | None:
    docs = sorted(run_dir.glob("*/evolution.json"))
    return json.loads(docs[-1].read_text()) if docs else None


def row_of(strategy: str, label: str, doc: dict | None, wall: float, tail: str) -> dict:
    if doc is None:
        return {"strategy": strategy, "run": label, "error": tail[-600:]}
    test = doc.get("test") or {}
    validity = doc.get("validity") or {}
    accepted = sum(
        sum(bool(s.get("accepted")) for s in r.get("steps") or []) or int(bool(r.get("accepted")))
        for r in doc.get("rounds", [])
    )
    return {
        "strategy": strategy,
        "run": label,
        "run_id": doc.get("run_id"),
        "wall_s": round(wall),
        "load": [round(x, 1) for x in os.getloadavg()],
        "train_start": doc["start"].get("score"),
        "train_final": doc["incumbent"].get("score"),
        "test_start": (test.get("start") or {}).get("suite_score"),
        "test_frozen": (test.get("frozen") or {}).get("suite_score"),
        "accepted_edits": accepted,
        "systematic": validity.get("systematic_fixes"),
        "accommodation": validity.get("accommodations"),
        "noise": validity.get("noise"),
        "t": validity.get("t"),
        "false_acceptances": validity.get("false_acceptances"),
        "cap": doc.get("self_evolution_cap") if strategy == "self-evolution" else "",
        "outcomes": [r.get("outcome") for r in doc.get("rounds", [])],
        "edits": [
            {
                "round": e["round"],
                "step": e["step"],
                "class": e["class"],
                "cured": sorted({f"{c['kind']}@{c['task']}:{c['status']}" for c in e["cures"]}),
            }
            for e in validity.get("edits", [])
        ],
        "held_out_kinds": validity.get("held_out_kinds"),
        "specs": [r.get("spec_summary") for r in doc.get("rounds", [])],
    }


def table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    lines = [" | ".join(keys), " | ".join("---" for _ in keys)]
    return "\n".join(lines + [" | ".join(str(r.get(k, "")) for k in keys) for r in rows])


def summary(rows: list[dict], train: str, test_trials: int) -> str:
    """The issue's figures in one table (`default` mode): per strategy, the train tasks it evolved on,
    test start -> frozen, Direct on test, whether the example harness (the start) scores between Direct
    and 1.0, accepted edits, their classes, t, and the Self-Evolution cap beside it."""
    lines = [
        f"train: {train} x 1 trial; test: the whole test split x {test_trials} trials",
        "strategy | train start -> end | test start -> frozen | frozen - start | Direct (test) | "
        "Direct < example < 1.0 | accepted | systematic/accommodation/noise | t | cap",
        " | ".join("---" for _ in range(10)),
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['strategy']} | error: {r['error'][-200:]!r}")
            continue
        start, frozen, direct = (
            None if x is None else round(x, 3)
            for x in (r["test_start"], r["test_frozen"], r.get("direct_test"))
        )
        delta = f"{frozen - start:+.3f}" if start is not None and frozen is not None else "-"
        between = (
            "-"
            if start is None or direct is None
            else ("yes" if direct < start < 1.0 else f"no ({'equal' if direct == start else 'not between'})")
        )
        train = " -> ".join("-" if x is None else f"{x:.3f}" for x in (r["train_start"], r["train_final"]))
        lines.append(
            " | ".join(
                str(x)
                for x in (
                    r["strategy"],
                    train,
                    f"{start} -> {frozen}",
                    delta,
                    direct,
                    between,
                    r["accepted_edits"],
                    f"{r['systematic']}/{r['accommodation']}/{r['noise']}",
                    "-" if r["t"] is None else r["t"],
                    r["cap"] or "-",
                )
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("default", "noop"))
    parser.add_argument("--strategies", default="ecdysis,self-evolution")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cap", type=int, default=5, help="ecdysis_self_evolution_cap")
    parser.add_argument("--test-trials", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="noop: evolution runs (nonces) per strategy")
    parser.add_argument(
        "--tasks",
        default=None,
        help="evolve on only these train task ids (comma-separated; the test split is always scored whole)",
    )
    parser.add_argument(
        "--direct",
        choices=("yes", "no", "only"),
        default="yes",
        help="default: also (or only) score Direct on the test split",
    )
    parser.add_argument(
        "--direct-score",
        type=float,
        default=None,
        help="with --direct no: Direct's test score from an earlier `--direct only` run (same "
        "commit of the simulated model), shown in the summary",
    )
    parser.add_argument("-n", dest="workers", default="2")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ecdysis-validity-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "--quiet", "--local", str(REPO), str(clone)], check=True)
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True
        ).stdout.strip()
        print(f"bench_sim_validity {args.mode} at commit {head}", flush=True)
        common = [
            "-n",
            args.workers,
            "--ecdysis-rounds",
            str(args.rounds),
            "-o",
            f"ecdysis_self_evolution_cap={args.cap}",
            *(["--ecdysis-tasks", args.tasks] if args.tasks else []),
        ]
        if args.mode == "default":
            direct = args.direct_score
            if args.direct != "no":
                code, wall, tail = pytest_run(
                    clone,
                    Path(tmp) / "direct",
                    [
                        "-n",
                        args.workers,
                        "--ecdysis-harness",
                        "direct",
                        "--ecdysis-split",
                        "test",
                        "--ecdysis-trials",
                        str(args.test_trials),
                        "--ecdysis-model",
                        "sim",
                    ],
                )
                summaries = sorted((Path(tmp) / "direct").glob("*/summary.json"))
                direct = json.loads(summaries[-1].read_text()).get("suite_score") if summaries else None
                print(f"direct (test, {args.test_trials} trials): {direct} ({wall:.0f} s)", flush=True)
            for strategy in strategies if args.direct != "only" else []:
                run_dir = Path(tmp) / strategy
                code, wall, tail = pytest_run(
                    clone,
                    run_dir,
                    [
                        *common,
                        "--ecdysis-evolve",
                        "--ecdysis-strategy",
                        strategy,
                        "--ecdysis-model",
                        "sim",
                        "--ecdysis-test-trials",
                        str(args.test_trials),
                    ],
                )
                row = {**row_of(strategy, "default", evolution(run_dir), wall, tail), "direct_test": direct}
                rows.append(row)
                print(json.dumps(row), flush=True)
        else:
            for k in range(1, args.repeats + 1):
                for strategy in strategies:
                    run_dir = Path(tmp) / f"{strategy}-{k}"
                    code, wall, tail = pytest_run(
                        clone,
                        run_dir,
                        [
                            *common,
                            "--ecdysis-evolve",
                            "--ecdysis-strategy",
                            strategy,
                            "--ecdysis-model",
                            "sim/noop",
                            "--ecdysis-test-trials",
                            "0",
                        ],
                    )
                    row = row_of(strategy, f"repeat {k}", evolution(run_dir), wall, tail)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if rows:
        print(table(rows))
    if args.mode == "default" and rows:
        print(
            summary(rows, f"tasks {args.tasks}" if args.tasks else "the whole train split", args.test_trials)
        )
    if args.mode == "noop":
        for strategy in strategies:
            mine = [r for r in rows if r["strategy"] == strategy and "error" not in r]
            print(
                f"{strategy}: {len(mine)} runs, accepted edits {[r['accepted_edits'] for r in mine]} "
                f"(total {sum(r['accepted_edits'] for r in mine)}), false acceptances "
                f"{sum(r['false_acceptances'] or 0 for r in mine)}"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
