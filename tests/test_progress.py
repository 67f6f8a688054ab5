"""Progress lines a person can follow: stage, done/total trials, elapsed, an estimate,
at least every ini `ecdysis_progress` seconds, during the session's trials and the evolution's sub-runs."""

from __future__ import annotations

import json

import pytest
from tiny_evolution import CONFTEST, make_project, run_evolution, script

from pytest_ecdysis.report.progress import Count, Ticker, read_count, status_line

SLOW_SUITE = """
import time
import pytest
from pytest_ecdysis import TrialResult, record_trial


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1", "2", "3"])
def test_task(request, task_id):
    time.sleep(0.6)
    reward = 1.0 if task_id != "3" else 0.0
    record_trial(request.node, TrialResult(suite="slow", task_id=task_id, trial=0, reward=reward,
                                           termination_reason="agent_stop", components={"db": reward}))
    assert reward >= 1.0
"""


def test_status_line_says_done_total_elapsed_and_an_estimate() -> None:
    """The pace so far estimates the rest; before the first trial, an earlier run's pace, else it says so."""
    assert status_line("round 1: validating", Count(done=10, total=30, failed=2), 65.0) == (
        "round 1: validating: 10/30 trials (2 failed), 1m05s elapsed, about 2m10s left"
    )
    assert status_line("test: start harness", Count(done=0, total=60), 30.0, seconds_per_trial=2.0) == (
        "test: start harness: 0/60 trials, 30s elapsed, about 1m30s left"
    )
    assert (
        status_line("s", Count(done=0, total=4), 3.0)
        == "s: 0/4 trials, 3s elapsed, estimate after the first trial"
    )
    assert status_line("round 2: diagnosis", None, 3725.0) == "round 2: diagnosis: 1h02m elapsed"
    # the pace counts from the end of collection: 100 s of workers starting do not inflate the estimate
    assert status_line("running the suite", Count(done=4, total=30, pace_s=20.0), 120.0) == (
        "running the suite: 4/30 trials, 2m00s elapsed, about 2m10s left"
    )


def test_ticker_repeats_its_line_until_the_stage_ends(tmp_path) -> None:
    """A ticker says a line every interval while the stage runs, reading the count each time, and stops."""
    import time

    lines: list[str] = []
    (tmp_path / "progress.json").write_text(json.dumps({"done": 1, "total": 3, "failed": 0}))
    with Ticker(lines.append, "stage", count=lambda: read_count(tmp_path / "progress.json"), interval_s=0.05):
        time.sleep(0.4)
    n = len(lines)
    time.sleep(0.2)
    assert n >= 3 and len(lines) == n and lines[0].startswith("stage: 1/3 trials, 0s elapsed, about 0s left")
    with Ticker(lines.append, "off", interval_s=0):
        time.sleep(0.1)
    assert len(lines) == n


def _run_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, suite: str, interval_s: float, *extra: str
) -> pytest.RunResult:
    """`pytest` in a subprocess on the trial-case module `suite` (no model: nothing is asked of one), with
    a progress line every `interval_s` seconds."""
    monkeypatch.setenv("ECDYSIS_SIM_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    pytester.makepyfile(test_suite=suite)
    pytester.mkpydir("harness")
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--ecdysis-harness",
        "harness",
        "-o",
        f"ecdysis_progress={interval_s}",
        *extra,
        timeout=300,
    )


