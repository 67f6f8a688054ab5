"""The `sequential` acceptance rule on scripted per-trial rewards (the SPRT on discordant trial pairs:
accept, reject, inconclusive, the first comparison that may only reject, its false-acceptance bound), the
paired rule's "no test was possible", the measured rates quoted, and the gate's default."""

from __future__ import annotations

import math
import random

import pytest
from trial_lines import trial_lines

from pytest_ecdysis.gate.acceptance import decide, decide_paired, paired_test, sign_min_wins
from pytest_ecdysis.gate.sequential import (
    BETA,
    P1,
    discordant_tasks,
    min_wins,
    sequential_test,
    trial_pairs,
)


def _pairs(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict:
    return trial_pairs(trial_lines(before), trial_lines(after))


def test_pairs_discordance_and_the_likelihood_ratio() -> None:
    """Trial i of a task pairs with trial i of the other side; unpaired trials drop out; the LR is
    (2·P1)^wins (2·(1-P1))^losses."""
    pairs = _pairs({"a": [0, 0, 1], "b": [1], "c": [1, 1]}, {"a": [1, 0], "b": [0], "c": [1, 1]})
    assert pairs == {"s/a": [(0.0, 1.0), (0.0, 0.0)], "s/b": [(1.0, 0.0)], "s/c": [(1.0, 1.0), (1.0, 1.0)]}
    assert discordant_tasks(pairs) == ["s/a", "s/b"]
    t = sequential_test(pairs, looks=1)
    assert (t.wins, t.losses, t.pairs, t.n_tasks) == (1, 1, 5, 3)
    assert t.log_lr == pytest.approx(math.log(2 * P1) + math.log(2 * (1 - P1)))
    assert t.state == "continue"


def test_first_comparison_may_only_reject() -> None:
    """+10/-0 on the first comparison crosses the acceptance bound (1.5^10 = 57.7 >= 20) but is not
    accepted before a confirmation look; after one look with the same evidence it is; without any look
    possible (deterministic models) the first comparison decides."""
    pairs = _pairs({str(i): [0.0] for i in range(10)}, {str(i): [1.0] for i in range(10)})
    first = sequential_test(pairs, looks=0)
    assert first.state == "continue" and first.p_value == 1.0
    assert sequential_test(pairs, looks=1).state == "accept"
    alone = sequential_test(pairs, looks=0, can_confirm=False)
    assert alone.state == "accept" and alone.p_value == pytest.approx(1.5**-10)


def test_clearly_worse_is_rejected_at_the_first_comparison() -> None:
    """+1/-3: LR 1.5 · 0.5^3 = 0.1875 <= β/(1-α) = 0.2105: rejected without a look; +3/-3 (a tie, as in
    the issue's curable world) is not: it goes to confirmation."""
    worse = sequential_test(
        _pairs({"0": [0], "1": [1], "2": [1], "3": [1]}, {"0": [1], "1": [0], "2": [0], "3": [0]})
    )
    assert worse.state == "reject" and math.exp(worse.log_lr) == pytest.approx(0.1875)
    assert worse.bounds()[0] == pytest.approx(BETA / 0.95)
    tie = sequential_test(
        _pairs({str(i): [float(i < 3)] for i in range(6)}, {str(i): [float(i >= 3)] for i in range(6)})
    )
    assert (tie.wins, tie.losses, tie.state) == (3, 3, "continue")


def test_confirmation_stopping_accept_and_inconclusive() -> None:
    """A fix that wins 4 discordant pairs a look from +3/-1: LR after look 1 = 1.5^7 · 0.5 = 8.5
    (continue), after look 2 = 1.5^11 · 0.5 = 43.2 >= 20: accepted, p = 1/43.2. A candidate that keeps
    tying (+1/-1 a look) never crosses a bound: after its looks it is still `continue` (inconclusive)."""
    before = {str(i): [0.0] for i in range(4)}
    after = {"0": [1.0], "1": [1.0], "2": [1.0], "3": [0.0]}
    before["3"], after["4"], before["4"] = [1.0], [0.0], [0.0]
    t = sequential_test(_pairs(before, after), looks=0)
    assert (t.wins, t.losses, t.state) == (3, 1, "continue")
    for task in "0123":  # look 1: the four cured tasks win
        before[task].append(0.0)
        after[task].append(1.0)
    t = sequential_test(_pairs(before, after), looks=1, max_log_lr=t.max_log_lr)
    assert t.state == "continue" and math.exp(t.log_lr) == pytest.approx(1.5**7 * 0.5)
    for task in "0123":
        before[task].append(0.0)
        after[task].append(1.0)
    t = sequential_test(_pairs(before, after), looks=2, max_log_lr=t.max_log_lr)
    assert t.state == "accept" and t.p_value == pytest.approx(1 / (1.5**11 * 0.5))
    tie_b, tie_a = {"0": [1.0], "1": [0.0]}, {"0": [0.0], "1": [1.0]}
    t = sequential_test(_pairs(tie_b, tie_a))
    for look in (1, 2, 3):
        tie_b["0"].append(1.0), tie_a["0"].append(0.0), tie_b["1"].append(0.0), tie_a["1"].append(1.0)
        t = sequential_test(_pairs(tie_b, tie_a), looks=look, max_log_lr=t.max_log_lr)
    assert t.state == "continue" and (t.wins, t.losses) == (4, 4)


def test_false_acceptance_stays_below_the_level_with_adaptive_looks() -> None:
    """Ville's bound in practice: 3000 no-op decisions (30 tasks, success chance uniform in [0.3, 1], both
    sides alike), three looks on the flipped tasks: the share accepted is <= α = 0.05."""
    rng = random.Random(7)
    accepted = 0
    for _ in range(3000):
        p = {str(i): rng.uniform(0.3, 1.0) for i in range(30)}
        b = {t: [float(rng.random() < q)] for t, q in p.items()}
        a = {t: [float(rng.random() < q)] for t, q in p.items()}
        test = sequential_test(_pairs(b, a))
        for look in (1, 2, 3):
            if test.state != "continue":
                break
            for t in discordant_tasks(_pairs(b, a)) or [f"s/{k}" for k in p]:
                k = t.split("/")[1]
                b[k].append(float(rng.random() < p[k]))
                a[k].append(float(rng.random() < p[k]))
            test = sequential_test(_pairs(b, a), looks=look, max_log_lr=test.max_log_lr)
        accepted += test.state == "accept"
    assert accepted / 3000 <= 0.05


def test_decide_sequential_without_looks_and_minimum_wins() -> None:
    """`decide("sequential", ...)` (ablation's re-validations: no look) is the one-look test: 8 wins and no
    loss reach LR 1.5^8 = 25.6 >= 20 (`min_wins`), 7 do not (17.1): inconclusive, not rejected."""
    assert min_wins(0.05) == 8 and sign_min_wins(0.05) == 5
    b = [{"suite": "s", "task_id": str(i), "trial": 0, "reward": 0.0} for i in range(10)]
    a8 = [{**t, "reward": 1.0 if int(t["task_id"]) < 8 else 0.0} for t in b]
    a7 = [{**t, "reward": 1.0 if int(t["task_id"]) < 7 else 0.0} for t in b]
    d8 = decide("sequential", 0.0, 0.8, b, a8)
    d7 = decide("sequential", 0.0, 0.7, b, a7)
    assert (
        d8.accepted and d8.fields()["method"] == "sprt" and d8.fields()["p_value"] == pytest.approx(1.5**-8)
    )
    assert not d7.accepted and d7.inconclusive and d7.fields()["sequential"]["outcome"] == "inconclusive"


def test_paired_sign_says_when_no_test_was_possible() -> None:
    """4 tasks cannot make the sign test significant at 0.05 (at least 5 wins needed): the reason says so."""
    test = paired_test([1.0, 1.0, 1.0, 1.0])
    d = decide_paired(0.0, 1.0, test)
    assert not d.accepted and d.reason.endswith("no test was possible (4 tasks: at least 5 wins needed)")
    assert "no test was possible" not in decide_paired(0.0, 1.0, paired_test([1.0] * 5 + [0.0])).reason


def test_measured_rates_are_quoted_with_their_source() -> None:
    """The rates table written by benchmarks/bench_decisions.py: every rule measured, the default named,
    the text says where the figures come from; a level it was not measured at quotes nothing."""
    from pytest_ecdysis.core.options import OPTIONS
    from pytest_ecdysis.gate.rates import _leaderboard, _table, rates_text

    table = _table()
    default = next(o.default for o in OPTIONS if o.name == "accept")
    assert _leaderboard()["default"] == default  # the default was chosen on τ² leaderboard noise
    assert set(table["rules"]) >= {"strict", "paired/sign", "sequential"}
    text = rates_text({"rule": "sequential", "level": 0.05})
    assert "false acceptance" in text and "bench_decisions.py" in text and "simulated model" in text
    assert rates_text({"rule": "sequential", "level": 0.1}) == ""


def test_the_gate_judges_sequential_as_a_significant_drop() -> None:
    """The gate cannot re-run the baseline: under `sequential` it fails only on a significant drop (as
    `paired`), not on any drop (as `strict`)."""
    from pytest_ecdysis.gate import baseline as gate

    def summary(rewards: list[float]) -> dict:
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
            "suite_score": sum(rewards) / len(rewards),
            "tasks": tasks,
        }

    base, run = summary([1.0] * 10), summary([0.0] + [1.0] * 9)  # one task lost: p = 0.5
    v = gate.verdict(
        run, base, rule="sequential", tolerance=0.0, max_regressions=None, missing=[], n_collected=10
    )
    assert v.passed and v.rule == "paired"
    assert not gate.verdict(
        run, base, rule="strict", tolerance=0.0, max_regressions=None, missing=[], n_collected=10
    ).passed


