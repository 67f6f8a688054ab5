"""Benchmark: every strategy of the paper's comparison table, on τ² airline and retail.

    python benchmarks/compare_strategies.py --budget 60        # minutes; chooses tasks, rounds and trials
    python benchmarks/compare_strategies.py --budget 80 --train 4 --test 2 --trials 3   # a plan of one's own

Rows: Direct and Human-Aug. (the Direct and example harness, scored only), Self-Evolution, Ecdysis w/o FDCR,
Ecdysis, HarnessFix, Self-Harness, creation from Direct (`ecdysis` evolving a copy of the Direct harness
committed into the clone as `direct_harness/`), and Ecdysis with failure-aware evidence (a quarter of the
start run's failures, at least 1). Each evolving row runs `pytest <domain suite> --ecdysis-evolve` on the
train tasks of the plan in a `git clone --local` of this repository (the committed HEAD runs), with the
simulated model at a fixed latency (`--ecdysis-sim-latency`) and its noise on (a fresh nonce per run), the
paper's strict rule against the incumbent's earlier run (ini `ecdysis_rescore = never`) and no test scoring in
the run (`--ecdysis-test-trials 0`); the script then scores each frozen harness on the plan's test tasks
(a start harness once, a frozen harness equal to its start not again) and, for the transfer column, with
the second profile `sim/strong`.

Columns: average accuracy (mean reward on test), pass@k and pass^k (k = the plan's test trials), evolution
wall-clock (`evolution.json` `wall_s`), editor calls (the rounds' `editor_calls`), diagnosis calls (lines of
the rounds' `transcript.jsonl`), tokens (diagnosis and editor, the rounds' `tokens`), test tokens per task
(the test run's agent tokens / its tasks, so summed over a task's trials), the accommodation ratio t and false
acceptances (`evolution.json` `validity`, `sim/truth/validity.py`; measured without held-out kinds, since the
run scores no test split) and transfer (accuracy of the frozen harness with `sim/strong`). `--budget` picks the
largest plan whose estimate fits (`PLANS`, `estimate`); it never cuts a row: every row runs to the end on
every domain (the issue's "every row runs to the end"), however long that takes, and each row's line prints
the minutes since the start. Rows run in `RUN_ORDER` (Ecdysis and Self-Evolution first); both domains run at
the same time.
Figures are the simulated model's; nothing is tuned to match the paper.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from suite_session import session_env

REPO = Path(__file__).resolve().parents[1]
DOMAINS = ("airline", "retail")
#: every τ² suite the benchmark can run (`--domains`): the paper's two and telecom.
KNOWN_DOMAINS = ("airline", "retail", "telecom")
TRANSFER_MODEL = "sim/strong"
#: (row, strategy or None for a scored-only harness, start harness, evidence)
ROWS = (
    ("Direct", None, "direct_harness", "all"),
    ("Human-Aug.", None, "example_harness", "all"),
    ("Self-Evolution", "self-evolution", "example_harness", "all"),
    ("Ecdysis w/o FDCR", "ecdysis-nofdcr", "example_harness", "all"),
    ("Ecdysis", "ecdysis", "example_harness", "all"),
    ("HarnessFix", "harnessfix", "example_harness", "all"),
    ("Self-Harness", "self-harness", "example_harness", "all"),
    ("Creation from Direct", "ecdysis", "direct_harness", "all"),
    ("Ecdysis, failure-aware", "ecdysis", "example_harness", "quarter"),
)
#: plans, smallest first: train tasks, test tasks, rounds, test trials, self-evolution cap
PLANS = (
    {"train": 2, "test": 2, "rounds": 1, "trials": 1, "cap": 2},
    {"train": 4, "test": 4, "rounds": 1, "trials": 3, "cap": 3},
    {"train": 8, "test": 8, "rounds": 2, "trials": 3, "cap": 5},
    {"train": 30, "test": 20, "rounds": 3, "trials": 3, "cap": 5},
)
#: candidates a round validates per strategy (self-harness: 3 proposals; self-evolution: its cap)
CANDIDATES = {"ecdysis": 1, "ecdysis-nofdcr": 1, "harnessfix": 1, "self-harness": 3}


def estimate(plan: dict, trial_s: float) -> float:
    """Minutes one domain takes (both run at once): trials of start runs, validations and test scoring."""
    evolving = [r for r in ROWS if r[1]]
    cands = sum(CANDIDATES.get(s, plan["cap"]) for _, s, _, _ in evolving)
    trials = (
        len(evolving) * plan["train"]
        + plan["rounds"] * cands * plan["train"]
        + (2 + 2 * len(evolving)) * plan["test"] * plan["trials"]
    )
    return (trials * trial_s + 30 * (len(evolving) * (1 + plan["rounds"] * 2) + 2 * len(evolving))) / 60


def choose_plan(budget_min: float, trial_s: float) -> dict:
    fitting = [p for p in PLANS if estimate(p, trial_s) <= budget_min]
    return fitting[-1] if fitting else PLANS[0]


#: the order rows run in (the table keeps ROWS' order): the two whose wall-clock the issue compares first,
#: so a small budget still measures them, then creation from Direct (it has never run before)
RUN_ORDER = (
    "Direct",
    "Human-Aug.",
    "Ecdysis",
    "Self-Evolution",
    "Creation from Direct",
    "Ecdysis w/o FDCR",
    "HarnessFix",
    "Self-Harness",
    "Ecdysis, failure-aware",
)
WORKERS = "0"
#: `--rows`: the rows to run (empty: every row)
ONLY_ROWS: set[str] = set()


def _harness_path(clone: Path, harness: str) -> Path:
    """The start harness's directory in the clone: `direct_harness/` at its root, the example in the suite."""
    if (clone / harness).is_dir():
        return clone / harness
    return clone / "pytest_ecdysis_tau2" / harness


