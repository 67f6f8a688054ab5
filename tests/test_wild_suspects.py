"""The same failure under every configuration (tau2-bench 316, 172): such a task is
suspect, its failures kept out of the evidence until a configuration passes it, the reason in
summary.json. Unit rules, then pytest as users run it (a gate against a baseline of another harness)."""

from __future__ import annotations

import json

import pytest
from test_records_pipeline import env, only_run_dir, read_jsonl, run, write_suite  # noqa: F401 - env is a fixture

from pytest_ecdysis.core.records import TrialResult
from pytest_ecdysis.evidence.suspects import identical_failures, suspect_across


def trial(
    task: str,
    k: int,
    reward: float,
    harness: str,
    reason: str = "user_stop",
    db: float = 0.0,
    model: str = "m",
) -> TrialResult:
    return TrialResult(
        suite="s",
        task_id=task,
        trial=k,
        reward=reward,
        termination_reason=reason,
        components={"db": db if reward < 1 else 1.0, "communicate": 1.0},
        harness_id=harness,
        model=model,
    )


def test_identical_failures_under_two_configurations_make_a_task_suspect_with_the_reason():
    a = [trial("1", 0, 0.0, "h@a"), trial("1", 1, 0.0, "h@a"), trial("2", 0, 0.0, "h@a")]
    b = [trial("1", 0, 0.0, "h@b"), trial("2", 0, 0.0, "h@b", reason="max_steps")]
    found = suspect_across([a, b], 1.0)
    assert list(found) == ["s/1"]  # task 2 failed differently under the two harnesses
    assert (
        "under 2 configurations (3 trials; harness h@a, h@b; model m): user_stop, failed components db"
        in found["s/1"]
    )


@pytest.mark.parametrize(
    "case", ["one_pass_clears", "one_configuration", "infra_only_elsewhere", "other_model"]
)
def test_what_does_not_make_a_task_suspect(case):
    a = [trial("1", 0, 0.0, "h@a"), trial("1", 1, 0.0, "h@a")]
    other = {
        "one_pass_clears": [trial("1", 0, 0.0, "h@b"), trial("1", 1, 1.0, "h@b")],
        "one_configuration": [trial("1", 2, 0.0, "h@a")],
        "infra_only_elsewhere": [
            TrialResult(
                suite="s", task_id="1", trial=0, harness_id="h@b", termination_reason="infrastructure_error"
            )
        ],
        "other_model": [trial("1", 0, 0.0, "h@a", model="m2")],
    }[case]
    found = suspect_across([a, other], 1.0)
    assert (found != {}) == (case == "other_model")  # another model is another configuration too


def test_identical_failures_of_one_run_are_the_baselines_signature():
    trials = [
        trial("1", 0, 0.0, "h"),
        trial("1", 1, 0.0, "h"),
        trial("2", 0, 0.0, "h"),
        trial("2", 1, 1.0, "h"),
    ]
    assert identical_failures(trials, 1.0) == {"s/1": "user_stop|db"}


