"""The regression gate as CI runs it: save a baseline, then gate later runs against it."""

from __future__ import annotations

import json

import pytest
from test_records_pipeline import env, run, write_suite  # noqa: F401  (env: the fixture, used below)

from pytest_ecdysis.gate import baseline as gate

pytestmark = pytest.mark.usefixtures("env")

BASE = {"syn-air": {"1": [1.0, 1.0], "2": [1.0, 0.0], "3": [0.0, 0.0], "4": [1.0, 1.0]}}  # score 5/8


def save_baseline(pytester: pytest.Pytester, plan: dict = BASE) -> dict:
    write_suite(pytester, plan)
    result = run(pytester, "--ecdysis-trials", "2", "--ecdysis-save-baseline", ".ecdysis/baseline.json")
    result.stdout.fnmatch_lines(["baseline written: .ecdysis/baseline.json"])
    return json.loads((pytester.path / ".ecdysis" / "baseline.json").read_text())


def gate_run(pytester: pytest.Pytester, plan: dict, *args: str, xdist: bool = False) -> pytest.RunResult:
    write_suite(pytester, plan)
    return run(pytester, "--ecdysis-trials", "2", "--ecdysis-gate", *(("-n", "2") if xdist else ()), *args)


def test_gate_passes_with_exit_0_even_with_failing_trials(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same score as the baseline: exit 0 although trials are below λ, says by how much, writes the job summary."""
    baseline = save_baseline(pytester)
    assert baseline["suite_score"] == pytest.approx(5 / 8) and baseline["tasks"]["syn-air/4"]["solved"]
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step_summary.md"))
    result = gate_run(pytester, BASE, "--ecdysis-gate-rule", "strict", xdist=True)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*gate PASSED: suite score 0.625 vs baseline 0.625 (+0.000, tolerance 0.000; "
            "0.000 above the lowest allowed score)*"
        ]
    )
    assert "3 failed" in result.stdout.str()
    md = (pytester.path / "step_summary.md").read_text()
    assert "**gate PASSED" in md and "| syn-air | 4 | 8 | 0.625 |" in md


def test_gate_fails_on_a_lower_score(pytester: pytest.Pytester) -> None:
    """`strict`: a score below the baseline by more than the tolerance: exit 1 and the shortfall stated.
    `paired` on 4 tasks, too few for the sign test ever to reject at 0.05: the score rule decides, and the
    verdict says why (test_gate_small_suite.py). The default (noninferiority, margin 5 points): 4 tasks x 2
    trials cannot show the drop within the margin: undecided, which fails (test_gate_noninferiority.py)."""
    save_baseline(pytester)
    worse = {**BASE, "syn-air": {**BASE["syn-air"], "4": [1.0, 0.0]}}  # 4/8
    result = gate_run(pytester, worse, "--ecdysis-gate-rule", "strict")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*gate FAILED: suite score 0.500 vs baseline 0.625 (-0.125*",
            "*suite score 0.500 is 0.125 below the baseline 0.625 (tolerance 0.000)*",
        ]
    )
    assert (
        gate_run(pytester, worse, "--ecdysis-gate-rule", "strict", "--ecdysis-gate-tolerance", "0.2").ret == 0
    )
    default = gate_run(pytester, worse)
    assert default.ret == 1
    default.stdout.fnmatch_lines(["*gate FAILED*rule noninferiority, margin 5 points: Δ -0.125*undecided*"])
    paired = gate_run(pytester, worse, "--ecdysis-gate-rule", "paired")
    assert paired.ret == 1
    paired.stdout.fnmatch_lines(
        [
            "*gate FAILED: suite score 0.500 vs baseline 0.625 (-0.125*",
            "*the paired test was not possible (4 task(s) in both runs: at least 5 needed), "
            "so the score rule decided*",
        ]
    )


def test_gate_fails_on_regressions_only_when_asked(pytester: pytest.Pytester) -> None:
    """Same score but a task solved in the baseline now fails: fails with max-regressions 0, passes unchecked
    (under the strict rule, which an equal score passes)."""
    save_baseline(pytester)
    swapped = {"syn-air": {"1": [1.0, 1.0], "2": [1.0, 1.0], "3": [0.0, 0.0], "4": [1.0, 0.0]}}  # still 5/8
    assert gate_run(pytester, swapped, "--ecdysis-gate-rule", "strict").ret == 0
    result = gate_run(
        pytester, swapped, "--ecdysis-gate-rule", "strict", "--ecdysis-gate-max-regressions", "0"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*1 task(s) solved in the baseline are not solved now (allowed 0): syn-air/4*"]
    )


def test_gate_fails_on_missing_cases(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crashed worker's case is missing: the gate fails with that reason whatever the score."""
    save_baseline(pytester)
    monkeypatch.setenv("SYNTH_CRASH", "syn-air-3-t0")  # a failing trial: the score alone would rise
    result = gate_run(pytester, BASE, xdist=True)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*gate FAILED*", "*1 collected case(s) never reported a result*syn-air-3-t0*"]
    )


