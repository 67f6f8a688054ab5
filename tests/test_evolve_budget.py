"""Budgets and the projection (`evolve/budget.py`): bad values, a budget below one starting run, a stop at a
stage boundary with the state saved, and a resume with a higher budget that finishes.

Uses the tiny suite of `test_evolve_loop` with trials that report tokens (110 per trial, 4 trials).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from tiny_evolution import CONFTEST, SUITE, evolution, make_project, run_evolution, script

from pytest_ecdysis.evolve import budget

TOKENS = 'tokens={"prompt": 100, "completion": 10, "total": 110},'
SUITE_WITH_TOKENS = SUITE.replace(
    'suite="tiny", task_id=task_id,', f'suite="tiny", task_id=task_id, {TOKENS}'
)


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return make_project(pytester, monkeypatch, CONFTEST, suite=SUITE_WITH_TOKENS)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--ecdysis-max-tokens", "-5"), "--ecdysis-max-tokens must be an integer >= 0"),
        (("--ecdysis-max-cost", "ten"), "--ecdysis-max-cost must be a number, got 'ten'"),
        (("--ecdysis-max-cost", "-0.5"), "--ecdysis-max-cost must be >= 0.0"),
    ],
)
def test_bad_budget_is_a_usage_error(project: pytest.Pytester, args: tuple[str, ...], message: str) -> None:
    result = run_evolution(project, *args)
    assert result.ret == 4, result.stdout.str()
    assert message in result.stderr.str()


@pytest.mark.slow
def test_budget_stops_at_a_stage_boundary_and_resumes_with_a_higher_one(project: pytest.Pytester) -> None:
    """Round 1's diagnosis could pass --ecdysis-max-tokens 1000 (440 spent by the starting run): the loop stops
    before it, saves its state, says what was spent and how to resume; a resume with a higher budget finishes
    both rounds. A later run whose budget is below one starting run (4 trials x 110 tokens, from the first
    run's tokens per trial) is a usage error before any trial, naming that projection."""
    script(project, [{"knob": "x", "value": 2}, {"knob": "x", "value": 4}])
    first = run_evolution(
        project, "--ecdysis-rounds", "2", "--ecdysis-test-trials", "0", "--ecdysis-max-tokens", "1000"
    )
    out = first.stdout.str()
    assert first.ret == 1, out
    assert "projection: this evolution can spend at most" in out
    assert "budget reached before the diagnosis of round 1" in out and "spent 440 tokens" in out
    assert "--ecdysis-resume run1 --ecdysis-max-tokens N with a higher budget" in out
    doc = evolution(project)
    assert doc["status"] == "stopped_budget" and doc["rounds"] == []
    assert doc["budget_stop"]["spent"]["tokens"] == 440 <= 1000
    assert not (project.path / "diagnose.log").exists()  # no role was called

    second = run_evolution(
        project,
        "--ecdysis-rounds",
        "2",
        "--ecdysis-test-trials",
        "0",
        "--ecdysis-resume",
        "run1",
        "--ecdysis-max-tokens",
        "10000000",
        run_id="",
    )
    assert second.ret == 0, second.stdout.str()
    doc = evolution(project)
    assert doc["status"] == "finished" and [r["outcome"] for r in doc["rounds"]] == ["accepted", "accepted"]
    assert "budget_stop" not in doc
    # both sessions' starting runs, two diagnoses (7 tokens each), two validation sub-runs and the incumbent's
    # two re-runs beside them (model "fake" is not deterministic) are counted
    assert doc["cost"]["stages"] == {"start": 880, "validation": 880, "rescore": 880}
    assert doc["cost"]["roles"]["diagnosis"]["total"] == 14 and doc["cost"]["tokens"] == 3 * 880 + 14
    assert doc["cost"]["usd"] is None and "'fake'" in doc["cost"]["unknown"][0]

    third = run_evolution(project, "--ecdysis-max-tokens", "300", run_id="run2")
    assert third.ret == 4, third.stdout.str()
    err = third.stderr.str()
    assert "--ecdysis-max-tokens 300 is smaller than one starting run" in err and "440 tokens" in err
    assert not (project.path / ".ecdysis" / "runs" / "run2" / "trials.jsonl").exists()


def test_projection_counts_every_part() -> None:
    """The projection's parts follow the configuration: 3K+2 role calls, the validation and re-run trials,
    K extra trials of both harnesses on every task, the test split of start and frozen harness."""
    cfg = SimpleNamespace(
        model="m",
        user_model="m",
        diagnosis_model="m",
        fdcr_passes=2,
        strategy="ecdysis",
        editor="sim",
        rounds=3,
        rescore="always",
        accept_extra_trials=2,
        ablate=False,
        test_models=(),
        test_trials=3,
        rootdir=None,
        max_tokens=None,
        max_cost_usd=None,
    )
    summary = {
        "n_trials": 10,
        "n_tasks": 5,
        "tokens": {"prompt": 900, "completion": 100},
        "user_tokens": {"prompt": 90, "completion": 10},
    }
    prices = {"m": {"prompt_per_mtok": 1.0, "completion_per_mtok": 1.0}}
    from pathlib import Path

    p = budget.project(cfg, summary, Path("/nonexistent"), Path("/nonexistent"), prices)
    per = p["per_round"]
    assert per["diagnosis"]["calls"] == 8
    assert per["validation"]["tokens"] == 2 * 10 * 110  # candidate + incumbent re-run, 110 tokens a trial
    assert per["confirmation"]["tokens"] == 2 * 2 * 5 * 110
    assert p["test"]["tokens"] == 2 * 5 * 3 * 110
    assert per["heldout"]["tokens"] == 2 * 5 * 3 * 110  # one candidate and its incumbent on test
    assert p["total"]["tokens"] == 3 * sum(x["tokens"] for x in per.values()) + p["test"]["tokens"]
    assert p["total"]["usd"] == pytest.approx(p["total"]["tokens"] / 1e6)
    line = budget.projection_line(p, cfg)
    assert line.startswith("projection: this evolution can spend at most") and "3 round(s)" in line
    json.dumps(p)  # recorded in evolution.json


def test_max_cost_with_an_unpriced_model_is_a_usage_error(project: pytest.Pytester) -> None:
    """A USD cap needs every model's price: 'fake' has none, so the run refuses to start, naming it."""
    result = run_evolution(project, "--ecdysis-max-cost", "5")
    assert result.ret == 4, result.stdout.str()
    assert "--ecdysis-max-cost cannot be counted: no price for 'fake'" in result.stderr.str()


def test_max_cost_stops_before_a_stage_that_could_pass_it(tmp_path) -> None:
    """With prices known, USD spent (the starting run, 1M prompt tokens of $1/Mtok) plus the validation's
    estimate ($1.50) above --ecdysis-max-cost 2 stops before the validation, naming the USD figures."""
    (tmp_path / ".ecdysis").mkdir()
    (tmp_path / ".ecdysis" / "prices.json").write_text(
        '{"models": {"m": {"prompt_per_mtok": 1.0, "completion_per_mtok": 1.0}}}'
    )
    cfg = SimpleNamespace(
        model="m", user_model="m", diagnosis_model="m", max_tokens=None, max_cost_usd=2.0, rootdir=tmp_path
    )
    said: list[str] = []
    start = {
        "model": "m",
        "user_model": "m",
        "tokens": {"prompt": 1_000_000, "completion": 0},
        "user_tokens": {},
    }
    doc = {
        "cost_start_runs": [start],
        "rounds": [],
        "projection": {"per_round": {"validation": {"calls": 10, "tokens": 1_500_000, "usd": 1.5}}},
    }
    ev = SimpleNamespace(
        cfg=cfg,
        doc=doc,
        dir=tmp_path / "run",
        state=SimpleNamespace(run_id="r9"),
        say=said.append,
        checkpoint=lambda: None,
    )
    budget.before_stage(ev, "diagnosis", "diagnosis of round 1")  # no estimate for it here: $1 + $0 <= $2
    with pytest.raises(
        budget.BudgetReached,
        match=r"--ecdysis-max-cost \$2: spent \$1, the validation of round 1 "
        r"may spend \$1.5 more",
    ):
        budget.before_stage(ev, "validation", "validation of round 1")
    assert doc["status"] == "stopped_budget" and "--ecdysis-resume r9 --ecdysis-max-cost USD" in said[-1]
