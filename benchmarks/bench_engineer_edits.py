"""Benchmark: harness edits an engineer wrote from the failure evidence, scored against the example harness.

    python benchmarks/bench_engineer_edits.py [--domains airline,retail] [--split test] [--trials 3]
                                              [--edits rule_exact_values,...] [--tasks 14,20] [--no-direct]
                                              [--nonce TEXT|fresh] [--json FILE]

The fixtures are `tests/fixtures/engineer_edits/<edit>.patch`, unified diffs against `pytest_ecdysis_tau2/example_harness/`
written before the simulated model read the harness's prompt rules (merge 8b925e0; what each edit is and why:
`tests/fixtures/engineer_edits/README.md`). For each domain the example harness (copied without its
`recipes/`, so the base and the edited copies differ by the patch alone) and each edited copy (`git apply`
in a temporary directory) are scored by `pytest pytest_ecdysis_tau2/test_<domain>.py -n 2 --ecdysis-harness
<copy> --ecdysis-split <split> --ecdysis-trials <trials>` with the simulated model; unless `--no-direct`,
Direct (`--ecdysis-harness direct`) is scored the same way.

Pairs: every (task, trial) of the edited run against the same (task, trial) of the base run; `+` = failed
with the base harness and passed with the edit, `-` the reverse (pass: reward >= 1.0, the default λ). With
one fixed `--nonce` (default `engineer-edits`) every run draws the same noise, so a discordant pair is the
edit's doing (common random numbers); `--nonce fresh` gives each run its own. `p` is the one-sided exact
sign test (scipy `binomtest`) that `+` outnumbers `-` by more than chance, for orientation only.
Also printed per edit: harness notes the edit added (e.g. `argument_repaired`) and tool errors per trial.

Figures are the simulated model's, never a real model's. Wall-clock: about 4 min per airline test run
of 3 trials (60 trials) and 8 min per retail one on a quiet 2-core machine; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from scipy.stats import binomtest
from suite_session import pytest_command, session_env

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "engineer_edits"
HARNESS = REPO / "pytest_ecdysis_tau2" / "example_harness"


def edits_available() -> list[str]:
    """Names of the fixture patches (`<name>.patch`), sorted."""
    return sorted(p.stem for p in FIXTURES.glob("*.patch"))


def harness_copy(dest: Path, patch: Path | None) -> Path:
    """`pytest_ecdysis_tau2/example_harness/` copied to `dest/example_harness` (no recipes, no caches), `patch` applied.

    Raises RuntimeError naming the patch when `git apply` refuses it (the fixture no longer fits the
    example harness: regenerate it against the current `pytest_ecdysis_tau2/example_harness/`).
    """
    target = dest / "example_harness"
    shutil.copytree(HARNESS, target, ignore=shutil.ignore_patterns("recipes", "__pycache__", "*.pyc"))
    if patch is not None:
        proc = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", str(patch)], cwd=dest, capture_output=True, text=True
        )
        if proc.returncode:
            raise RuntimeError(
                f"{patch.name} does not apply to pytest_ecdysis_tau2/example_harness/: {proc.stderr.strip()}"
            )
    return target


def score(domain: str, harness: str, args: argparse.Namespace, run_root: Path) -> dict:
    """One pytest session of the domain's suite with `harness`; its summary and per-(task, trial) trials.

    Returns {"score", "trials": {(task, trial): record}, "wall_s", "run_dir"}; raises RuntimeError with
    the tail of pytest's output when the session wrote no summary.
    """
    run_dir = Path(tempfile.mkdtemp(prefix=f"{domain}-", dir=run_root))
    env = session_env(PYTHONPATH=str(REPO))
    cmd = [
        *pytest_command(f"pytest_ecdysis_tau2/test_{domain}.py"),
        "-n",
        str(args.workers),
        "--ecdysis-harness",
        harness,
        "--ecdysis-split",
        args.split,
        "--ecdysis-trials",
        str(args.trials),
        "--ecdysis-run-dir",
        str(run_dir),
        "-o",
        "ecdysis_progress=0",
    ]
    if args.nonce != "fresh":
        cmd += ["-o", f"ecdysis_sim_nonce={args.nonce}"]
    if args.tasks:
        cmd += ["--ecdysis-tasks", args.tasks]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    summaries = sorted(run_dir.glob("*/summary.json"))
    if not summaries:
        raise RuntimeError(
            f"no run written for {harness} on {domain} (exit {proc.returncode}):\n"
            f"{proc.stdout[-1500:]}{proc.stderr[-800:]}"
        )
    summary = json.loads(summaries[-1].read_text())
    trials = {}
    for line in (summaries[-1].parent / "trials.jsonl").read_text().splitlines():
        record = json.loads(line)
        trials[(record["task_id"], record["trial"])] = record
    return {
        "score": summary["suite_score"],
        "trials": trials,
        "wall_s": wall,
        "run_dir": str(summaries[-1].parent),
        "infra": summary.get("n_infra_errors", 0),
    }


def _passed(record: dict | None) -> bool:
    return record is not None and (record.get("reward") or 0.0) >= 1.0


def _errors_per_trial(run: dict) -> float:
    calls = [c for r in run["trials"].values() for c in r.get("tool_calls") or []]
    return sum(bool(c.get("error")) for c in calls) / max(1, len(run["trials"]))


def compare(label: str, domain: str, base: dict, other: dict, args: argparse.Namespace) -> dict:
    """A table row: base and other scores, delta, discordant pairs, sign-test p, notes the other added."""
    keys = sorted(
        set(base["trials"]) | set(other["trials"]),
        key=lambda k: (int(k[0]) if k[0].isdigit() else k[0], k[1]),
    )
    plus = [k for k in keys if not _passed(base["trials"].get(k)) and _passed(other["trials"].get(k))]
    minus = [k for k in keys if _passed(base["trials"].get(k)) and not _passed(other["trials"].get(k))]
    p = (
        binomtest(len(plus), len(plus) + len(minus), 0.5, alternative="greater").pvalue
        if plus or minus
        else 1.0
    )

    def notes(run: dict) -> Counter:
        return Counter(n.get("kind") for r in run["trials"].values() for n in r.get("harness_notes") or [])

    added = notes(other) - notes(base)
    return {
        "edit": label,
        "domain": domain,
        "split": args.split,
        "trials": args.trials,
        "base": round(base["score"], 3),
        "edited": round(other["score"], 3),
        "delta": round(other["score"] - base["score"], 3),
        "plus": len(plus),
        "minus": len(minus),
        "p": round(p, 4),
        "errors_per_trial": f"{_errors_per_trial(base):.2f}->{_errors_per_trial(other):.2f}",
        "notes_added": dict(added),
        "flips_plus": [f"{t}/{k}" for t, k in plus],
        "flips_minus": [f"{t}/{k}" for t, k in minus],
        "infra": f"{base['infra']}/{other['infra']}",
        "wall_s": round(other["wall_s"]),
    }


COLUMNS = (
    "edit",
    "domain",
    "split",
    "trials",
    "base",
    "edited",
    "delta",
    "plus",
    "minus",
    "p",
    "errors_per_trial",
    "notes_added",
    "infra",
    "wall_s",
)


def table(rows: list[dict]) -> str:
    """Markdown table of the rows (COLUMNS)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |" for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--domains", default="airline", help="comma-separated: airline, retail (default airline)"
    )
    parser.add_argument("--split", default="test", choices=["train", "test", "all"])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--edits",
        default=",".join(edits_available()),
        help="comma-separated fixture names; '' for none (default: all)",
    )
    parser.add_argument("--tasks", default="", help="only these task ids (a quick check; default all)")
    parser.add_argument(
        "--no-direct", action="store_true", help="do not score Direct against the example harness"
    )
    parser.add_argument(
        "--direct-domains",
        default="airline,retail",
        help="domains of the Direct vs example comparison (default airline,retail)",
    )
    parser.add_argument(
        "--nonce", default="engineer-edits", help="simulated model's nonce for every run, or 'fresh'"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default="", help="also write the rows here")
    args = parser.parse_args()
    edits = [e for e in args.edits.split(",") if e]
    unknown = sorted(set(edits) - set(edits_available()))
    if unknown:
        parser.error(f"no fixture {unknown}; known: {', '.join(edits_available())}")
    domains = [d for d in args.domains.split(",") if d]
    direct_domains = [] if args.no_direct else [d for d in args.direct_domains.split(",") if d]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"commit {commit}  load at start {os.getloadavg()}  nonce {args.nonce}  simulated model", flush=True
    )
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="engineer-edits-") as tmp:
        root = Path(tmp)
        runs = root / "runs"
        runs.mkdir()
        for domain in list(dict.fromkeys(domains + direct_domains)):
            base_dir = harness_copy(root / f"base-{domain}", None)
            base = score(domain, str(base_dir), args, runs)
            print(
                f"{domain}: example harness {base['score']:.3f} ({base['wall_s']:.0f} s, load "
                f"{os.getloadavg()[0]:.1f})",
                flush=True,
            )
            for edit in edits if domain in domains else []:
                edited = score(
                    domain,
                    str(harness_copy(root / f"{edit}-{domain}", FIXTURES / f"{edit}.patch")),
                    args,
                    runs,
                )
                rows.append(compare(edit, domain, base, edited, args))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
            if domain in direct_domains:
                direct = score(domain, "direct", args, runs)
                row = compare("example (base: Direct)", domain, direct, base, args)
                rows.append(row)
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(f"\ncommit {commit}  load at end {os.getloadavg()}  nonce {args.nonce}  simulated model\n")
    print(table(rows))
    for row in rows:
        print(f"{row['edit']} {row['domain']}: + {row['flips_plus']}  - {row['flips_minus']}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"commit": commit, "nonce": args.nonce, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
