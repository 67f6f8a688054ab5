"""The adaptive acceptance rule, the non-inferiority gate and the train-test gap (`gate/adaptive.py`,
`gate/noninferiority.py`): decisions, looks, budgets and the simulator's agreement with the pure rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_ecdysis.gate import adaptive as ad
from pytest_ecdysis.gate import noninferiority as ni


def test_clear_gain_is_accepted_at_an_interim_look() -> None:
    """22 wins and no loss make the wealth 1.25^22 > 100 = 1 / (0.2 · 0.05): accept before the budget."""
    out = {f"t{i}": ([0.0, 0.0], [1.0, 1.0]) for i in range(11)}
    test = ad.adaptive_test(out, budget=200)
    assert test.state == "accept" and test.wins == 22 and test.final_p is None


def test_unsettled_tasks_get_the_next_look_and_settled_ones_none() -> None:
    """A task whose pooled trials all agree gets no more trials, whoever won; the others LOOK_TRIALS."""
    out = {"a": ([1.0, 1.0], [1.0, 1.0]), "b": ([0.0, 1.0], [1.0, 0.0]), "c": ([0.0, 0.0], [0.0, 1.0])}
    test = ad.adaptive_test(out, budget=100)
    assert test.state == "continue" and test.next_trials == {"b": ad.LOOK_TRIALS, "c": ad.LOOK_TRIALS}


def test_last_look_is_cut_to_the_budget_then_the_final_sign_test_decides() -> None:
    """With 4 trials left on 3 unsettled tasks the look is 1 trial on the first 2; at the budget the final
    sign test (level 0.04) decides, else inconclusive."""
    out = {t: ([0.0, 1.0], [1.0, 0.0]) for t in "abc"}
    assert ad.plan_look(out, budget=16) == {"a": 1, "b": 1}
    done = ad.adaptive_test(out, budget=12)
    assert done.state == "inconclusive" and done.final_p is not None and done.final_p > 0.5
    wins = {f"t{i}": ([0.0], [1.0]) for i in range(6)} | {"x": ([1.0], [0.0])}
    final = ad.adaptive_test(wins, budget=14)
    assert final.final_p == pytest.approx(8 / 128) and final.state == "inconclusive"
    more = {f"t{i}": ([0.0], [1.0]) for i in range(8)}
    assert ad.adaptive_test(more, budget=16).state == "accept"  # p = 1/256 <= 0.04


def test_start_plan_fits_the_budget() -> None:
    assert ad.start_plan(["b", "a"], 600) == {"a": ad.START_TRIALS, "b": ad.START_TRIALS}
    assert ad.start_plan(["a", "b", "c"], 7) == {"a": 1, "b": 1, "c": 1}
    assert ad.start_plan(["a", "b", "c"], 4) == {"a": 1, "b": 1}


def test_futility_rejects_many_losses() -> None:
    """12 losses and 1 win: 1 / (1.2 · 0.8^12) > 10 = 1 / BETA."""
    out = {f"t{i}": ([1.0], [0.0]) for i in range(12)} | {"w": ([0.0], [1.0])}
    assert ad.adaptive_test(out, budget=400).state == "reject"


def test_bad_level_or_budget_is_an_error() -> None:
    with pytest.raises(ValueError, match="level"):
        ad.adaptive_test({}, budget=10, level=1.0)
    with pytest.raises(ValueError, match="budget"):
        ad.adaptive_test({}, budget=1)


def _run_pure(
    p0: np.ndarray, p1: np.ndarray, rng: np.random.Generator, budget: int
) -> tuple[list[str], list[int]]:
    states, spent = [], []
    for d in range(p0.shape[0]):
        out: dict[str, tuple[list[float], list[float]]] = {f"{t:03d}": ([], []) for t in range(p0.shape[1])}
        plan = ad.start_plan(list(out), budget)
        while True:
            for key, m in plan.items():
                t = int(key)
                for _ in range(m):
                    out[key][0].append(float(rng.random() < p0[d, t]))
                    out[key][1].append(float(rng.random() < p1[d, t]))
            r = ad.adaptive_test(out, budget=budget)
            if r.state != "continue":
                break
            plan = r.next_trials
        states.append(r.state)
        spent.append(r.trials)
    return states, spent


def test_simulator_agrees_with_the_pure_rule() -> None:
    """`simulate` (numpy, vectorised) and `adaptive_test` driven look by look decide alike on one world."""
    rng = np.random.default_rng(3)
    p0 = rng.beta(0.6, 0.6, size=(300, 20))
    p1 = np.minimum(1.0, p0 + 0.15 * (1 - p0))
    st, sp = ad.simulate(p0, p1, rng, 240)
    pure, spent = _run_pure(p0, p1, rng, 240)
    assert abs(float((st == 1).mean()) - float(np.mean([s == "accept" for s in pure]))) < 0.1
    assert abs(float(sp.mean()) - float(np.mean(spent))) < 25


def test_false_acceptance_is_within_the_level() -> None:
    """No change on 30 noisy tasks: accepted at most about α (0.05) of 2,000 simulated decisions."""
    rng = np.random.default_rng(7)
    p0 = rng.beta(0.5, 0.5, size=(2000, 30))
    st, _ = ad.simulate(p0, p0, rng, ad.default_budget(30))
    assert float((st == 1).mean()) <= 0.06


def test_projection_says_what_the_run_can_see() -> None:
    """A starting run of 2 trials on 30 tasks, 10 of them mixed: a finite gain at 600 trials, and a line."""
    counts = [(1.0, 2)] * 10 + [(0.0, 2)] * 10 + [(2.0, 2)] * 10
    proj = ad.project(counts, 600, gains=(0.05,), draws=200)
    assert proj.min_gain is not None and 0.03 <= proj.min_gain <= 0.2
    assert proj.line().startswith(f"detects a +{100 * proj.min_gain:.0f} point gain with 80% power")
    tiny = ad.project(counts, 8, gains=(0.05,), draws=100)
    assert tiny.min_gain is None and "cannot detect a gain below +30 points" in tiny.line()


def test_noninferiority_pass_fail_undecided() -> None:
    """Equal sides with many trials pass; a shown 30-point drop fails; a small sample is undecided."""
    same = {f"t{i}": [1.0, 0.0] * 10 for i in range(40)}
    assert ni.noninferiority(same, same).state == "pass"
    worse = {f"t{i}": [0.0] * 14 + [1.0] * 6 for i in range(40)}
    assert ni.noninferiority(same, worse).state == "fail"
    few_b = {f"t{i}": [1.0 if i % 2 else 0.0] for i in range(10)}
    v = ni.noninferiority(few_b, few_b)
    assert v.state == "undecided" and not v.passed and v.more_trials and v.more_trials > 0
    assert "would decide" in v.line()


def test_plan_trials_and_smallest_drop() -> None:
    rates = [0.5] * 30
    k = ni.plan_trials(rates)
    se = (sum(p * (1 - p) * 2 / k for p in rates)) ** 0.5 / 30
    assert se <= ni.DEFAULT_MARGIN / 3.29
    catches, shows = ni.smallest_drop(rates, k)
    assert catches < ni.DEFAULT_MARGIN < shows


def test_train_test_gap_is_said_for_a_memorising_candidate() -> None:
    """Train 0.3 -> 1.0 on every task, test flat: said, naming the train tasks; equal gains: not said."""
    tr_s = {f"r{i}": [1.0 if i < 3 else 0.0] for i in range(10)}
    tr_f = {f"r{i}": [1.0] for i in range(10)}
    te = {f"e{i}": [1.0 if i % 3 == 0 else 0.0] for i in range(10)}
    gap = ni.train_test_gap(tr_s, tr_f, te, te)
    assert gap.said and gap.tasks[0] == "r3" and "beyond the noise" in gap.line()
    assert not ni.train_test_gap(tr_s, tr_s, te, te).said


def test_sign_p_is_the_exact_binomial_tail() -> None:
    assert ad.sign_p(6, 1) == pytest.approx(8 / 128)
    assert ad.sign_p(0, 0) == 1.0


def test_more_trials_from_the_drift_of_the_unsettled_pairs() -> None:
    """3 wins and 1 loss per 8 pairs: drift (3·log 1.25 + log 0.75) / 8 per pair, 2 trials a pair; no
    visible gain: None; a decided test: 0."""
    out = {
        "a": ([0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]),
        "b": ([0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0]),
    }
    test = ad.adaptive_test(out, budget=16)
    assert test.state == "inconclusive"
    mu = (3 * math.log(1.25) + math.log(0.75)) / 8
    assert ad.more_trials(test, out) == 2 * math.ceil((math.log(100) - test.log_e) / mu)
    flat = {"a": ([0.0, 1.0], [1.0, 0.0])}
    assert ad.more_trials(ad.adaptive_test(flat, budget=4), flat) is None


def test_leaderboard_rates_are_quoted_for_the_default_rule() -> None:
    """The committed `leaderboard_rates.json` quotes `adaptive` (the targets' cells) and no unknown rule."""
    from pytest_ecdysis.gate import rates

    text = rates.leaderboard_text("adaptive")
    assert text.startswith("on τ² leaderboard noise") and "(airline)" in text and "(telecom)" in text
    assert rates.leaderboard_text("no-such-rule") == ""
