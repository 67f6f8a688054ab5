"""The action's run script (`python -m pytest_ecdysis.ci.action`), run as action.yml runs it: a subprocess
with the `INPUT_*` variables the composite step sets from a workflow's `with:`, and `GITHUB_OUTPUT`,
`GITHUB_STEP_SUMMARY`, `RUNNER_TEMP`, `GITHUB_RUN_ID` as a runner sets them; then the step's outputs, job
summary, page and exit status are read back. The suite is a small one of its own (no model), so the gate's
verdict follows the agent; evolve mode with the simulated model runs in tests/test_wheel_template.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ecdysis.ci.action import choose_model, pytest_args
from pytest_ecdysis.ci.inputs import ActionInputs
from pytest_ecdysis.core.options import OPTIONS

SUITE = """
import json, pathlib, pytest, pytest_ecdysis
from pytest_ecdysis import TrialResult

ANSWERS = json.loads((pathlib.Path(__file__).parent / "agent.json").read_text())  # the "agent"
TASKS = {f"t{i}": f"answer-{i}" for i in range(6)}


def pytest_generate_tests(metafunc):
    cfg = pytest_ecdysis.get_state(metafunc.config).cfg
    metafunc.parametrize("case", [pytest.param((t, k), id=f"{t}-t{k}", marks=pytest.mark.ecdysis_trial)
                                  for t in TASKS for k in range(cfg.trials)])


def test_task(case, request, ecdysis):
    task, trial = case
    reward = 1.0 if ANSWERS.get(task) == TASKS[task] else 0.0
    pytest_ecdysis.record_trial(request.node, TrialResult(suite="toy", task_id=task, trial=trial, reward=reward,
                                components={"communicate": reward}, termination_reason="agent_stop"))
    assert reward >= ecdysis.cfg.threshold
"""


def agent(repo: Path, solved: int) -> None:
    """The toy agent answers the first `solved` of the 6 tasks right."""
    (repo / "agent.json").write_text(
        json.dumps({f"t{i}": f"answer-{i}" if i < solved else "?" for i in range(6)})
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "repo").mkdir()
    repo = tmp_path / "repo"
    (repo / "test_toy.py").write_text(SUITE)
    agent(repo, 5)
    return repo


def action(repo: Path, run_id: str, **inputs: str) -> tuple[subprocess.CompletedProcess, dict[str, str], str]:
    """Run the script as action.yml's step does; returns (process, $GITHUB_OUTPUT as a dict, job summary)."""
    runner = repo.parent / f"runner-{run_id}"
    runner.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_", "ECDYSIS_RUN"))}
    env.update(
        {"INPUT_" + k.upper(): v for k, v in inputs.items()},
        GITHUB_OUTPUT=str(runner / "output"),
        GITHUB_STEP_SUMMARY=str(runner / "summary.md"),
        RUNNER_TEMP=str(runner),
        GITHUB_RUN_ID=run_id,
        GITHUB_RUN_ATTEMPT="1",
        ECDYSIS_SIM_URL="http://127.0.0.1:9",
    )  # the toy suite calls no model
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ecdysis.ci.action"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = runner / "output"
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines()) if out.exists() else {}
    summary = (runner / "summary.md").read_text() if (runner / "summary.md").exists() else ""
    return proc, outputs, summary


@pytest.mark.parametrize(
    ("inputs", "what"),
    [
        ({"MODE": "check"}, "mode"),
        ({"MODE": "gate", "BASELINE": "missing.json"}, "baseline"),
        ({"MODE": "evolve", "TOKEN": ""}, "token"),
        ({"MODE": "gate", "SHARDS": "4"}, "shard"),
        ({"MODE": "baseline", "BUDGET": "ten"}, "budget"),
        ({"MODE": "gate", "BASELINE": "test_toy.py", "ACCEPT": "lenient"}, "accept"),
        ({"MODE": "gate", "BASELINE": "test_toy.py", "ACCEPT": "strict"}, "gate-rule"),
        ({"MODE": "gate", "BASELINE": "test_toy.py", "GATE_RULE": "lenient"}, "gate-rule"),
        ({"MODE": "gate", "BASELINE": "test_toy.py", "GATE_MARGIN": "1"}, "gate-margin"),
        ({"MODE": "gate", "BASELINE": "test_toy.py", "GATE_MARGIN": "-0.1"}, "gate-margin"),
        ({"MODE": "gate", "BASELINE": "test_toy.py", "GATE_PASS_UNDECIDED": "maybe"}, "gate-pass-undecided"),
    ],
)
def test_bad_input_fails_the_step_with_one_line_naming_what_to_set(
    repo: Path, inputs: dict, what: str
) -> None:
    """Unknown mode, a gate without its baseline, evolve without a token (and bad numbers, shards, rules):
    exit 2 with a single `::error::` line that says which input to set; nothing runs, no output is written."""
    proc, outputs, _ = action(repo, "1", **inputs)
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("::error title=pytest-ecdysis::"), proc.stdout
    assert f"set `{what}:`" in lines[0], lines[0]
    assert outputs == {} and not (repo / ".ecdysis").exists()


