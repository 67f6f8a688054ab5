"""The held-out check: a candidate whose train gain does not show on held-out tasks is refused, not committed.

Unit tests of the rule (`gate.heldout`) with values; then evolutions of a tiny two-split suite through
pytester with a scripted `cmd:` editor: train tasks 0-3, test tasks 4-7 (`--ecdysis-split test`), task i of
a split solved when the harness's `LEVEL` > i's index in its split, or when its id is in the harness's
`ANSWERS` table. The incumbent has LEVEL = 1 (0.25 on both splits). The `memorised` editor writes the answers
of train tasks 1-3 (train 1.0, test 0.25): refused, under `strict` and under the default rule, no branch.
The `cure` editor raises LEVEL to 3 (0.75 on both splits): accepted.
"""

from __future__ import annotations

import json

import pytest
from tiny_evolution import CONFTEST, evolution, git, make_project, run_evolution

from pytest_ecdysis.gate.heldout import HELDOUT_LEVEL, heldout_check, heldout_summary
from pytest_ecdysis.report.evolution import summary_lines
from pytest_ecdysis.report.verdict import heldout_lines

pytest_plugins = ["pytester"]


# --- the rule -----------------------------------------------------------------------------------------


def test_memorised_train_gain_is_refused_with_the_tasks_that_carried_it() -> None:
    """Train: 3 of 4 tasks 0 -> 1 (gain +0.75, per-task diffs 0, 1, 1, 1: s² = 0.25); held-out: nothing
    moves (gain 0, s² 0). SE = sqrt(0.25 / 4) = 0.25, z(0.99) = 2.326: lower = 0.75 - 0.582 = +0.168 > 0."""
    check = heldout_check(
        {"a": [1.0], "b": [0.0], "c": [0.0], "d": [0.0]},
        {"a": [1.0], "b": [1.0], "c": [1.0], "d": [1.0]},
        {"x": [1.0], "y": [0.0], "z": [0.0]},
        {"x": [1.0], "y": [0.0], "z": [0.0]},
    )
    assert check.refused
    assert check.train_gain == pytest.approx(0.75) and check.held_gain == 0.0
    assert check.se == pytest.approx(0.25)
    assert check.lower == pytest.approx(0.75 - 2.3263 * 0.25, abs=1e-3)
    assert check.tasks == ("b", "c", "d")
    assert (check.n_train, check.n_held, check.level) == (4, 3, HELDOUT_LEVEL)
    assert "refused" in check.line() and "train tasks that carried it: b, c, d" in check.line()
    assert check.fields()["tasks"] == ["b", "c", "d"] and check.fields()["made"] is True


def test_gain_matched_on_held_out_tasks_passes() -> None:
    """The same train gain, matched held out (+0.667 on 3 tasks): the gap is within the noise."""
    check = heldout_check(
        {"a": [1.0], "b": [0.0], "c": [0.0], "d": [0.0]},
        {"a": [1.0], "b": [1.0], "c": [1.0], "d": [1.0]},
        {"x": [1.0], "y": [0.0], "z": [0.0]},
        {"x": [1.0], "y": [1.0], "z": [1.0]},
    )
    assert not check.refused
    assert check.held_gain == pytest.approx(2 / 3) and check.gap == pytest.approx(0.75 - 2 / 3)
    assert check.lower < 0 and "passed" in check.line()


def test_noise_decides_a_gap_of_the_same_size() -> None:
    """A train gain of +0.25 over a held-out gain of 0: refused on 40 deterministic tasks (10 of them 0 -> 1
    on train, s² = 0.192, SE 0.069, lower +0.089), not on 4 tasks (1 of them: SE 0.25, lower -0.33)."""
    big = heldout_check(
        {str(i): [0.0] for i in range(40)},
        {str(i): [1.0 if i < 10 else 0.0] for i in range(40)},
        {str(i): [0.0] for i in range(20)},
        {str(i): [0.0] for i in range(20)},
    )
    small = heldout_check(
        {str(i): [0.0] for i in range(4)},
        {str(i): [1.0 if i < 1 else 0.0] for i in range(4)},
        {str(i): [0.0] for i in range(4)},
        {str(i): [0.0] for i in range(4)},
    )
    assert big.gap == pytest.approx(0.25) and small.gap == pytest.approx(0.25)
    assert big.refused and big.lower == pytest.approx(
        0.25 - 2.3263 * (0.25 * 0.75 * 40 / 39 / 40) ** 0.5, abs=1e-3
    )
    assert not small.refused and small.lower == pytest.approx(0.25 - 2.3263 * 0.25, abs=1e-3)


def test_rule_needs_two_tasks_a_split_and_a_level_in_range() -> None:
    with pytest.raises(ValueError, match="at least 2 tasks"):
        heldout_check({"a": [0.0]}, {"a": [1.0]}, {"x": [0.0], "y": [0.0]}, {"x": [0.0], "y": [0.0]})
    with pytest.raises(ValueError, match="level must be in"):
        heldout_check({}, {}, {}, {}, level=1.5)


