"""The last lines of an evolution or a gate say what happened: after pytest's counts line
comes the `ecdysis verdict` section, whose lines name the branch and how to see it (or why none was made),
the gate's verdict, and say that the starting run's failed trials are not the run's failure."""

from __future__ import annotations

import json

import pytest
from test_gate_runs import save_baseline
from test_records_pipeline import env  # noqa: F401  (the fixture, used by the gate test)
from tiny_evolution import CONFTEST, make_project, run_evolution, script

from pytest_ecdysis.report.verdict import evolution_lines, verdict_lines


def _tail(result: pytest.RunResult) -> list[str]:
    """The lines after pytest's own last line (`=== 3 failed, 1 passed in 9.1s ===`)."""
    lines = [line for line in result.stdout.lines if line.strip()]
    last_counts = max(i for i, line in enumerate(lines) if " passed" in line and line.startswith("="))
    return lines[last_counts + 1 :]


def _accepted_round(**extra: object) -> dict:
    """A round of `evolution.json` the strict rule accepted, 0.200 -> 0.400, whose paired sign test gives
    p=0.5 (+1/-0 tasks); `extra` adds or replaces its fields."""
    return {
        "round": 1,
        "accepted": True,
        "outcome": "accepted",
        "score_before": 0.2,
        "score_after": 0.4,
        "decision": {
            "rule": "strict",
            "method": "sign",
            "p_value": 0.5,
            "level": 0.05,
            "wins": 1,
            "losses": 0,
        },
        **extra,
    }


def _evolution_doc(
    row: dict, *, start: float, incumbent: float = 0.4, branch: str | None = "ecdysis/r1", **extra: object
) -> dict:
    """An `evolution.json` of the one round `row`: the start's and the incumbent's scores, the branch, and
    `extra` top-level fields."""
    return {
        "rounds": [row],
        "start": {"score": start},
        "incumbent": {"score": incumbent},
        "branch": branch,
        **extra,
    }


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return make_project(pytester, monkeypatch, CONFTEST)


@pytest.mark.slow
def test_evolution_that_made_a_branch_ends_with_the_branch_and_what_the_failures_were(project) -> None:
    script(project, [{"knob": "x", "value": 3}])
    result = run_evolution(project, "--ecdysis-rounds", "1")
    assert result.ret == 0, result.stdout.str()
    tail = _tail(result)
    assert "ecdysis verdict" in tail[0]
    assert tail[1].startswith(
        "evolution finished: 1 of 1 round(s) accepted; train score 0.250 -> 0.750; "
        "held-out test split 0.250 -> 0.750 (1 trial(s) per task)"
    )
    assert (
        tail[2].startswith("decided by: strict rule (score strictly rises")
        and "measured on the simulated" in tail[2]
    )
    assert tail[3].startswith("branch ecdysis/run1 holds the accepted change(s); see them with: git diff ")
    assert "the 3 failed trial(s) listed above are the starting harness's trials" in "\n".join(tail)
    assert tail[-1].startswith("exit status 0 (success); files in ") and "ecdysis show " in tail[-1]
    doc = json.loads(next(project.path.rglob("evolution.json")).read_text())
    assert doc["cpu_s"] > 0  # the controller's and its sub-runs' CPU seconds over the evolution
    result.stdout.fnmatch_lines(
        [
            f"evolution wall-clock {doc['wall_s']:.1f} s, {doc['cpu_s']:.1f} CPU s (the "
            "controller and every process it waited for); files in *"
        ]
    )


@pytest.mark.slow
def test_evolution_without_a_branch_says_why(project) -> None:
    script(project, [{"knob": "x", "value": 1}, None])
    result = run_evolution(project, "--ecdysis-rounds", "2")
    assert result.ret == 0, result.stdout.str()
    text = "\n".join(_tail(result))
    assert "evolution finished: 0 of 2 round(s) accepted; train score 0.250 -> 0.250" in text
    assert (
        "no branch was made: no round scored strictly higher than the harness it started from: round 1 "
        "rejected"
    ) in text
    assert "round 2 no spec (scripted: no spec)" in text
    assert (
        "group(s): no spec: scripted: no spec [" in result.stdout.str()
    )  # the stage line: no nested parentheses
    assert _tail(result)[-1].startswith("exit status 0 (success)")


