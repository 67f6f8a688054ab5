"""The gate's default rule on suites too small for its paired test (the paired default meets a 3-task suite of
one's own, docs/own-suite.md): a sign test at level 0.05 needs at least 5 tasks to ever reject, so below that
the plain score rule decides and the verdict says why; from 5 tasks on, the paired test decides (one lost task
of six is no significant drop)."""

from __future__ import annotations

from pytest_ecdysis.gate.baseline import verdict


def tasks(rewards: list[float]) -> dict[str, dict]:
    return {str(i): {"mean_reward": r, "solved": r == 1.0} for i, r in enumerate(rewards)}


def gate(base: list[float], now: list[float], **kw):
    baseline = {"suite_score": sum(base) / len(base), "tasks": tasks(base)}
    run = {"suite_score": sum(now) / len(now), "n_infra_errors": 0, "tasks": tasks(now)}
    return verdict(
        run,
        baseline,
        tolerance=kw.pop("tolerance", 0.0),
        max_regressions=None,
        missing=[],
        n_collected=len(now),
        rule=kw.pop("rule", "sequential"),
        **kw,
    )


def test_a_drop_on_a_suite_too_small_for_the_paired_test_fails_by_the_score_rule():
    v = gate([1, 1, 0], [1, 0, 0])
    assert not v.passed and v.rule == "paired"  # the rule asked for; the reason says the score rule decided
    assert v.reasons == [
        "suite score 0.333 is 0.333 below the baseline 0.667 (tolerance 0.000); the paired test was "
        "not possible (3 task(s) in both runs: at least 5 needed), so the score rule decided"
    ]


def test_no_drop_on_a_small_suite_passes_and_a_tolerated_drop_too():
    assert gate([1, 1, 0], [1, 1, 0]).passed
    assert gate([1, 1, 0], [1, 0, 0], tolerance=0.5).passed


def test_from_five_tasks_on_the_paired_test_decides():
    one_lost = gate([1] * 6, [1] * 5 + [0])
    assert one_lost.passed and one_lost.rule == "paired" and one_lost.reasons == []
    all_lost = gate([1] * 6, [0] * 6)
    assert (
        not all_lost.passed
        and "the run is worse than the baseline: sign test over 6 task(s)" in all_lost.reasons[0]
    )
