"""The HTML page of a run (`ecdysis report`, ini `ecdysis_html`) on bad run directories: an empty, absent,
half-written (interrupted) or older-schema run gives a page saying what is missing, never a traceback;
a gate run's page leads with its verdict. The page of a real evolution in a browser: test_report_browser.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_evolution import CONFTEST, make_project, run_evolution, script

from pytest_ecdysis import cli
from pytest_ecdysis.core.records import SCHEMA_VERSION
from pytest_ecdysis.report import html as html_report
from pytest_ecdysis.report import html_view

pytest_plugins = ["pytester"]


def _page(run: Path) -> str:
    out = run.parent / f"{run.name}.html"
    assert cli.main(["report", str(run), "-o", str(out)]) == 0
    return out.read_text()


@pytest.mark.slow
def test_html_option_writes_the_page_of_an_interrupted_evolution(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ini `ecdysis_html = FILE` on the tiny evolution project (test_evolve_loop.py) interrupted in round 2: the
    page is written all the same, with round 1 and the command that resumes the run; the terminal names it."""
    project = make_project(pytester, monkeypatch, CONFTEST)
    script(project, [{"knob": "x", "value": 2}, {"knob": "x", "value": 4}])
    (project.path / "interrupt-2").write_text("")
    result = run_evolution(project, "--ecdysis-rounds", "2", "-o", "ecdysis_html=out/page.html")
    assert result.ret == 2, result.stdout.str()  # interrupted
    page = (project.path / "out" / "page.html").read_text()
    assert "Round 1:" in page and "tiny/1" in page and "--ecdysis-resume run1" in page
    result.stdout.fnmatch_lines(["*html report: out/page.html*"])


def test_empty_and_absent_run_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty run directory gives a page that says so (exit 0); `ecdysis report` on a path that does not exist
    is exit 2 and creates nothing (the session-end page still says what is missing)."""
    (tmp_path / "empty").mkdir()
    page = _page(tmp_path / "empty")
    assert "What is missing" in page and "is empty: the run wrote nothing" in page
    assert "is empty" in capsys.readouterr().err
    page = html_report.render_view(html_view.gather(tmp_path / "nope"))  # ecdysis_html at session end
    assert "is not a directory: nothing to show" in page
    assert cli.main(["report", str(tmp_path / "nope")]) == 2  # a typo: exit 2, nothing created
    assert "nope is not a directory" in capsys.readouterr().err and not (tmp_path / "nope").exists()


def test_half_written_evolution(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An interrupted run (evolution.json `running`, a cut-off trials.jsonl line, a truncated groups.json,
    no test scores) gives a page with the finished round and a note per defect, and the resume command."""
    run = tmp_path / "r1"
    (run / "rounds" / "1").mkdir(parents=True)
    summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": "r1",
        "suite": "tau2-airline",
        "split": "train",
        "model": "sim",
        "suite_score": 0.5,
        "pass_hat_k": {"1": 0.5},
        "tokens": {"total": 10},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "groups.json").write_text('{"schema_version": 1, "groups": [{"signa')
    trial = {"suite": "tau2-airline", "task_id": "3", "trial": 0, "reward": 0.0, "messages": []}
    (run / "trials.jsonl").write_text(json.dumps(trial) + '\n{"suite": "tau2-air')
    (run / "evolution.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": "r1",
                "status": "running",
                "start": {"score": 0.5},
                "rounds": [
                    {
                        "round": 1,
                        "strategy": "ecdysis",
                        "score_before": 0.5,
                        "score_after": 0.75,
                        "accepted": True,
                        "outcome": "accepted",
                        "flips": {"failed_to_solved": ["tau2-airline/3"], "solved_to_failed": []},
                    }
                ],
            }
        )
    )
    (run / "rounds" / "1" / "candidate.diff").write_text(
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n"
    )
    page = _page(run)
    assert "status &#39;running&#39;" in page and "--ecdysis-resume r1" in page
    assert "groups.json cannot be read" in page and "trials.jsonl: 1 line(s) are not JSON" in page
    assert "Round 1:" in page and "tau2-airline/3" in page and 'class="diff"' in page
    assert "Traceback (most recent call last)" not in page
    assert cli.main(["show", str(run)]) == 2  # the text summary needs groups.json: one error naming it
    assert "groups.json" in capsys.readouterr().err
    (run / "groups.json").write_text('{"schema_version": 1, "groups": []}')
    assert cli.main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "    1    0.500    0.750" in out and "evolution status 'running'" in out