def task_ids(domain: str, split: str, n: int) -> list[str]:
    # the benchmark may import the suite; pytest_ecdysis never does
    from pytest_ecdysis_tau2.tasks.suite import split_ids

    return list(split_ids(domain, split))[:n]


def pytest_cmd(domain: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        f"pytest_ecdysis_tau2/test_{domain}.py",
        "-q",
        "-n",
        WORKERS,
        "-p",
        "no:cacheprovider",
        *args,
    ]


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=session_env(), capture_output=True, text=True)


def score(
    clone: Path,
    domain: str,
    harness: Path,
    tasks: list[str],
    trials: int,
    latency: float,
    out: Path,
    model: str | None = None,
) -> dict:
    """`summary.json` figures of one harness on the test tasks: accuracy, pass@k, pass^k, tokens per task."""
    args = [
        "--ecdysis-split",
        "test",
        "--ecdysis-tasks",
        ",".join(tasks),
        "--ecdysis-trials",
        str(trials),
        "--ecdysis-harness",
        str(harness),
        "--ecdysis-run-dir",
        str(out),
        "--ecdysis-sim-latency",
        str(latency),
    ]
    proc = run(pytest_cmd(domain, *args, *(["--ecdysis-model", model] if model else [])), clone)
    found = sorted(out.glob("*/summary.json"))
    if not found:
        return {"error": (proc.stdout[-300:] + proc.stderr[-300:]).strip()}
    s = json.loads(found[-1].read_text())
    k = str(trials)
    return {
        "acc": s.get("suite_score"),
        "pass_at": (s.get("pass_at_k") or {}).get(k),
        "pass_hat": (s.get("pass_hat_k") or {}).get(k),
        "tokens_per_task": round((s.get("tokens") or {}).get("total", 0) / max(1, s.get("n_tasks") or 1)),
    }


def evolve(
    clone: Path,
    domain: str,
    strategy: str,
    harness: str,
    evidence: str,
    plan: dict,
    tasks: list[str],
    latency: float,
    out: Path,
) -> dict:
    args = [
        "--ecdysis-evolve",
        "--ecdysis-strategy",
        strategy,
        "--ecdysis-rounds",
        str(plan["rounds"]),
        "--ecdysis-tasks",
        ",".join(tasks),
        "--ecdysis-trials",
        "1",
        "--ecdysis-test-trials",
        "0",
        "--ecdysis-harness",
        harness,
        "--ecdysis-run-dir",
        str(out),
        "--ecdysis-sim-latency",
        str(latency),
        "-o",
        "ecdysis_rescore=never",
        "-o",
        "ecdysis_self_evolution_cap=" + str(plan["cap"]),
        "--ecdysis-evidence",
        evidence,
    ]
    proc = run(pytest_cmd(domain, *args), clone)
    evo = sorted(out.glob("*/evolution.json"))
    if not evo:
        return {"error": (proc.stdout[-400:] + proc.stderr[-400:]).strip()}
    doc = json.loads(evo[-1].read_text())
    rounds = doc.get("rounds", [])
    validity = doc.get("validity") or {}
    return {
        "doc": doc,
        "run_dir": evo[-1].parent,
        "evo_s": doc.get("wall_s"),
        "editor": sum(r.get("editor_calls", 0) for r in rounds),
        "diag": sum(
            len(p.read_text().splitlines()) for p in evo[-1].parent.glob("rounds/*/transcript.jsonl")
        ),
        "tokens": sum((r.get("tokens") or {}).get("total", 0) for r in rounds),
        "accepted": sum(bool(r.get("accepted")) for r in rounds),
        "t": validity.get("t"),
        "false_acc": validity.get("false_acceptances"),
    }


