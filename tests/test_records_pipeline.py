"""The controller's end of a run, through pytest as users run it: records across xdist workers.

A tiny synthetic suite (no τ²) records a `TrialResult` per case in a fixture and asserts reward >= λ.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

SYNTH = """
import json, os
import pytest
from pytest_ecdysis import record_trial
from pytest_ecdysis.core.records import ToolCallRecord, TrialResult

PLAN = json.loads({plan!r})  # {{suite: {{task_id: [reward or null (infra) per trial]}}}}
SUSPECT = set({suspect!r})
CASES = [(s, t, k) for s, tasks in PLAN.items() for t, rs in tasks.items() for k in range(len(rs))]


@pytest.fixture
def trial(request):
    suite, task, k = request.param
    reward = PLAN[suite][task][k]
    failed = reward is not None and reward < 1
    calls = [ToolCallRecord(name="get_order", arguments={{"order_id": task}}, result="{{}}", step=1)]
    if failed:
        calls.append(ToolCallRecord(name="update_order", arguments={{"order_id": "x" + task}},
                                    result="Error: order x" + task + " not found", error=True, step=3))
    result = TrialResult(
        suite=suite, task_id=task, trial=k, reward=reward,
        components={{"db": 1.0 if not failed else 0.0, "communicate": 1.0}} if reward is not None else {{}},
        termination_reason="user_stop" if reward is not None else "infrastructure_error",
        tool_calls=calls, steps=5,
        messages=[{{"role": "user", "content": "hello " + task}}, {{"role": "assistant", "content": "ok"}},
                  {{"role": "assistant", "content": None, "tool_calls": [{{"name": "get_order", "arguments": {{}}}}]}},
                  {{"role": "tool", "content": "Error: not found" if failed else "{{}}"}},
                  {{"role": "assistant", "content": "done"}}],
        tokens={{"prompt": 100, "completion": 20, "total": 120}}, wall_s=0.01,
        suspect=task in SUSPECT, error=None if reward is not None else "endpoint down",
    )
    record_trial(request.node, result)
    if reward is None:
        raise RuntimeError("infrastructure error: endpoint down")
    return result


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("trial", CASES, indirect=True, ids=[f"{{s}}-{{t}}-t{{k}}" for s, t, k in CASES])
def test_case(trial):
    if os.environ.get("SYNTH_CRASH") == f"{{trial.suite}}-{{trial.task_id}}-t{{trial.trial}}":
        os._exit(1)
    assert trial.reward >= 1.0, f"reward {{trial.reward}} components {{trial.components}}"
"""

#: three tasks x 3 trials: task 1 always solved, task 2 solved 2 of 3, task 3 never.
PLAN = {"syn-air": {"1": [1.0, 1.0, 1.0], "2": [1.0, 0.0, 1.0], "3": [0.0, 0.0, 0.0]}}


def write_suite(
    pytester: pytest.Pytester, plan: dict = PLAN, suspect: tuple = (), name: str = "test_synth"
) -> None:
    pytester.makepyfile(**{name: SYNTH.format(plan=json.dumps(plan), suspect=list(suspect))})
    (pytester.path / "harness").mkdir(exist_ok=True)
    (pytester.path / "harness" / "__init__.py").write_text("# a harness for the synthetic suite\n")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No simulated server (the synthetic suite needs no model) and a fresh run id per run."""
    monkeypatch.setenv("ECDYSIS_SIM_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ECDYSIS_RUN_ID", "unused")
    monkeypatch.delenv("ECDYSIS_RUN_ID")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    import os

    result = pytester.runpytest("--ecdysis-harness", "harness", "-p", "no:cacheprovider", *args)
    os.environ.pop("ECDYSIS_RUN_ID", None)  # the inner controller exported its run id
    return result