def test_older_schema_and_odd_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run written by an older schema (no version, no `tasks`, rounds without flips, fields of other
    types) gives a page that names the schema difference and shows '–' for what it lacks."""
    run = tmp_path / "old"
    run.mkdir()
    (run / "summary.json").write_text(
        json.dumps(
            {
                "run_id": "old",
                "suite_score": "n/a",
                "pass_hat_k": [1],
                "tokens": None,
                "gate": {"passed": False, "regressions": ["tau2-airline/9"]},
            }
        )
    )
    (run / "evolution.json").write_text(
        json.dumps(
            {
                "schema_version": 0,
                "status": "finished",
                "rounds": [{"round": 1, "spec_summary": "x"}, "junk"],
                "test": {"start": 0.4},
            }
        )
    )
    page = _page(run)
    assert "summary.json has schema version None" in page and "evolution.json has schema version 0" in page
    assert "no test-split scores" in page and "Round 1:" in page
    assert "Gate verdict" in page and "tau2-airline/9" in page
    assert cli.main(["show", str(run)]) == 2
    assert "lack fields this version reads" in capsys.readouterr().err


def test_gate_run_page_shows_verdict_and_regressions(tmp_path: Path) -> None:
    """A gate run's page leads with the verdict, its reasons and the regressed tasks; a score row per suite
    and the per-task table follow; weak passes and suspect tasks, when the summary has them, get a section."""
    run = tmp_path / "g"
    run.mkdir()
    gate = {
        "passed": False,
        "headline": "gate FAILED: suite score 0.400 < baseline 0.500",
        "reasons": ["2 task(s) solved in the baseline are not solved now"],
        "regressions": ["tau2-airline/1", "tau2-airline/4"],
    }
    (run / "summary.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": "g",
                "suite": "tau2-airline",
                "suite_score": 0.4,
                "gate": gate,
                "suspect_tasks": ["tau2-airline/20"],
                "weak_passes": ["tau2-airline/5"],
                "problems": [
                    "1 collected case(s) never reported a valid trial result: t.py::test_airline[7-t0]"
                ],
                "by_suite": {"tau2-airline": {"suite_score": 0.4}, "tau2-retail": {"suite_score": 0.123}},
                "tasks": {
                    "tau2-airline/1": {"n": 2, "successes": 1, "solved": False},
                    "tau2-airline/5": {"n": 2, "successes": 2, "solved": True},
                },
            }
        )
    )
    (run / "groups.json").write_text(json.dumps({"schema_version": 1, "groups": []}))
    (run / "trials.jsonl").write_text("")
    view = html_view.gather(run)
    assert view["missing"] == [] and view["evolution"] is None
    page = html_report.render(run)
    for text in (
        "gate FAILED: suite score 0.400",
        "2 task(s) solved in the baseline",
        "tau2-airline/4",
        "Weak passes",
        "tau2-airline/5",
        "Suspect tasks",
        "tau2-airline/20",
        "tau2-retail</td>",
        "0.123",
        "Tasks: 1 of 2 solved",
        "1 / 2",
        "Problems with the run",
        "test_airline[7-t0]",
    ):
        assert text in page, text


def test_template_error_still_gives_a_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last resort: a template that cannot draw a field still yields a page naming the error."""

    class Broken:
        def get_template(self, name):
            raise RuntimeError("cannot draw field x")

    monkeypatch.setattr(html_report, "_env", Broken)
    page = html_report.render(tmp_path)
    assert "could not be drawn" in page and "RuntimeError: cannot draw field x" in page