def frozen_dir(clone: Path, res: dict, harness: str, tmp: Path) -> Path | None:
    """A checkout of the run's branch (the frozen harness), or None when nothing was accepted."""
    branch = res["doc"].get("branch")
    if not branch:
        return None
    where = tmp / f"frozen-{res['doc']['run_id']}"
    subprocess.run(
        ["git", "worktree", "add", "--quiet", "--detach", str(where), branch], cwd=clone, check=True
    )
    return _harness_path(where, harness)


def domain_rows(
    domain: str, plan: dict, latency: float, started: float, tmp: Path, clone: Path
) -> list[dict]:
    train, test = task_ids(domain, "train", plan["train"]), task_ids(domain, "test", plan["test"])
    rows, starts, transfers = [], {}, {}
    for name, strategy, harness, evidence in sorted(ROWS, key=lambda r: RUN_ORDER.index(r[0])):
        if ONLY_ROWS and name not in ONLY_ROWS:
            continue
        row = {"domain": domain, "row": name}
        base = tmp / "runs" / domain / name.replace(" ", "_").replace(".", "").replace(",", "")
        if harness not in starts:
            starts[harness] = score(
                clone, domain, _harness_path(clone, harness), test, plan["trials"], latency, base / "start"
            )
        if strategy is None:
            rows.append({**row, **starts[harness]})
            print(
                f"[{domain}] {name}: done at {(time.monotonic() - started) / 60:.1f} min\n{row_line(rows[-1])}",
                flush=True,
            )
            continue
        if evidence == "quarter":  # a quarter of the failures of the Ecdysis row's start run
            ref = next((r for r in rows if r["row"] == "Ecdysis" and r.get("run_dir")), None)
            n_fail = len((ref["run_dir"] / "failures.jsonl").read_text().splitlines()) if ref else 4
            evidence = f"failure-aware:{max(1, n_fail // 4)}"
            row["evidence"] = evidence
        res = evolve(clone, domain, strategy, harness, evidence, plan, train, latency, base / "evolve")
        if "error" in res:
            rows.append({**row, **res})
            print(
                f"[{domain}] {name}: ERROR at {(time.monotonic() - started) / 60:.1f} min: {res['error'][-200:]}",
                flush=True,
            )
            continue
        frozen = frozen_dir(clone, res, harness, tmp)
        test_scores = (
            starts[harness]
            if frozen is None
            else score(clone, domain, frozen, test, plan["trials"], latency, base / "frozen")
        )
        key = str(frozen or harness)  # a start harness is scored with the second profile once
        if key not in transfers:
            transfers[key] = score(
                clone,
                domain,
                frozen or _harness_path(clone, harness),
                test,
                plan["trials"],
                latency,
                base / "transfer",
                model=TRANSFER_MODEL,
            )
        transfer = transfers[key]
        rows.append(
            {
                **row,
                **test_scores,
                **{k: v for k, v in res.items() if k != "doc"},
                "transfer": transfer.get("acc"),
            }
        )
        print(
            f"[{domain}] {name}: done at {(time.monotonic() - started) / 60:.1f} min "
            f"({res['accepted']} accepted round(s))\n{row_line(rows[-1])}",
            flush=True,
        )
    return rows


def fmt(v: object) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


COLUMNS = (
    ("avg acc", "acc"),
    ("pass@k", "pass_at"),
    ("pass^k", "pass_hat"),
    ("evo s", "evo_s"),
    ("editor", "editor"),
    ("diag", "diag"),
    ("tokens", "tokens"),
    ("tok/task", "tokens_per_task"),
    ("t", "t"),
    ("false acc", "false_acc"),
    ("transfer", "transfer"),
)