@pytest.mark.usefixtures("env")
def test_gate_ends_with_its_verdict_after_the_failed_trials(pytester: pytest.Pytester) -> None:
    save_baseline(pytester)
    result = pytester.runpytest_subprocess(
        "--ecdysis-harness",
        "harness",
        "-p",
        "no:cacheprovider",
        "--ecdysis-trials",
        "2",
        "--ecdysis-gate",
        "--ecdysis-gate-rule",
        "strict",  # the equal score passes it; 4 tasks x 2 trials cannot decide the default rule
        timeout=300,
    )
    assert result.ret == 0
    tail = _tail(result)
    assert "ecdysis verdict" in tail[0] and tail[1].startswith(
        "gate PASSED: suite score 0.625 vs baseline 0.625"
    )
    assert "the 3 failed trial(s) listed above are within what the baseline allows" in tail[2]
    assert tail[-1].startswith("exit status 0 (success)")


def test_verdict_lines_of_a_stopped_evolution_and_a_failed_gate(tmp_path) -> None:
    """Unit: an evolution stopped by an error says why and how to resume (when the loop had started); a
    failed gate gives its reasons and exit status 1."""
    (tmp_path / "evolution.json").write_text("{}")
    lines = verdict_lines(
        {"n_failures": 2},
        evolve=True,
        gate=None,
        evolution=None,
        evolution_error="--ecdysis-evolve stopped: git failed",
        run_id="r1",
        run_path=tmp_path,
        exit_status=1,
    )
    assert [text for text, _ in lines] == [
        "evolution stopped before it finished: git failed",  # not "nothing was made": rounds may be kept
        "what was done is kept: continue with --ecdysis-resume r1 (same options)",
        f"exit status 1 (failure); files in {tmp_path} (read back with: ecdysis show {tmp_path})",
    ]
    assert evolution_lines(None, "x", "r1", resumable=False) == [
        ("evolution stopped, nothing was made: x", "red")
    ]
    # a budget stop: the same options would stop at the same place, so the line asks for a higher budget
    budget = evolution_lines(
        None, "--ecdysis-evolve stopped: budget reached before the round 2 validation", "r1", resumable=True
    )
    assert budget[1] == ("what was done is kept: continue with --ecdysis-resume r1 and a higher budget", None)
    # interrupted (Ctrl-C, SIGTERM): no error and no result; it said "nothing was made: no evolution result"
    assert evolution_lines(None, None, "r1", resumable=True)[0] == (
        "evolution interrupted before it finished: no verdict",
        "red",
    )
    gate = {
        "passed": False,
        "headline": "gate FAILED: suite score 0.5 vs baseline 0.6",
        "reasons": ["suite score 0.500 is 0.100 below", "2 regressed"],
    }
    lines = verdict_lines(
        {"n_failures": 3},
        evolve=False,
        gate=gate,
        evolution=None,
        evolution_error=None,
        run_id="r",
        run_path=None,
        exit_status=1,
    )
    assert lines == [
        (gate["headline"], "red"),
        ("  - suite score 0.500 is 0.100 below", None),
        ("  - 2 regressed", None),
        ("exit status 1 (failure)", None),
    ]


def test_the_no_branch_line_names_the_run_s_acceptance_rule() -> None:
    """Under --ecdysis-accept paired a round that rose but was not significant is not 'not strictly higher'."""
    from pytest_ecdysis.report.verdict import evolution_lines

    row = {
        "round": 1,
        "accepted": False,
        "outcome": "rejected",
        "reason": "suite score 0.600 -> 0.800; sign test (+1/-0): p=0.5: not significant at level 0.2",
    }
    doc = _evolution_doc(
        row, start=0.6, incumbent=0.6, branch=None, accept={"rule": "paired", "method": "sign", "level": 0.2}
    )
    ((line, _),) = [x for x in evolution_lines(doc, None, "r1") if x[0].startswith("no branch")]
    assert line.startswith(
        "no branch was made: no round passed the paired sign test (an improvement significant "
        "at level 0.2): round 1 rejected (suite score 0.600 -> 0.800"
    )
    doc["accept"] = {"rule": "strict", "method": "sign", "level": 0.05}
    ((line, _),) = [x for x in evolution_lines(doc, None, "r1") if x[0].startswith("no branch")]
    assert line.startswith(
        "no branch was made: no round scored strictly higher than the harness it started from"
    )


