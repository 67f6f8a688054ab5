"""Crash messages blame what crashed (pytest-xdist 814), with pytest as users run it.

Every xdist worker dies importing a conftest: the run said "no trial case was collected: check the test
paths and --ecdysis-tasks". A worker dies mid-trial: one PROBLEM line blamed report serialisation. Each
now names the crash and where its traceback is (the terminal's "[gwN] node down", summary.json
`worker_crashes`). Uses the synthetic suite of `test_records_pipeline.py` (no τ², no model).
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from test_records_pipeline import env, only_run_dir, run, write_suite  # noqa: F401 - env is a fixture

CRASHING_CONFTEST = {
    "raises": 'raise RuntimeError("boom in conftest")',
    "exits": "os._exit(3)",
}


def crashing_conftest(pytester: pytest.Pytester, how: str) -> None:
    """A conftest that kills every xdist worker importing it; the controller (pytester runs it in this
    process, whose pid is the marker) imports it unharmed, even when this test itself runs on a worker."""
    pytester.makeconftest(
        textwrap.dedent(f"""
        import os
        if os.getpid() != {os.getpid()}:
            {CRASHING_CONFTEST[how]}
    """)
    )


@pytest.mark.parametrize("how", list(CRASHING_CONFTEST))
def test_workers_crashing_on_a_conftest_are_named_not_blamed_on_the_test_paths(
    pytester: pytest.Pytester,
    env: None,  # noqa: F811
    how: str,
) -> None:
    """Exit status stays pytest's (5: no tests ran); the PROBLEM line and summary.json name the crash and
    where its traceback is, and never say "no trial case was collected"."""
    write_suite(pytester, {"syn-air": {"1": [1.0], "2": [0.0]}})
    crashing_conftest(pytester, how)
    result = run(pytester, "-n", "2", "--max-worker-restart", "1", "--ecdysis-save-baseline", "b.json")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, out
    assert "no trial case was collected" not in out
    result.stdout.fnmatch_lines(
        [
            "*PROBLEM: every xdist worker crashed before collecting a test*the first gw*"
            "node down*summary.json `worker_crashes`*"
        ]
    )
    summary = json.loads((only_run_dir(pytester) / "summary.json").read_text())
    assert summary["problems"][0].startswith("every xdist worker crashed before collecting a test")
    assert summary["worker_crashes"] and all(not c["collected"] for c in summary["worker_crashes"])
    if how == "raises":
        assert (
            "boom in conftest" in summary["problems"][0]
            and "boom in conftest" in summary["worker_crashes"][0]["error"]
        )
    assert not any("endpoint is healthy" in p for p in summary["problems"])


def test_the_gate_verdict_names_the_worker_crash(pytester: pytest.Pytester, env: None) -> None:  # noqa: F811
    """A gate run whose workers all crash fails (exit 1) with the crash as its reason."""
    write_suite(pytester, {"syn-air": {"1": [1.0]}})
    assert run(pytester, "--ecdysis-save-baseline", "b.json").ret == 0
    crashing_conftest(pytester, "raises")
    result = run(
        pytester, "-n", "2", "--max-worker-restart", "1", "--ecdysis-gate", "--ecdysis-baseline", "b.json"
    )
    assert result.ret == 1, result.stdout.str()
    # two runs started in the same second sort by their random suffix: find the gate's by its content
    summaries = [
        json.loads((r / "summary.json").read_text()) for r in (pytester.path / ".ecdysis" / "runs").iterdir()
    ]
    assert len(summaries) == 2 and sum("gate" in s for s in summaries) == 1, summaries
    gate = next(s["gate"] for s in summaries if "gate" in s)
    assert any(
        "every xdist worker crashed before collecting a test" in r and "boom in conftest" in r
        for r in gate["reasons"]
    ), gate["reasons"]
    assert not any("check the test paths" in r for r in gate["reasons"])


def test_a_worker_dying_mid_trial_is_named_and_not_blamed_on_serialisation(
    pytester: pytest.Pytester,
    env: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The only case's worker dies (os._exit) mid-trial: the PROBLEM lines name the crashed case, say the
    worker died and where to look; none blames a report xdist cannot serialise."""
    write_suite(pytester, {"syn-air": {"1": [1.0]}})
    monkeypatch.setenv("SYNTH_CRASH", "syn-air-1-t0")
    result = run(pytester, "-n", "2", "--max-worker-restart", "1")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "cannot serialise" not in out
    result.stdout.fnmatch_lines(
        [
            "*PROBLEM: xdist worker(s) crashed while running: test_synth.py::test_case[[]syn-air-1-t0[]]*"
            "died mid-trial*node down*"
        ]
    )
    summary = json.loads((only_run_dir(pytester) / "summary.json").read_text())
    assert [c["collected"] for c in summary["worker_crashes"]] == [True]