LOOK_CONFTEST_TAIL = '''

_inner = evolve.run_suite


def run_suite_logged(**kwargs):
    """Log every sub-run id; Ctrl-C before the candidate's second confirmation look when `interrupt-look` exists."""
    if (HERE / "interrupt-look").exists() and kwargs["run_id"].endswith("-r1c2"):
        raise KeyboardInterrupt
    with open(HERE / "validate.log", "a") as log:
        log.write(kwargs["run_id"] + "\\n")
    return _inner(**kwargs)


evolve.run_suite = run_suite_logged
'''


@pytest.mark.slow
def test_confirmation_accepts_after_looks_and_resumes_without_redoing_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny suite (test_evolve_loop): LEVEL 1 -> 4 gains 3 of 4 tasks in every trial. Under `sequential`
    the first comparison (+3/-0, LR 3.4) may not accept; look 1 re-runs the 3 flipped tasks for both
    harnesses (+6/-0, LR 11.4), look 2 again (+9/-0, LR 38.4 >= 20): accepted, 12 confirmation trials.
    Ctrl-C before look 2 and `--ecdysis-resume`: look 1's sub-runs are not run again."""
    import json

    from tiny_evolution import CONFTEST, evolution, make_project, run_evolution, script

    from pytest_ecdysis.report.pr_body import render_pr_body

    project = make_project(pytester, monkeypatch, CONFTEST + LOOK_CONFTEST_TAIL)
    script(project, [{"knob": "x", "value": 4}])
    (project.path / "interrupt-look").write_text("")
    first = run_evolution(
        project, "--ecdysis-rounds", "1", "--ecdysis-accept", "sequential", "--ecdysis-test-trials", "0"
    )
    assert first.ret == 2, first.stdout.str()
    confirm_dir = project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1" / "confirm"
    assert (confirm_dir / "1.json").is_file() and not (confirm_dir / "2.json").exists()
    (project.path / "interrupt-look").unlink()
    second = run_evolution(
        project,
        "--ecdysis-rounds",
        "1",
        "--ecdysis-accept",
        "sequential",
        "--ecdysis-test-trials",
        "0",
        "--ecdysis-resume",
        "run1",
        run_id="",
    )
    assert second.ret == 0, second.stdout.str()
    ran = (project.path / "validate.log").read_text().split()
    assert sorted(r for r in ran if "c1" in r) == [
        "run1-r1c1",
        "run1-r1ic1",
    ]  # look 1: once, before the Ctrl-C
    # look 2 was unfinished: redone (its incumbent side may have started beside the interrupted candidate)
    assert ran.count("run1-r1c2") == 1 and ran.count("run1-r1ic2") in (1, 2) and ran[-2:] != ["run1-r1c1"] * 2
    (row,) = evolution(project)["rounds"]
    assert row["outcome"] == "accepted"
    conf = row["confirmation"]
    assert [x["tasks"] for x in conf["looks"]] == [["tiny/1", "tiny/2", "tiny/3"]] * 2 and conf[
        "trials"
    ] == 12
    assert (row["decision"]["rule"], row["decision"]["method"]) == ("sequential", "sprt")
    assert (row["decision"]["wins"], row["decision"]["losses"]) == (9, 0)
    assert row["decision"]["p_value"] == pytest.approx(1.5**-9)
    assert json.loads((confirm_dir / "2.json").read_text())["budget_trials"] == 6
    second.stdout.fnmatch_lines(
        [
            "*round 1: sequential rule*: accept: against the incumbent re-run beside it: *"
            "+9/-0 discordant*12 confirmation trial(s)*",
            "*decided by: sequential sign test*the confirmation spent 12 trial(s)*",
        ]
    )
    body = render_pr_body(project.path / ".ecdysis" / "runs" / "run1")
    assert "The confirmation spent 12 trial(s)." in body and "sequential sign test of discordant" in body
    from pytest_ecdysis.report.html_view import gather

    view = gather(project.path / ".ecdysis" / "runs" / "run1")
    assert view["evolution"]["decided_by"].startswith("decided by: sequential sign test")
    assert "the confirmation spent 12 trial(s)" in view["evolution"]["decided_by"]