def test_a_branch_verdict_says_what_the_accepted_round_was_decided_on(tmp_path) -> None:
    """A strict round accepted against the incumbent's re-run (0.200 -> 0.400; its earlier run 0.400, so the
    headline reads 0.400 -> 0.400) with p=0.5, and an edit the simulated ground truth calls noise: the
    verdict and the PR body say all three before the reader merges; a significant round without a re-run
    or ground truth gets no caveat."""
    import json

    from pytest_ecdysis.report.evolution import caveats
    from pytest_ecdysis.report.pr_body import render_pr_body

    row = _accepted_round(
        incumbent_run={"rescored": True, "run_path": "x", "score": 0.2, "cached_score": 0.4}
    )
    doc = _evolution_doc(
        row,
        start=0.4,
        diff_command="git diff a ecdysis/r1",
        accept={"rule": "strict", "method": "sign", "level": 0.05},
        validity={"accepted_edits": 1, "systematic_fixes": 0, "accommodations": 0, "noise": 1},
    )
    said = [
        text for text, colour in evolution_lines(doc, None, "r1") if text.startswith("read before merging")
    ]
    assert said == [
        "read before merging: round 1 was decided on 0.200 -> 0.400: the candidate against the incumbent re-run "
        "beside it (that incumbent's earlier run scored 0.400)",
        "read before merging: round 1 was accepted by the strict rule (any rise) although the paired sign test "
        "gives p=0.5 (+1/-0 tasks): a rise this size is often run-to-run noise; --ecdysis-accept paired accepts "
        "only a significant one",
        "read before merging: the simulated model's ground truth attributes 1 of 1 accepted edit(s) to no quirk "
        "the edit cured (noise between the runs compared), 0 to systematic fixes",
    ]
    (tmp_path / "evolution.json").write_text(json.dumps(doc))
    body = render_pr_body(tmp_path)
    assert "### Read before merging" in body and body.count("\n- round 1 was") == 2
    quiet = {
        **doc,
        "validity": {"noise": 0},
        "rounds": [
            {**row, "incumbent_run": {"rescored": False}, "decision": {**row["decision"], "p_value": 0.01}}
        ],
    }
    assert caveats(quiet) == []


