"""`--ecdysis-resume` must repeat the interrupted run's options: a 3-task run resumed as 30 would score
other trials against the recorded incumbent. Checked at configure time, before any trial."""

from __future__ import annotations

import pytest
from tiny_evolution import CONFTEST, make_project, run_evolution, script


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return make_project(pytester, monkeypatch, CONFTEST)


@pytest.mark.slow
def test_resume_with_other_options_is_a_usage_error_before_any_trial(project: pytest.Pytester) -> None:
    """Interrupted with --ecdysis-tasks 0,1: resuming without it (or with other trials) is refused with
    exit 4, naming each option then and now, and leaves the run directory as it was; the same options
    resume."""
    script(project, [{"knob": "x", "value": 2}])
    (project.path / "interrupt-1").write_text("")
    first = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-tasks", "0,1")
    assert first.ret == 2, first.stdout.str()
    (project.path / "interrupt-1").unlink()
    run = project.path / ".ecdysis" / "runs" / "run1"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}

    result = run_evolution(
        project, "--ecdysis-rounds", "1", "--ecdysis-resume", "run1", "--ecdysis-trials", "2", run_id=""
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--ecdysis-resume run1: that run was started with other options "
            "(--ecdysis-tasks 0,1 then, all now; --ecdysis-trials 1 then, 2 now); resume "
            "with the options of the interrupted run*"
        ]
    )
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before

    result = run_evolution(
        project, "--ecdysis-rounds", "1", "--ecdysis-resume", "run1", "--ecdysis-tasks", "0,1", run_id=""
    )
    assert result.ret == 0, result.stdout.str()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            ("--ecdysis-accept", "paired"),
            "--ecdysis-accept strict (method sign, level 0.05) then, paired (method sign, level 0.05) now",
        ),
        (("--ecdysis-strategy", "self-evolution"), "--ecdysis-strategy ecdysis then, self-evolution now"),
        (("--ecdysis-evidence", "failure-aware:1"), "--ecdysis-evidence all then, failure-aware:1 now"),
    ],
)
def test_resume_under_another_decision_rule_is_a_usage_error(
    project: pytest.Pytester, extra: tuple, said: str
) -> None:
    """The rounds of a run were decided under its rule: a resume under another (a strict run resumed as
    paired finished with `accept.rule` strict in evolution.json and `rule: paired` in a round's decision) is
    refused before any trial, naming the option then and now."""
    script(project, [{"knob": "x", "value": 2}])
    (project.path / "interrupt-1").write_text("")
    assert run_evolution(project, "--ecdysis-rounds", "1").ret == 2
    (project.path / "interrupt-1").unlink()
    result = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-resume", "run1", *extra, run_id="")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*that run was started with other options ({said}); resume*"])


@pytest.mark.slow
def test_a_run_still_going_cannot_be_resumed(project: pytest.Pytester) -> None:
    """A second session resuming a run whose session still runs is refused (exit 4, naming the process that
    holds it) and writes nothing; once that process is gone the resume goes ahead."""
    import subprocess
    import sys

    script(project, [{"knob": "x", "value": 2}])
    (project.path / "interrupt-1").write_text("")
    assert run_evolution(project, "--ecdysis-rounds", "1").ret == 2
    (project.path / "interrupt-1").unlink()
    run = project.path / ".ecdysis" / "runs" / "run1"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from pytest_ecdysis.core.rundir import lock_run; lock_run(Path(sys.argv[1]), 'x'); "
            "print('held', flush=True); time.sleep(120)",
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
        result = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-resume", "run1", run_id="")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [
                f"*--ecdysis-resume run1: the run * is in use by process {holder.pid}, which is "
                "still running; wait for it*"
            ]
        )
        assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    finally:
        holder.kill()
        holder.wait()
    result = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-resume", "run1", run_id="")
    assert result.ret == 0, result.stdout.str()
