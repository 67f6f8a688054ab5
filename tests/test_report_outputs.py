"""Run-directory renderings: junit.xml read back, the `ecdysis` CLI, Markdown summaries, the PR body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, Properties

from pytest_ecdysis import cli
from pytest_ecdysis.core.records import SCHEMA_VERSION, TrialResult
from pytest_ecdysis.report import pr_body
from pytest_ecdysis.report import summary as report
from pytest_ecdysis.run import files as run_files


def test_junit_has_per_case_properties_and_results(tmp_path: Path) -> None:
    """junit.xml read back with junitparser: one suite per suite, properties per case, failure/error/missing."""
    trials = [
        TrialResult(
            suite="tau2-airline",
            task_id="3",
            trial=0,
            nodeid="t/test_air.py::test_airline[3-t0]",
            reward=1.0,
            termination_reason="user_stop",
            wall_s=1.5,
        ),
        TrialResult(
            suite="tau2-airline",
            task_id="4",
            trial=1,
            nodeid="t/test_air.py::test_airline[4-t1]",
            reward=0.0,
            components={"db": 0.0},
            termination_reason="agent_stop",
        ),
        TrialResult(
            suite="tau2-retail",
            task_id="9",
            trial=0,
            nodeid="t/test_ret.py::test_retail[9-t0]",
            termination_reason="infrastructure_error",
            error="HTTP 503 after 3 retries",
        ),
    ]
    path = run_files.write_junit(tmp_path / "junit.xml", trials, ["t/test_ret.py::test_retail[10-t0]"], 1.0)
    xml = JUnitXml.fromfile(str(path))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"tau2-airline", "tau2-retail", "missing"}
    cases = {c.name: c for s in xml for c in s}
    props = {p.name: p.value for p in cases["test_airline[4-t1]"].child(Properties)}
    assert props == {
        "reward": "0",
        "termination_reason": "agent_stop",
        "task_id": "4",
        "trial": "1",
        "suite": "tau2-airline",
        "harness_id": "",
    }
    assert cases["test_airline[3-t0]"].is_passed and cases["test_airline[3-t0]"].time == 1.5
    assert cases["test_airline[3-t0]"].classname == "t.test_air"
    assert isinstance(cases["test_airline[4-t1]"].result[0], Failure)
    assert "components db=0" in cases["test_airline[4-t1]"].result[0].message
    assert isinstance(cases["test_retail[9-t0]"].result[0], Error)
    assert isinstance(cases["test_retail[10-t0]"].result[0], Error)
    assert suites["tau2-airline"].failures == 1 and suites["missing"].errors == 1


def make_run(root: Path, name: str, suite: str, tasks: dict[str, bool], score: float) -> Path:
    run = root / name
    run.mkdir(parents=True)
    summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": name,
        "suite": suite,
        "by_suite": {
            suite: {
                "n_tasks": len(tasks),
                "n_trials": len(tasks),
                "suite_score": score,
                "pass_hat_k": {"1": score},
            }
        },
        "split": "train",
        "trials": 1,
        "threshold": 1.0,
        "n_tasks": len(tasks),
        "n_trials": len(tasks),
        "suite_score": score,
        "pass_at_k": {"1": score},
        "pass_hat_k": {"1": score},
        "n_failures": 1,
        "n_infra_errors": 0,
        "suspect_tasks": [],
        "wall_s": 3.0,
        "tokens": {"prompt": 10, "completion": 5, "total": 15},
        "cost_usd": None,
        "cost_note": "unknown model",
        "harness_id": "example_harness@abc",
        "model": "my-model",
        "tasks": {k: {"n": 1, "successes": int(v), "infra_errors": 0, "solved": v} for k, v in tasks.items()},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "groups.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "groups": [
                    {
                        "signature": "user_stop|db|book|not_found",
                        "cross_task": True,
                        "tasks": ["a", "b"],
                        "records": ["a/t0", "b/t0"],
                    }
                ],
            }
        )
    )
    return run


def test_cli_show_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`show` prints the score table and groups; `compare` lists flips both ways; unknown cost says unknown."""
    a = make_run(
        tmp_path,
        "A",
        "tau2-airline",
        {"tau2-airline/1": True, "tau2-airline/2": False, "tau2-airline/3": True},
        0.667,
    )
    b = make_run(
        tmp_path,
        "B",
        "tau2-airline",
        {"tau2-airline/1": False, "tau2-airline/2": True, "tau2-airline/3": True},
        0.667,
    )
    assert cli.main(["show", str(a)]) == 0
    out = capsys.readouterr().out
    assert "tau2-airline" in out and "0.667" in out and "cost unknown" in out
    assert "cross-task   2 rec   2 tasks  user_stop|db|book|not_found" in out
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "solved -> failed (1): tau2-airline/1" in out and "failed -> solved (1): tau2-airline/2" in out


