"""A run's figures and its files: the trial results checked, aggregated and written to the run directory.

`aggregate(trials, ...)` is the pure core of `session.finish` (summary figures, triage, pattern groups;
also used by `ecdysis merge` and benchmarked by `benchmarks/bench_aggregate.py`); `write_run_dir` writes
the five files of a run directory (docs/records.md): the data first, then the rendering `junit.xml`
(`report.write_junit`), whose failure loses nothing already written. No pytest import.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import failures, metrics, patterns, report
from .errors import RunDirError
from .records import SCHEMA_VERSION, TrialResult


def _parse_trials(raw: dict[str, dict], problems: list[str]) -> list[TrialResult]:
    out = []
    for nodeid, data in raw.items():
        if isinstance(data, dict) and "ecdysis_error" in data:
            problems.append(data["ecdysis_error"])
            continue
        try:
            t = TrialResult.model_validate(data)
        except ValidationError as exc:
            problems.append(f"{nodeid}: its trial result is not a valid TrialResult ({exc.error_count()} "
                            f"error(s), first: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}); left out")
            continue
        t.nodeid = nodeid  # the report's node id is what coverage is checked against
        out.append(t)
    out.sort(key=lambda t: (*metrics._natural(metrics.task_key(t)), t.trial))
    return out


def aggregate(
    trials: list[TrialResult], *, threshold: float, trials_per_task: int, model: str,
    prices: dict[str, dict[str, float]], user_model: str | None = None,
) -> tuple[dict[str, Any], failures.Triage, list[Any]]:
    """(summary figures, triage, groups) of a list of trials: the pure core of `finish` (benchmarked)."""
    suites = sorted({t.suite for t in trials})
    block = metrics.score_block(trials, threshold=threshold, n_trials_cfg=trials_per_task, model=model,
                                prices=prices, user_model=user_model)
    by_suite = {}
    for s in suites:
        sub = [t for t in trials if t.suite == s]
        by_suite[s] = metrics.score_block(sub, threshold=threshold, n_trials_cfg=trials_per_task, model=model,
                                          prices=prices, user_model=user_model)
        by_suite[s].pop("tasks")
        by_suite[s].pop("weak_passes", None)
    tri = failures.triage(trials, threshold)
    groups = patterns.group(tri.records)
    block.update(
        suite="+".join(suites) or "none",
        by_suite=by_suite,
        n_failures=len(tri.records),
        n_evidence=len(tri.evidence),
        kept_out=dict(sorted(Counter(r.kept_out for r in tri.records if r.kept_out).items())),
        n_groups=len(groups),
        n_cross_task_groups=sum(g.cross_task for g in groups),
        suspect_tasks=sorted({metrics.task_key(t) for t in trials if t.suspect}, key=metrics._natural),
    )
    return block, tri, groups


def write_run_dir(run_path: Path, summary: dict[str, Any], trials: list[TrialResult], tri: failures.Triage,
                  groups: list[Any], missing: list[str], threshold: float, not_run: list[str] | None = None,
                  ) -> list[str]:
    """Write the five files of a run directory (docs/records.md), the data first: `trials.jsonl`,
    `failures.jsonl`, `groups.json`, `summary.json`, then the rendering `junit.xml`.

    Returns the problems of report files that could not be written (a `junit.xml` that failed is named,
    the data files are already on disk; `summary.json` is rewritten to list the problem).

    Raises:
        RunDirError: the directory or one of the data files cannot be written.
    """
    try:
        run_path.mkdir(parents=True, exist_ok=True)
        with open(run_path / "trials.jsonl", "w", encoding="utf-8") as fh:
            for t in trials:
                fh.write(t.model_dump_json() + "\n")
        with open(run_path / "failures.jsonl", "w", encoding="utf-8") as fh:
            for r in tri.records:
                fh.write(r.model_dump_json() + "\n")
        (run_path / "groups.json").write_text(json.dumps(
            {"schema_version": SCHEMA_VERSION, "groups": [g.model_dump(mode="json") for g in groups]}, indent=1))
        write_summary(run_path, summary)
    except OSError as exc:
        raise RunDirError(f"cannot write the run directory {run_path}: {exc.strerror or exc}; pass a writable "
                          "--ecdysis-run-dir (the results are still in the terminal summary)") from None
    problems = []
    try:
        report.write_junit(run_path / "junit.xml", trials, missing, threshold, not_run=not_run,
                           stopped=summary.get("stopped"))
    except Exception as exc:  # noqa: BLE001 - a rendering must never lose the run written above
        problems.append(f"junit.xml not written ({type(exc).__name__}: {exc}); summary.json and trials.jsonl "
                        f"in {run_path} hold the results")
    if problems:
        summary.setdefault("problems", []).extend(problems)  # the same list as the outcome's problems
        try:
            write_summary(run_path, summary)
        except OSError:
            pass  # the first summary.json is there; the problem is still printed
    return problems


def write_summary(run_path: Path, summary: dict[str, Any]) -> None:
    """`summary.json`, replaced atomically (a reader never sees half a file). Raises OSError."""
    tmp = run_path / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    tmp.replace(run_path / "summary.json")