def test_gate_fails_when_nothing_is_collected(pytester: pytest.Pytester) -> None:
    """No trial case at all ('no tests ran'): the gate fails instead of exit 0 or 5."""
    save_baseline(pytester)
    result = run(pytester, "--ecdysis-trials", "2", "--ecdysis-gate", "-n", "2", "-k", "nothing_matches")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*no trial case was collected*"])


def test_gate_refuses_a_mismatched_baseline(pytester: pytest.Pytester) -> None:
    """Other trials/model/λ: usage error before any trial; other suite (a suite that does not tell its tasks
    after collection): refused at the end, not compared, and a usage error too."""
    save_baseline(pytester)
    result = gate_run(pytester, BASE, "--ecdysis-trials", "3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*refuses baseline*trials: baseline 2, this run 3*"])
    result = gate_run(pytester, BASE, "--ecdysis-threshold", "0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*refuses baseline*threshold: baseline 1.0, this run 0.5*"])
    result = gate_run(pytester, {"syn-ret": BASE["syn-air"]})
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*gate REFUSED*suite: baseline 'syn-air', this run 'syn-ret'*"])


def test_gate_without_a_baseline_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """--ecdysis-gate with no baseline file says how to make one."""
    result = gate_run(pytester, BASE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no baseline at .ecdysis/baseline.json*--ecdysis-save-baseline*"])


def test_verdict_on_infra_errors_and_headline() -> None:
    """Unit: infrastructure errors fail the gate even with a higher score; the headline says by how much."""
    base = {
        "suite": "s",
        "split": "train",
        "trials": 1,
        "model": "sim",
        "threshold": 1.0,
        "suite_score": 0.5,
        "tasks": {"s/1": {"solved": True}},
    }
    run_summary = {**base, "suite_score": 0.6, "n_infra_errors": 2, "tasks": {"s/1": {"solved": True}}}
    v = gate.verdict(
        run_summary, base, tolerance=0.0, max_regressions=None, missing=[], n_collected=3, rule="strict"
    )
    assert not v.passed and "2 trial(s) ended with an infrastructure error" in v.reasons[0]
    ok = gate.verdict(
        {**run_summary, "n_infra_errors": 0},
        base,
        tolerance=0.05,
        max_regressions=None,
        missing=[],
        n_collected=3,
        rule="strict",
    )
    assert ok.passed and "0.150 above the lowest allowed score" in ok.headline()


def test_verdict_refuses_another_task_selection() -> None:
    """Unit: a run over other tasks than the baseline's (another --ecdysis-tasks) is refused, not compared."""
    base = {
        "suite": "s",
        "split": "train",
        "trials": 1,
        "model": "sim",
        "threshold": 1.0,
        "suite_score": 0.5,
        "tasks": {"s/1": {"solved": True}, "s/2": {"solved": False}},
    }
    run_summary = {**base, "suite_score": 1.0, "n_infra_errors": 0, "tasks": {"s/1": {"solved": True}}}
    v = gate.verdict(run_summary, base, tolerance=0.0, max_regressions=None, missing=[], n_collected=1)
    assert v.refused and not v.passed and "only in the baseline: s/2" in v.reasons[0]


def test_gate_command_exits_as_the_pytest_gate(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture
) -> None:
    """`ecdysis gate` exits as `pytest --ecdysis-gate` does (4, a usage error, for a missing or unreadable
    baseline and for one of other options or tasks: it exited 2 and 1), and its messages name its own
    options (`--baseline`, never `--ecdysis-gate`/`--ecdysis-baseline`)."""
    from pytest_ecdysis.cli import main as ecdysis

    base = save_baseline(pytester)
    run(pytester, "--ecdysis-trials", "2", "--ecdysis-run-dir", "runs")
    (run_dir,) = list((pytester.path / "runs").iterdir())
    assert ecdysis(["gate", str(run_dir), "--baseline", ".ecdysis/baseline.json", "--rule", "strict"]) == 0
    capsys.readouterr()
    assert ecdysis(["gate", str(run_dir), "--baseline", "nowhere.json"]) == pytest.ExitCode.USAGE_ERROR == 4
    err = capsys.readouterr().err
    assert "ecdysis gate: no baseline at nowhere.json" in err and "point --baseline at it" in err, err
    assert "--ecdysis-gate" not in err and "--ecdysis-baseline" not in err, err
    (pytester.path / "junk.json").write_text("[]")
    assert ecdysis(["gate", str(run_dir), "--baseline", "junk.json"]) == 4
    err = capsys.readouterr().err
    assert "baseline junk.json is not a pytest-ecdysis baseline" in err and "--ecdysis-baseline" not in err, (
        err
    )
    (pytester.path / "trials3.json").write_text(json.dumps({**base, "trials": 3}))
    assert ecdysis(["gate", str(run_dir), "--baseline", "trials3.json"]) == 4
    assert "gate REFUSED" in capsys.readouterr().out
    more = {f"syn-air/{i}": {"n": 2, "successes": 2, "solved": True} for i in range(10, 34)}
    (pytester.path / "more.json").write_text(json.dumps({**base, "tasks": {**base["tasks"], **more}}))
    assert ecdysis(["gate", str(run_dir), "--baseline", "more.json"]) == 4
    out = capsys.readouterr().out  # 24 ids only in the baseline: 5 shown, and how many more
    assert (
        "only in the baseline: syn-air/10, syn-air/11, syn-air/12, syn-air/13, syn-air/14 and 19 more" in out
    )


def test_shown_says_how_many_were_left_off() -> None:
    """A cut list in a message says how many it left off ("and N more"); the whole list is shown as is."""
    from pytest_ecdysis.core.errors import shown

    assert shown([]) == "none" and shown(["a", "b"]) == "a, b"
    assert shown([str(i) for i in range(8)], 5) == "0, 1, 2, 3, 4 and 3 more"
    # long items (τ² telecom task ids): fewer shown, the count still whole, the line bounded
    telecom = [
        f"tau2-telecom/[service_issue]airplane_mode_on|unseat_sim_card_{i}[PERSONA:None]" for i in range(10)
    ]
    line = shown(telecom, 10)
    assert len(line) <= 260 and line.endswith(f" and {10 - line.count('tau2-telecom/')} more"), line
    assert line.count("tau2-telecom/") == 3
    assert shown(["x" * 500]) == "x" * 239 + "…"
    assert shown(["x", "y", "z"], 2, "; ") == "x; y and 1 more"


def test_gate_refuses_a_sim_baseline_of_another_nonce(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The baseline records the simulated model's nonce; a gate run with another one (or a fresh one per run)
    is refused naming both, by pytest (exit 4 before any trial) and by `ecdysis gate`; a baseline written
    before the field existed is still accepted."""
    from pytest_ecdysis.cli import main as ecdysis

    monkeypatch.delenv("ECDYSIS_SIM_NONCE")
    write_suite(pytester, BASE)
    run(pytester, "--ecdysis-trials", "2", "-o", "ecdysis_sim_nonce=ci", "--ecdysis-save-baseline", "b.json")
    base = json.loads((pytester.path / "b.json").read_text())
    assert base["sim_nonce"] == "ci"
    strict = ("--ecdysis-gate-rule", "strict")  # an equal score passes it (the default needs more trials)
    assert (
        gate_run(pytester, BASE, "-o", "ecdysis_sim_nonce=ci", "--ecdysis-baseline", "b.json", *strict).ret
        == 0
    )
    result = gate_run(pytester, BASE, "-o", "ecdysis_sim_nonce=other", "--ecdysis-baseline", "b.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*refuses baseline*simulated model's nonce*baseline 'ci', this run 'other'*"]
    )
    result = gate_run(pytester, BASE, "--ecdysis-baseline", "b.json")  # no nonce: a fresh one per run
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*baseline 'ci', this run none (a fresh nonce per run)*"])
    monkeypatch.setenv("ECDYSIS_SIM_NONCE", "ci")  # the environment variable fixes it as the option does
    assert gate_run(pytester, BASE, "--ecdysis-baseline", "b.json", *strict).ret == 0
    (pytester.path / "old.json").write_text(json.dumps({k: v for k, v in base.items() if k != "sim_nonce"}))
    assert (
        gate_run(
            pytester, BASE, "-o", "ecdysis_sim_nonce=other", "--ecdysis-baseline", "old.json", *strict
        ).ret
        == 0
    )
    monkeypatch.delenv("ECDYSIS_SIM_NONCE")
    run(pytester, "--ecdysis-trials", "2", "-o", "ecdysis_sim_nonce=other", "--ecdysis-run-dir", "runs")
    (run_dir,) = list((pytester.path / "runs").iterdir())
    assert json.loads((run_dir / "summary.json").read_text())["sim_nonce"] == "other"
    assert ecdysis(["gate", str(run_dir), "--baseline", "b.json"]) == 4
    assert (
        "simulated model's nonce (ecdysis_sim_nonce or ECDYSIS_SIM_NONCE): baseline 'ci', this run 'other'"
        in capsys.readouterr().out
    )
    assert ecdysis(["gate", str(run_dir), "--baseline", "old.json", "--rule", "strict"]) == 0


def test_every_subcommand_option_with_a_default_shows_it_in_its_help() -> None:
    """`ecdysis gate --help` showed no default for --baseline: every subcommand's option with a default
    says it in `--help` (the value argparse would use, so the text cannot drift from it)."""
    import argparse

    from pytest_ecdysis.cli import build_parser

    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    checked = 0
    for name, sub in subparsers.choices.items():
        text = " ".join(sub.format_help().split())
        for action in sub._actions:
            if (
                not action.option_strings
                or action.default is None
                or action.default is argparse.SUPPRESS
                or isinstance(action, argparse._HelpAction | argparse._StoreTrueAction)
            ):
                continue
            checked += 1
            assert f"(default: {action.default})" in text, (name, action.option_strings, text)
    assert (
        checked >= 7
    )  # baseline -o, gate --baseline --rule --margin --tolerance --accept-method --accept-level
