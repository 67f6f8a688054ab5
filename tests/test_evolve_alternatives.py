"""Alternatives rounds (`self-harness`, `harnessfix`) in the evolution loop, and a strategy a conftest.py
registers through the `ecdysis_strategies` hook, on the tiny suite of `test_evolve_loop.py` extended so a
candidate can break a solved task: task i is solved when LEVEL > i and i is not in the harness's SKIP.
"""

from __future__ import annotations

import json

import pytest
from tiny_evolution import evolution, git, make_project, run_evolution, scripted_diagnosis

pytest_plugins = ["pytester"]

SUITE = """
import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1", "2", "3"])
def test_task(request, task_id):
    state = get_state(request.config)
    harness = load_harness(state.harness_dir)
    reward = 1.0 if int(task_id) < harness.LEVEL and int(task_id) not in getattr(harness, "SKIP", ()) else 0.0
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
step = json.loads(spec_path.read_text())["changes"][0]["parameters"]
with open(Path(__file__).parent / "editor.log", "a") as log:
    log.write(json.dumps(step) + "\\n")
init = harness / "__init__.py"
text = init.read_text().replace("LEVEL = ", "LEVEL = %d  # was " % step["value"], 1)
if step.get("skip") is not None:
    text += "\\nSKIP = (%d,)\\n" % step["skip"]
init.write_text(text)
"""

# Scripted alternatives diagnosis: round n proposes one spec per entry of SCRIPT[n-1]; regression-aware.
CONFTEST = scripted_diagnosis("""

def diagnose(*, round_dir, strategy, **_):
    n = int(Path(round_dir).name)
    specs = [ModificationSpec(summary=f"proposal {k}: {step}", changes=[SpecChange(
                 component="policy_prompt", files=["__init__.py"], description="set LEVEL", parameters=step)])
             for k, step in enumerate(json.loads((HERE / "script.json").read_text())[n - 1], start=1)]
    return SimpleNamespace(spec=specs[0] if specs else None, specs=specs, alternatives=True,
                           regression_aware=True, reason="", tokens={"prompt": 5, "completion": 2, "total": 7},
                           wall_s=0.01)

""")

# A user's own strategy, registered from conftest.py; its diagnosis goes through the real `diagnose`.
USER_CONFTEST = """
from pytest_ecdysis.diagnose.fdcr import Diagnosis
from pytest_ecdysis.core.records import ModificationSpec, SpecChange


class Mine:
    name = "mine"
    instance_level = False

    def propose(self, round_input, client):
        (round_input.round_dir / "mine.txt").write_text(f"{len(round_input.records)} record(s)")
        spec = ModificationSpec(summary="mine: LEVEL 3", changes=[SpecChange(
            component="policy_prompt", files=["__init__.py"], description="set LEVEL", parameters={"value": 3})])
        return Diagnosis(spec=spec, specs=[spec], reason="", calls=0)


def ecdysis_strategies():
    return {"mine": Mine}
"""


def _project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, conftest: str) -> pytest.Pytester:
    return make_project(pytester, monkeypatch, conftest, suite=SUITE, editor=EDITOR)


def _run(project: pytest.Pytester, strategy: str, rounds: int, *extra: str) -> pytest.RunResult:
    return run_evolution(project, "--ecdysis-strategy", strategy, "--ecdysis-rounds", str(rounds), *extra)