def test_summary_and_verdict_name_a_refusal_and_a_check_not_made() -> None:
    refused = heldout_check(
        {"a": [0.0], "b": [0.0]}, {"a": [1.0], "b": [1.0]}, {"x": [0.0], "y": [0.0]}, {"x": [0.0], "y": [0.0]}
    ).fields()
    doc = {
        "rounds": [
            {"round": 1, "outcome": "rejected", "heldout": refused, "reason": refused["line"]},
            {
                "round": 2,
                "outcome": "accepted",
                "heldout": {
                    "made": False,
                    "refused": False,
                    "why": "w",
                    "line": "held-out check not made: w",
                },
            },
        ]
    }
    held = heldout_summary(doc)
    assert held is not None
    assert (held["refused"], held["passed"], held["not_made"]) == (1, 0, 1)
    assert held["checks"][0]["round"] == 1 and held["checks"][0]["tasks"] == ["a", "b"]
    assert held["checks"][0]["gap"] == 1.0 and held["checks"][0]["lower"] == 1.0
    texts = [t for t, _ in heldout_lines(doc)]
    assert texts[0].startswith("round 1 refused, not committed: held-out check over 2 train")
    assert texts[1] == "held-out check could not be made for 1 candidate(s): w"
    assert heldout_summary({"rounds": [{"round": 1, "outcome": "no_spec"}]}) is None
    table = "\n".join(summary_lines({**doc, "run_id": "r", "status": "finished"}))
    assert "rejected/held-out" in table and "held-out: round 1: held-out check over" in table
    assert "held-out: round 2: held-out check not made: w" in table


def _run_dir(path, rewards: dict[str, list[float | None]]):
    path.mkdir(parents=True)
    (path / "summary.json").write_text("{}")
    lines = [
        json.dumps({"task_id": t, "trial": i, "reward": r, "termination_reason": "agent_stop"})
        for t, rs in rewards.items()
        for i, r in enumerate(rs)
    ]
    (path / "trials.jsonl").write_text("\n".join(lines) + "\n")
    return str(path)


def test_decision_trials_pool_the_looks_and_extra_runs_but_not_a_look_with_a_problem(tmp_path) -> None:
    """The train side of the check is every trial the decision judged: the validation runs, then each usable
    adaptive look, confirmation look and extra run (a look with a `problem` was not used by the decision)."""
    from pytest_ecdysis.evolve.heldout import decision_trials, rewards_by_task

    def pair(name: str, cand: list[float | None], inc: list[float | None]) -> dict:
        return {
            "candidate": {"run_path": _run_dir(tmp_path / name / "c", {"a": cand})},
            "incumbent": {"run_path": _run_dir(tmp_path / name / "i", {"a": inc})},
        }

    row = {
        "looks": {
            "looks": [
                {"runs": pair("look1", [1.0, 1.0], [0.0, 0.0])},
                {"runs": pair("bad", [9.0], [9.0]), "problem": "drift"},
            ]
        },
        "confirmation": {"looks": [{"runs": pair("conf", [0.0], [1.0])}]},
        "extra_trials": {"runs": pair("extra", [1.0, None], [0.0])},
    }
    before = [{"task_id": "a", "reward": 0.0}]
    after = [{"task_id": "a", "reward": 1.0}]
    b, a = decision_trials(row, before, after)
    assert rewards_by_task(b) == {"a": [0.0, 0.0, 0.0, 1.0, 0.0]}
    assert rewards_by_task(a) == {"a": [1.0, 1.0, 1.0, 0.0, 1.0]}  # the infrastructure error (None) left out
    assert decision_trials({}, before, after) == (before, after)


def test_summary_names_the_step_of_an_instance_level_round() -> None:
    held = {"made": True, "refused": True, "line": "x", "tasks": ["t"], "gap": 0.5, "lower": 0.1}
    doc = {"rounds": [{"round": 3, "outcome": "rejected", "steps": [{"step": 2, "heldout": held}]}]}
    summary = heldout_summary(doc)
    assert summary is not None and summary["checks"] == [
        {
            "round": 3,
            "step": 2,
            "made": True,
            "refused": True,
            "tasks": ["t"],
            "gap": 0.5,
            "lower": 0.1,
            "line": "x",
        }
    ]
    assert [t for t, _ in heldout_lines(doc)] == ["round 3 step 2 refused, not committed: x"]


# --- evolutions ------------------------------------------------------------------------------------------

SUITE = """
import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state

SPLITS = {"train": ["0", "1", "2", "3"], "test": ["4", "5", "6", "7"]}


def pytest_generate_tests(metafunc):
    if "task_id" in metafunc.fixturenames:
        cfg = get_state(metafunc.config).cfg
        ids = SPLITS.get(cfg.split, SPLITS["train"] + SPLITS["test"])
        metafunc.parametrize("task_id", [t for t in ids if cfg.tasks is None or t in cfg.tasks])


@pytest.mark.ecdysis_trial
def test_task(request, task_id):
    state = get_state(request.config)
    harness = load_harness(state.harness_dir)
    index = int(task_id) % 4  # its place in its split
    solved = index < harness.LEVEL or task_id in getattr(harness, "ANSWERS", {})
    reward = 1.0 if solved else 0.0
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=0, reward=reward, termination_reason="agent_stop",
        components={"db": reward}, harness_id=state.harness_id,
        tool_calls=[{"name": "book", "arguments": {"id": task_id}, "result": "error", "error": True}]))
    assert reward >= 1.0
"""

