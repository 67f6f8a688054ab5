"""docs/own-suite.md cannot rot: its code blocks are run as written, as a user would run them.

The blocks whose first line is `# <file>.py` are written to a pytester directory and run with `-n 2`:
the scores and the failure group the doc shows, a baseline, a gate that passes against it and one that
fails once the agent gets worse. Also: a run of a suite that uses no harness names none (issue's tryout:
it was labelled with the example harness); one given `--ecdysis-harness` names that harness.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "own-suite.md"
FILE_BLOCK = re.compile(r"```python\n# (?P<name>[\w.]+\.py)\n(?P<body>.*?)```", re.S)


def doc_files() -> dict[str, str]:
    """`{file name: source}` of the doc's code blocks that start with `# <name>.py`."""
    text = DOC.read_text(encoding="utf-8")
    return {m["name"]: f"# {m['name']}\n{m['body']}" for m in FILE_BLOCK.finditer(text)}


def doc_output_lines() -> list[str]:
    """The terminal lines the doc shows under "## A run" (its block that starts with the `=== ecdysis ===` line)."""
    text = DOC.read_text(encoding="utf-8").split("## A run", 1)[1]
    block = re.search(r"\n```\n(=+ ecdysis =+\n.*?)```", text, re.S)
    assert block, "docs/own-suite.md shows no output under '## A run'"
    return block[1].splitlines()


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The doc's files in a fresh directory; no simulated server (the suite calls no model)."""
    files = doc_files()
    assert set(files) == {"my_agent.py", "test_orders.py"}, sorted(files)
    for name, source in files.items():
        (pytester.path / name).write_text(source, encoding="utf-8")
    monkeypatch.setenv("ECDYSIS_SIM_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = pytester.runpytest("-p", "no:cacheprovider", "--ecdysis-trials", "2", *args)
    os.environ.pop("ECDYSIS_RUN_ID", None)  # the inner controller exported its run id
    return result


def last_run(pytester: pytest.Pytester) -> Path:
    return sorted((pytester.path / ".ecdysis" / "runs").iterdir())[-1]


def test_doc_suite_runs_saves_a_baseline_and_gates(suite: pytest.Pytester) -> None:
    """The doc's suite gives the figures the doc prints; its baseline passes the gate until the agent regresses."""
    result = run(suite, "-n", "2", "--ecdysis-save-baseline", "base.json")
    result.assert_outcomes(passed=4, failed=2)
    shown = [line for line in doc_output_lines() if not line.startswith(("run ", "failures ", "=="))]
    result.stdout.fnmatch_lines(["*== ecdysis ==*", "run * split train  model sim  harness none", *shown])
    summary = json.loads((last_run(suite) / "summary.json").read_text())
    assert (summary["suite"], summary["n_tasks"], summary["n_trials"]) == ("orders", 3, 6)
    assert summary["suite_score"] == pytest.approx(2 / 3)
    assert summary["pass_hat_k"] == pytest.approx({"1": 2 / 3, "2": 2 / 3})
    assert summary["harness_id"] is None
    records = [json.loads(line) for line in (last_run(suite) / "failures.jsonl").read_text().splitlines()]
    assert {
        (r["task_id"], r["first_tool_error"]["name"], tuple(r["failed_components"])) for r in records
    } == {("status-8", "get_order", ("communicate",))}
    assert json.loads((suite.path / "base.json").read_text())["tasks"]["orders/status-9"]["solved"] is True

    strict = ("--ecdysis-gate-rule", "strict")  # as the doc's gate: 3 tasks cannot decide non-inferiority
    gate = run(suite, "-n", "2", "--ecdysis-gate", "--ecdysis-baseline", "base.json", *strict)
    assert gate.ret == 0, gate.stdout.str()
    gate.stdout.fnmatch_lines(["gate PASSED: suite score 0.667 vs baseline 0.667*"])

    agent = suite.path / "my_agent.py"
    agent.write_text(agent.read_text().replace('"9": "delivered"', '"9": "lost"'))  # the agent regresses
    worse = run(suite, "-n", "2", "--ecdysis-gate", "--ecdysis-baseline", "base.json", *strict)
    assert worse.ret == 1, worse.stdout.str()
    worse.stdout.fnmatch_lines(["gate FAILED: suite score 0.333 vs baseline 0.667*"])


def test_a_run_given_a_harness_names_it(suite: pytest.Pytester) -> None:
    """`--ecdysis-harness` given: the run and every trial name that harness, though the suite sets no id."""
    (suite.path / "harness").mkdir()
    (suite.path / "harness" / "__init__.py").write_text("# a harness\n")
    result = run(suite, "--ecdysis-harness", "harness", "--ecdysis-tasks", "status-7")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["run * harness harness@*"])
    summary = json.loads((last_run(suite) / "summary.json").read_text())
    assert summary["harness_id"].startswith("harness@")
    trials = [json.loads(line) for line in (last_run(suite) / "trials.jsonl").read_text().splitlines()]
    assert [t["harness_id"] for t in trials] == [summary["harness_id"]] * 2
