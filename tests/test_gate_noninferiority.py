"""The gate's default rule, non-inferiority, end to end: `pytest --ecdysis-gate` and `ecdysis gate` on a
40-task synthetic suite with a saved 4-trial baseline (28 tasks always solved, 12 never), against runs that
equal it (pass), lose one task (undecided: fails by default, passes with pass-undecided) and lose six
(a drop shown beyond the margin: fails either way). The figures below are the test's on these outcomes
(`noninferiority.noninferiority`, `smallest_drop`); its rates are benchmarked in benchmarks/leaderboard_bench.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_records_pipeline import env, run, write_suite  # noqa: F401  (env: the fixture, used below)

from pytest_ecdysis.cli import main as ecdysis

pytestmark = pytest.mark.usefixtures("env")

TRIALS = "4"


def plan(lost: int = 0) -> dict:
    """40 tasks x 4 trials: 0..27 solved in every trial, 28..39 in none; the first `lost` solved ones lost."""
    return {"syn-air": {str(i): [1.0] * 4 if lost <= i < 28 else [0.0] * 4 for i in range(40)}}


def lines(result: pytest.RunResult, *patterns: str) -> None:
    """fnmatch the output's lines, a pattern's `[` taken literally (the verdict's bounds are in brackets)."""
    result.stdout.fnmatch_lines([p.replace("[", "[[]") for p in patterns])


def gate(pytester: pytest.Pytester, lost: int, *args: str) -> pytest.RunResult:
    write_suite(pytester, plan(lost))
    return run(
        pytester, "--ecdysis-trials", TRIALS, "--ecdysis-gate", "--ecdysis-run-dir", f"runs-{lost}", *args
    )


def verdict_of(pytester: pytest.Pytester, lost: int) -> dict:
    """The gate verdict of the latest gate run over the plan that lost `lost` tasks."""
    summaries = [d / "summary.json" for d in (pytester.path / f"runs-{lost}").iterdir()]
    return json.loads(max(summaries, key=lambda p: p.stat().st_mtime_ns).read_text())["gate"]


@pytest.fixture
def baseline(pytester: pytest.Pytester) -> Path:
    write_suite(pytester, plan())
    result = run(pytester, "--ecdysis-trials", TRIALS, "--ecdysis-save-baseline", ".ecdysis/baseline.json")
    result.stdout.fnmatch_lines(["baseline written: .ecdysis/baseline.json"])
    return pytester.path / ".ecdysis" / "baseline.json"


def test_an_equal_run_passes_and_the_verdict_says_rule_margin_bounds_and_the_drop_it_catches(
    pytester: pytest.Pytester, baseline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Δ 0 with SE 0.026: the one-sided bound -0.042 is within the 5-point margin: exit 0. The terminal line,
    summary.json, the job summary and `ecdysis show` state the rule, margin, Δ, bounds, state and the
    smallest drop this suite catches at 4 trials (2.3 points, failed with 80% probability)."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step_summary.md"))
    result = gate(pytester, 0)
    assert result.ret == 0
    line = (
        "gate PASSED: suite score 0.700 vs baseline 0.700 (+0.000); rule noninferiority, margin 5 points: "
        "Δ +0.000, one-sided 95% bounds [-0.042, +0.042]: pass; catches a drop of 2.3 points or more (80%) "
        "at 4 trial(s) per task over 40 task(s)"
    )
    assert line in result.stdout.str()
    v = verdict_of(pytester, 0)
    assert (v["rule"], v["margin"], v["state"], v["passed"]) == ("noninferiority", 0.05, "pass", True)
    ni = v["noninferiority"]
    assert ni["lower"] == pytest.approx(-0.0421, abs=1e-4) and ni["catches"] == pytest.approx(
        0.0231, abs=1e-4
    )
    assert ni["trials"] == 4 and ni["n_tasks"] == 40 and ni["trials_to_decide"] is None
    assert f"**{line}**" in (pytester.path / "step_summary.md").read_text()
    (run_dir,) = (pytester.path / "runs-0").iterdir()
    assert ecdysis(["show", str(run_dir)]) == 0
    assert line in capsys.readouterr().out


def test_a_run_that_loses_one_task_is_undecided_and_fails_unless_told_to_pass(
    pytester: pytest.Pytester, baseline: Path
) -> None:
    """One task of 40 lost: Δ -0.025, bounds [-0.069, +0.019] straddle -0.05: undecided; about 13 trials per
    task would decide it. It fails (exit 1) by default, passes with --ecdysis-gate-pass-undecided (then the
    gate fails only a drop *shown* beyond the margin: 13.3 points at 4 trials, said), and passes with a
    10-point margin from the ini key."""
    result = gate(pytester, 1)
    assert result.ret == 1
    lines(
        result,
        *[
            "*gate FAILED: suite score 0.675 vs baseline 0.700 (-0.025); rule noninferiority, margin 5 points: "
            "Δ -0.025, one-sided 95% bounds [-0.069, +0.019]: undecided, about 13 trials per task would decide "
            "it (now 4), which fails; catches a drop of 2.3 points*",
            "*undecided: the drop was not shown within the margin*--ecdysis-gate-pass-undecided*",
        ],
    )
    v = verdict_of(pytester, 1)
    assert (v["state"], v["passed"], v["noninferiority"]["trials_to_decide"]) == ("undecided", False, 13)
    lenient = gate(pytester, 1, "--ecdysis-gate-pass-undecided")
    assert lenient.ret == 0
    lines(
        lenient,
        *[
            "*gate PASSED*undecided, about 13 trials per task would decide it (now 4), passed by pass-undecided; "
            "catches a drop of 13.3 points or more (80%)*"
        ],
    )
    wider = gate(pytester, 1, "-o", "ecdysis_gate_margin=0.1")
    assert wider.ret == 0
    wider.stdout.fnmatch_lines(["*gate PASSED*margin 10 points: Δ -0.025*: pass;*"])