def test_a_gate_run_failing_a_task_as_the_baseline_of_another_harness_did_marks_it_suspect(
    pytester: pytest.Pytester,
    env: None,  # noqa: F811
) -> None:
    """Baseline with harness A: task 3 fails every trial (db). This run, harness B: the same. summary.json
    lists 3 in `suspect_tasks` with the reason in `suspect_reasons`, its records are kept out
    (`kept_out: suspect_task`) and in no group; task 2, which B fails once but A passed, stays evidence."""
    plan = {"syn-air": {"1": [1.0, 1.0], "2": [1.0, 1.0], "3": [0.0, 0.0]}}
    write_suite(pytester, plan)
    assert run(pytester, "--ecdysis-save-baseline", "b.json").ret == 1  # task 3 fails
    baseline = json.loads((pytester.path / "b.json").read_text())
    assert baseline["tasks"]["syn-air/3"]["failure"] == "user_stop|db"
    first = only_run_dir(pytester)
    write_suite(pytester, {"syn-air": {"1": [1.0, 1.0], "2": [1.0, 0.0], "3": [0.0, 0.0]}})
    (pytester.path / "harness" / "__init__.py").write_text("# harness B\n")
    run(pytester, "--ecdysis-gate", "--ecdysis-baseline", "b.json")
    runs = sorted(p for p in (pytester.path / ".ecdysis" / "runs").iterdir() if p != first)
    summary = json.loads((runs[-1] / "summary.json").read_text())
    assert summary["suspect_tasks"] == ["syn-air/3"]
    assert "failed identically under 2 configurations" in summary["suspect_reasons"]["syn-air/3"]
    records = read_jsonl(runs[-1] / "failures.jsonl")
    assert {r["task_id"]: r["kept_out"] for r in records} == {"3": "suspect_task", "2": None}
    groups = json.loads((runs[-1] / "groups.json").read_text())["groups"]
    assert all("syn-air/3" not in g["tasks"] for g in groups) and groups
    assert summary["kept_out"] == {"suspect_task": 2}
    # the evolution loop's reading of the same two runs (incumbent's and candidate's run directories)
    from pytest_ecdysis.evidence.suspects import across_run_dirs

    assert list(across_run_dirs([first, runs[-1]], 1.0)) == ["syn-air/3"]


def test_evolution_keeps_tasks_failing_alike_in_the_incumbents_and_candidates_runs_out_of_evidence(tmp_path):
    """Before a round's diagnosis, the incumbent's run and the sub-runs under `rounds/` (a rejected
    candidate's validation) are compared: a task both failed alike is kept out, the loop says so; a task
    the candidate solved stays evidence."""
    from types import SimpleNamespace

    from pytest_ecdysis.evidence.failures import triage
    from pytest_ecdysis.evidence.patterns import group
    from pytest_ecdysis.evolve.stages import _without_suspects

    def write(path, trials):
        path.mkdir(parents=True, exist_ok=True)
        (path / "trials.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in trials))

    incumbent = [trial("1", 0, 0.0, "h@a"), trial("2", 0, 0.0, "h@a")]
    write(tmp_path, incumbent)
    write(tmp_path / "rounds" / "1" / "validation", [trial("1", 0, 0.0, "h@b"), trial("2", 0, 1.0, "h@b")])
    said = []
    ev = SimpleNamespace(
        dir=tmp_path, cfg=SimpleNamespace(threshold=1.0), say=lambda text, n: said.append(text)
    )
    records = triage(incumbent, 1.0).records
    records, groups = _without_suspects(ev, 2, records, group(records), tmp_path)
    assert {r.task_id: r.kept_out for r in records} == {"1": "suspect_task", "2": None}
    assert [g.tasks for g in groups] == [["s/2"]]
    assert len(said) == 1 and "s/1: every trial failed identically under 2 configurations" in said[0]


def test_evolution_keeps_suspects_when_nothing_else_is_left(tmp_path):
    """When every failing task is suspect, the round still has evidence (them), and the loop says why."""
    from types import SimpleNamespace

    from pytest_ecdysis.evidence.failures import triage
    from pytest_ecdysis.evidence.patterns import group
    from pytest_ecdysis.evolve.stages import _without_suspects

    incumbent = [trial("1", 0, 0.0, "h@a")]
    (tmp_path / "rounds" / "1" / "v").mkdir(parents=True)
    (tmp_path / "trials.jsonl").write_text(incumbent[0].model_dump_json() + "\n")
    (tmp_path / "rounds" / "1" / "v" / "trials.jsonl").write_text(
        trial("1", 0, 0.0, "h@b").model_dump_json() + "\n"
    )
    said = []
    ev = SimpleNamespace(
        dir=tmp_path, cfg=SimpleNamespace(threshold=1.0), say=lambda text, n: said.append(text)
    )
    records = triage(incumbent, 1.0).records
    out, groups = _without_suspects(ev, 2, records, group(records), tmp_path)
    assert [r.kept_out for r in out] == [None] and groups
    assert "kept as evidence, as nothing else is left" in said[0]