@pytest.mark.parametrize("trials", [0, 1, 3])
def test_every_table_of_the_pr_body_has_as_many_cells_per_row_as_its_header(tmp_path, trials) -> None:
    """A Markdown table whose rows have more or fewer cells than its header renders shifted on GitHub: with no
    held-out pass^k (`--ecdysis-test-trials 0`, no pass^k measured) the held-out table's header had one
    empty column too many. Checked for every table of the body, with 0, 1 and 3 held-out trials."""
    import json

    from pytest_ecdysis.report.pr_body import render_pr_body

    hat = {str(k): 0.5 for k in range(1, trials + 1)}
    side = (
        {"suite_score": 0.5, "pass_hat_k": hat, "tokens_per_task": 120} if trials else {"suite_score": None}
    )
    doc = _evolution_doc(_accepted_round(), start=0.2, test={"trials": trials, "start": side, "frozen": side})
    (tmp_path / "evolution.json").write_text(json.dumps(doc))
    body = render_pr_body(tmp_path)
    tables, current = [], []
    for line in [*body.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    assert len(tables) >= 2, body
    for table in tables:
        widths = [len(line.strip().strip("|").split("|")) for line in table]
        assert len(set(widths)) == 1, "\n".join(table)


def test_a_round_whose_candidate_asked_for_another_model_is_named_in_the_verdict() -> None:
    """`model_overridden` on a round (or an instance-level step): the verdict says which round's candidate
    asked for another model than the configured one, in how many validation trials, that the calls were
    made with the configured model, and for an accepted one that its change is on the branch; rounds
    without it get no such line."""
    doc = {
        "model": "qwen3-8b",
        "rounds": [
            {"round": 1, "outcome": "accepted", "accepted": True, "model_overridden": 4},
            {"round": 2, "outcome": "rejected", "model_overridden": 2},
            {"round": 3, "outcome": "rejected"},
            {
                "round": 4,
                "outcome": "rejected",
                "steps": [{"step": 2, "outcome": "rejected", "model_overridden": 1}],
            },
        ],
        "start": {"score": 0.25},
        "incumbent": {"score": 0.75},
        "branch": "ecdysis/r1",
        "diff_command": "git diff main ecdysis/r1",
    }
    said = [(t, c) for t, c in evolution_lines(doc, None, "r1") if t.startswith("model override")]
    assert said == [
        (
            "model override: round 1's candidate asked for another model than the configured qwen3-8b in 4 "
            "validation trial(s); those calls were made with qwen3-8b, so its score is qwen3-8b's; its change "
            "is on the branch, and outside pytest-ecdysis that harness would ask for the other model: remove "
            "that from it before merging",
            "yellow",
        ),
        (
            "model override: round 2's candidate asked for another model than the configured qwen3-8b in 2 "
            "validation trial(s); those calls were made with qwen3-8b, so its score is qwen3-8b's (rejected)",
            "yellow",
        ),
        (
            "model override: round 4 step 2's candidate asked for another model than the configured qwen3-8b "
            "in 1 validation trial(s); those calls were made with qwen3-8b, so its score is qwen3-8b's "
            "(rejected)",
            "yellow",
        ),
    ]
    for r in doc["rounds"]:
        r.pop("model_overridden", None)
        for st in r.get("steps", []):
            st.pop("model_overridden")
    assert not [t for t, _ in evolution_lines(doc, None, "r1") if t.startswith("model override")]


#: the tiny suite, whose harness at a LEVEL above 1 asks for another model: the trusted side's note
#: `model_overridden` (as `pytest_ecdysis_tau2.harness_process.request_guard` writes it) on each trial.
ASKING_SUITE = """
import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1", "2", "3"])
def test_task(request, task_id):
    state = get_state(request.config)
    level = load_harness(state.harness_dir).LEVEL
    reward = 1.0 if int(task_id) < level else 0.0
    notes = [{"kind": "model_overridden", "detail": "asked for 'gpt-big'", "step": 1}] if level > 1 else []
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=0, reward=reward, termination_reason="agent_stop",
        components={"db": reward}, harness_id=state.harness_id, endpoint_notes=notes,
        tool_calls=[{"name": "book", "arguments": {"id": task_id}, "result": "error", "error": True}]))
    assert reward >= 1.0
"""


@pytest.mark.slow
def test_an_accepted_candidate_that_asked_for_another_model_is_named_after_pytests_last_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole evolution the way users run it: the round's candidate (LEVEL 3) asks for another model in
    each of its 4 validation trials; the round record keeps `model_overridden: 4` and the verdict section,
    after pytest's counts line, names it, not only the validation line."""
    project = make_project(pytester, monkeypatch, CONFTEST, suite=ASKING_SUITE)
    script(project, [{"knob": "x", "value": 3}])
    result = run_evolution(project, "--ecdysis-rounds", "1")
    assert result.ret == 0, result.stdout.str()
    doc = json.loads((project.path / ".ecdysis" / "runs" / "run1" / "evolution.json").read_text())
    assert doc["rounds"][0]["accepted"] and doc["rounds"][0]["model_overridden"] == 4
    tail = _tail(result)
    assert any(
        line.startswith(
            "model override: round 1's candidate asked for another model than the configured fake"
        )
        and "in 4 validation trial(s)" in line
        and "its change is on the branch" in line
        for line in tail
    ), tail