@pytest.mark.slow  # three pytest runs in subprocesses: 30-140 s on a shared machine
def test_baseline_then_gate_passes_then_fails_when_the_agent_gets_worse(repo: Path) -> None:
    """mode baseline writes the file (exit 0 though a trial is below λ); mode gate passes against it and
    fails (exit 1) once the agent solves fewer tasks; the outputs carry the verdict, the suite score, the
    run directory and the HTML page; the job summary names the simulated model and the verdict. The gate's
    rule inputs reach it: 6 tasks x 2 trials show an equal run within a 25-point `gate-margin` (one-sided
    bound -0.202), not within the default 5 points (undecided: fails, or passes with `gate-pass-undecided`);
    3 tasks lost is a drop shown beyond the default margin (upper bound -0.223)."""
    proc, out, summary = action(repo, "10", MODE="baseline", WORKERS="2", TRIALS="2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        out["verdict"] == "saved"
        and out["suite-score"] == "0.8333"
        and out["artifact-name"] == "ecdysis-baseline-run"
    )
    assert json.loads((repo / ".ecdysis" / "baseline.json").read_text())["suite_score"] == pytest.approx(
        5 / 6
    )
    assert "::notice title=pytest-ecdysis::" in proc.stdout and "simulated" in summary

    proc, out, summary = action(repo, "11", MODE="gate", WORKERS="2", TRIALS="2", GATE_MARGIN="0.25")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out["verdict"], out["suite-score"], out["run-dir"]) == (
        "passed",
        "0.8333",
        ".ecdysis/runs/gate-11-1",
    )
    assert "<html" in Path(out["report-path"]).read_text()[:500].lower()
    assert (
        "verdict **passed**, suite score 0.8333" in summary and "gate PASSED" in summary
    )  # the plugin's table too

    gate = json.loads((repo / out["run-dir"] / "summary.json").read_text())["gate"]
    assert (gate["rule"], gate["margin"], gate["state"]) == ("noninferiority", 0.25, "pass")
    assert gate["noninferiority"]["lower"] == pytest.approx(-0.2015, abs=1e-3)

    proc, out, _ = action(repo, "13", MODE="gate", WORKERS="0", TRIALS="2")
    assert proc.returncode == 1 and out["verdict"] == "failed", proc.stdout + proc.stderr
    gate = json.loads((repo / out["run-dir"] / "summary.json").read_text())["gate"]
    assert (gate["margin"], gate["state"]) == (0.05, "undecided")
    proc, out, _ = action(repo, "14", MODE="gate", WORKERS="0", TRIALS="2", GATE_PASS_UNDECIDED="true")
    assert proc.returncode == 0 and out["verdict"] == "passed", proc.stdout + proc.stderr
    assert "undecided" in proc.stdout and "passed by pass-undecided" in proc.stdout

    agent(repo, 2)
    proc, out, summary = action(repo, "12", MODE="gate", WORKERS="0", TRIALS="2", GATE_PASS_UNDECIDED="true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (out["verdict"], out["suite-score"]) == ("failed", "0.3333")
    assert "verdict **failed**" in summary
    gate = json.loads((repo / out["run-dir"] / "summary.json").read_text())["gate"]
    assert (gate["rule"], gate["state"], gate["passed"]) == ("noninferiority", "fail", False)
    assert gate["noninferiority"]["upper"] == pytest.approx(-0.2233, abs=1e-3)
    proc, out, _ = action(repo, "15", MODE="gate", WORKERS="0", TRIALS="2", GATE_RULE="strict")
    assert proc.returncode == 1 and out["verdict"] == "failed", proc.stdout + proc.stderr
    assert json.loads((repo / out["run-dir"] / "summary.json").read_text())["gate"]["rule"] == "strict"


@pytest.mark.slow  # four subprocess runs
def test_a_sharded_gate_runs_each_shard_then_merges_and_gates(repo: Path) -> None:
    """Two shard jobs (no verdict, exit 0 though trials fail, no page) and the final job's merge + gate, with
    the inputs ecdysis-gate-sharded.yml passes; the merged run's score is the unsharded one."""
    assert action(repo, "20", MODE="baseline", WORKERS="0")[0].returncode == 0
    shards = repo.parent / "shards"
    shards.mkdir()
    for group in ("1", "2"):
        proc, out, _ = action(repo, f"2{group}", MODE="gate", SHARDS="2", SHARD=group, WORKERS="0")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (
            out["verdict"] == "shard"
            and out["report-path"] == ""
            and out["artifact-name"] == f"ecdysis-shard-{group}"
        )
        (repo / out["run-dir"]).rename(shards / f"ecdysis-shard-{group}")  # as download-artifact lays them
    proc, out, summary = action(repo, "29", MODE="gate", MERGE=f"{shards}/*/", GATE_MARGIN="0.4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out["verdict"], out["suite-score"]) == ("passed", "0.8333")
    assert re.search(r"merged 2 shard\(s\) into .*merged-gate-29-1", proc.stdout)
    assert "gate PASSED" in proc.stdout and Path(out["report-path"]).is_file()
    assert "rule noninferiority, margin 40 points" in proc.stdout  # `gate-margin` reached `ecdysis gate`


def test_gate_rule_inputs_become_the_gate_options_of_pytest_and_of_ecdysis_gate() -> None:
    """`gate-rule`, `gate-margin`, `gate-pass-undecided` become `--ecdysis-gate-rule`, `--ecdysis-gate-margin`,
    `--ecdysis-gate-pass-undecided` for the pytest gate (each an option the plugin declares) and `--rule`,
    `--margin`, `--pass-undecided` for the merged run's `ecdysis gate` (each one it parses); left empty, none
    is passed (the plugin's defaults: noninferiority, 0.05, undecided fails)."""
    from pytest_ecdysis.ci.action import gate_rule_args
    from pytest_ecdysis.cli import build_parser

    def inputs(**env: str) -> ActionInputs:
        return ActionInputs.from_env(
            {"INPUT_MODE": "gate", "INPUT_BASELINE": __file__, **{"INPUT_" + k: v for k, v in env.items()}}
        )

    given = inputs(GATE_RULE="paired", GATE_MARGIN="0.1", GATE_PASS_UNDECIDED="true")
    joined = " ".join(pytest_args(given, "sim"))
    assert "--ecdysis-gate-rule paired --ecdysis-gate-margin 0.1 --ecdysis-gate-pass-undecided" in joined
    assert set(re.findall(r"--ecdysis-[a-z-]+", joined)) <= {"--ecdysis-" + o.name for o in OPTIONS}
    cli = build_parser().parse_args(["gate", "run", *gate_rule_args(given)])
    assert (cli.rule, cli.margin, cli.pass_undecided) == ("paired", 0.1, True)
    empty = inputs()
    assert gate_rule_args(empty) == [] and "--ecdysis-gate-rule" not in pytest_args(empty, "sim")
    assert (empty.gate_rule, empty.gate_margin, empty.gate_pass_undecided) == ("", None, False)
    shard = inputs(
        SHARDS="2", SHARD="1", GATE_MARGIN="0.1"
    )  # a shard does not gate: its options are not passed
    assert "--ecdysis-gate-margin" not in pytest_args(shard, "sim")


def test_the_model_falls_back_to_sim_without_a_key_or_url() -> None:
    """A model secret without a key or URL (a fork's pull request gets none) runs `sim` and says why."""

    def inputs(**env: str) -> ActionInputs:
        return ActionInputs.from_env({"INPUT_MODE": "baseline", **{"INPUT_" + k: v for k, v in env.items()}})

    assert choose_model(inputs(MODEL="gpt-4o-mini", API_KEY="k")) == ("gpt-4o-mini", None)
    assert choose_model(inputs(MODEL="qwen3", BASE_URL="http://h:8000/v1")) == ("qwen3", None)
    assert choose_model(inputs(MODEL="sim/weak")) == ("sim/weak", None)
    for given in (inputs(MODEL="gpt-4o-mini"), inputs()):
        model, notice = choose_model(given)
        assert model == "sim" and "set the `model:` and `api-key:`" in notice


def test_evolve_inputs_become_options_the_plugin_has() -> None:
    """Evolve's rounds, strategy, rule and budget become the plugin's options (each one it declares)."""
    inp = ActionInputs.from_env(
        {
            "INPUT_MODE": "evolve",
            "INPUT_TOKEN": "t",
            "INPUT_ROUNDS": "1",
            "INPUT_STRATEGY": "ecdysis-nofdcr",
            "INPUT_ACCEPT": "strict",
            "INPUT_BUDGET": "2.5",
            "INPUT_PATHS": "suite/a.py suite/b.py",
            "INPUT_ARGS": "--ecdysis-tasks '0,1'",
        }
    )
    args = pytest_args(inp, "sim")
    assert args[:2] == ["suite/a.py", "suite/b.py"] and args[-2:] == ["--ecdysis-tasks", "0,1"]
    joined = " ".join(args)
    for part in (
        "--ecdysis-evolve",
        "--ecdysis-rounds 1",
        "--ecdysis-strategy ecdysis-nofdcr",
        "--ecdysis-accept strict",
        "--ecdysis-max-cost 2.5",
        "-n 2",
        "--ecdysis-model sim",
    ):
        assert part in joined
    known = {"--ecdysis-" + o.name for o in OPTIONS}
    assert set(re.findall(r"--ecdysis-[a-z-]+", joined)) <= known
