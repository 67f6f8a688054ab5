"""The acceptance rules on scripted paired results: `strict` (the suite score strictly rises) and
`paired` (a one-sided paired test over tasks at a stated level), and the gate's use of the same test."""

from __future__ import annotations

import random

import pytest
from tiny_evolution import make_project
from trial_lines import trial_lines

from pytest_ecdysis.gate import baseline as gate
from pytest_ecdysis.gate.acceptance import (
    METHODS,
    decide,
    decide_paired,
    decide_strict,
    decision_fields,
    paired_differences,
    paired_test,
    regression_test,
    task_means,
)


def _runs(before: list[float], after: list[float]) -> tuple[list[dict], list[dict]]:
    return (
        trial_lines({str(i): [r] for i, r in enumerate(before)}),
        trial_lines({str(i): [r] for i, r in enumerate(after)}),
    )


CLEAR_WIN = ([0.0] * 8 + [1.0] * 22, [1.0] * 30)  # 8 tasks gained, none lost
TIE = ([0.0] * 5 + [1.0] * 25, [0.0] * 5 + [1.0] * 25)
NOISE = ([1, 1, 0, 0, 0, 1, 1, 1] + [1.0] * 22, [0, 0, 1, 1, 1, 1, 1, 1] + [1.0] * 22)  # +3 / -2
ONE_FLIP = ([0.0] + [1.0] * 29, [1.0] * 30)  # a single large flip


@pytest.mark.parametrize("method", METHODS)
def test_clear_win_is_accepted_by_both_rules(method: str) -> None:
    """Eight tasks gained and none lost: significant at 0.05 whatever the method; strict accepts too."""
    before, after = _runs(*CLEAR_WIN)
    paired = decide("paired", 22 / 30, 1.0, before, after, method=method, level=0.05)
    assert paired.accepted and paired.test.wins == 8 and paired.test.losses == 0
    assert paired.test.p_value <= 0.05 and paired.test.effect == pytest.approx(8 / 30)
    low, high = paired.test.interval
    assert 0 < low <= 8 / 30 <= high
    assert decide("strict", 22 / 30, 1.0, before, after, method=method).accepted


@pytest.mark.parametrize("method", METHODS)
def test_tie_is_rejected_by_both_rules(method: str) -> None:
    before, after = _runs(*TIE)
    for rule in ("strict", "paired"):
        d = decide(rule, 25 / 30, 25 / 30, before, after, method=method)
        assert not d.accepted and d.test.p_value == 1.0 and d.test.effect == 0.0
        assert d.test.interval == (0.0, 0.0)


@pytest.mark.parametrize("method", METHODS)
def test_noise_and_one_large_flip_fool_strict_but_not_paired(method: str) -> None:
    """A net +1 task from noise (+3/-2), or one task flipping: the suite score rises, so `strict` accepts;
    the paired test does not reject "no improvement", so `paired` rejects, saying why."""
    for before_r, after_r in (NOISE, ONE_FLIP):
        before, after = _runs(before_r, after_r)
        s0, s1 = sum(before_r) / 30, sum(after_r) / 30
        assert s1 > s0
        assert decide("strict", s0, s1, before, after, method=method).accepted
        paired = decide("paired", s0, s1, before, after, method=method)
        assert not paired.accepted and paired.test.p_value > 0.05
        assert "not significant at level 0.05" in paired.reason


def test_sign_test_p_values_are_the_binomial_tail() -> None:
    """Sign test: P(X >= wins) for X ~ Bin(wins + losses, 1/2); ties (zero differences) are left out.
    Wilcoxon on ±1 differences (one trial per task) is the same test; on distinct magnitudes it is exact."""
    assert paired_test([1.0] * 5 + [0.0] * 10).p_value == pytest.approx(1 / 32)
    assert paired_test([1.0] * 4 + [-1.0]).p_value == pytest.approx(6 / 32)
    assert paired_test([1.0]).p_value == pytest.approx(0.5)
    assert paired_test([1.0] * 4 + [-1.0], method="wilcoxon").p_value == pytest.approx(6 / 32)
    tied = paired_test([1.0, 1.0, 0.5, 0.5, -0.5, 1.0, 0.5], method="wilcoxon").p_value  # permutation test
    assert 0.02 < tied < 0.1
    assert paired_test([0.5, 0.25, 1, -0.1, 0.3, 0.7], method="wilcoxon").p_value == pytest.approx(2 / 64)


@pytest.mark.parametrize("method", METHODS)
def test_false_acceptance_rate_of_paired_on_noise_is_at_most_the_level(method: str) -> None:
    """An unchanged harness on a noisy model: each task flips either way with the same chance. Over 200
    scripted decisions `paired` accepts at most the level (plus sampling slack); `strict` about 45%."""
    rng = random.Random(7)
    paired = strict = 0
    n = 200
    for _ in range(n):
        p_task = [rng.uniform(0.3, 1.0) for _ in range(30)]
        before = [float(rng.random() < p) for p in p_task]
        after = [float(rng.random() < p) for p in p_task]
        s0, s1 = sum(before) / 30, sum(after) / 30
        test = paired_test(paired_differences(dict(enumerate(before)), dict(enumerate(after))), method=method)
        paired += decide_paired(s0, s1, test).accepted
        strict += decide_strict(s0, s1).accepted
    assert paired / n <= 0.07
    assert strict / n >= 0.3