@pytest.mark.slow
def test_the_best_passing_proposal_is_kept_and_a_regression_is_rejected(pytester, monkeypatch) -> None:
    """Three proposals from the same incumbent (LEVEL 1, score 0.25), one editor call and one validation each:
    LEVEL 2 (0.5, passes), LEVEL 4 with task 0 broken (0.75, higher, but it breaks a solved task: rejected
    as a regression), LEVEL 3 (0.75, passes): the best that passes, proposal 3, is kept; each proposal keeps
    its spec, diff, validation and decision in rounds/1/proposals/<k>/."""
    project = _project(pytester, monkeypatch, CONFTEST)
    (project.path / "script.json").write_text(
        json.dumps([[{"value": 2}, {"value": 4, "skip": 0}, {"value": 3}]])
    )
    result = _run(project, "self-harness", 1, "-o", "ecdysis_proposals=4")
    assert result.ret == 0, result.stdout.str()
    assert evolution(project)["proposals"] == 4 and "4 proposals a round" in result.stdout.str()
    (r1,) = evolution(project)["rounds"]
    assert r1["editor_calls"] == 3 and len((project.path / "editor.log").read_text().splitlines()) == 3
    assert [(p["outcome"], p["score_before"], p["score_after"]) for p in r1["proposals"]] == [
        ("accepted", 0.25, 0.5),
        ("rejected", 0.25, 0.75),
        ("accepted", 0.25, 0.75),
    ]
    assert r1["proposals"][1]["regression"] and "tiny/0" in r1["proposals"][1]["reason"]
    assert [p["chosen"] for p in r1["proposals"]] == [False, False, True]
    assert (r1["outcome"], r1["chosen"], r1["score_after"]) == ("accepted", 3, 0.75)
    pdir = project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1" / "proposals"
    for k in (1, 2, 3):
        for name in ("spec.json", "edit.json", "candidate.diff", "validation.json", "decision.json"):
            assert (pdir / str(k) / name).is_file(), f"proposal {k}: {name}"
    # every proposal was edited on the same incumbent
    assert all("-LEVEL = 1" in (pdir / str(k) / "candidate.diff").read_text() for k in (1, 2, 3))
    assert "LEVEL = 3" in git(project.path, "show", "ecdysis/run1:tiny_harness/__init__.py")
    assert git(project.path, "worktree", "list").count("\n") == 1


@pytest.mark.slow
def test_a_round_whose_only_gain_breaks_a_solved_task_is_rejected(pytester, monkeypatch) -> None:
    """Regression-aware acceptance: the one candidate raises the score (0.25 -> 0.5) but breaks task 0, which
    the incumbent solved: the round is rejected and no branch is made (the strict rule alone would accept)."""
    project = _project(pytester, monkeypatch, CONFTEST)
    (project.path / "script.json").write_text(json.dumps([[{"value": 4, "skip": 0}]]))
    result = _run(project, "harnessfix", 1)
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    (r1,) = doc["rounds"]
    assert (r1["outcome"], r1["score_before"], r1["score_after"]) == ("rejected", 0.25, 0.75)
    assert "regression" in r1["reason"] and doc["branch"] is None


@pytest.mark.slow
def test_a_strategy_registered_in_conftest_runs_through_the_hook(pytester, monkeypatch) -> None:
    """A user's strategy, registered by `ecdysis_strategies()` in conftest.py, is accepted by
    --ecdysis-strategy and drives the round through the real diagnosis."""
    project = _project(pytester, monkeypatch, USER_CONFTEST)
    result = _run(project, "mine", 1)
    assert result.ret == 0, result.stdout.str()
    (r1,) = evolution(project)["rounds"]
    assert (r1["strategy"], r1["outcome"], r1["score_after"], r1["editor_calls"]) == (
        "mine",
        "accepted",
        0.75,
        1,
    )
    assert (
        project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1" / "mine.txt"
    ).read_text() == "3 record(s)"


def test_validity_counts_only_the_kept_proposal(tmp_path) -> None:
    """The simulated ground-truth validity counts the proposal an alternatives round kept, not the others that
    also passed."""
    from pytest_ecdysis.sim.truth.validity import accepted_edits

    for k in (1, 2):
        pdir = tmp_path / "rounds" / "1" / "proposals" / str(k)
        pdir.mkdir(parents=True)
        (pdir / "validation.json").write_text(json.dumps({"run_path": f"/runs/p{k}"}))
    doc = {
        "start": {"run_path": "/runs/start"},
        "rounds": [
            {
                "round": 1,
                "accepted": True,
                "proposals": [
                    {"proposal": 1, "accepted": True, "chosen": False, "flips": {"failed_to_solved": ["a"]}},
                    {
                        "proposal": 2,
                        "accepted": True,
                        "chosen": True,
                        "flips": {"failed_to_solved": ["a", "b"]},
                    },
                ],
            }
        ],
    }
    assert accepted_edits(doc, tmp_path) == [
        {"round": 1, "step": None, "before": "/runs/start", "after": "/runs/p2", "gained": ["a", "b"]}
    ]