def _clock(lines: list[str]) -> list[float]:
    """The seconds of each `ecdysis [t s] ...` line, in output order."""
    return [float(line.split("[", 1)[1].split("s]", 1)[0]) for line in lines if line.startswith("ecdysis [")]


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["plain", "xdist"])
def test_session_prints_progress_lines_and_writes_progress_json(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: tuple
) -> None:
    """While the trials run: `ecdysis [t s] running the suite: k/4 trials ...` lines; at the end
    progress.json in the run directory says 4/4 with 1 failed."""
    result = _run_suite(pytester, monkeypatch, SLOW_SUITE, 0.3, *xdist)
    assert result.ret == 1
    assert any(
        line.startswith("ecdysis [")
        and " running the suite: " in line
        and "/4 trials" in line
        and "elapsed" in line
        for line in result.stdout.lines
    ), result.stdout.str()
    # written where pytest's own terminal output goes, never into a running test's captured output (-n 0,
    # no terminal: the lines fell into the failing test's "Captured stdout call")
    assert "Captured stdout" not in result.stdout.str(), result.stdout.str()
    (run,) = (pytester.path / ".ecdysis" / "runs").iterdir()
    assert json.loads((run / "progress.json").read_text())["done"] == 4
    count = read_count(run / "progress.json")
    assert (count.done, count.total, count.failed) == (4, 4, 1) and count.pace_s is not None


FAST_SUITE = """
import time
import pytest
from pytest_ecdysis import TrialResult, record_trial


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", [str(i) for i in range(400)])
def test_task(request, task_id):
    time.sleep(0.004)
    record_trial(request.node, TrialResult(suite="fast", task_id=task_id, trial=0, reward=1.0,
                                           termination_reason="agent_stop", components={"db": 1.0}))
"""


def test_progress_lines_never_race_the_capture_of_tests_in_process(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without xdist the ticker's thread says its lines while the main thread switches output capture on and
    off around each test phase: every line reaches the terminal when said, in clock order, none lands in a
    test's captured output or after the session's summary (suspending capture from the thread put lines
    there)."""
    result = _run_suite(pytester, monkeypatch, FAST_SUITE, 0.002, "-rA")
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.lines
    clock = _clock(out)
    assert len(clock) > 20 and clock == sorted(clock), clock
    summary = max(i for i, line in enumerate(out) if " passed" in line and line.startswith("="))
    assert not any("running the suite" in line for line in out[summary:]), out[summary:]
    assert "running the suite" not in "\n".join(line for line in out if not line.startswith("ecdysis [")), (
        result.stdout.str()
    )


@pytest.mark.slow
def test_evolution_stages_print_progress_lines(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Diagnosis, editor call, validation sub-run and the held-out check's test-split scoring each report
    while they run, the sub-runs with their done/total trials read from the sub-run's progress.json; the final
    test-split lines say they reuse the held-out check's runs of the same bytes."""
    slow = "\n\nimport time as _time\n\n\n@pytest.fixture(autouse=True)\ndef _slow():\n    yield\n    _time.sleep(0.4)\n"
    project = make_project(
        pytester, monkeypatch, "import pytest\n" + CONFTEST + slow
    )  # trials that take time
    script(project, [{"knob": "x", "value": 2}])
    result = run_evolution(project, "--ecdysis-rounds", "1", "-o", "ecdysis_progress=0.2")
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    for stage in (
        "round 1: validating candidate tiny_harness@",
        "round 1: held-out check: scoring the candidate and the incumbent on the test split: ",
    ):
        assert any(
            stage in line and "elapsed" in line and line.startswith("ecdysis [") for line in out.splitlines()
        ), stage
    assert any("/4 trials" in line for line in out.splitlines() if "held-out check: scoring" in line)
    for side in ("start", "frozen"):
        assert any(
            line.startswith("ecdysis [") and f"test: {side} harness: suite score" in line and "reused" in line
            for line in out.splitlines()
        ), side
    assert any("/4 trials" in line for line in out.splitlines() if "validating candidate" in line)
    # one clock from the session's start: the evolution's lines go on from the suite's, never restart at 0
    clock = _clock(out.splitlines())
    assert clock == sorted(clock) and len(clock) > 3, clock
    # the incumbent's re-run beside the candidate reports under its own label, not as a second candidate
    assert any(
        "re-running the incumbent (paired with the candidate): " in line and "/4 trials" in line
        for line in out.splitlines()
    )
