"""session.exit_status and the evolution hand-off, on hand-made state (no pytest run inside)."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ecdysis.core.errors import GitError
from pytest_ecdysis.gate.baseline import GateVerdict
from pytest_ecdysis.run import coverage as run_coverage
from pytest_ecdysis.run import session


def outcome(gate: GateVerdict | None = None, run_path: Path | None = Path("/tmp/x")) -> session.RunOutcome:
    return session.RunOutcome(summary={}, groups=[], missing=[], problems=[], run_path=run_path, gate=gate)


def state(evolve: bool = False, out: session.RunOutcome | None = None) -> SimpleNamespace:
    return SimpleNamespace(cfg=SimpleNamespace(evolve=evolve), outcome=out)


def verdict(passed: bool) -> GateVerdict:
    return GateVerdict(passed=passed, score=0.5, baseline_score=0.5, tolerance=0.0)


def test_exit_status_follows_the_gate_and_keeps_pytest_errors() -> None:
    """Gate passed -> 0 even after failed tests (pytest's 1); failed -> 1; interrupted/internal/usage kept."""
    assert session.exit_status(state(out=outcome(verdict(True))), 1) == 0
    assert session.exit_status(state(out=outcome(verdict(False))), 0) == 1
    assert session.exit_status(state(out=outcome(verdict(False))), 5) == 1  # "no tests ran"
    for code in (2, 3, 4):
        assert session.exit_status(state(out=outcome(verdict(True))), code) is None
    assert session.exit_status(state(out=outcome()), 1) is None  # a plain run: pytest's meaning
    assert session.exit_status(state(out=None), 1) is None


def test_evolution_errors_are_reported_and_fail_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_evolution raising an EcdysisError -> a clear message and exit 1; returning -> exit 0; the
    validation sub-runs it starts do not see $GITHUB_STEP_SUMMARY (one job summary, not one per sub-run)."""
    fake = types.ModuleType("pytest_ecdysis.evolve.loop")

    def boom(session_, state_, summary):  # noqa: ANN001, ANN202
        raise GitError("the branch ecdysis/x exists")

    fake.run_evolution = boom
    monkeypatch.setitem(sys.modules, "pytest_ecdysis.evolve.loop", fake)
    st = state(evolve=True, out=outcome())
    session._evolve(None, st, st.outcome)
    assert st.outcome.evolution_error == "--ecdysis-evolve stopped: the branch ecdysis/x exists"
    assert session.exit_status(st, 1) == 1
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/tmp/summary.md")
    seen = []
    fake.run_evolution = lambda session_, state_, summary: (
        seen.append(os.environ.get("GITHUB_STEP_SUMMARY")) or {"rounds": []}
    )
    st = state(evolve=True, out=outcome())
    session._evolve(None, st, st.outcome)
    assert st.outcome.evolution == {"rounds": []} and session.exit_status(st, 1) == 0
    assert (
        seen == [None] and os.environ["GITHUB_STEP_SUMMARY"] == "/tmp/summary.md"
    )  # hidden from sub-runs only


def test_missing_evolution_module_gives_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pytest_ecdysis.evolve.loop the run still finishes, with a message naming what is missing."""
    monkeypatch.setitem(sys.modules, "pytest_ecdysis.evolve.loop", None)  # import raises ImportError
    st = state(evolve=True, out=outcome())
    session._evolve(None, st, st.outcome)
    assert "run_evolution is missing" in st.outcome.evolution_error


def test_json_safe_trial_marks_what_json_cannot_carry() -> None:
    """A JSON-safe dict passes unchanged; one with an object becomes a marker naming the case."""
    good = {"suite": "s", "task_id": "1", "trial": 0, "termination_reason": "user_stop"}
    assert run_coverage.json_safe_trial(good, "t.py::x") is good
    bad = run_coverage.json_safe_trial({**good, "x": object()}, "t.py::x")
    assert set(bad) == {"ecdysis_error"} and "t.py::x is not JSON-serialisable" in bad["ecdysis_error"]
