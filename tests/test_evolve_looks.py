"""The adaptive rule in the loop (`evolve/looks.py`): its pure parts (retry pooling keeps the level, the
start's top-up, the budget a cost cap leaves, the tried mark diagnosis sees) and one evolution whose
candidate is decided by looks on a ten-task suite that honours `--ecdysis-trials` and the trial offset."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.evolve.looks import _top_up, affordable_trials, check_before_trials
from pytest_ecdysis.evolve.stages import tried_outcome
from pytest_ecdysis.gate.adaptive import adaptive_test, more_trials, start_plan
from tests.tiny_evolution import evolution, make_project, run_evolution, script


def _decide(rng: np.random.Generator, rates: np.ndarray, budget: int, retries: int) -> bool:
    """One decision under H0 (both sides draw task i with rate rates[i]) the way `adaptive_decide` runs it:
    a first attempt to `budget` (start of START_TRIALS, looks on unsettled tasks), then up to `retries`
    retries pooled with it, each buying min(budget, more_trials) trials decided by the interim bound alone.
    True when it accepted."""
    tasks = [str(i) for i in range(len(rates))]
    out: dict[str, tuple[list[float], list[float]]] = {t: ([], []) for t in tasks}

    def draw(plan: dict[str, int]) -> None:
        for t, k in plan.items():
            p = rates[int(t)]
            out[t][0].extend(float(x) for x in rng.random(k) < p)
            out[t][1].extend(float(x) for x in rng.random(k) < p)

    draw(start_plan(tasks, budget))
    test = adaptive_test(out, budget=budget)
    while test.state == "continue":
        draw(test.next_trials)
        test = adaptive_test(out, budget=budget)
    for _ in range(retries):
        if test.state in ("accept", "reject"):
            break
        need = more_trials(test, out) or 0
        limit = test.trials + min(budget, need)
        test = adaptive_test(out, budget=max(2, limit), final_test=False)
        while test.state == "continue":
            draw(test.next_trials)
            test = adaptive_test(out, budget=max(2, limit), final_test=False)
    return test.state == "accept"


def test_retries_pooled_with_the_first_attempt_keep_the_level() -> None:
    """Under "no improvement" (rates drawn per task, both harnesses alike), a first attempt and two retries
    that buy the trials `more_trials` asks for, pooled, accept at most α = 0.05 (400 decisions of 12 tasks,
    budget 120: the bound is α1 + α2; measured well below it). Without the final test's α being spent once,
    retries that re-ran it would add α2 each time."""
    rng = np.random.default_rng(7)
    accepted = [_decide(rng, rng.beta(0.7, 0.7, 12), 120, retries=2) for _ in range(400)]
    share = sum(accepted) / len(accepted)
    assert share <= 0.05 + 2 * (0.05 * 0.95 / 400) ** 0.5, share


def test_a_retry_decides_by_the_interim_bound_only() -> None:
    """`final_test=False`: at its limit a retry never runs the final sign test (its α was spent), so a
    record of 9 wins and no loss, which the final test would accept, stays inconclusive; the interim bound
    still accepts once the wealth passes 1/α1."""
    few = {str(i): ([0.0], [1.0]) for i in range(9)}
    assert adaptive_test(few, budget=18).state == "accept"  # p = 2^-9 at the budget
    retry = adaptive_test(few, budget=18, final_test=False)
    assert retry.state == "inconclusive" and retry.final_p is None
    many = {str(i): ([0.0] * 3, [1.0] * 3) for i in range(8)}  # 24 wins: 1.25^24 = 211 >= 100
    assert adaptive_test(many, budget=48, final_test=False).state == "accept"


def test_the_start_is_topped_up_only_when_every_task_misses_the_same_and_it_fits() -> None:
    """One trial a task compared and two wanted: one more on every task, if the budget allows it."""
    outcomes = {t: ([1.0], [0.0]) for t in "abc"}
    assert _top_up(outcomes, start_plan(list("abc"), 60), 6, 60) == dict.fromkeys("abc", 1)
    assert _top_up(outcomes, start_plan(list("abc"), 60), 6, 8) == {}  # 6 + 6 > 8
    two = {t: ([1.0, 1.0], [0.0, 0.0]) for t in "abc"}
    assert _top_up(two, start_plan(list("abc"), 60), 12, 60) == {}


def test_a_token_cap_turns_into_trials_per_decision() -> None:
    """(cap - start - test - rounds x (diagnosis + editor)) / rounds / candidates / tokens per trial."""
    projection = {
        "start_run": {"tokens": 30_000, "usd": None},
        "start_trials": 30,
        "rounds": 2,
        "candidates": 1,
        "test": {"tokens": 60_000},
        "per_round": {"diagnosis": {"tokens": 5_000}, "editor": {"tokens": 5_000}},
    }
    cfg = SimpleNamespace(max_tokens=500_000, max_cost_usd=None)
    assert affordable_trials(cfg, projection) == (500_000 - 30_000 - 60_000 - 20_000) // 2 // 1_000
    assert affordable_trials(SimpleNamespace(max_tokens=None, max_cost_usd=None), projection) is None


def test_a_budget_too_small_is_a_usage_error_naming_strict() -> None:
    """40 trials a decision on 10 tasks cannot see +30 points: said before any trial, with strict's rates."""
    cfg = SimpleNamespace(evolve=True, accept="adaptive", accept_budget=40)
    with pytest.raises(UsageError) as err:
        check_before_trials(cfg, 10)
    assert "cannot detect a gain below +30 points" in str(err.value)
    assert "--ecdysis-accept strict (" in str(err.value) and "false acceptance" in str(err.value)
    check_before_trials(SimpleNamespace(evolve=True, accept="adaptive", accept_budget=0), 10)  # 200: fine