def test_unwritable_output_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only writing the page can fail: exit 2 with one line naming the path."""
    (tmp_path / "file").write_text("")
    assert cli.main(["report", str(tmp_path), "-o", str(tmp_path / "file" / "page.html")]) == 2
    assert "cannot write the HTML report to" in capsys.readouterr().err


def test_trajectories_are_escaped_and_show_what_the_model_saw(tmp_path: Path) -> None:
    """A failure record's trajectory is on the page with markup escaped (a tool result holding `<script>`
    stays text, control characters and bidi overrides show as escapes); a tool message shows the harness's `model_view` and is marked when it differs from τ²'s."""
    run = tmp_path / "t"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "run_id": "t"}))
    (run / "groups.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "groups": [
                    {
                        "signature": "user_stop|db|book|other",
                        "cross_task": False,
                        "tasks": ["s/1"],
                        "records": ["s/1/t0"],
                    }
                ],
            }
        )
    )
    trial = {
        "suite": "s",
        "task_id": "1",
        "trial": 0,
        "reward": 0.0,
        "termination_reason": "user_stop",
        "messages": [
            {"role": "user", "content": "book it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "name": "book", "arguments": {"id": "A<1>"}}],
            },
            {"role": "tool", "id": "c1", "content": "<script>alert(1)</script> long result"},
            {"role": "assistant", "content": "\x1b[31mred\x00 \u202eevil"},
        ],
        "tool_calls": [
            {
                "name": "book",
                "arguments": {"id": "A<1>"},
                "step": 1,
                "model_view": "<script>alert(1)</script> … [truncated 12 chars]",
            }
        ],
    }
    (run / "trials.jsonl").write_text(json.dumps(trial) + "\n")
    page = html_report.render(run)
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; … [truncated 12 chars]" in page
    assert "as the harness sent it to the model" in page and 'book({"id": "A&lt;1&gt;"})' in page
    assert "\\x1b[31mred\\x00 \\u202eevil" in page and "\x00" not in page and "\x1b" not in page


def test_show_of_an_evolution_run_prints_rounds_test_and_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ecdysis show` of an evolution run: the starting run's summary, then the rounds table, the test
    split's start and frozen scores and the branch; a skipped test split is said."""
    run = tmp_path / "e"
    run.mkdir()
    (run / "summary.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": "e",
                "suite_score": 0.25,
                "by_suite": {"tiny": {"suite_score": 0.25}},
            }
        )
    )
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run_id": "e",
        "status": "finished",
        "branch": "ecdysis/e",
        "diff_command": "git diff abc ecdysis/e",
        "start": {"score": 0.25},
        "rounds": [
            {
                "round": 1,
                "score_before": 0.25,
                "score_after": 0.75,
                "outcome": "accepted",
                "accepted": True,
                "flips": {"failed_to_solved": ["tiny/1", "tiny/2"], "solved_to_failed": []},
            }
        ],
        "test": {"trials": 1, "start": {"suite_score": 0.25}, "frozen": {"suite_score": 0.75}},
    }
    (run / "evolution.json").write_text(json.dumps(doc))
    assert cli.main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out.splitlines()[2]  # the starting run's score table comes first
    assert "    1    0.250    0.750" in out and "accepted" in out and "+2 / -0" in out
    assert "test split, 1 trial(s) per task:  start 0.250" in out and "frozen 0.750" in out
    assert "branch ecdysis/e; view its diff: git diff abc ecdysis/e" in out
    doc["test"]["transfer"] = {"sim/strong": {"start": {"suite_score": 0.5}, "frozen": {"suite_score": 1.0}}}
    (run / "evolution.json").write_text(json.dumps(doc))
    page = html_report.render(run)  # the page holds the same: chart, rounds, test, transfer, branch
    assert '<svg id="chart"' in page and "test score: start → frozen</span><b>0.250 → 0.750" in page
    assert '<code>sim/strong</code></td><td colspan="3">0.500 → 1.000' in page and "ecdysis/e" in page
    doc["test"] = {"skipped": "--ecdysis-test-trials 0: not scored on test"}
    (run / "evolution.json").write_text(json.dumps(doc))
    assert cli.main(["show", str(run)]) == 0
    assert "test split not scored: --ecdysis-test-trials 0" in capsys.readouterr().out


def test_show_of_a_running_evolution_says_so_before_any_branch_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ecdysis show` of an evolution still running said "no round was accepted: no branch" before saying its
    status was 'running': the status comes first, and no branch verdict is given for it."""
    run = tmp_path / "e"
    run.mkdir()
    (run / "summary.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": "e",
                "suite_score": 0.25,
                "by_suite": {"tiny": {"suite_score": 0.25}},
            }
        )
    )
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run_id": "e",
        "status": "running",
        "branch": None,
        "start": {"score": 0.25},
        "rounds": [],
    }
    (run / "evolution.json").write_text(json.dumps(doc))
    assert cli.main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "evolution status 'running': still running (or interrupted), so no branch verdict yet" in out
    assert "no round was accepted" not in out
    (run / "evolution.json").write_text(json.dumps({**doc, "status": "finished"}))
    assert cli.main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "no round was accepted: no branch" in out and "evolution status" not in out


def test_show_lists_weak_passes_without_pointing_at_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The terminal section points at `ecdysis show RUN_DIR` for the weak passes; `ecdysis show` itself listed
    them under that same pointer (circular): it says they are listed below."""
    from pytest_ecdysis.report import summary as report

    run = tmp_path / "w"
    run.mkdir()
    summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": "w",
        "suite_score": 1.0,
        "by_suite": {"tiny": {"suite_score": 1.0}},
        "n_weak_passes": 1,
        "weak_passes": [{"task": "tiny/1", "trial": 0, "reasons": ["no tool call"]}],
    }
    (run / "summary.json").write_text(json.dumps(summary))
    assert "`ecdysis show RUN_DIR` lists them" in "\n".join(report.summary_lines(summary, []))
    assert cli.main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "ecdysis show RUN_DIR" not in out and "gold action not matched; listed below)" in out
    assert "  weak pass tiny/1 t0: no tool call" in out
