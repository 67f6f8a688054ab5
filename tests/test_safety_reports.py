"""Hostile text never costs a run: an endpoint's error text with an ANSI escape or a NUL
byte gives a well-formed `junit.xml`, clean terminal and Markdown lines; the data files are written first,
and a report file that cannot be written is a PROBLEM line, never a lost run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from json_endpoint import JsonHandler, serving, v1_url

from pytest_ecdysis.core import safetext
from pytest_ecdysis.core.records import TrialResult
from pytest_ecdysis.evidence.failures import triage
from pytest_ecdysis.report import summary as report
from pytest_ecdysis.run import files as run_files

HOSTILE = "\x1b[31mCUDA out of memory\x1b[0m\x00 at step \x07 7\r\u202eevil"
CONTROL = [chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, 0x9B]]


def test_safetext_escapes_what_each_format_cannot_carry() -> None:
    """Controls become visible escapes (nothing is dropped); tab and newline stay where a format allows them."""
    assert safetext.terminal(HOSTILE) == (
        "\\x1b[31mCUDA out of memory\\x1b[0m\\x00 at step \\x07 7\\x0d\\u202eevil"
    )
    assert safetext.xml("a\tb\nc\x00\ud800\uffff") == "a\tb\nc\\x00\\ud800\\uffff"
    for text in (safetext.terminal("".join(CONTROL)), safetext.markdown("".join(CONTROL))):
        assert not any(ch in text for ch in CONTROL)
    assert safetext.terminal(None) == ""


def _trial(error: str, **kw) -> TrialResult:
    return TrialResult(
        suite="tau2-airline",
        task_id="0",
        trial=0,
        reward=None,
        termination_reason="infrastructure_error",
        error=error,
        nodeid="test_airline.py::test_airline[0-t0]",
        **kw,
    )


def test_junit_is_well_formed_with_control_characters(tmp_path: Path) -> None:
    """Every text of `junit.xml` (names, properties, messages) is XML-safe; the escapes are readable."""
    t = _trial(HOSTILE, harness_id="h\x00")
    run_files.write_junit(tmp_path / "junit.xml", [t], ["test_x.py::test_\x1b[0]"], 1.0)
    root = ET.parse(tmp_path / "junit.xml").getroot()
    (error,) = [e for e in root.iter("error") if e.get("type") == "infrastructure_error"]
    assert "\\x1b[31mCUDA out of memory" in error.get("message") and "\\x00" in error.get("message")
    assert {p.get("value") for p in root.iter("property")} >= {"h\\x00"}


def test_terminal_and_markdown_lines_carry_no_controls() -> None:
    """The `ecdysis` section and the Markdown job summary escape a hostile group signature and problem."""
    summary = {"run_id": "r", "by_suite": {}, "tokens": {}, "model": "m"}
    groups = [{"signature": f"book: {HOSTILE}", "records": [1], "tasks": ["a"], "cross_task": False}]
    lines = report.summary_lines(summary, groups, None, [HOSTILE])
    markdown = report.summary_markdown(summary, groups, None, [HOSTILE])
    for text in ("\n".join(lines), markdown):
        assert not any(ch in text.replace("\n", "") for ch in CONTROL), text
        assert "\\x1b[31mCUDA" in text


def test_a_failed_junit_is_a_problem_after_the_data_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When `junit.xml` cannot be written, `summary.json`, `trials.jsonl`, `failures.jsonl` and `groups.json`
    are already on disk, and the problem is named in the returned list and in `summary.json`."""

    def broken(*args, **kwargs):
        raise ValueError("not well-formed (invalid token)")

    monkeypatch.setattr(run_files, "write_junit", broken)
    trials = [_trial("boom")]
    summary = {"run_id": "r", "problems": []}
    problems = run_files.write_run_dir(tmp_path / "r", summary, trials, triage(trials, 1.0), [], [], 1.0)
    assert len(problems) == 1 and "junit.xml not written" in problems[0]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["problems"] == problems
    assert (tmp_path / "r" / "trials.jsonl").read_text().count("\n") == 1
    assert {p.name for p in (tmp_path / "r").iterdir()} == {
        "summary.json",
        "trials.jsonl",
        "failures.jsonl",
        "groups.json",
    }


class _Failing(JsonHandler):
    """A GPU server having a bad day: HTTP 500 whose message carries ANSI colour, NUL and BEL."""

    def do_POST(self):  # noqa: N802 - http.server API
        self.read_body()
        self.send_json(500, {"error": {"message": HOSTILE, "type": "server_error"}})


@pytest.fixture
def failing_endpoint():
    with serving(_Failing) as server:
        yield v1_url(server)


def test_hostile_endpoint_error_keeps_the_run(
    pytester: pytest.Pytester, failing_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real τ² suite against an endpoint whose 500 replies carry control characters: pytest's own exit
    status, a complete run directory (`junit.xml` well-formed, `summary.json`), clean terminal output (the
    `ecdysis` section and pytest's own error line) and job summary, and `ecdysis show` reads the run."""
    pytest.importorskip("tau2")
    monkeypatch.setenv("ECDYSIS_MAX_RETRIES", "0")
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    step_summary = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ecdysis_tau2.test_airline",
        "-p",
        "no:cacheprovider",
        "--ecdysis-model",
        "scripted",
        "--ecdysis-base-url",
        failing_endpoint,
        "--ecdysis-preflight",
        "off",  # the trial's own infrastructure error is what this test reads
        "--ecdysis-tasks",
        "0",
        "--ecdysis-run-dir",
        "runs",
        timeout=600,
    )
    out = result.stdout.str()
    assert result.ret == 1, out  # the trial's infrastructure error, not INTERNALERROR (3)
    assert "INTERNALERROR" not in out
    (run,) = (pytester.path / "runs").iterdir()
    assert {"summary.json", "trials.jsonl", "failures.jsonl", "groups.json", "junit.xml"} <= {
        p.name for p in run.iterdir()
    }
    (error,) = ET.parse(run / "junit.xml").getroot().iter("error")
    assert "\\x1b[31mCUDA out of memory\\x1b[0m\\x00" in error.get("message")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n_infra_errors"] == 1 and summary["problems"] == []
    assert "= ecdysis =" in out and "\x1b" not in out and "\x00" not in out  # pytest's own lines included
    assert not any(ch in step_summary.read_text().replace("\n", "") for ch in CONTROL)
    show = subprocess.run(
        [sys.executable, "-m", "pytest_ecdysis.cli", "show", str(run)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert show.returncode == 0 and "tau2-airline" in show.stdout, show.stderr
