"""A run's figures and its files: the trial results checked, aggregated and written to the run directory.

`aggregate(trials, ...)` is the pure core of `session.finish` (summary figures, triage, pattern groups;
also used by `ecdysis merge` and benchmarked by `benchmarks/bench_aggregate.py`); `write_run_dir` writes
the five files of a run directory (docs/records.md): the data first, then the rendering `junit.xml`
(`write_junit`: one `<testsuite>` per suite, one `<testcase>` per trial, every text from outside made
XML-safe by `safetext.xml`), whose failure loses nothing already written. No pytest import.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from junitparser import Error, Failure, JUnitXml, Properties, Property, Skipped, TestCase, TestSuite
from pydantic import ValidationError

from pytest_ecdysis.core import metrics, safetext
from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.metrics import is_success
from pytest_ecdysis.core.records import SCHEMA_VERSION, TrialResult
from pytest_ecdysis.core.secrets import redact, redact_json
from pytest_ecdysis.evidence import failures, patterns
from pytest_ecdysis.report.summary import _fmt


def _parse_trials(raw: dict[str, dict], problems: list[str]) -> list[TrialResult]:
    out = []
    for nodeid, data in raw.items():
        if isinstance(data, dict) and "ecdysis_error" in data:
            problems.append(data["ecdysis_error"])
            continue
        try:
            t = TrialResult.model_validate(data)
        except ValidationError as exc:
            problems.append(
                f"{nodeid}: its trial result is not a valid TrialResult ({exc.error_count()} "
                f"error(s), first: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}); left out"
            )
            continue
        t.nodeid = nodeid  # the report's node id is what coverage is checked against
        out.append(t)
    out.sort(key=lambda t: (*metrics._natural(metrics.task_key(t)), t.trial))
    return out


def aggregate(
    trials: list[TrialResult],
    *,
    threshold: float,
    trials_per_task: int,
    model: str,
    prices: dict[str, dict[str, float]],
    user_model: str | None = None,
    suspects: dict[str, str] | None = None,
) -> tuple[dict[str, Any], failures.Triage, list[Any]]:
    """(summary figures, triage, groups) of a list of trials: the pure core of `finish` (benchmarked).

    `suspects`: `{task key: reason}` of tasks that fail identically under every configuration seen
    (`evidence.suspects`); their records are kept out of the evidence (`kept_out: "suspect_task"`), the
    tasks join `suspect_tasks` and the reasons are `suspect_reasons`. Tasks all of whose trials failed
    with one signature carry it as `tasks[key]["failure"]` (a baseline keeps it for the next run).

    Trials the endpoint refused alike on their first request, every scored one of them
    (`evidence.first_refusal`), are first changed in place into infrastructure errors; `endpoint_refusal`
    is then the line naming the refusal (else None)."""
    from pytest_ecdysis.evidence.first_refusal import reclassify
    from pytest_ecdysis.evidence.suspects import identical_failures, keep_out, suspect_across

    endpoint_refusal = reclassify(trials)  # in place: the same first refusal everywhere is the endpoint's
    suspects = {**suspect_across([trials], threshold), **(suspects or {})}
    suites = sorted({t.suite for t in trials})
    block = metrics.score_block(
        trials,
        threshold=threshold,
        n_trials_cfg=trials_per_task,
        model=model,
        prices=prices,
        user_model=user_model,
    )
    by_suite = {}
    for s in suites:
        sub = [t for t in trials if t.suite == s]
        by_suite[s] = metrics.score_block(
            sub,
            threshold=threshold,
            n_trials_cfg=trials_per_task,
            model=model,
            prices=prices,
            user_model=user_model,
        )
        by_suite[s].pop("tasks")
        by_suite[s].pop("weak_passes", None)
    tri = failures.triage(trials, threshold)
    tri.records = keep_out(tri.records, suspects)
    groups = patterns.group(tri.records)
    for key, signature in identical_failures(trials, threshold).items():
        if key in block.get("tasks", {}):
            block["tasks"][key]["failure"] = signature
    block.update(
        suite="+".join(suites) or "none",
        by_suite=by_suite,
        n_failures=len(tri.records),
        n_evidence=len(tri.evidence),
        kept_out=dict(sorted(Counter(r.kept_out for r in tri.records if r.kept_out).items())),
        n_groups=len(groups),
        n_cross_task_groups=sum(g.cross_task for g in groups),
        suspect_tasks=sorted(
            {metrics.task_key(t) for t in trials if t.suspect} | set(suspects), key=metrics._natural
        ),
        suspect_reasons=dict(sorted(suspects.items())),
        user_aborts=[f"{metrics.task_key(t)}/t{t.trial}" for t in trials if t.user_abort],
        endpoint_refusal=endpoint_refusal,
    )
    return block, tri, groups


def write_run_dir(
    run_path: Path,
    summary: dict[str, Any],
    trials: list[TrialResult],
    tri: failures.Triage,
    groups: list[Any],
    missing: list[str],
    threshold: float,
    not_run: list[str] | None = None,
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
                fh.write(redact(t.model_dump_json()) + "\n")
        with open(run_path / "failures.jsonl", "w", encoding="utf-8") as fh:
            for r in tri.records:
                fh.write(redact(r.model_dump_json()) + "\n")
        (run_path / "groups.json").write_text(
            redact(
                json.dumps(
                    {"schema_version": SCHEMA_VERSION, "groups": [g.model_dump(mode="json") for g in groups]},
                    indent=1,
                )
            )
        )
        write_summary(run_path, summary)
    except OSError as exc:
        raise RunDirError(
            f"cannot write the run directory {run_path}: {exc.strerror or exc}; pass a writable "
            "--ecdysis-run-dir (the results are still in the terminal summary)"
        ) from None
    problems = []
    try:
        write_junit(
            run_path / "junit.xml",
            trials,
            missing,
            threshold,
            not_run=not_run,
            stopped=summary.get("stopped"),
        )
    except Exception as exc:  # noqa: BLE001 - a rendering must never lose the run written above
        problems.append(
            f"junit.xml not written ({type(exc).__name__}: {exc}); summary.json and trials.jsonl "
            f"in {run_path} hold the results"
        )
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
    tmp.write_text(json.dumps(redact_json(summary), indent=2, ensure_ascii=False))
    tmp.replace(run_path / "summary.json")


def write_junit(
    path: Path,
    trials: list[TrialResult],
    missing: list[str],
    threshold: float,
    *,
    not_run: list[str] | None = None,
    stopped: str | None = None,
) -> Path:
    """`junit.xml`: one `<testsuite>` per suite, one `<testcase>` per trial with properties
    `reward`, `termination_reason`, `task_id`, `trial`, `suite`, `harness_id`; failures for reward < λ,
    errors for infrastructure errors and for missing cases (suite `missing`); cases pytest never ran because
    it stopped early (`not_run`, reason `stopped`) are skipped (suite `not_run`). Every text is made XML-safe
    (`safetext.xml`). Raises OSError when `path` cannot be written."""

    def x(text: str) -> str:
        return safetext.xml(redact(text))

    xml = JUnitXml(name="pytest-ecdysis")
    suites: dict[str, TestSuite] = {}
    for t in trials:
        ts = suites.get(t.suite)
        if ts is None:
            ts = suites[t.suite] = TestSuite(x(t.suite))
        module, _, name = x(t.nodeid or f"{t.suite}::{t.task_id}-t{t.trial}").rpartition("::")
        case = TestCase(
            name or x(t.nodeid), classname=module.replace("/", ".").removesuffix(".py"), time=t.wall_s
        )
        props = Properties()
        for key, value in (
            ("reward", "" if t.reward is None else f"{t.reward:g}"),
            ("termination_reason", t.termination_reason),
            ("task_id", t.task_id),
            ("trial", str(t.trial)),
            ("suite", t.suite),
            ("harness_id", t.harness_id),
        ):
            props.add_property(Property(key, x(value)))
        case.append(props)
        if t.is_infra_error:
            case.result = [Error(x(t.error or t.termination_reason), x(t.termination_reason))]
        elif not is_success(t.reward, threshold):
            comps = ", ".join(f"{k}={v:g}" for k, v in t.components.items()) or "none"
            case.result = [
                Failure(
                    x(
                        f"reward {_fmt(t.reward)} < λ {threshold:g}; components {comps}; "
                        f"termination {t.termination_reason}"
                    ),
                    "below_threshold",
                )
            ]
        ts.append(case)  # add_testcase recounts the suite each time (quadratic)
    if missing:
        ts = suites["missing"] = TestSuite("missing")
        for nodeid in missing:
            module, _, name = x(nodeid).rpartition("::")
            case = TestCase(name or x(nodeid), classname=module.replace("/", ".").removesuffix(".py"))
            case.result = [
                Error(
                    "the case was collected but never reported a result "
                    "(crashed worker or unserialisable report)",
                    "missing",
                )
            ]
            ts.append(case)
    if not_run:
        ts = suites["not_run"] = TestSuite("not_run")
        for nodeid in not_run:
            module, _, name = x(nodeid).rpartition("::")
            case = TestCase(name or x(nodeid), classname=module.replace("/", ".").removesuffix(".py"))
            case.result = [
                Skipped(x(f"not run: pytest stopped early ({stopped or 'interrupted'})"), "not_run")
            ]
            ts.append(case)
    for ts in suites.values():
        ts.update_statistics()
        xml.add_testsuite(ts)
    xml.update_statistics()
    xml.write(str(path), pretty=len(trials) <= 2000)  # pretty-printing costs ~1 ms per case
    return path