def test_per_task_means_pair_tasks_scored_in_both_runs() -> None:
    """Trials of a task are averaged; infrastructure errors (no reward) are left out; only tasks scored in
    both runs are paired."""
    means = task_means(
        trial_lines({"1": [1.0, 0.0, 1.0], "2": [0.5]}) + [{"suite": "s", "task_id": "3", "reward": None}]
    )
    assert means == {"s/1": pytest.approx(2 / 3), "s/2": 0.5}
    assert paired_differences(means, {"s/1": 1.0, "s/4": 0.0}) == [pytest.approx(1 / 3)]


def test_unknown_method_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown paired-test method 't'"):
        paired_test([1.0], method="t")
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        paired_test([1.0], level=1.0)
    with pytest.raises(ValueError, match="unknown acceptance rule"):
        decide("lenient", 0.1, 0.2, [], [])


def test_decision_fields_for_decision_json() -> None:
    """`decision.json` carries rule, method, effect, interval, p_value and level; none without a test."""
    test = paired_test([1.0] * 6 + [0.0] * 4, method="sign", level=0.1)
    d = decide_paired(0.4, 1.0, test)
    fields = d.fields()
    assert {k: fields[k] for k in ("rule", "method", "level")} == {
        "rule": "paired",
        "method": "sign",
        "level": 0.1,
    }
    assert fields["effect"] == pytest.approx(0.6) and fields["p_value"] == pytest.approx(1 / 64)
    assert len(fields["interval"]) == 2
    assert decision_fields({"decision": fields}) == fields
    assert decision_fields({})["p_value"] is None
    assert decide_strict(None, 0.5).accepted is False


def test_regression_test_is_the_paired_test_the_other_way_round() -> None:
    """The gate's test: effect run - baseline, p of "no drop"."""
    base = {f"s/{i}": 1.0 for i in range(10)}
    run = {**base, **{f"s/{i}": 0.0 for i in range(6)}}
    t = regression_test(base, run)
    assert t.effect == pytest.approx(-0.6) and t.losses == 6 and t.wins == 0
    assert t.p_value == pytest.approx(1 / 64) and t.interval[1] < 0
    assert regression_test(base, base).p_value == 1.0


def _summary(rewards: list[float], score: float | None = None) -> dict:
    tasks = {
        f"s/{i}": {"n": 1, "successes": int(r), "solved": r == 1.0, "mean_reward": r, "infra_errors": 0}
        for i, r in enumerate(rewards)
    }
    return {
        "suite": "s",
        "split": "train",
        "trials": 1,
        "model": "sim",
        "threshold": 1.0,
        "n_infra_errors": 0,
        "suite_score": sum(rewards) / len(rewards) if score is None else score,
        "tasks": tasks,
    }


def test_gate_paired_fails_only_on_a_significant_drop() -> None:
    """One task lost (noise-sized): `strict` fails the gate, `paired` passes it and reports p; six tasks
    lost: both fail. The verdict dict carries method, effect, interval, p_value."""
    base = _summary([1.0] * 20)
    one = _summary([0.0] + [1.0] * 19)
    six = _summary([0.0] * 6 + [1.0] * 14)
    kw = {"tolerance": 0.0, "max_regressions": None, "missing": [], "n_collected": 20}
    assert not gate.verdict(one, base, rule="strict", **kw).passed
    v = gate.verdict(one, base, rule="paired", **kw)
    assert v.passed and v.as_dict()["p_value"] == pytest.approx(0.5) and v.as_dict()["method"] == "sign"
    assert "sign test of a drop over 20 task(s)" in v.headline()
    v6 = gate.verdict(six, base, rule="paired", **kw)
    assert not v6.passed and "the run is worse than the baseline" in v6.reasons[0]
    assert v6.as_dict()["effect"] == pytest.approx(-0.3) and v6.as_dict()["interval"][1] < 0
    # a drop below the tolerance passes even when significant
    assert gate.verdict(six, base, rule="paired", **{**kw, "tolerance": 0.35}).passed


def test_gate_pairs_old_baselines_by_success_rate() -> None:
    """A baseline written before baselines kept `mean_reward` is compared by success rate on both sides."""
    base = _summary([1.0] * 10)
    for v in base["tasks"].values():
        del v["mean_reward"]
    run = _summary([0.5] * 10)  # partial rewards: no successes at λ = 1
    v = gate.verdict(
        run, base, rule="paired", tolerance=0.0, max_regressions=None, missing=[], n_collected=10
    )
    assert v.test["effect"] == pytest.approx(-1.0)