def table(rows: list[dict]) -> str:
    head = "| domain | row | " + " | ".join(c for c, _ in COLUMNS) + " | note |"
    lines = [head, "|" + " --- |" * (len(COLUMNS) + 3)]
    return "\n".join(lines + [row_line(r) for r in rows])


def row_line(r: dict) -> str:
    """One row of the table (also printed as soon as the row is done, so a cut run keeps what it measured)."""
    note = r.get("note") or r.get("error", "")[:80] or r.get("evidence", "")
    return f"| {r['domain']} | {r['row']} | " + " | ".join(fmt(r.get(k)) for _, k in COLUMNS) + f" | {note} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--budget",
        type=float,
        default=60,
        help="minutes the plan should take (default: 60); it chooses the plan and never cuts a row",
    )
    parser.add_argument(
        "--trial-seconds",
        type=float,
        default=20.0,
        help="wall seconds one trial takes on this machine, for the plan (default: 20)",
    )
    parser.add_argument("--latency", type=float, default=0.05, help="simulated seconds per completion")
    parser.add_argument(
        "--domains",
        default=",".join(DOMAINS),
        help=f"comma-separated τ² domains (default: {','.join(DOMAINS)}, the paper's; also telecom)",
    )
    parser.add_argument(
        "-n",
        dest="workers",
        default="0",
        help="pytest-xdist workers per run (default: 0; on a "
        "loaded machine the workers' start-up costs more than two tasks take)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--rows",
        default="",
        help="comma-separated row names to run (default: every row), e.g. 'Direct,Human-Aug.,Self-Evolution,Ecdysis'",
    )
    for key, what in (
        ("train", "train tasks"),
        ("test", "test tasks"),
        ("rounds", "rounds"),
        ("trials", "test trials"),
        ("cap", "self-evolution cap"),
    ):
        parser.add_argument(f"--{key}", type=int, help=f"{what}, overriding the plan --budget chose")
    args = parser.parse_args(argv)
    global WORKERS
    WORKERS = args.workers
    ONLY_ROWS.update(r for r in args.rows.split(",") if r)
    sys.path.insert(0, str(REPO))
    plan = {
        **choose_plan(args.budget, args.trial_seconds),
        **{k: getattr(args, k) for k in ("train", "test", "rounds", "trials", "cap") if getattr(args, k)},
    }
    domains = [d for d in args.domains.split(",") if d]
    if unknown := [d for d in domains if d not in KNOWN_DOMAINS]:
        parser.error(
            f"--domains: {', '.join(unknown)} is not a τ² suite here; use {', '.join(KNOWN_DOMAINS)}"
        )
    print(
        f"budget {args.budget:g} min, {args.trial_seconds:g} s/trial: plan {plan} (estimate "
        f"{estimate(plan, args.trial_seconds):.0f} min per domain, domains at the same time); latency "
        f"{args.latency} s, noise on (fresh nonce per run), transfer model {TRANSFER_MODEL}",
        flush=True,
    )
    started = time.monotonic()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="ecdysis-compare-") as name:
        tmp = Path(name)
        threads = []
        for domain in domains:
            clone = tmp / f"repo-{domain}"
            subprocess.run(["git", "clone", "--quiet", "--local", str(REPO), str(clone)], check=True)
            shutil.copytree(REPO / "pytest_ecdysis_tau2" / "harnesses" / "direct", clone / "direct_harness")
            subprocess.run(["git", "add", "direct_harness"], cwd=clone, check=True)
            subprocess.run(
                [
                    "git",
                    "-c",
                    "user.name=bench",
                    "-c",
                    "user.email=bench@example.com",
                    "commit",
                    "-qm",
                    "the Direct harness as a starting harness",
                ],
                cwd=clone,
                check=True,
            )
            t = threading.Thread(
                target=lambda d=domain, c=clone: results.__setitem__(
                    d, domain_rows(d, plan, args.latency, started, tmp / d, c)
                )
            )
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
    order = [r[0] for r in ROWS]
    rows = [r for d in domains for r in sorted(results.get(d, []), key=lambda r: order.index(r["row"]))]
    print(table(rows))
    print(f"wall {(time.monotonic() - started) / 60:.1f} min")
    if args.json:
        args.json.write_text(
            json.dumps([{k: v for k, v in r.items() if k != "run_dir"} for r in rows], indent=2, default=str)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
