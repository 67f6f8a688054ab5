"""The `ecdysis` command: read run directories back.

    ecdysis show RUN_DIR              the summary the terminal section printed (score table, groups, gate;
                                      for an evolution run also the rounds, test scores and branch)
    ecdysis report RUN_DIR [-o FILE]  one self-contained HTML page of the run (default RUN_DIR/report.html)
    ecdysis compare RUN_A RUN_B       per-task flips from A to B (solved -> failed, failed -> solved)
    ecdysis pr-body RUN_DIR           the Markdown PR body of an evolution run (stdout)
    ecdysis summary-md RUN_DIR        the Markdown job summary of a run (stdout)
    ecdysis merge SHARD... -o OUT     one run directory from the shards of a sharded suite run
    ecdysis baseline RUN_DIR [-o F]   write a complete (merged) run's scores as a baseline (what
                                      `--ecdysis-save-baseline` writes; default .ecdysis/baseline.json)
    ecdysis gate RUN_DIR --baseline F the regression gate on a run directory (exit 0 pass, 1 fail, 4 no
                                      usable baseline: missing, unreadable, or of other options, tasks or
                                      suite; the exit statuses of `pytest --ecdysis-gate`)
    ecdysis init DIR [--baseline]     a repository of your own: a harness, the suite that runs it,
                                      pytest.ini, the gate and evolve workflows using the action

Exit status: 0 on success, 2 on bad input (missing or unreadable run directory, runs of different
suites), with one line on stderr saying what to do. `report` writes a page even for a broken run
directory (the page and stderr say what is missing); only a path that is not a directory or an unwritable
output is an error. No network;
pytest is imported only to read an evolution run's rounds (`report.evolution.summary_lines`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_ecdysis.core.errors import EcdysisError, RunDirError, UsageError
from pytest_ecdysis.report import summary as report


def _show(args: argparse.Namespace) -> int:
    evo_file = Path(args.run_dir) / "evolution.json"
    has_summary = not evo_file.is_file() or (Path(args.run_dir) / "summary.json").is_file()
    summary, groups = report.read_run(args.run_dir) if has_summary else ({}, [])
    doc = report.read_json(evo_file) if evo_file.is_file() else None
    unfinished = doc is not None and doc.get("status") != "finished"
    try:
        if has_summary:
            weak = summary.get("weak_passes") or []  # passes that rest on luck
            print(
                "\n".join(
                    report.summary_lines(
                        summary,
                        groups,
                        summary.get("gate"),
                        summary.get("problems"),
                        weak_hint="listed below" if weak else None,
                    )
                )
            )
            for w in weak:
                print(f"  weak pass {w['task']} t{w['trial']}: {'; '.join(w['reasons'])}")
        if (
            unfinished and doc is not None
        ):  # said before the rounds: no branch verdict yet, whatever the rounds so far show
            print(
                f"evolution status {doc.get('status')!r}: still running (or interrupted), so no branch verdict "
                f"yet; resume an interrupted one with --ecdysis-resume {doc.get('run_id') or Path(args.run_dir).name}"
            )
        if doc is not None:
            from pytest_ecdysis.report.evolution import (
                summary_lines as evolution_lines,  # imports pytest: evolution runs only
            )

            for line in evolution_lines(doc)[1:]:
                print(line)
            if (doc.get("test") or {}).get("skipped"):
                print(f"test split not scored: {doc['test']['skipped']}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RunDirError(
            f"{args.run_dir} has files that lack fields this version reads ({type(exc).__name__}: "
            f"{exc}); written by another version or halfway? `ecdysis report` shows what it has"
        ) from None
    return 0


def _report(args: argparse.Namespace) -> int:
    from pytest_ecdysis.report.html import write_html

    if not args.run_dir.is_dir():  # a typo: never create it and write a page into it
        raise RunDirError(f"{args.run_dir} is not a directory: pass a run directory, .ecdysis/runs/<run-id>")
    path, missing = write_html(args.run_dir, args.output)
    for note in missing:
        print(f"ecdysis report: {note}", file=sys.stderr)
    print(f"{path} ({path.stat().st_size / 1024:.1f} KiB)")
    return 0


def _summary_md(args: argparse.Namespace) -> int:
    summary, groups = report.read_run(args.run_dir)
    print(report.summary_markdown(summary, groups, summary.get("gate"), summary.get("problems")), end="")
    return 0


def compare_lines(a: Path, b: Path) -> list[str]:
    """The `compare` report. Raises RunDirError for runs of different suites, splits or thresholds; runs of
    different task sets (another `--ecdysis-tasks`) are marked, and scored on their common tasks only."""
    sa, _ = report.read_run(a)
    sb, _ = report.read_run(b)
    for key in ("suite", "split", "threshold"):
        if sa.get(key) != sb.get(key):
            raise RunDirError(
                f"cannot compare runs of a different {key}: {a} has {sa.get(key)!r}, {b} has "
                f"{sb.get(key)!r}; compare two runs of the same suite, split and λ"
            )
    fl = report.flips(sa, sb)
    out = [f"{a.name} -> {b.name}  suite {sa.get('suite')}  split {sa.get('split')}"]
    if sa.get("trials") != sb.get("trials"):
        out.append(
            f"note: trials per task differ ({sa.get('trials')} vs {sb.get('trials')}); "
            "'solved' means every trial succeeded"
        )
    sc_a, sc_b = sa.get("suite_score"), sb.get("suite_score")
    ta, tb = sa.get("tasks") or {}, sb.get("tasks") or {}
    if set(ta) != set(tb):  # another --ecdysis-tasks: whole-run scores are over other tasks
        common = sorted(set(ta) & set(tb))
        out.append(
            f"DIFFERENT TASK SETS: {len(ta)} tasks vs {len(tb)}, {len(common)} in common; the whole-run "
            f"scores ({_score(sc_a)} and {_score(sc_b)}) are not comparable, so only the common tasks are"
        )
        sc_a, sc_b = _common_score(ta, common), _common_score(tb, common)
        label = f"score on the {len(common)} common tasks"
    else:
        label = "suite score"
    if sc_a is not None and sc_b is not None:
        out.append(f"{label} {sc_a:.3f} -> {sc_b:.3f} ({sc_b - sc_a:+.3f})")
    out.append(
        f"solved -> failed ({len(fl['solved_to_failed'])}): {', '.join(fl['solved_to_failed']) or 'none'}"
    )
    out.append(
        f"failed -> solved ({len(fl['failed_to_solved'])}): {', '.join(fl['failed_to_solved']) or 'none'}"
    )
    if fl["only_before"] or fl["only_after"]:
        out.append(
            f"tasks only in {a.name}: {', '.join(fl['only_before']) or 'none'}; only in {b.name}: "
            f"{', '.join(fl['only_after']) or 'none'}"
        )
    return out


def _score(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _common_score(tasks: dict, common: list[str]) -> float | None:
    """Successful trials / trials over the `common` task keys (None without trials)."""
    n = sum(tasks[k].get("n", 0) for k in common)
    return sum(tasks[k].get("successes", 0) for k in common) / n if n else None


def _compare(args: argparse.Namespace) -> int:
    print("\n".join(compare_lines(args.run_a, args.run_b)))
    return 0


def _pr_body(args: argparse.Namespace) -> int:
    from pytest_ecdysis.report.pr_body import render_pr_body

    print(render_pr_body(args.run_dir), end="")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from pytest_ecdysis.run.merge import merge

    summary = merge(args.shards, args.output, run_id=args.run_id)
    print(
        f"merged {len(args.shards)} shard(s) into {args.output}: {summary['n_trials']} trial(s) of "
        f"{summary['n_tasks']} task(s), suite score {report._fmt(summary.get('suite_score'))}"
    )
    return 0


def _baseline(args: argparse.Namespace) -> int:
    from pytest_ecdysis.gate import baseline as gate

    summary, _ = report.read_run(args.run_dir)
    if "suite_score" not in summary:
        raise RunDirError(
            f"{args.run_dir} has no suite score to save; pass the run directory of a suite run "
            "(or of `ecdysis merge`)"
        )
    if why := gate.incomplete(summary):
        raise RunDirError(
            f"baseline not written to {args.output}: {args.run_dir} is incomplete ({why}); "
            "rerun the missing shards or cases when the endpoint is healthy"
        )
    path = gate.save_baseline(summary, args.output)
    print(
        f"baseline of {args.run_dir} written to {path}: suite score {report._fmt(summary.get('suite_score'))}, "
        f"{summary.get('n_tasks')} task(s) x {summary.get('trials')} trial(s)"
    )
    return 0


def _gate(args: argparse.Namespace) -> int:
    from pytest_ecdysis.core.config_values import _choice, _float, _int, gate_margin
    from pytest_ecdysis.core.config_values import level as level_of
    from pytest_ecdysis.core.rundir import write_json
    from pytest_ecdysis.gate import baseline as gate
    from pytest_ecdysis.gate.acceptance import METHODS

    try:  # the same checks as --ecdysis-gate-tolerance, -gate-max-regressions and the ini keys
        # ecdysis_accept_level, ecdysis_accept_method, ecdysis_gate_max_cost_rise
        _float("gate-tolerance", args.tolerance, 0.0, 1.0)
        gate_margin("gate-margin", args.margin)
        if args.max_regressions is not None:
            _int("gate-max-regressions", args.max_regressions, 0)
        level = level_of("accept-level", args.accept_level)
        _choice("accept-method", args.accept_method, METHODS)
        if args.max_cost_rise is not None:
            _float("gate-max-cost-rise", args.max_cost_rise, 0.0, None)
    except UsageError as exc:
        text = str(exc).replace("ini key ecdysis_gate_max_cost_rise", "--max-cost-rise")
        text = text.replace("ini key ecdysis_accept_", "--accept-").replace("accept_level", "accept-level")
        text = text.replace("accept_method", "accept-method").replace("--ecdysis-gate-", "--")
        raise RunDirError(text) from None
    summary, _ = report.read_run(args.run_dir)
    try:  # a baseline that cannot be used: exit 4, as `pytest --ecdysis-gate` (a usage error there)
        baseline = gate.load_baseline(args.baseline, who="ecdysis gate", option="--baseline")
    except UsageError as exc:
        print(f"ecdysis: error: {exc}", file=sys.stderr)
        return 4
    v = gate.verdict(
        summary,
        baseline,
        tolerance=args.tolerance,
        max_regressions=args.max_regressions,
        missing=summary.get("missing", []),
        n_collected=int(summary.get("n_collected") or 0),
        baseline_path=str(args.baseline),
        rule=args.rule,
        method=args.accept_method,
        level=level,
        max_cost_rise=args.max_cost_rise,
        margin=args.margin,
        pass_undecided=args.pass_undecided,
    )
    if summary.get("gate"):  # an earlier verdict (the pytest gate's, or another rule's) is kept, not replaced
        summary.setdefault("gate_history", []).append(summary["gate"])
    summary["gate"] = {
        **v.as_dict(),
        "by": "ecdysis gate",
    }  # as `pytest --ecdysis-gate` records it (docs/ci.md)
    write_json(args.run_dir / "summary.json", summary)
    print(v.headline())
    for reason in v.reasons if not v.refused else []:
        print(f"  - {reason}")
    return 0 if v.passed else 4 if v.refused else 1


def _init(args: argparse.Namespace) -> int:
    from pytest_ecdysis.ci.template import init

    try:
        written = init(
            args.directory, suite=args.suite, harness=args.harness, action=args.action, baseline=args.baseline
        )
    except UsageError as exc:
        raise RunDirError(str(exc)) from None  # exit 2 with the one line, as every command's bad input
    print(
        f"ecdysis init: {len(written)} file(s) in {args.directory}: harness/, tests/, pytest.ini, "
        f".github/workflows/{', .ecdysis/baseline.json' if args.baseline else ''}"
    )
    print(
        "next: cd into it, `git init` (if new), "
        + ("" if args.baseline else "`pytest -n 2 --ecdysis-save-baseline .ecdysis/baseline.json`, ")
        + "commit everything; README.md says more"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from pytest_ecdysis.core.config_values import GATE_RULES as gate_rules

    parser = argparse.ArgumentParser(prog="ecdysis", description="Read pytest-ecdysis run directories.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("show", help="print a run's summary")
    p.add_argument("run_dir", type=Path)
    p.set_defaults(func=_show)
    p = sub.add_parser("report", help="write one self-contained HTML page of a run")
    p.add_argument("run_dir", type=Path)
    p.add_argument("-o", "--output", type=Path, default=None, help="the page (default: RUN_DIR/report.html)")
    p.set_defaults(func=_report)
    p = sub.add_parser("compare", help="per-task flips between two runs of the same suite")
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.set_defaults(func=_compare)
    p = sub.add_parser("pr-body", help="Markdown PR body of an evolution run")
    p.add_argument("run_dir", type=Path)
    p.set_defaults(func=_pr_body)
    p = sub.add_parser("summary-md", help="Markdown job summary of a run")
    p.add_argument("run_dir", type=Path)
    p.set_defaults(func=_summary_md)
    p = sub.add_parser("merge", help="merge the run directories of a sharded suite run into one")
    p.add_argument("shards", type=Path, nargs="+", help="the shards' run directories")
    p.add_argument("-o", "--output", type=Path, required=True, help="the merged run directory to write")
    p.add_argument("--run-id", default=None, help="run id of the merged run (default: merged-<first shard>)")
    p.set_defaults(func=_merge)
    p = sub.add_parser("baseline", help="write a (merged) run's scores as the gate's baseline file")
    p.add_argument("run_dir", type=Path)
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path(".ecdysis/baseline.json"),
        help="the baseline file (default: %(default)s)",
    )
    p.set_defaults(func=_baseline)
    p = sub.add_parser("gate", help="the regression gate on a (merged) run directory")
    p.add_argument("run_dir", type=Path)
    p.add_argument(
        "--baseline",
        type=Path,
        default=Path(".ecdysis/baseline.json"),
        help="the baseline file the gate reads (default: %(default)s)",
    )
    p.add_argument(
        "--rule",
        choices=gate_rules,
        default=gate_rules[0],
        help="noninferiority: pass when the data show the drop is within --margin, fail when a drop beyond "
        "it is shown, else undecided (fails unless --pass-undecided; the trials per task that would decide "
        "are said); strict: fail on a score drop beyond --tolerance; paired: fail on a significant paired "
        "drop beyond --tolerance (as --ecdysis-gate-rule) (default: %(default)s)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="noninferiority: the tolerated drop, a rate share in [0, 1) (0.05 = 5 points; as "
        "--ecdysis-gate-margin) (default: %(default)s)",
    )
    p.add_argument(
        "--pass-undecided",
        action="store_true",
        help="noninferiority: pass an undecided verdict (as --ecdysis-gate-pass-undecided) (default: it fails)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="strict and paired: allowed drop of the suite score (default: %(default)s)",
    )
    p.add_argument(
        "--max-regressions",
        type=int,
        default=None,
        help="allowed tasks solved in the baseline and not now (default: not checked)",
    )
    p.add_argument(
        "--accept-method",
        default="sign",
        help="the paired test: sign, wilcoxon or bootstrap (default: %(default)s)",
    )
    p.add_argument(
        "--accept-level",
        type=float,
        default=0.05,
        help="the paired test's level, in (0, 1) (default: %(default)s)",
    )
    p.add_argument(
        "--max-cost-rise",
        type=float,
        default=None,
        help="fail when the agent's tokens per task rise above the baseline's by more than this share "
        "(0.2 = 20%%; as ini ecdysis_gate_max_cost_rise) (default: not checked)",
    )
    p.set_defaults(func=_gate)
    p = sub.add_parser("init", help="lay out a repository of your own: harness, suite, pytest.ini, workflows")
    p.add_argument("directory", type=Path)
    p.add_argument("--suite", default=None, help="the suite template (default: the only one installed, tau2)")
    p.add_argument(
        "--harness",
        default="example_harness",
        help="the harness to start from: a directory or a registered name (default: %(default)s)",
    )
    p.add_argument(
        "--action",
        default=None,
        help="the action's reference in the workflows, OWNER/REPO@REF (default: pytest-ecdysis/pytest-ecdysis@v0)",
    )
    p.add_argument(
        "--baseline", action="store_true", help="also run the suite once and save .ecdysis/baseline.json"
    )
    p.set_defaults(func=_init)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EcdysisError as exc:
        print(f"ecdysis: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