def test_cli_refuses_runs_of_different_suites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Comparing an airline run with a retail run: exit 2 and one line naming both suites."""
    a = make_run(tmp_path, "A", "tau2-airline", {"tau2-airline/1": True}, 1.0)
    b = make_run(tmp_path, "B", "tau2-retail", {"tau2-retail/1": True}, 1.0)
    assert cli.main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "different suite" in err and "'tau2-airline'" in err and "'tau2-retail'" in err
    assert cli.main(["show", str(tmp_path / "nope")]) == 2
    assert "a pytest-ecdysis run directory?" in capsys.readouterr().err


def test_markdown_escapes_pipes_in_signatures(tmp_path: Path) -> None:
    """Group signatures contain '|': in the Markdown table they are escaped so the table keeps its columns."""
    summary, groups = report.read_run(make_run(tmp_path, "A", "s", {"s/1": True}, 1.0))
    md = report.summary_markdown(summary, groups)
    row = next(line for line in md.splitlines() if "user_stop" in line)
    assert row.replace("\\|", "").count("|") == 5


def test_markdown_names_suspect_tasks_like_the_terminal(tmp_path: Path) -> None:
    """A failure of a suspect task counts in `failures` but is in no group: the job summary says why, as the
    terminal section does."""
    summary, groups = report.read_run(make_run(tmp_path, "A", "s", {"s/1": True}, 1.0))
    assert "suspect" not in report.summary_markdown(summary, groups)
    summary["suspect_tasks"] = ["tau2-retail/2", "tau2-retail/3"]
    md = report.summary_markdown(summary, groups)
    assert "suspect tasks (scored, kept out of evidence): `tau2-retail/2`, `tau2-retail/3`" in md
    text = "\n".join(report.summary_lines(summary, groups))
    assert "suspect tasks (scored, kept out of evidence): tau2-retail/2, tau2-retail/3" in text


def make_evolution_run(root: Path) -> Path:
    """A recorded evolution run directory (docs/records.md) (two rounds, the second accepted)."""
    run = make_run(root, "evo", "tau2-airline", {"tau2-airline/1": False}, 0.4)
    summary = json.loads((run / "summary.json").read_text())
    summary["model"] = summary["diagnosis_model"] = "gpt-4o-mini"
    (run / "summary.json").write_text(json.dumps(summary))
    evo = {
        "schema_version": 1,
        "branch": "ecdysis/evolve-20261130",
        "wall_s": 812.5,
        "rounds": [
            {
                "round": 1,
                "strategy": "ecdysis",
                "score_before": 0.4,
                "score_after": 0.38,
                "accepted": False,
                "editor_calls": 1,
                "tokens": {"prompt": 1000, "completion": 200, "total": 1200},
                "wall_s": 300.0,
                "flips": {"solved_to_failed": ["tau2-airline/5"], "failed_to_solved": []},
                "outcome": "rejected",
            },
            {
                "round": 2,
                "strategy": "ecdysis",
                "score_before": 0.4,
                "score_after": 0.5,
                "accepted": True,
                "editor_calls": 1,
                "tokens": {"prompt": 1000000, "completion": 0, "total": 1000000},
                "wall_s": 400.0,
                "flips": {
                    "solved_to_failed": ["tau2-airline/9"],
                    "failed_to_solved": ["tau2-airline/1", "tau2-airline/4"],
                },
                "outcome": "accepted",
            },
        ],
        "test": {
            "start": {"suite_score": 0.35, "pass_hat_k": {"1": 0.35, "2": 0.2, "3": 0.1}},
            "frozen": {"suite_score": 0.45, "pass_hat_k": {"1": 0.45, "2": 0.3, "3": 0.2}},
            "trials": 3,
            "transfer": {"sim/strong": {"start": 0.6, "frozen": 0.65}},
        },
    }
    (run / "evolution.json").write_text(json.dumps(evo))
    (run / "rounds" / "2").mkdir(parents=True)
    (run / "rounds" / "2" / "spec.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "summary": "Name the argument and its expected form in tool errors.",
                "changes": [
                    {
                        "component": "environment_contract",
                        "files": ["feedback.py"],
                        "description": "errors name the argument and expected form",
                        "trigger": "a tool error",
                        "addresses": ["user_stop|db|book|not_found"],
                        "expected_effect": "id errors repaired",
                        "risks": ["longer tool messages"],
                        "guards": ["only on errors"],
                    }
                ],
                "left_alone": [{"signature": "max_steps|none|-|-", "reason": "single task"}],
                "watch_tasks": ["9"],
            }
        )
    )
    return run


def test_pr_body_from_a_recorded_evolution_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PR body: test scores before/after with pass^k, each round, flips and spec of accepted rounds, cost."""
    run = make_evolution_run(tmp_path)
    body = pr_body.render_pr_body(run)
    assert "| before (start) | 0.350 | 0.350 | 0.200 | 0.100 |" in body
    assert "| after (frozen) | 0.450 | 0.450 | 0.300 | 0.200 |" in body
    assert "change on test: +0.100" in body
    assert "| 1 | ecdysis | 0.400 | 0.380 | rejected |" in body
    assert "### Round 2 (accepted)" in body and "### Round 1" not in body
    assert "failed -> solved: tau2-airline/1, tau2-airline/4" in body
    assert "solved -> failed: tau2-airline/9" in body
    assert "**environment_contract** (`feedback.py`)" in body and "risks: longer tool messages" in body
    assert "left alone: `max_steps|none|-|-`" in body
    assert "transfer to `sim/strong`: 0.600 -> 0.650" in body
    # 1,001,000 prompt tokens at gpt-4o-mini's 0.15 USD per million, 200 completion at 0.6
    assert "estimated cost $0.1503" in body
    assert cli.main(["pr-body", str(run)]) == 0
    assert capsys.readouterr().out == body


