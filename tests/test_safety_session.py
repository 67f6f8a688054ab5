"""A run that stops early keeps what ran; a run that runs nothing writes nothing.

`-x`, `--maxfail` and Ctrl-C: the trials that ran (and cost tokens) are written, the cases not run are
named as not run (not as missing results), the exit status stays pytest's. `--collect-only`: nothing
written, pytest's exit status, no simulated server started."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SUITE = """
import pytest
from pytest_ecdysis import TrialResult, record_trial


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1", "2", "3"])
def test_task(request, task_id):
    if task_id == "2" and request.config.getoption("--interrupt-at-2"):
        raise KeyboardInterrupt
    reward = 0.0 if task_id == "1" else 1.0
    record_trial(request.node, TrialResult(suite="tiny", task_id=task_id, trial=0, reward=reward,
                                           termination_reason="agent_stop"))
    assert reward >= 1.0
"""

CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--interrupt-at-2", action="store_true")
"""


@pytest.fixture
def tiny(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("ECDYSIS_RUN_ID", "ECDYSIS_SIM_URL"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_tiny=SUITE, conftest=CONFTEST)
    (pytester.path / "h").mkdir()
    (pytester.path / "h" / "__init__.py").write_text("def build_agent(**kw):\n    return None\n")
    return pytester


def _run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess(
        "test_tiny.py",
        "-p",
        "no:cacheprovider",
        "--ecdysis-harness",
        "h",
        "--ecdysis-run-dir",
        "runs",
        *args,
        timeout=300,
    )


def _run_dir(project: pytest.Pytester) -> Path:
    (run,) = (project.path / "runs").iterdir()
    return run


def _check_stopped_run(project: pytest.Pytester, result: pytest.RunResult, ran: list[str]) -> dict:
    run = _run_dir(project)
    summary = json.loads((run / "summary.json").read_text())
    trials = [json.loads(line)["task_id"] for line in (run / "trials.jsonl").read_text().splitlines()]
    assert trials == ran
    assert summary["missing"] == [] and summary["problems"] == [] and summary["stopped"]
    assert summary["not_run"] == [
        f"test_tiny.py::test_task[{i}]" for i in ("0", "1", "2", "3") if i not in ran
    ]
    skipped = [
        c.get("name")
        for c in ET.parse(run / "junit.xml").getroot().iter("testcase")
        if c.find("skipped") is not None
    ]
    assert skipped == [n.split("::")[1] for n in summary["not_run"]]
    result.stdout.fnmatch_lines(
        [
            "*= ecdysis =*",
            f"*stopped early (*): {len(summary['not_run'])} case(s) not run*",
            "run directory: *",
        ]
    )
    assert "PROBLEM" not in result.stdout.str()
    show = subprocess.run(
        [sys.executable, "-m", "pytest_ecdysis.cli", "show", str(run)], capture_output=True, text=True
    )
    assert show.returncode == 0 and "stopped early" in show.stdout, show.stdout + show.stderr
    return summary


def test_exitfirst_writes_what_ran(tiny: pytest.Pytester) -> None:
    """`-x` stops after the failing task 1: tasks 0 and 1 are written, 2 and 3 are not run; exit status 1."""
    result = _run(tiny, "-x")
    assert result.ret == 1, result.stdout.str()
    summary = _check_stopped_run(tiny, result, ["0", "1"])
    assert summary["stopped"] == "stopping after 1 failures" and summary["n_trials"] == 2


def test_maxfail_under_xdist_writes_what_ran(tiny: pytest.Pytester) -> None:
    """`--maxfail 1 -n 2`: whatever the workers ran before stopping is written; the rest is not run, never
    missing; the exit status is pytest's own (xdist's interruption)."""
    result = _run(tiny, "--maxfail", "1", "-n", "2")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    run = _run_dir(tiny)
    summary = json.loads((run / "summary.json").read_text())
    ran = [json.loads(line)["task_id"] for line in (run / "trials.jsonl").read_text().splitlines()]
    assert "1" in ran and summary["missing"] == [] and summary["problems"] == []
    assert sorted(ran + [n[-2] for n in summary["not_run"]]) == ["0", "1", "2", "3"]


def test_sigterm_during_the_trials_writes_what_ran(tiny: pytest.Pytester) -> None:
    """SIGTERM (a CI cancel) while task 2 runs: tasks 0 and 1 are written, 2 and 3 are not run; exit status
    2, as for Ctrl-C."""
    import os
    import signal
    import time

    marker = tiny.path / "task2.started"
    tiny.makeconftest(
        CONFTEST
        + f"""

import time
from pathlib import Path
import pytest


@pytest.fixture(autouse=True)
def _slow_task_2(request):
    if request.node.name == "test_task[2]":
        Path({str(marker)!r}).write_text("")
        time.sleep(120)
    yield
"""
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_tiny.py",
            "-p",
            "no:cacheprovider",
            "--ecdysis-harness",
            "h",
            "--ecdysis-run-dir",
            "runs",
        ],
        cwd=tiny.path,
        env={**os.environ},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    run = _run_dir(tiny)
    summary = json.loads((run / "summary.json").read_text())
    assert [json.loads(line)["task_id"] for line in (run / "trials.jsonl").read_text().splitlines()] == [
        "0",
        "1",
    ]
    assert summary["stopped"] == "SIGTERM received" and len(summary["not_run"]) == 2


def test_ctrl_c_writes_what_ran(tiny: pytest.Pytester) -> None:
    """Ctrl-C during task 2: tasks 0 and 1 are written, 2 and 3 are not run; exit status 2 (interrupted)."""
    result = _run(tiny, "--interrupt-at-2")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    _check_stopped_run(tiny, result, ["0", "1"])


@pytest.mark.parametrize("option", ["--collect-only", "--setup-plan"])
def test_collect_only_writes_nothing_and_starts_no_server(tiny: pytest.Pytester, option: str) -> None:
    """`--collect-only` or `--setup-plan` (with the simulated model, the default): exit status 0, no run
    directory, no PROBLEM, no simulated server."""
    result = _run(tiny, option)
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    assert "PROBLEM" not in out and "serving at" not in out and "= ecdysis =" not in out
    assert not (tiny.path / "runs").exists()
    assert "test_task[3]" in out


# --- SIGTERM during evolution -------------------------------------------------------------------------------

SLOW_SUBRUN = '''

import os as _os
import time as _time

import pytest as _pytest


MARKERS = Path(%r)


@_pytest.fixture(autouse=True)
def _slow_validation_subrun():
    """In a sub-run (the first is round 1's validation), when `slow` exists: note the pid, then take long."""
    if _os.environ.get("ECDYSIS_RUN_ID") != "run1" and (MARKERS / "slow").exists():
        (MARKERS / "subrun.pid").write_text(str(_os.getpid()))
        _time.sleep(120)
    yield
'''


@pytest.mark.slow
def test_sigterm_during_evolution_stops_cleanly_and_resumes(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while the validation sub-run runs: the sub-run is ended, the temporary worktree removed, the
    state saved and the resume command printed (exit status 2, as for Ctrl-C); the resume finishes the run."""
    import os
    import signal
    import time

    from tiny_evolution import CONFTEST, evolve_args, git, make_project, script

    markers = tmp_path_factory.mktemp("markers")  # outside the checkout (sub-runs run from a private copy)
    project = make_project(pytester, monkeypatch, CONFTEST + SLOW_SUBRUN % str(markers))
    script(project, [{"knob": "x", "value": 3}])
    (markers / "slow").write_text("")
    args = [sys.executable, "-m", "pytest", *evolve_args(project, "--ecdysis-rounds", "1")]
    env = {**os.environ, "ECDYSIS_RUN_ID": "run1"}
    proc = subprocess.Popen(
        args, cwd=project.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    pid_file = markers / "subrun.pid"
    deadline = (
        time.monotonic() + 900
    )  # a hang catch: the sub-run starts after the start run (minutes at load 40)
    while not pid_file.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert pid_file.exists(), proc.communicate()[0] if proc.poll() is not None else "sub-run never started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "interrupted: resume with --ecdysis-resume run1" in out
    sub_pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(sub_pid, 0)  # the sub-run was ended, not orphaned
    assert git(project.path, "worktree", "list").count("\n") == 1  # no temporary worktree left registered
    doc = json.loads((project.path / ".ecdysis" / "runs" / "run1" / "evolution.json").read_text())
    assert doc["status"] == "running" and doc["rounds"] == []  # saved, resumable
    (markers / "slow").unlink()
    resumed = subprocess.run(
        [*args, "--ecdysis-resume", "run1"],
        cwd=project.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = json.loads((project.path / ".ecdysis" / "runs" / "run1" / "evolution.json").read_text())
    assert doc["status"] == "finished" and [r["outcome"] for r in doc["rounds"]] == ["accepted"]
    assert len((project.path / "editor.log").read_text().splitlines()) == 1  # the edit was not redone
