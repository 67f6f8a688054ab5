"""The gate watches cost too (ini `ecdysis_gate_max_cost_rise`): a baseline keeps the agent's tokens per task, and
a harness change that raises them beyond the allowed share fails the gate with the figure in the verdict."""

from __future__ import annotations

from pytest_ecdysis.gate import baseline as gate


def summary(tokens_total: int, score: float = 0.5) -> dict:
    tasks = {
        f"s/{i}": {"n": 1, "successes": int(i < 2), "solved": i < 2, "mean_reward": float(i < 2)}
        for i in range(4)
    }
    return {
        "suite": "s",
        "split": "train",
        "trials": 1,
        "model": "m",
        "threshold": 1.0,
        "suite_score": score,
        "n_tasks": 4,
        "tasks": tasks,
        "tokens": {"prompt": tokens_total, "completion": 0, "total": tokens_total},
    }


def check(run: dict, base: dict, rise: float | None) -> gate.GateVerdict:
    """The verdict under the strict rule, which these equal scores pass: only the cost check decides."""
    return gate.verdict(
        run,
        base,
        tolerance=0.0,
        max_regressions=None,
        missing=[],
        n_collected=4,
        max_cost_rise=rise,
        rule="strict",
    )


def test_baseline_keeps_tokens_per_task() -> None:
    assert gate.baseline_from_summary(summary(4000))["tokens_per_task"] == 1000.0


def test_rise_beyond_the_share_fails_with_the_figure() -> None:
    """+30 % tokens per task against an allowed +10 %: the gate fails and says 1,300 vs 1,000 (+30.0%); +10 %
    exactly passes; without the option the same run passes."""
    base = gate.baseline_from_summary(summary(4000))
    failed = check(summary(5200), base, 0.10)
    assert not failed.passed
    assert any("tokens per task 1,300 are +30.0% against the baseline's 1,000" in r for r in failed.reasons)
    assert "tokens per task 1,300 vs 1,000 (+30.0%, at most +10.0%)" in failed.headline()
    assert failed.as_dict()["cost"]["rise"] == 0.3
    assert check(summary(4400), base, 0.10).passed
    assert check(summary(5200), base, None).passed


def test_a_baseline_without_tokens_per_task_cannot_be_checked() -> None:
    base = gate.baseline_from_summary(summary(4000))
    del base["tokens_per_task"]
    v = check(summary(4000), base, 0.10)
    assert not v.passed and any("save a new baseline" in r for r in v.reasons)


SUITE = """
import os

import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.plugin import get_state


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1"])
def test_task(request, task_id):
    n = int(os.environ["TINY_TOKENS"])  # a harness change that makes the agent talk more
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=0, reward=1.0, termination_reason="agent_stop",
        components={"db": 1.0}, harness_id=get_state(request.config).harness_id,
        tokens={"prompt": n, "completion": 0, "total": n}))
"""


def test_gate_run_fails_on_a_cost_rise_with_the_figure(pytester, monkeypatch) -> None:
    """`pytest --ecdysis-gate -o ecdysis_gate_max_cost_rise=0.1`: the same scores at +50 % tokens per task
    fail the gate (exit 1) with both figures in the verdict; within the share it passes (exit 0)."""
    for name in ("ECDYSIS_RUN_ID", "ECDYSIS_SIM_URL", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_tiny=SUITE)
    pytester.mkpydir("tiny_harness")
    args = (
        "test_tiny.py",
        "-p",
        "no:cacheprovider",
        "--ecdysis-model",
        "fake",
        "--ecdysis-base-url",
        "http://127.0.0.1:9",
        "--ecdysis-preflight",
        "off",  # no model at the closed port: the suite calls none
        "--ecdysis-harness",
        "tiny_harness",
    )
    # the strict rule, which these equal scores pass: only the cost check decides (2 tasks x 1 trial cannot
    # show an equal run within the noninferiority margin)
    gate_args = ("--ecdysis-gate", "--ecdysis-baseline", "base.json", "--ecdysis-gate-rule", "strict")
    monkeypatch.setenv("TINY_TOKENS", "1000")
    saved = pytester.runpytest_subprocess(*args, "--ecdysis-save-baseline", "base.json")
    assert saved.ret == 0, saved.stdout.str()
    monkeypatch.setenv("TINY_TOKENS", "1500")
    failed = pytester.runpytest_subprocess(*args, *gate_args, "-o", "ecdysis_gate_max_cost_rise=0.1")
    assert failed.ret == 1, failed.stdout.str()
    failed.stdout.fnmatch_lines(["*tokens per task 1,500 are +50.0% against the baseline's 1,000*"])
    monkeypatch.setenv("TINY_TOKENS", "1050")
    passed = pytester.runpytest_subprocess(*args, *gate_args, "-o", "ecdysis_gate_max_cost_rise=0.1")
    assert passed.ret == 0, passed.stdout.str()
    passed.stdout.fnmatch_lines(["*tokens per task 1,050 vs 1,000 (+5.0%, at most +10.0%)*"])


def test_the_gate_command_checks_the_cost_rise_too(tmp_path, capsys) -> None:
    """`ecdysis gate RUN --max-cost-rise 0.1` judges tokens per task as `pytest --ecdysis-gate` with ini `ecdysis_gate_max_cost_rise`
    does (it had no such option: a sharded gate could not watch cost): exit 1 with the figure, 0 without it."""
    import json

    from pytest_ecdysis.cli import main as ecdysis

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(
        json.dumps({**summary(5200), "run_id": "r", "n_collected": 4, "missing": []})
    )
    (tmp_path / "b.json").write_text(json.dumps(gate.baseline_from_summary(summary(4000))))
    strict = ("--rule", "strict")  # these equal scores pass it: only the cost check decides
    assert (
        ecdysis(["gate", str(run), "--baseline", str(tmp_path / "b.json"), *strict, "--max-cost-rise", "0.1"])
        == 1
    )
    assert "tokens per task 1,300 vs 1,000 (+30.0%, at most +10.0%)" in capsys.readouterr().out
    assert json.loads((run / "summary.json").read_text())["gate"]["cost"]["rise"] == 0.3
    assert ecdysis(["gate", str(run), "--baseline", str(tmp_path / "b.json"), *strict]) == 0