def only_run_dir(pytester: pytest.Pytester) -> Path:
    runs = sorted((pytester.path / ".ecdysis" / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _strip(records: list[dict]) -> list[str]:
    return sorted(
        json.dumps({k: v for k, v in r.items() if k not in ("wall_s",)}, sort_keys=True) for r in records
    )


def test_xdist_and_plain_runs_give_the_same_records(pytester: pytest.Pytester, env: None) -> None:
    """With -n 2 and without xdist the run directory holds the same trials, failures and groups."""
    write_suite(pytester)
    out = {}
    for mode, extra in (("plain", ()), ("xdist", ("-n", "2"))):
        result = run(pytester, "--ecdysis-run-dir", f"runs-{mode}", *extra)
        result.assert_outcomes(passed=5, failed=4)
        (run_dir,) = list((pytester.path / f"runs-{mode}").iterdir())
        out[mode] = {
            "trials": _strip(read_jsonl(run_dir / "trials.jsonl")),
            "failures": _strip(read_jsonl(run_dir / "failures.jsonl")),
            "groups": json.loads((run_dir / "groups.json").read_text()),
            "summary": json.loads((run_dir / "summary.json").read_text()),
        }
    assert out["plain"]["trials"] == out["xdist"]["trials"]
    assert out["plain"]["failures"] == out["xdist"]["failures"]
    assert out["plain"]["groups"] == out["xdist"]["groups"]
    s = out["xdist"]["summary"]
    assert s["n_trials"] == 9 and s["n_failures"] == 4 and s["missing"] == []
    assert s["suite_score"] == pytest.approx(5 / 9)
    assert s["pass_hat_k"]["3"] == pytest.approx(1 / 3)  # only task 1 solved in all 3
    groups = out["xdist"]["groups"]["groups"]
    assert groups[0]["cross_task"] and groups[0]["tasks"] == ["syn-air/2", "syn-air/3"]
    assert groups[0]["signature"] == "user_stop|db|update_order|not_found"


def test_a_worker_killed_mid_run_is_named_as_missing(
    pytester: pytest.Pytester, env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case whose worker dies (os._exit) is named as missing in the summary and fails the run."""
    write_suite(pytester)
    monkeypatch.setenv("SYNTH_CRASH", "syn-air-2-t0")
    result = run(pytester, "-n", "2")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*PROBLEM: 1 collected case(s) never reported*test_case[[]syn-air-2-t0[]]*",
            "*crashed while running*",
        ]
    )
    summary = json.loads((only_run_dir(pytester) / "summary.json").read_text())
    assert summary["missing"] == ["test_synth.py::test_case[syn-air-2-t0]"]
    assert summary["n_trials"] == 8


def test_unserialisable_result_is_reported_not_dropped(pytester: pytest.Pytester, env: None) -> None:
    """A trial result JSON cannot carry is named, and its case counts as missing (exit 1, not 0)."""
    write_suite(pytester, {"syn-air": {"1": [1.0]}})
    pytester.makeconftest(
        textwrap.dedent("""
        import pytest
        from pytest_ecdysis.plugin import TRIAL_KEY

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_makereport(item, call):
            if call.when == "call":
                item.stash[TRIAL_KEY] = dict(item.stash[TRIAL_KEY], extra=object())
    """)
    )
    result = run(pytester, "-n", "2")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*is not JSON-serialisable*", "*1 collected case(s) never reported*"])


def test_infra_errors_and_suspect_tasks_are_kept_apart(pytester: pytest.Pytester, env: None) -> None:
    """Infrastructure errors are counted, not recorded; suspect tasks are scored but not grouped."""
    write_suite(pytester, {"syn-air": {"1": [None, 1.0], "2": [0.0, 0.0], "3": [0.0, 1.0]}}, suspect=("2",))
    result = run(pytester)
    result.assert_outcomes(passed=2, failed=3, errors=1)
    run_dir = only_run_dir(pytester)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["n_infra_errors"] == 1 and summary["suspect_tasks"] == ["syn-air/2"]
    assert summary["suite_score"] == pytest.approx(2 / 5)  # the infra error has no reward
    failures = read_jsonl(run_dir / "failures.jsonl")
    assert sorted((f["task_id"], f["suspect"]) for f in failures) == [("2", True), ("2", True), ("3", False)]
    groups = json.loads((run_dir / "groups.json").read_text())["groups"]
    assert [g["tasks"] for g in groups] == [["syn-air/3"]]


def test_two_suites_give_a_combined_summary(pytester: pytest.Pytester, env: None) -> None:
    """One run over two suites: `suite` joins them with '+', `by_suite` holds each one's figures."""
    write_suite(pytester, {"syn-air": {"1": [1.0]}, "syn-ret": {"1": [0.0], "2": [1.0]}})
    run(pytester)
    summary = json.loads((only_run_dir(pytester) / "summary.json").read_text())
    assert summary["suite"] == "syn-air+syn-ret"
    assert summary["by_suite"]["syn-air"]["suite_score"] == 1.0
    assert summary["by_suite"]["syn-ret"]["suite_score"] == 0.5
    assert summary["suite_score"] == pytest.approx(2 / 3)


def test_ordinary_tests_write_no_run_directory(pytester: pytest.Pytester, env: None) -> None:
    """A session without trial cases leaves no trace (the plugin is installed for every pytest run)."""
    pytester.makepyfile(test_plain="def test_x():\n    assert True\n")
    (pytester.path / "harness").mkdir()
    (pytester.path / "harness" / "__init__.py").write_text("")
    result = run(pytester, "-n", "2")
    assert result.ret == 0
    assert not (pytester.path / ".ecdysis").exists()
    assert "ecdysis ====" not in result.stdout.str()


def test_unusable_run_dir_is_a_usage_error_before_any_trial(pytester: pytest.Pytester, env: None) -> None:
    """--ecdysis-run-dir under a file: a usage error at configure time, before any trial runs."""
    write_suite(pytester, {"syn-air": {"1": [1.0]}})
    (pytester.path / "blocker").write_text("a file, not a directory")
    result = run(pytester, "--ecdysis-run-dir", "blocker/runs")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*--ecdysis-run-dir blocker/runs:*is not a directory*writable --ecdysis-run-dir*"]
    )
    assert "syn-air" not in result.stdout.str()


def test_unwritable_run_dir_still_prints_results(
    pytester: pytest.Pytester, env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run directory that cannot be written at session end: one clear message, and the summary is still
    printed (here the run's own directory is taken by a file)."""
    write_suite(pytester, {"syn-air": {"1": [1.0]}})
    (pytester.path / "runs").mkdir()
    (pytester.path / "runs" / "taken").write_text("a file, not a directory")
    monkeypatch.setenv("ECDYSIS_RUN_ID", "taken")
    result = run(pytester, "--ecdysis-run-dir", "runs")
    result.stdout.fnmatch_lines(
        ["syn-air * 1 * 1 * 1.000*", "*PROBLEM: cannot write the run directory*--ecdysis-run-dir*"]
    )


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["plain", "xdist"])
def test_deselected_cases_are_not_missing(pytester: pytest.Pytester, env: None, xdist: tuple) -> None:
    """Cases deselected with -k are not expected: only the ones that were to run are checked."""
    write_suite(pytester)
    result = run(pytester, "-k", "syn-air-1", *xdist)
    assert result.parseoutcomes()["passed"] == 3 and result.ret == 0  # xdist reports no "deselected"
    assert "PROBLEM" not in result.stdout.str()
    assert json.loads((only_run_dir(pytester) / "summary.json").read_text())["missing"] == []
