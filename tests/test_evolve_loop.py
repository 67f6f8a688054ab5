"""The evolution loop end to end: a tiny synthetic suite in a temporary git repository, with a scripted
diagnosis (conftest) and a scripted `cmd:` editor, run the way users run it (pytester subprocess).

The suite has four tasks; task i is solved when the harness constant `LEVEL` > i, so the suite score is
LEVEL/4 and every edit's effect is known in advance.
"""

from __future__ import annotations

import json

import pytest
from tiny_evolution import CONFTEST, evolution, git, make_project, run_evolution, script

pytest_plugins = ["pytester"]


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A git repository holding the tiny suite, its harness, the scripted diagnosis and editor."""
    return make_project(pytester, monkeypatch, CONFTEST)


@pytest.mark.slow
def test_accepted_rejected_and_tied_rounds(project: pytest.Pytester) -> None:
    """A round is accepted only when the suite score rises strictly (drops and ties are rejected); the
    branch holds one commit per accepted round, touching only the harness; the user's checkout stays."""
    script(project, [{"knob": "x", "value": 3}, {"knob": "x", "value": 2}, {"knob": "x", "value": 3}])
    (project.path / "notes.txt").write_text("uncommitted work elsewhere\n")
    head_before = git(project.path, "rev-parse", "HEAD")
    result = run_evolution(project, "-n", "2")
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    rounds = doc["rounds"]
    assert [r["outcome"] for r in rounds] == ["accepted", "rejected", "rejected"]
    assert [(r["score_before"], r["score_after"]) for r in rounds] == [
        (0.25, 0.75),
        (0.75, 0.5),
        (0.75, 0.75),
    ]
    assert [r["editor_calls"] for r in rounds] == [1, 1, 1]
    assert rounds[0]["flips"]["failed_to_solved"] == ["tiny/1", "tiny/2"]
    assert doc["branch"] == "ecdysis/run1"
    assert doc["test"]["start"]["suite_score"] == 0.25 and doc["test"]["frozen"]["suite_score"] == 0.75
    log = git(project.path, "log", "--format=%s", "main..ecdysis/run1").splitlines()
    assert len(log) == 1 and log[0].startswith("ecdysis round 1:")
    changed = git(project.path, "diff", "--name-only", "main", "ecdysis/run1").split()
    assert changed == ["tiny_harness/__init__.py"]
    # the user's checkout: same branch, same HEAD, harness untouched, uncommitted file still there
    assert git(project.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(project.path, "rev-parse", "HEAD") == head_before
    assert "LEVEL = 1\n" in (project.path / "tiny_harness" / "__init__.py").read_text()
    assert git(project.path, "status", "--porcelain").strip() == "?? notes.txt"
    assert git(project.path, "worktree", "list").count("\n") == 1
    # the candidate's sub-run and the incumbent's beside it share the session's 2 xdist workers (one
    # process each), and the round files exist
    rdir = project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1"
    for log in (rdir / "pytest.log", rdir / "incumbent" / "pytest.log"):
        command = log.read_text().splitlines()[0]
        assert command.endswith(" -n 0") or " -n 0 " in command, command
        assert "-n 2" not in command, command
    for name in ("spec.json", "candidate.diff", "decision.json", "run1-r1/summary.json"):
        assert (rdir / name).is_file(), name
    result.stdout.fnmatch_lines(["*branch ecdysis/run1*git diff*", "*test split*start 0.250*frozen 0.750*"])


@pytest.mark.slow
def test_nothing_accepted_makes_no_branch(project: pytest.Pytester) -> None:
    """An out-of-harness edit is refused before validation, a candidate that does not import is
    `broken_candidate`, a failing editor is `no_change`; with nothing accepted there is no branch."""
    script(project, [{"kind": "outside"}, {"kind": "break"}, {"kind": "fail"}])
    result = run_evolution(project, "--ecdysis-rounds", "3")
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    assert [r["outcome"] for r in doc["rounds"]] == ["guard_rejected", "broken_candidate", "no_change"]
    assert "test_tiny.py" in doc["rounds"][0]["reason"]
    assert [r["score_after"] for r in doc["rounds"]] == [None, None, None]
    assert doc["branch"] is None
    assert "ecdysis/run1" not in git(project.path, "branch", "--list")
    assert not (project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1" / "run1-r1").exists()
    assert doc["test"]["frozen"]["same_as_start"] is True
    result.stdout.fnmatch_lines(["*no round was accepted: no branch*"])


@pytest.mark.slow
def test_gold_data_read_and_no_spec(project: pytest.Pytester) -> None:
    """A diff that reads τ² task files is flagged statically and refused; a round without a spec makes
    no editor call; `--ecdysis-test-model` adds a test comparison per extra model."""
    script(project, [{"kind": "gold"}, None])
    result = run_evolution(project, "--ecdysis-rounds", "2", "--ecdysis-test-model", "other-model")
    transfer = evolution(project)["test"]["transfer"]
    assert transfer["other-model"]["start"]["suite_score"] == 0.25
    assert (
        "--ecdysis-model other-model"
        in next(
            (project.path / ".ecdysis" / "runs" / "run1" / "test" / "transfer" / "other-model").rglob(
                "pytest.log"
            )
        ).read_text()
    )
    assert result.ret == 0, result.stdout.str()
    rounds = evolution(project)["rounds"]
    assert [r["outcome"] for r in rounds] == ["guard_rejected", "no_spec"]
    assert "tasks.json" in rounds[0]["reason"]
    assert [r["editor_calls"] for r in rounds] == [1, 0]
    assert len((project.path / "editor.log").read_text().splitlines()) == 1


@pytest.mark.slow
def test_test_trials_zero_skips_the_test_scoring(project: pytest.Pytester) -> None:
    """`--ecdysis-test-trials 0` (slow real models) scores nothing on test and says so in evolution.json."""
    script(project, [None])
    result = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-test-trials", "0")
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    assert doc["test"]["start"] is None and doc["test"]["frozen"] is None and doc["test"]["trials"] == 0
    assert "--ecdysis-test-trials 0" in doc["test"]["skipped"]
    assert not (project.path / ".ecdysis" / "runs" / "run1" / "test").exists()


@pytest.mark.slow
def test_held_out_scores_carry_capability_and_efficiency(project: pytest.Pytester) -> None:
    """Start and frozen harness on test are reported with capability (suite score) and efficiency (agent
    tokens per task, summed over the task's test trials): here a trial costs 100 x LEVEL tokens (the tiny
    suite runs one trial a task), so the start (LEVEL 1) costs 100 tokens a task and the frozen harness
    (LEVEL 3) 300, in evolution.json, the summary line and the pull-request body."""
    from pytest_ecdysis.report.pr_body import render_pr_body

    suite = (project.path / "test_tiny.py").read_text()
    (project.path / "test_tiny.py").write_text(
        suite.replace(
            "tool_calls=[",
            'tokens={"prompt": 100 * level, "completion": 0, "total": 100 * level}, tool_calls=[',
            1,
        )
    )
    git(project.path, "commit", "-qam", "trials report tokens")
    script(project, [{"knob": "x", "value": 3}])
    result = run_evolution(project, "--ecdysis-rounds", "1")
    assert result.ret == 0, result.stdout.str()
    test = evolution(project)["test"]
    assert (test["start"]["suite_score"], test["start"]["tokens_per_task"], test["start"]["tokens"]) == (
        0.25,
        100,
        400,
    )
    assert (test["frozen"]["suite_score"], test["frozen"]["tokens_per_task"]) == (0.75, 300)
    result.stdout.fnmatch_lines(
        ["*test split*start 0.250 (pass^1 0.250, 100 tokens/task)*frozen 0.750*300 tokens/task*"]
    )
    body = render_pr_body(project.path / ".ecdysis" / "runs" / "run1")
    assert "| before (start) | 0.250 | 0.250 | 100 |" in body
    assert "| after (frozen) | 0.750 | 0.750 | 300 |" in body


REPAIRING_EDITOR = (
    CONFTEST
    + '''
import pytest_ecdysis.evolve.loop as _evolve
from pytest_ecdysis.edit.editors import BuiltinEditor
from pytest_ecdysis.endpoint.role_client import Completion

BLOCK = "__init__.py\\n<<<<<<< SEARCH\\nLEVEL = 1\\n=======\\nLEVEL = {}\\n>>>>>>> REPLACE\\n"


class Client:
    """The editor model: a first answer that does not parse, then a repaired one."""

    replies = [BLOCK.format("("), BLOCK.format(3)]

    def complete(self, role, messages, **kw):
        return Completion(self.replies.pop(0), {"prompt": 10, "completion": 5, "total": 15}, 0.0)


_evolve.make_editor = lambda cfg: BuiltinEditor(cfg, client=Client())
'''
)


@pytest.mark.slow
def test_a_repair_call_counts_as_an_editor_call(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round's `editor_calls` is the true number of editor model calls: the built-in editor's first
    answer breaks the syntax, its one repair call makes the edit, and the round counts 2 calls (and both
    calls' tokens), not 1 per edit."""
    project = make_project(pytester, monkeypatch, REPAIRING_EDITOR)
    script(project, [{"knob": "x", "value": 3}])
    result = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-test-trials", "0")
    assert result.ret == 0, result.stdout.str()
    (r1,) = evolution(project)["rounds"]
    assert (r1["outcome"], r1["score_after"], r1["editor_calls"]) == ("accepted", 0.75, 2)
    edit = json.loads(
        (project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1" / "edit.json").read_text()
    )
    assert (edit["calls"], edit["tokens"]["total"]) == (2, 30) and "attempt 2" in edit["detail"]


@pytest.mark.slow
def test_resume_after_interruption(project: pytest.Pytester) -> None:
    """Ctrl-C during round 2 leaves a resumable run; `--ecdysis-resume` continues without redoing round 1
    (one editor call per round overall) and ends with the branch."""
    script(project, [{"knob": "x", "value": 2}, {"knob": "x", "value": 4}])
    (project.path / "interrupt-2").write_text("")
    first = run_evolution(project, "--ecdysis-rounds", "2")
    assert first.ret == 2, first.stdout.str()  # interrupted
    doc = evolution(project)
    assert doc["status"] == "running" and [r["outcome"] for r in doc["rounds"]] == ["accepted"]
    assert "ecdysis/run1" not in git(project.path, "branch", "--list")
    (project.path / "interrupt-2").unlink()
    second = run_evolution(project, "--ecdysis-rounds", "2", "--ecdysis-resume", "run1", run_id="")
    assert second.ret == 0, second.stdout.str()
    doc = evolution(project)
    assert [r["outcome"] for r in doc["rounds"]] == ["accepted", "accepted"]
    assert [r["score_after"] for r in doc["rounds"]] == [0.5, 1.0]
    assert len((project.path / "editor.log").read_text().splitlines()) == 2
    assert git(project.path, "log", "--format=%s", "main..ecdysis/run1").count("ecdysis round") == 2


@pytest.mark.slow
def test_resume_rebuilds_an_edited_candidate(project: pytest.Pytester) -> None:
    """Interrupted after the edit and before validation: the resumed run rebuilds the candidate from
    `candidate.diff` and validates it without calling the editor or the diagnosis again."""
    script(project, [{"knob": "x", "value": 3}])
    (project.path / "interrupt-validate").write_text("")
    first = run_evolution(project, "--ecdysis-rounds", "1")
    assert first.ret == 2, first.stdout.str()
    rdir = project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1"
    assert (rdir / "edit.json").is_file() and not (rdir / "validation.json").exists()
    (project.path / "interrupt-validate").unlink()
    second = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-resume", "run1", run_id="")
    assert second.ret == 0, second.stdout.str()
    assert [(r["outcome"], r["score_after"]) for r in evolution(project)["rounds"]] == [("accepted", 0.75)]
    assert len((project.path / "editor.log").read_text().splitlines()) == 1
    assert len((project.path / "diagnose.log").read_text().splitlines()) == 1
    assert "LEVEL = 3" in git(project.path, "show", "ecdysis/run1:tiny_harness/__init__.py")


@pytest.mark.slow
def test_resume_compares_with_the_trials_this_session_scored(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resuming session scores the start harness again into the run directory; when the model moved
    (TINY_BONUS: one more task solved), the candidate is compared with that run's score, never with the
    number recorded when the run started (a 0.25 -> 0.75 'gain' against trials that score 0.5)."""
    script(project, [{"knob": "x", "value": 2}])
    (project.path / "interrupt-validate").write_text("")
    assert run_evolution(project, "--ecdysis-rounds", "1", "-o", "ecdysis_rescore=never").ret == 2
    assert evolution(project)["start"]["score"] == 0.25
    (project.path / "interrupt-validate").unlink()
    monkeypatch.setenv("TINY_BONUS", "1")
    second = run_evolution(
        project, "--ecdysis-rounds", "1", "-o", "ecdysis_rescore=never", "--ecdysis-resume", "run1", run_id=""
    )
    assert second.ret == 0, second.stdout.str()
    doc = evolution(project)
    assert doc["start"]["score"] == 0.5
    assert [(r["recorded_score"], r["score"]) for r in doc["rescored_on_resume"]] == [(0.25, 0.5)]
    (row,) = doc["rounds"]
    assert (row["score_before"], row["score_after"], row["outcome"]) == (0.5, 0.75, "accepted")
    second.stdout.fnmatch_lines(["*the start harness scored 0.5 in this session, 0.25 when the run started*"])


@pytest.mark.slow
def test_resume_errors(project: pytest.Pytester) -> None:
    """Resuming a run that does not exist is a usage error naming the run; so is a run of another suite."""
    result = run_evolution(project, "--ecdysis-resume", "nope", run_id="")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--ecdysis-resume nope: no such run*"])
    run = project.path / ".ecdysis" / "runs" / "other"
    run.mkdir(parents=True)
    (run / "evolution.json").write_text(
        json.dumps(
            {"suite": "tau2-retail", "status": "running", "incumbent": {"commit": "0" * 40}, "rounds": []}
        )
    )
    result = run_evolution(project, "--ecdysis-resume", "other", run_id="")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*that run evolved suite 'tau2-retail'*"])
    plain = project.path / ".ecdysis" / "runs" / "plain"
    plain.mkdir(parents=True)
    (plain / "summary.json").write_text(json.dumps({"schema_version": 1, "suite": "tiny"}))
    result = run_evolution(project, "--ecdysis-resume", "plain", run_id="")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--ecdysis-resume plain: that run is not an evolution*"])
    assert json.loads((plain / "summary.json").read_text()) == {"schema_version": 1, "suite": "tiny"}