EDITOR = """
import json, sys
from pathlib import Path

spec_path, harness = Path(sys.argv[1]), Path(sys.argv[2])
kind = json.loads(spec_path.read_text())["changes"][0]["parameters"]["kind"]
init = harness / "__init__.py"
if kind == "memorised":  # the gold answers of the train tasks it failed, as a plain table
    init.write_text(init.read_text() + "\\nANSWERS = {'1': 'gold', '2': 'gold', '3': 'gold'}\\n")
elif kind == "cure":  # a real fix: one more task of every split solved
    init.write_text(init.read_text().replace("LEVEL = 1", "LEVEL = 3"))
"""


def _project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, kinds: list[str], *, strict: bool):
    project = make_project(pytester, monkeypatch, CONFTEST, suite=SUITE, editor=EDITOR, accept_ini=strict)
    (project.path / "script.json").write_text(json.dumps([{"kind": k} for k in kinds]))
    return project


def _refused(row: dict) -> None:
    assert row["outcome"] == "rejected" and not row.get("accepted") and "commit" not in row, row
    held = row["heldout"]
    assert held["made"] and held["refused"]
    assert (held["train_gain"], held["held_gain"], held["n_train"], held["n_held"]) == (0.75, 0.0, 4, 4)
    assert held["gap"] == 0.75 and held["lower"] > 0 and held["tasks"] == ["1", "2", "3"]
    assert row["reason"] == held["line"] and "refused" in row["reason"]


@pytest.mark.slow
def test_memorised_table_refused_under_strict_and_a_real_cure_accepted_after_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 1 writes a table of train answers (train 0.25 -> 1.0, test 0.25 -> 0.25): refused by the
    held-out check, recorded as rejected with the gap and the tasks, not committed; round 2 cures LEVEL
    (0.75 on both splits): accepted and branched. The test figure reuses the held-out checks' runs."""
    project = _project(pytester, monkeypatch, ["memorised", "cure"], strict=True)
    result = run_evolution(project, "--ecdysis-rounds", "2", timeout=1800)
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    first, second = doc["rounds"]
    _refused(first)
    assert (first["score_before"], first["score_after"]) == (0.25, 1.0)
    assert second["outcome"] == "accepted" and second["heldout"]["refused"] is False
    assert (second["heldout"]["train_gain"], second["heldout"]["held_gain"]) == (0.5, 0.5)
    assert doc["incumbent"]["score"] == 0.75 and doc["branch"] == "ecdysis/run1"
    committed = git(project.path, "show", "ecdysis/run1:tiny_harness/__init__.py")
    assert "LEVEL = 3" in committed and "ANSWERS" not in committed
    assert doc["test"]["start"]["suite_score"] == 0.25 and doc["test"]["frozen"]["suite_score"] == 0.75
    assert doc["test"]["start"]["heldout_check"] and doc["test"]["frozen"]["heldout_check"]
    summary = json.loads((project.path / ".ecdysis" / "runs" / "run1" / "summary.json").read_text())
    assert (summary["heldout"]["refused"], summary["heldout"]["passed"]) == (1, 1)
    assert summary["heldout"]["checks"][0]["tasks"] == ["1", "2", "3"]
    from pytest_ecdysis.report.pr_body import render_pr_body

    body = render_pr_body(project.path / ".ecdysis" / "runs" / "run1")
    assert "**Held-out checks**: 1 passed, 1 refused" in body and "- round 1 refused: held-out check" in body
    out = result.stdout.str()
    assert "rejected/held-out" in out
    result.stdout.fnmatch_lines(
        ["*round 1 refused, not committed: held-out check over 4 train / 4 held-out*"]
    )


@pytest.mark.slow
def test_memorised_table_refused_under_the_default_rule_no_branch(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default rule (adaptive) accepts the table on train; the held-out check refuses it: no commit, no
    branch, the verdict names the refusal."""
    project = _project(pytester, monkeypatch, ["memorised"], strict=False)
    result = run_evolution(project, "--ecdysis-rounds", "1", timeout=1800)
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    assert doc["accept"]["rule"] == "adaptive"
    (row,) = doc["rounds"]
    assert row["decision"]["rule"] == "adaptive"
    _refused(row)
    looked = row["looks"]["trials"]
    assert 8 < row["heldout"]["train_trials"] <= 8 + looked  # the looks' trials judged too
    assert doc["branch"] is None and "ecdysis/" not in git(project.path, "branch", "--list")
    result.stdout.fnmatch_lines(
        [
            "*round 1 refused, not committed: held-out check over 4 train / 4 held-out task(s)*lower bound "
            "+0.168*train tasks that carried it: 1, 2, 3",
            "*no branch was made: no round passed both its test and the held-out check: round 1 refused by "
            "the held-out check (train gain +0.750 vs held-out gain +0.000)",
        ]
    )