def test_a_drop_shown_beyond_the_margin_fails_even_when_undecided_passes(
    pytester: pytest.Pytester, baseline: Path
) -> None:
    """Six tasks lost: Δ -0.150, upper bound -0.097 < -0.05: a drop shown beyond the margin, exit 1 with and
    without pass-undecided; the former rule (paired, selectable by name) fails it too here."""
    for extra in ((), ("--ecdysis-gate-pass-undecided",)):
        result = gate(pytester, 6, *extra)
        assert result.ret == 1
        lines(
            result,
            *[
                "*gate FAILED*Δ -0.150, one-sided 95% bounds [-0.203, -0.097]: fail;*",
                "*a drop beyond the margin is shown: Δ -0.150, one-sided upper bound -0.097 < -0.050 "
                "(margin 5 points)*",
            ],
        )
    assert verdict_of(pytester, 6)["state"] == "fail"
    paired = gate(pytester, 6, "--ecdysis-gate-rule", "paired")
    assert paired.ret == 1 and "rule noninferiority" not in paired.stdout.str()


def test_the_gate_command_judges_the_same_with_its_own_options(
    pytester: pytest.Pytester, baseline: Path, capsys: pytest.CaptureFixture
) -> None:
    """`ecdysis gate RUN --baseline F`: the same three verdicts and exit statuses; `--pass-undecided`,
    `--margin` and `--rule` as the pytest options; bad values exit 2 naming the choices, nothing written."""
    for lost in (0, 1, 6):
        write_suite(pytester, plan(lost))
        run(pytester, "--ecdysis-trials", TRIALS, "--ecdysis-run-dir", f"runs-{lost}")
    run_dir = {lost: next((pytester.path / f"runs-{lost}").iterdir()) for lost in (0, 1, 6)}

    def gate_cli(lost: int, *args: str) -> tuple[int, str]:
        code = ecdysis(["gate", str(run_dir[lost]), "--baseline", ".ecdysis/baseline.json", *args])
        return code, capsys.readouterr().out

    code, out = gate_cli(0)
    assert code == 0 and "rule noninferiority, margin 5 points: Δ +0.000, one-sided 95% bounds [-0.042" in out
    code, out = gate_cli(1)
    assert code == 1 and "undecided, about 13 trials per task would decide it (now 4), which fails" in out
    assert "  - undecided: the drop was not shown within the margin" in out
    summary = json.loads((run_dir[1] / "summary.json").read_text())
    assert (summary["gate"]["state"], summary["gate"]["by"]) == ("undecided", "ecdysis gate")
    assert gate_cli(1, "--pass-undecided")[0] == 0
    assert gate_cli(1, "--margin", "0.1")[0] == 0
    assert gate_cli(1, "--rule", "strict", "--tolerance", "0.03")[0] == 0  # the former rule, by name
    code, out = gate_cli(6, "--pass-undecided")
    assert code == 1 and "a drop beyond the margin is shown" in out
    before = (run_dir[6] / "summary.json").read_text()
    for bad in ("1", "-0.01"):
        assert ecdysis(["gate", str(run_dir[6]), "--margin", bad]) == 2
        assert "--margin must be a rate share in [0, 1)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        ecdysis(["gate", str(run_dir[6]), "--rule", "lenient"])
    assert exc.value.code == 2
    assert "choose from 'noninferiority', 'strict', 'paired'" in capsys.readouterr().err
    assert (run_dir[6] / "summary.json").read_text() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--ecdysis-gate-margin", "1"),
            "*--ecdysis-gate-margin must be a rate share in [[]0, 1), e.g. 0.05*got 1.0*",
        ),
        (("--ecdysis-gate-margin", "-0.1"), "*--ecdysis-gate-margin must be a rate share*got -0.1*"),
        (
            ("--ecdysis-gate-rule", "sequential"),
            "*--ecdysis-gate-rule must be one of noninferiority, strict, paired, got 'sequential'*",
        ),
        (
            ("--ecdysis-accept", "strict"),
            "*--ecdysis-accept is the evolution's acceptance rule, not the gate's: choose the gate's rule with "
            "--ecdysis-gate-rule, one of noninferiority, strict, paired*",
        ),
    ],
)
def test_bad_gate_rule_values_are_usage_errors_before_any_trial(
    pytester: pytest.Pytester, baseline: Path, args: tuple[str, ...], message: str
) -> None:
    """A margin outside [0, 1), an unknown rule, or the evolution's --ecdysis-accept given to the gate: exit 4
    with one message naming the choices, and no trial runs (no run directory is written)."""
    result = gate(pytester, 0, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert not (pytester.path / "runs-0").exists()