def test_an_inconclusive_round_not_to_retry_is_tried_for_diagnosis() -> None:
    assert tried_outcome({"outcome": "inconclusive", "looks": {"retry": False}}) == "tried_inconclusive"
    assert tried_outcome({"outcome": "inconclusive", "looks": {"retry": True}}) == "inconclusive"
    assert tried_outcome({"outcome": "rejected"}) == "rejected"


#: Ten tasks; task i is solved when the harness constant LEVEL > i; the trials are the run's
#: `--ecdysis-tasks` and `--ecdysis-trials`, from `--ecdysis-trial-offset` (as the τ² suites parametrise them).
SUITE10 = """
import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state


def pytest_generate_tests(metafunc):
    cfg = get_state(metafunc.config).cfg
    offset = getattr(cfg, "trial_offset", 0)
    trials = range(offset, offset + cfg.trials)
    wanted = set(cfg.tasks or [str(t) for t in range(10)])  # `--ecdysis-tasks`
    metafunc.parametrize("task_id,trial", [(str(t), k) for t in range(10) if str(t) in wanted for k in trials])


@pytest.mark.ecdysis_trial
def test_task(request, task_id, trial):
    state = get_state(request.config)
    reward = 1.0 if int(task_id) < load_harness(state.harness_dir).LEVEL else 0.0
    record_trial(request.node, TrialResult(
        suite="ten", task_id=task_id, trial=trial, reward=reward, termination_reason="agent_stop",
        components={"db": reward}, harness_id=state.harness_id,
        tool_calls=[{"name": "book", "arguments": {"id": task_id}, "result": "error", "error": True}]))
    assert reward >= 1.0
"""


def test_adaptive_looks_decide_a_real_gain(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LEVEL 1 -> 6 cures tasks 1-5 (in every trial). The default rule (adaptive, budget 200 for 10 tasks):
    the starting comparison (1 trial a task a side, +5/-0), the top-up to 2 (+10), then looks of 2 trials
    on the 5 unsettled tasks only (+20, +30): accepted by the interim bound (1.25^30 >= 100) after 3 looks,
    80 trials in all, 60 of them the looks'; each look is one sub-run per side at a later trial offset."""
    project = make_project(pytester, monkeypatch, suite=SUITE10, accept_ini=False)
    script(project, [{"value": 6}])
    result = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-test-trials", "0")
    assert result.ret == 0, result.stdout.str()[-3000:]
    doc = evolution(project)
    row = doc["rounds"][0]
    assert doc["accept"]["rule"] == "adaptive" and doc["adaptive"]["budget"] == 200
    assert row["outcome"] == "accepted" and row["decision"]["rule"] == "adaptive"
    assert (row["decision"]["wins"], row["decision"]["losses"]) == (30, 0)
    looks = row["looks"]
    assert [(len(x["tasks"]), x["per_side"], x["trial_offset"]) for x in looks["looks"]] == [
        (10, 1, 1),
        (5, 2, 2),
        (5, 2, 4),
    ]
    assert looks["trials"] == 60 and row["decision"]["adaptive"]["trials"] == 80
    assert row["wall_s"] >= sum(x["wall_s"] for x in looks["looks"])
    out = result.stdout.str()
    assert "acceptance: adaptive rule, 200 trials a decision" in out and "80% power" in out
    assert "+30/-0" in out  # the round table's pairs column
    decision = json.loads((project.path / ".ecdysis/runs/run1/rounds/1/decision.json").read_text())
    assert decision["method"] == "adaptive" and decision["adaptive"]["outcome"] == "accepted"
