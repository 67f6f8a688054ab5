"""The `self-evolution` baseline in the evolution loop: a round's instance-level specs are patched one by
one (one editor call, guard and validation each), on the tiny synthetic suite of `test_evolve_loop.py`
(task i is solved when the harness constant `LEVEL` > i, so the suite score is LEVEL/4), with a scripted
instance-level diagnosis (conftest) and the same scripted `cmd:` editor, run as users run it.
"""

from __future__ import annotations

import json

import pytest
from tiny_evolution import evolution, git, lines, make_project, run_evolution, scripted_diagnosis

from pytest_ecdysis.evolve.loop import MAX_INSTANCE_STEPS

pytest_plugins = ["pytester"]

# Scripted instance-level diagnosis: round n answers with one spec per entry of SCRIPT[n-1].
CONFTEST = scripted_diagnosis('''

def diagnose(*, records, groups, harness_dir, history, solved_tasks, cfg, round_dir, strategy, **_):
    n = int(Path(round_dir).name)
    with open(HERE / "diagnose.log", "a") as log:
        log.write(json.dumps({"round": n, "records": len(records), "strategy": strategy}) + "\\n")
    specs = [ModificationSpec(summary=f"scripted round {n} spec {k}: {step}", changes=[SpecChange(
                 component="policy_prompt", files=["__init__.py"], description="set LEVEL", parameters=step)])
             for k, step in enumerate(json.loads((HERE / "script.json").read_text())[n - 1], start=1)]
    return SimpleNamespace(spec=specs[0] if specs else None, specs=specs, instance_level=True, reason="",
                           tokens={"prompt": 5, "completion": 2, "total": 7}, wall_s=0.01)


import pytest_ecdysis.evolve.runs as evolve  # where the loop calls run_suite
_run_suite = evolve.run_suite


def run_suite(**kwargs):
    """Ctrl-C before the validation sub-run `<run-id>-<suffix>` starts, when `interrupt-<suffix>` exists."""
    suffix = kwargs["run_id"].rsplit("-", 1)[-1]
    if (HERE / f"interrupt-{suffix}").exists():
        raise KeyboardInterrupt
    with open(HERE / "validate.log", "a") as log:
        log.write(kwargs["run_id"] + "\\n")
    return _run_suite(**kwargs)


evolve.run_suite = run_suite
''')


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A git repository holding the tiny suite, its harness, the scripted diagnosis and editor."""
    return make_project(pytester, monkeypatch, CONFTEST)


def _run(project: pytest.Pytester, rounds: int, *extra: str, run_id: str | None = "run1") -> pytest.RunResult:
    return run_evolution(
        project,
        "--ecdysis-strategy",
        "self-evolution",
        "--ecdysis-rounds",
        str(rounds),
        *extra,
        run_id=run_id,
    )


@pytest.mark.slow
def test_specs_are_patched_one_by_one(project: pytest.Pytester) -> None:
    """A round with 3 specs makes 3 editor calls and 3 validation sub-runs after one diagnosis; the accepted
    middle step is the base of step 3 and of the next round; the round is `accepted` because a step was;
    each accepted step is one commit on the branch."""
    # round 1: a tie (rejected), LEVEL 3 (0.25 -> 0.75, accepted), LEVEL 2 on top of it (0.5, rejected)
    # round 2: LEVEL 4 on top of round 1 (1.0, accepted)
    (project.path / "script.json").write_text(
        json.dumps([[{"value": 1}, {"value": 3}, {"value": 2}], [{"value": 4}]])
    )
    result = _run(project, 2)
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    r1, r2 = doc["rounds"]
    assert len(lines(project, "diagnose.log")) == 2
    assert [json.loads(x)["value"] for x in lines(project, "editor.log")] == [1, 3, 2, 4]
    validated = lines(project, "validate.log")
    assert [x for x in validated if not x.endswith(("i", "h"))][:4] == [
        "run1-r1s1",
        "run1-r1s2",
        "run1-r1s3",
        "run1-r2s1",
    ]
    # each candidate was scored beside a re-run of the incumbent it was edited from (evolve.paired)
    assert sorted(x for x in validated if x.endswith("i") and not x.endswith("hi")) == [
        "run1-r1s1i",
        "run1-r1s2i",
        "run1-r1s3i",
        "run1-r2s1i",
    ]
    assert r1["editor_calls"] == 3 and r2["editor_calls"] == 1
    assert [s["outcome"] for s in r1["steps"]] == ["rejected", "accepted", "rejected"]
    assert [(s["score_before"], s["score_after"]) for s in r1["steps"]] == [
        (0.25, 0.25),
        (0.25, 0.75),
        (0.75, 0.5),
    ]
    assert (r1["outcome"], r1["accepted"], r1["score_before"], r1["score_after"]) == (
        "accepted",
        True,
        0.25,
        0.75,
    )
    assert r1["flips"]["failed_to_solved"] == ["tiny/1", "tiny/2"]
    assert r1["tokens"]["total"] == 7  # the diagnosis; the cmd: editor reports no tokens
    assert (r2["outcome"], r2["score_before"], r2["score_after"]) == ("accepted", 0.75, 1.0)
    # step 3 was edited on top of step 2's commit
    steps = project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1" / "steps"
    assert "-LEVEL = 3  # was 1" in (steps / "3" / "candidate.diff").read_text()
    for k in (1, 2, 3):
        for name in (
            "spec.json",
            "edit.json",
            "candidate.diff",
            "validation.json",
            "decision.json",
            f"run1-r1s{k}/summary.json",
        ):
            assert (steps / str(k) / name).is_file(), f"step {k}: {name}"
    assert json.loads((steps / "2" / "spec.json").read_text())["changes"][0]["parameters"] == {"value": 3}
    log = git(project.path, "log", "--format=%s", "main..ecdysis/run1").splitlines()
    assert [line.split(":")[0] for line in log] == ["ecdysis round 2 step 1", "ecdysis round 1 step 2"]
    assert "LEVEL = 4" in git(project.path, "show", "ecdysis/run1:tiny_harness/__init__.py")
    assert doc["test"]["frozen"]["suite_score"] == 1.0
    assert git(project.path, "worktree", "list").count("\n") == 1
    result.stdout.fnmatch_lines(["*round 1 step 2/3: accepted*", "*branch ecdysis/run1: 2 commit(s)*"])


@pytest.mark.slow
def test_steps_are_capped(project: pytest.Pytester) -> None:
    """At most MAX_INSTANCE_STEPS specs are patched in a round, and its reason says how many were dropped;
    without a validated candidate the round's outcome is the most advanced of its steps' outcomes."""
    assert MAX_INSTANCE_STEPS == 5
    # a failing editor (no_change), an edit outside the harness (guard_rejected), three more failures;
    # the two LEVEL 4 specs beyond the cap would have been accepted
    (project.path / "script.json").write_text(
        json.dumps(
            [
                [
                    {"kind": "fail"},
                    {"kind": "outside"},
                    {"kind": "fail"},
                    {"kind": "fail"},
                    {"kind": "fail"},
                    {"value": 4},
                    {"value": 4},
                ]
            ]
        )
    )
    result = _run(project, 1)
    assert result.ret == 0, result.stdout.str()
    (r1,) = evolution(project)["rounds"]
    assert r1["editor_calls"] == 5 and len(lines(project, "editor.log")) == 5
    assert [s["outcome"] for s in r1["steps"]] == ["no_change", "guard_rejected"] + ["no_change"] * 3
    assert r1["outcome"] == "guard_rejected" and r1["score_after"] is None
    assert "cap: 5 of 7 specs patched" in r1["reason"] and "other 2 dropped" in r1["reason"]
    assert lines(project, "validate.log") == ["run1-test-start"]  # no candidate was validated
    assert evolution(project)["branch"] is None


@pytest.mark.slow
def test_the_cap_is_an_option_recorded_in_evolution_json(project: pytest.Pytester) -> None:
    """ecdysis_self_evolution_cap = 2 patches two specs of seven; evolution.json records the cap and the
    final table prints it beside the strategy (its cost depends on it)."""
    (project.path / "script.json").write_text(json.dumps([[{"kind": "fail"}] * 7]))
    result = _run(project, 1, "-o", "ecdysis_self_evolution_cap=2")
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    (r1,) = doc["rounds"]
    assert doc["self_evolution_cap"] == 2 and r1["editor_calls"] == 2
    assert "cap: 2 of 7 specs patched (ecdysis_self_evolution_cap = 2)" in r1["reason"]
    result.stdout.fnmatch_lines(["*strategy self-evolution, at most 2 specs a round*"])


@pytest.mark.slow
def test_resume_does_not_redo_finished_steps(project: pytest.Pytester) -> None:
    """Ctrl-C before step 3's validation: the resumed run reads steps 1-2 back (no second diagnosis or
    editor call), rebuilds step 3's candidate on top of the accepted step 2, and validates it."""
    (project.path / "script.json").write_text(json.dumps([[{"value": 1}, {"value": 3}, {"value": 4}]]))
    (project.path / "interrupt-r1s3").write_text("")
    first = _run(project, 1)
    assert first.ret == 2, first.stdout.str()  # interrupted
    doc = evolution(project)
    assert doc["status"] == "running" and doc["rounds"] == [] and doc["incumbent"]["score"] == 0.25
    (project.path / "interrupt-r1s3").unlink()
    second = _run(project, 1, "--ecdysis-resume", "run1", run_id=None)
    assert second.ret == 0, second.stdout.str()
    (r1,) = evolution(project)["rounds"]
    assert len(lines(project, "diagnose.log")) == 1
    assert len(lines(project, "editor.log")) == 3
    assert [x for x in lines(project, "validate.log") if not x.endswith(("i", "h"))][:3] == [
        "run1-r1s1",
        "run1-r1s2",
        "run1-r1s3",
    ]
    assert [(s["outcome"], s["score_before"], s["score_after"]) for s in r1["steps"]] == [
        ("rejected", 0.25, 0.25),
        ("accepted", 0.25, 0.75),
        ("accepted", 0.75, 1.0),
    ]
    assert (r1["outcome"], r1["score_before"], r1["score_after"], r1["editor_calls"]) == (
        "accepted",
        0.25,
        1.0,
        3,
    )
    log = git(project.path, "log", "--format=%s", "main..ecdysis/run1").splitlines()
    assert [line.split(":")[0] for line in log] == ["ecdysis round 1 step 3", "ecdysis round 1 step 2"]