def test_pr_body_without_evolution_json_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run directory that is not an evolution run: exit 2 naming evolution.json."""
    run = make_run(tmp_path, "plain", "s", {"s/1": True}, 1.0)
    assert cli.main(["pr-body", str(run)]) == 2
    err = capsys.readouterr().err
    assert "no evolution.json" in err and "--ecdysis-evolve" in err and "ecdysis show" in err


def test_user_simulator_tokens_shown_when_spent(tmp_path: Path) -> None:
    """A real user model's tokens (part of the cost) appear in the terminal and Markdown summaries."""
    summary, groups = report.read_run(make_run(tmp_path, "A", "s", {"s/1": True}, 1.0))
    assert "user simulator" not in report.summary_markdown(summary, groups)
    summary["user_tokens"] = {"prompt": 40, "completion": 2, "total": 42}
    assert "user simulator tokens 42" in report.summary_markdown(summary, groups)
    assert any("user simulator tokens 42" in line for line in report.summary_lines(summary, groups))


def test_cli_compare_marks_runs_of_different_task_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 3-task run against a 2-task run (another --ecdysis-tasks): the report says so first, does not
    compare the whole-run scores, and scores both on the common tasks."""
    a = make_run(
        tmp_path,
        "A",
        "tau2-airline",
        {"tau2-airline/1": True, "tau2-airline/2": False, "tau2-airline/3": False},
        0.333,
    )
    b = make_run(tmp_path, "B", "tau2-airline", {"tau2-airline/1": True, "tau2-airline/2": True}, 1.0)
    assert cli.main(["compare", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "DIFFERENT TASK SETS: 3 tasks vs 2, 2 in common; the whole-run scores (0.333 and 1.000) "
        "are not comparable, so only the common tasks are"
    )
    assert lines[2] == "score on the 2 common tasks 0.500 -> 1.000 (+0.500)"
    assert "tasks only in A: tau2-airline/3; only in B: none" in lines
