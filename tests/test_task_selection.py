"""`--ecdysis-tasks` and the gate's baseline are checked right after collection, before any trial runs:
an id that selects nothing and a baseline of other tasks are usage errors (exit 4), with the real τ² suites."""

from __future__ import annotations

import json

import pytest

#: (tau2 is not imported in this process: the ids are τ²'s, checked by the subprocesses' messages)

EXIT_USAGE = pytest.ExitCode.USAGE_ERROR


@pytest.fixture(autouse=True)
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """No trial may run in these tests; a dead simulated-model URL makes sure none could."""
    monkeypatch.setenv("ECDYSIS_SIM_URL", "http://127.0.0.1:9")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--ecdysis-run-dir", str(pytester.path / "runs"), *args, timeout=600
    )


def _refused_before_any_trial(result: pytest.RunResult, pytester: pytest.Pytester, *message: str) -> None:
    assert result.ret == EXIT_USAGE, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(list(message))
    out = result.stdout.str()
    assert "passed" not in out and "failed" not in out and "skipped" not in out
    assert not (pytester.path / "runs").exists()


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["plain", "xdist"])
def test_an_id_of_a_suite_that_was_not_collected_is_a_usage_error(
    pytester: pytest.Pytester, xdist: tuple
) -> None:
    """A retail-only train id (72: airline has 0-49) with only the airline module collected used to end as '1 skipped', exit 0;
    now it says which suite has the id, with or without xdist; an id beside it that selects a case changes
    nothing."""
    result = _run(pytester, "--pyargs", "pytest_ecdysis_tau2.test_airline", "--ecdysis-tasks", "0,72", *xdist)
    _refused_before_any_trial(
        result,
        pytester,
        "*--ecdysis-tasks: 72 is a task of tau2-retail, whose tests were "
        "not collected (this session collected tau2-airline)*",
    )


def test_an_id_of_another_split_or_of_no_suite_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """An id of the test split with the train split names the split to pass; an id of no suite names the
    valid ids; both are usage errors like every other bad option (was a collection error, exit 2)."""
    test_only = "18"  # airline's test split, in no train split (test_suite_runner checks that)
    result = _run(pytester, "--pyargs", "pytest_ecdysis_tau2", "--ecdysis-tasks", f"{test_only},9999")
    _refused_before_any_trial(
        result,
        pytester,
        f"*--ecdysis-tasks: {test_only} is not in split 'train' (tau2-airline has it in split 'test'*); pass "
        "--ecdysis-split test or all*; 9999 is a task of no installed suite; ids of split 'train': "
        "tau2-airline: 0, 1, 3*; tau2-retail: *",
    )


def _baseline(pytester: pytest.Pytester, tasks: list[str]) -> str:
    path = pytester.path / "baseline.json"
    path.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "ecdysis-baseline",
                "suite": "tau2-airline",
                "split": "train",
                "trials": 1,
                "model": "sim",
                "threshold": 1.0,
                "suite_score": 1.0,
                "n_tasks": len(tasks),
                "tasks": {f"tau2-airline/{t}": {"n": 1, "successes": 1, "solved": True} for t in tasks},
            }
        )
    )
    return str(path)


def test_gate_with_a_baseline_of_other_tasks_is_refused_before_any_trial(pytester: pytest.Pytester) -> None:
    """A baseline saved with --ecdysis-tasks 0,1 against a run of task 0, and against a run of the whole
    split: refused after collection as a usage error (was: after the whole suite ran, exit 1)."""
    baseline = _baseline(pytester, ["0", "1"])
    args = ("--pyargs", "pytest_ecdysis_tau2.test_airline", "--ecdysis-gate", "--ecdysis-baseline", baseline)
    result = _run(pytester, *args, "--ecdysis-tasks", "0")
    _refused_before_any_trial(
        result,
        pytester,
        "*--ecdysis-gate refuses baseline * before any trial: it was made "
        "with other tasks (tasks: baseline has 2, this run 1 (only in the "
        "baseline: tau2-airline/1; only in this run: none))*",
    )
    result = _run(pytester, *args)
    _refused_before_any_trial(result, pytester, "*refuses baseline*tasks: baseline has 2, this run 30*")


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["plain", "xdist"])
def test_ids_a_split_gave_another_shard_are_no_error(pytester: pytest.Pytester, xdist: tuple) -> None:
    """`--ecdysis-tasks 0,1,3,4,5,7 --splits 2 --group 1` (pytest-split) exited 4: the ids of the other shard
    counted as unknown, with a wrong message (an airline id "is a task of tau2-retail, whose tests were not
    collected"). An id of a collected suite that the split deselected is fine; an id of a suite that was not
    collected still is a usage error under the split."""
    pytest.importorskip("pytest_split", reason="pytest-split is in the dev extra (pip install -e .[dev])")
    split = ("--splits", "2", "--group", "1", "--co", "-q", *xdist)
    result = _run(
        pytester, "--pyargs", "pytest_ecdysis_tau2.test_airline", "--ecdysis-tasks", "0,1,3,4,5,7", *split
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    out = result.stdout.str()
    assert "test_airline[0-t0]" in out and "test_airline[7-t0]" not in out  # the split did deselect some
    result = _run(
        pytester, "--pyargs", "pytest_ecdysis_tau2.test_airline", "--ecdysis-tasks", "0,1,72", *split
    )
    assert result.ret == EXIT_USAGE
    result.stderr.fnmatch_lines(
        ["*--ecdysis-tasks: 72 is a task of tau2-retail, whose tests were not collected*"]
    )


def test_an_id_of_a_collected_suites_other_split_names_that_split_before_other_suites(
    pytester: pytest.Pytester,
) -> None:
    """`--ecdysis-tasks 2` on airline's train split: 2 is an airline *test* task and a
    retail train task; the message named only retail ("whose tests were not collected"). It now names the
    split of the collected suite that holds it and the option that selects it, then the other suite."""
    result = _run(pytester, "--pyargs", "pytest_ecdysis_tau2.test_airline", "--ecdysis-tasks", "2")
    _refused_before_any_trial(
        result,
        pytester,
        "*--ecdysis-tasks: 2 is not in split 'train' (tau2-airline has it in split 'test'); pass --ecdysis-split "
        "test or all to select it; it is a task of tau2-retail, whose tests were not collected*",
    )


def test_ids_that_all_selected_cases_ask_the_suites_for_nothing_and_others_are_still_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The workers wait for their first cases while the controller checks `--ecdysis-tasks`: ids that each
    selected a collected case need no list of the suites' tasks (τ²'s import and all its domains' tasks);
    an id that selected nothing is still looked up and named."""
    from pytest_ecdysis.core import registry
    from pytest_ecdysis.core.errors import UsageError
    from pytest_ecdysis.run.selection import check_tasks, classify

    asked = []
    monkeypatch.setattr(
        registry, "task_ids", lambda split: asked.append(split) or {"tau2-airline": ["3", "5"]}
    )
    collected = classify(
        ["pkg/test_airline.py::test_airline[3-t0]", "pkg/test_airline.py::test_airline[5-t0]"]
    )
    check_tasks(("3", "5"), "train", collected)
    assert asked == []
    with pytest.raises(UsageError, match="99 is a task of no installed suite"):
        check_tasks(("3", "99"), "train", collected)
    assert asked and asked[0] == "train"