@pytest.mark.slow
def test_an_inconclusive_round_is_not_rejected(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LEVEL 1 -> 2 gains one task of 4 in every trial: +1, +2, +3, +4 discordant wins after the first
    comparison and three looks: LR 1.5^4 = 5.1, neither bound: `inconclusive`, no branch, said as such."""
    from tiny_evolution import CONFTEST, evolution, make_project, run_evolution, script

    project = make_project(pytester, monkeypatch, CONFTEST)
    script(project, [{"knob": "x", "value": 2}])
    result = run_evolution(
        project, "--ecdysis-rounds", "1", "--ecdysis-accept", "sequential", "--ecdysis-test-trials", "0"
    )
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    (row,) = doc["rounds"]
    assert row["outcome"] == "inconclusive" and not row["accepted"] and doc["branch"] is None
    assert row["confirmation"]["trials"] == 6 and "budget spent (3 look(s)" in row["confirmation"]["stopped"]
    assert row["decision"]["sequential"]["outcome"] == "inconclusive"
    result.stdout.fnmatch_lines(
        ["*round 1: inconclusive (neither accepted nor rejected: may be tried again)*"]
    )


def test_held_out_regressions_are_listed_in_the_verdict_and_pr_body(tmp_path) -> None:
    """A test task the start solved in every trial and the frozen harness failed once is a held-out
    regression: computed from the two test runs, listed by the verdict and the PR body."""
    import json

    from pytest_ecdysis.evolve.testsplit import held_out_regressions
    from pytest_ecdysis.report.pr_body import render_pr_body
    from pytest_ecdysis.report.verdict import evolution_lines

    def run(name: str, rewards: dict[str, list[float]]) -> str:
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"suite_score": 0.5}))
        lines = trial_lines(rewards, suite="airline", termination_reason="agent_stop")
        (d / "trials.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        return str(d)

    start = {
        "run_path": run("start", {"1": [1.0, 1.0], "2": [1.0, 1.0], "3": [0.0, 1.0]}),
        "suite_score": 0.83,
    }
    frozen = {
        "run_path": run("frozen", {"1": [1.0, 0.0], "2": [1.0, 1.0], "3": [1.0, 1.0]}),
        "suite_score": 0.83,
    }
    reg = held_out_regressions(start, frozen, 1.0)
    assert reg == {"solved_to_failed": ["airline/1"], "failed_to_solved": ["airline/3"]}
    assert held_out_regressions(start, {**frozen, "same_as_start": True}, 1.0)["solved_to_failed"] == []
    doc = {
        "rounds": [{"round": 1, "accepted": True, "outcome": "accepted"}],
        "start": {"score": 0.5},
        "incumbent": {"score": 0.6},
        "branch": "ecdysis/r1",
        "diff_command": "git diff a ecdysis/r1",
        "test": {"start": start, "frozen": frozen, "trials": 2, "regressions": reg},
        "accept": {"rule": "sequential", "method": "sign", "level": 0.05},
    }
    texts = [t for t, _ in evolution_lines(doc, None, "r1")]
    assert (
        "held-out regression(s): the frozen harness lost 1 test task(s) the start solved in every trial: "
        "airline/1"
    ) in texts
    (tmp_path / "evo").mkdir()
    (tmp_path / "evo" / "evolution.json").write_text(json.dumps(doc))
    assert (
        "**Held-out regressions**: the frozen harness lost 1 test task(s) the start solved in every trial: "
        "airline/1" in render_pr_body(tmp_path / "evo")
    )


@pytest.mark.slow
def test_a_retried_inconclusive_candidate_continues_its_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LEVEL 1 -> 2 (one task gained in every trial) proposed in three rounds: round 1 ends inconclusive at
    +4/-0 (LR 5.1); rounds 2 and 3 reuse its validation and continue the same test with the earlier looks
    pooled: round 2 reaches +7 (LR 17.1, inconclusive), round 3 accepts at its first look (+8, LR 25.6 >= 20)."""
    from tiny_evolution import CONFTEST, evolution, make_project, run_evolution, script

    project = make_project(pytester, monkeypatch, CONFTEST)
    script(project, [{"knob": "x", "value": 2}] * 3)
    result = run_evolution(
        project, "--ecdysis-rounds", "3", "--ecdysis-accept", "sequential", "--ecdysis-test-trials", "0"
    )
    assert result.ret == 0, result.stdout.str()
    rounds = evolution(project)["rounds"]
    assert [r["outcome"] for r in rounds] == ["inconclusive", "inconclusive", "accepted"]
    assert [r["decision"]["wins"] for r in rounds] == [4, 7, 8]
    assert [r["confirmation"].get("continued", 0) for r in rounds] == [0, 3, 6]
    assert [r["confirmation"]["trials"] for r in rounds] == [6, 6, 2]
    result.stdout.fnmatch_lines(
        ["*round 3: continuing the test of the earlier attempt(s) at this candidate (6 look(s) pooled)*"]
    )
