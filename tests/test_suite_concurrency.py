"""Many trials in flight per worker (`--ecdysis-concurrency C`): same cases, same results."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from pytest_ecdysis.run.xdist_schedule import owns
from pytest_ecdysis_tau2.trial.trial_pool import TrialPool


def test_pool_keeps_c_trials_in_flight_and_returns_each_its_own() -> None:
    """With C = 4, the first request starts 4 trials at once (a 4-party barrier that times out otherwise),
    and every key gets its own result, in the order pytest asks, also for a key outside the share."""
    barrier = threading.Barrier(4, timeout=20)
    started: list[int] = []

    def run(key: int) -> int:
        started.append(key)
        if key < 4:
            barrier.wait()  # raises BrokenBarrierError unless keys 0-3 run together
        return key * 10

    pool = TrialPool(list(range(8)), run, concurrency=4)
    assert [pool.result(k) for k in range(8)] == [k * 10 for k in range(8)]
    assert pool.result(99) == 990  # a case handed over from a crashed worker: run when asked
    assert sorted(started) == [*range(8), 99]  # no trial ran twice


def test_pool_hands_the_trials_error_to_its_case() -> None:
    """A trial that raises fails its own case only; the next trial's result is unaffected."""

    def run(key: int) -> int:
        if key == 1:
            raise RuntimeError("scorer died")
        return key

    pool = TrialPool([0, 1, 2], run, concurrency=3)
    assert pool.result(0) == 0
    with pytest.raises(RuntimeError, match="scorer died"):
        pool.result(1)
    assert pool.result(2) == 2


def test_shares_cover_the_collection_once() -> None:
    """Every case belongs to exactly one worker's share."""
    for workers in (1, 2, 3):
        for i in range(20):
            assert sum(owns(i, w, workers) for w in range(workers)) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--ecdysis-concurrency", "0"],
            "--ecdysis-concurrency must be 'auto' (an adaptive limit for the whole session) or an integer "
            ">= 1 (trials in flight per worker), got '0'",
        ),
        (["--ecdysis-concurrency", "many"], "--ecdysis-concurrency must be 'auto' * got 'many'"),
        (
            ["-n", "2", "--dist", "loadscope", "--ecdysis-concurrency", "4"],
            "--ecdysis-concurrency 4 needs xdist's --dist load",
        ),
    ],
)
def test_bad_concurrency_is_a_usage_error(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def _run(pytester: pytest.Pytester, run_dir: str, *extra: str) -> tuple[int, dict]:
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ecdysis_tau2.test_airline",
        "-n",
        "2",
        "-rA",
        "-p",
        "no:cacheprovider",
        "--ecdysis-split",
        "all",
        "--ecdysis-tasks",
        "0,1,2",
        "--ecdysis-trials",
        "2",
        "-o",
        "ecdysis_sim_nonce=tests",
        "--ecdysis-limits",
        "call-timeout=600",  # a loaded machine's slow reply is no infrastructure error
        "--ecdysis-run-dir",
        run_dir,
        *extra,
        timeout=900,
    )
    (path,) = (pytester.path / run_dir).iterdir()
    trials = {}
    for line in (path / "trials.jsonl").read_text().splitlines():
        row = json.loads(line)
        trials[row.pop("nodeid")] = {k: v for k, v in row.items() if k != "wall_s"}
    summary = json.loads((path / "summary.json").read_text())
    failures = sorted(
        json.dumps(_without_times(json.loads(x)), sort_keys=True) for x in _lines(path / "failures.jsonl")
    )
    outcomes = sorted(line for line in result.outlines if line.startswith(("PASSED", "FAILED", "ERROR")))
    return result.ret, {
        "trials": trials,
        "failures": failures,
        "outcomes": outcomes,
        "summary": _without_times(summary),
    }


def _without_times(doc: object) -> object:
    """The summary without the run id and wall times (the only fields concurrency may change)."""
    if isinstance(doc, dict):
        return {
            k: _without_times(v) for k, v in doc.items() if k not in ("run_id", "wall_s", "trials_wall_s")
        }
    return doc


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def test_concurrent_run_equals_the_sequential_run(pytester: pytest.Pytester) -> None:
    """Real τ² airline cases on the simulated model with a fixed nonce, -n 2, the harness's agent in its
    process per trial: with C = 3 per worker the cases, records (every field but wall time), failure
    records, summary and exit status equal those of the run without it. (Each run has its own run id and
    simulated server: conftest.py.)"""
    ret_one, one = _run(pytester, "one")
    ret_many, many = _run(pytester, "many", "--ecdysis-concurrency", "3")
    assert len(one["trials"]) == 6 and one["failures"]  # a failing case too (airline 2), so exit status 1
    assert ret_many == ret_one
    assert many == one