@pytest.mark.slow
def test_a_round_records_its_decision_under_paired(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny suite (test_evolve_loop): LEVEL 1 -> 3 gains 2 of 4 tasks. `strict` would accept; under
    `--ecdysis-accept paired` the sign test gives p = 1/4 > 0.05 (on 4 tasks no test was possible: 5 wins are
    needed), so the round is rejected, and its
    `decision.json` carries rule, method, effect, interval and p_value, also in the terminal and PR body."""
    import json

    from tiny_evolution import CONFTEST, make_project, run_evolution, script

    from pytest_ecdysis.report.pr_body import render_pr_body

    project = make_project(pytester, monkeypatch, CONFTEST)
    script(project, [{"knob": "x", "value": 3}])
    result = run_evolution(project, "--ecdysis-rounds", "1", "--ecdysis-accept", "paired")
    assert result.ret == 0, result.stdout.str()
    run = project.path / ".ecdysis" / "runs" / "run1"
    decision = json.loads((run / "rounds" / "1" / "decision.json").read_text())
    assert decision["round"]["outcome"] == "rejected"
    assert {k: decision[k] for k in ("rule", "method", "level")} == {
        "rule": "paired",
        "method": "sign",
        "level": 0.05,
    }
    assert decision["effect"] == pytest.approx(0.5) and decision["p_value"] == pytest.approx(0.25)
    assert decision["interval"][0] <= 0.5 <= decision["interval"][1]
    doc = json.loads((run / "evolution.json").read_text())
    assert doc["accept"]["rule"] == "paired"
    # paired re-scoring: the incumbent ran again beside the candidate; both runs are kept
    inc = doc["rounds"][0]["incumbent_run"]
    assert (
        inc["rescored"]
        and inc["run_id"] == "run1-r1i"
        and inc["score"] == 0.25
        and inc["cached_score"] == 0.25
    )
    assert (run / "rounds" / "1" / "incumbent" / "run1-r1i" / "trials.jsonl").is_file()
    assert (run / "rounds" / "1" / "run1-r1" / "trials.jsonl").is_file()
    result.stdout.fnmatch_lines(
        [
            "*round 1: paired rule*: reject: against the incumbent re-run beside it: suite score "
            "0.250 -> 0.750; sign test over 4 task(s) (+2/-0): effect +0.500*p=0.25: no test was "
            "possible (4 tasks: at least 5 wins needed)*",
            "*acceptance: paired sign test at level 0.05*",
        ]
    )
    body = render_pr_body(run)
    assert "| +0.500 [" in body and "| 0.25 (sign) |" in body


def test_rescore_plan() -> None:
    """The incumbent is re-run beside each candidate under `auto` and `always`, also with a fixed nonce (the
    rule does not change with it: the re-run is drawn from it, said); only `never` skips it."""
    from types import SimpleNamespace

    from pytest_ecdysis.evolve.paired import rescore_plan

    def cfg(rescore: str, model: str = "sim", nonce: str | None = None) -> SimpleNamespace:
        return SimpleNamespace(rescore=rescore, model=model, user_model=model, sim_nonce=nonce)

    assert rescore_plan(cfg("auto"), {})[0] is True
    rerun, why = rescore_plan(cfg("auto", nonce="ci"), {})
    assert rerun is True and "fixed nonce ('ci')" in why and "both runs drawn from it" in why
    assert rescore_plan(cfg("auto"), {"ECDYSIS_SIM_NONCE": "x"})[0] is True
    assert rescore_plan(cfg("auto", model="gpt-4o", nonce="ci"), {})[0] is True  # a nonce fixes only sim
    assert rescore_plan(cfg("always", nonce="ci"), {})[0] is True
    assert rescore_plan(cfg("never"), {}) == (
        False,
        "ecdysis_rescore = never: compared with the incumbent's earlier run",
    )


@pytest.mark.slow
def test_no_candidate_is_validated_twice(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Self-evolution: two specs whose edits give byte-identical candidates on the same incumbent (a tie,
    rejected, so the base stays): the second step reuses the first one's validation, recorded, and starts
    no sub-run; ini `ecdysis_rescore = never` compares with the incumbent's earlier run, recorded too."""
    import json

    from test_evolve_selfevolution import CONFTEST, _run
    from tiny_evolution import evolution, lines

    project = make_project(pytester, monkeypatch, CONFTEST)
    (project.path / "script.json").write_text(json.dumps([[{"value": 1}, {"value": 1}]]))
    result = _run(project, 1, "-o", "ecdysis_rescore=never")
    assert result.ret == 0, result.stdout.str()
    (r1,) = evolution(project)["rounds"]
    s1, s2 = r1["steps"]
    assert (s1["outcome"], s2["outcome"]) == ("rejected", "rejected")
    assert s1["harness_id_after"] == s2["harness_id_after"]
    assert "reused_validation" not in s1 and s2["reused_validation"] == "rounds/1/steps/1"
    assert [x for x in lines(project, "validate.log") if "-r1" in x] == ["run1-r1s1"]
    assert (
        s1["incumbent_run"]["rescored"] is False and "ecdysis_rescore = never" in s1["incumbent_run"]["why"]
    )
    result.stdout.fnmatch_lines(
        [
            "*step 2/2: candidate * was already validated on incumbent * in this run "
            "(rounds/1/steps/1): its validation is reused*"
        ]
    )
