"""The GitHub Action's main step: `python -m pytest_ecdysis.ci.action` with the `INPUT_*` of `action.yml`.

What it does, in order (docs/ci.md, "The action"):

1. reads and checks the inputs (`inputs.ActionInputs`); bad input prints one `::error::` line naming the
   input to set and exits 2 before anything runs;
2. picks the model: the `model` input when it has an API key or a base URL, else the simulated model `sim`,
   said with a `::notice::` and in the job summary (a fork's pull request gets no secrets);
3. runs `pytest` (gate, evolve, baseline, or one shard of a sharded gate) with run id
   `<mode>-<GITHUB_RUN_ID>-<GITHUB_RUN_ATTEMPT>` (a timestamp outside Actions), or in gate mode with
   `merge:` merges the shards' run directories (`ecdysis merge`) and gates the merged run (`ecdysis gate`);
4. writes the run's HTML page (`ecdysis report`), in evolve mode the pull request's body (`ecdysis pr-body`),
   the step's outputs (`$GITHUB_OUTPUT`: `verdict`, `suite-score`, `branch`, `report-path`, `run-dir`,
   `pr-body-path`, `artifact-name`, `exit-status`; a shard writes no page) and a few lines of job summary (the plugin writes the score table itself).

Exit status: the gate's (0 passed, 1 failed, 4 refused); evolve: pytest's (0 when the loop ran to the end,
improved or not); baseline: 0 when the baseline file was written; a shard: 0 unless pytest had a usage or
internal error (>= 2). The pull request itself is opened by `action.yml` with peter-evans/create-pull-request.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from pytest_ecdysis.ci.inputs import SANDBOX_DEFAULT, ActionInputs
from pytest_ecdysis.core.errors import ActionInputError

NOTICE_SIM = (
    "no model with an API key or base URL was given: the run uses the simulated model (sim), not a "
    "real LLM; set the `model:` and `api-key:` (or `base-url:`) inputs to use one"
)


def choose_model(inp: ActionInputs) -> tuple[str, str | None]:
    """(model, notice): the `model` input when it can be reached, else `sim` and why."""
    if inp.model.startswith("sim"):
        return inp.model, None
    if inp.model and (inp.api_key or inp.base_url):
        return inp.model, None
    return "sim", NOTICE_SIM


def run_id_of(inp: ActionInputs, env: Mapping[str, str]) -> str:
    """`<mode>-<run id>-<attempt>` in Actions (`-shard<i>` for a shard), else `<mode>-<UTC timestamp>`."""
    stamp = (
        f"{env['GITHUB_RUN_ID']}-{env.get('GITHUB_RUN_ATTEMPT', '1')}"
        if env.get("GITHUB_RUN_ID")
        else time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    )
    return f"{inp.mode}-{stamp}" + (f"-shard{inp.shard}" if inp.sharded else "")


def pytest_args(inp: ActionInputs, model: str) -> list[str]:
    """The pytest command line (after `python -m pytest`) for the inputs."""
    args = [
        *inp.paths,
        "-q",
        "-p",
        "no:cacheprovider",
        "--ecdysis-run-dir",
        inp.run_dir,
        "--ecdysis-model",
        model,
        "--ecdysis-trials",
        str(inp.trials),
    ]
    if inp.workers:
        args += ["-n", str(inp.workers)]
    if inp.harness:
        args += ["--ecdysis-harness", inp.harness]
    if inp.sharded:
        args += [
            "--splits",
            str(inp.shards),
            "--group",
            str(inp.shard),
            "--splitting-algorithm",
            "least_duration",
        ]
    elif inp.mode == "gate":
        args += ["--ecdysis-gate", "--ecdysis-baseline", inp.baseline]
        args += [f"--ecdysis-gate-{a[2:]}" if a.startswith("--") else a for a in gate_rule_args(inp)]
    elif inp.mode == "baseline":
        args += ["--ecdysis-save-baseline", inp.baseline]
    else:
        args.append("--ecdysis-evolve")
        if inp.rounds is not None:
            args += ["--ecdysis-rounds", str(inp.rounds)]
        if inp.strategy:
            args += ["--ecdysis-strategy", inp.strategy]
        if inp.budget_usd is not None:
            args += ["--ecdysis-max-cost", repr(inp.budget_usd)]
    if inp.accept and inp.mode == "evolve":  # the gate's rule is gate-rule (inputs refuse accept there)
        args += ["--ecdysis-accept", inp.accept]
    sandbox = inp.sandbox or SANDBOX_DEFAULT.get(inp.mode)
    if sandbox:  # evolve: on unless the workflow opts out by name (`sandbox: auto` or `off`)
        args += ["--ecdysis-sandbox", sandbox]
    return [*args, *inp.args]


def gate_rule_args(inp: ActionInputs) -> list[str]:
    """The gate's rule inputs as `ecdysis gate` options (`--rule`, `--margin`, `--pass-undecided`); the pytest
    gate's are the same names with `--ecdysis-gate-` (`pytest_args`)."""
    args = ["--rule", inp.gate_rule] if inp.gate_rule else []
    if inp.gate_margin is not None:
        args += ["--margin", repr(inp.gate_margin)]
    return args + (["--pass-undecided"] if inp.gate_pass_undecided else [])


def _ecdysis(*args: str, env: Mapping[str, str], stdout=None) -> int:
    """`ecdysis ARGS` with this interpreter; its output goes to the step's log (or `stdout`)."""
    proc = subprocess.run([sys.executable, "-m", "pytest_ecdysis.cli", *args], env=dict(env), stdout=stdout)
    return proc.returncode


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run(env: Mapping[str, str]) -> int:
    """The action's main step; returns its exit status (see the module docstring)."""
    try:
        inp = ActionInputs.from_env(env)
    except ActionInputError as exc:
        print(f"::error title=pytest-ecdysis::{exc}", flush=True)
        return 2
    model, notice = choose_model(inp)
    sub_env = {k: v for k, v in env.items() if not k.startswith("INPUT_")}
    sub_env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if inp.api_key:
        sub_env["OPENAI_API_KEY"] = env["INPUT_API_KEY"].strip()
    if inp.base_url:
        sub_env["OPENAI_BASE_URL"] = inp.base_url
    run_id = run_id_of(inp, env)
    summary_lines = [
        f"**pytest-ecdysis** `{inp.mode}`"
        + (f" (shard {inp.shard} of {inp.shards})" if inp.sharded else "")
        + f", model `{model}`"
    ]
    if notice:
        print(f"::notice title=pytest-ecdysis::{notice}", flush=True)
        summary_lines.append(f"Model: **simulated** (sim): {notice}.")
    started = time.time()
    if inp.merge:
        run_path = Path(inp.run_dir) / f"merged-{run_id}"
        shards = sorted(glob.glob(inp.merge))
        if not shards:
            print(
                f"::error title=pytest-ecdysis::merge {inp.merge!r} matches no directory: set `merge:` to the "
                "glob of the downloaded shards' run directories",
                flush=True,
            )
            return 2
        code = _ecdysis("merge", *shards, "-o", str(run_path), env=sub_env)
        if code == 0:
            with open(
                env.get("GITHUB_STEP_SUMMARY") or os.devnull, "a"
            ) as out:  # the table pytest would write
                _ecdysis("summary-md", str(run_path), env=sub_env, stdout=out)
            gate_args = ["--baseline", inp.baseline, *gate_rule_args(inp)]
            code = _ecdysis("gate", str(run_path), *gate_args, env=sub_env)
    else:
        run_path = Path(inp.run_dir) / run_id
        sub_env["ECDYSIS_RUN_ID"] = run_id
        command = [sys.executable, "-m", "pytest", *pytest_args(inp, model)]
        print("$ " + " ".join(command), flush=True)
        code = subprocess.run(command, env=sub_env).returncode
    outputs, status = outcome(inp, run_path, code, started)
    report = Path(env.get("RUNNER_TEMP") or run_path) / "ecdysis-report.html"
    if (
        run_path.is_dir()
        and not inp.sharded
        and _ecdysis("report", str(run_path), "-o", str(report), env=sub_env) == 0
    ):
        outputs["report-path"] = str(report)
    if inp.mode == "evolve" and run_path.is_dir():
        body = Path(env.get("RUNNER_TEMP") or run_path) / "ecdysis-pr-body.md"
        with body.open("w") as out:
            if _ecdysis("pr-body", str(run_path), env=sub_env, stdout=out) == 0:
                outputs["pr-body-path"] = str(body)
        summary_lines += ["", body.read_text()] if outputs.get("pr-body-path") else []
    summary_lines.insert(1, verdict_line(outputs))
    write_outputs(env, outputs, summary_lines)
    return status


def outcome(inp: ActionInputs, run_path: Path, code: int, started: float) -> tuple[dict[str, str], int]:
    """(outputs, exit status) from the run directory and pytest's (or `ecdysis gate`'s) exit status."""
    summary = _read(run_path / "summary.json")
    score = summary.get("suite_score")
    outputs = {
        "verdict": "error",
        "suite-score": "" if score is None else f"{score:.4f}",
        "branch": "",
        "report-path": "",
        "run-dir": str(run_path) if run_path.is_dir() else "",
        "pr-body-path": "",
        "exit-status": str(code),
        "artifact-name": f"ecdysis-shard-{inp.shard}" if inp.sharded else f"ecdysis-{inp.mode}-run",
    }
    status = code
    if inp.sharded:
        outputs["verdict"] = "shard" if code <= 1 else "error"
        status = 0 if code <= 1 else code
    elif inp.mode == "gate":
        gate = summary.get("gate") or {}
        if gate:
            outputs["verdict"] = (
                "refused" if gate.get("refused") else "passed" if gate.get("passed") else "failed"
            )
        elif code == 4:
            outputs["verdict"] = "refused"
    elif inp.mode == "baseline":
        path = Path(inp.baseline)
        saved = path.is_file() and path.stat().st_mtime >= started - 1 and code <= 1
        outputs["verdict"] = "saved" if saved else "error"
        status = 0 if saved else code or 1
    else:
        branch = _read(run_path / "evolution.json").get("branch") or ""
        outputs["branch"] = branch
        if code == 0:
            outputs["verdict"] = "improved" if branch else "unchanged"
    return outputs, status


def verdict_line(outputs: Mapping[str, str]) -> str:
    """The job summary's line for the verdict, e.g. `verdict **passed**, suite score 0.7000`."""
    line = f"verdict **{outputs['verdict']}**"
    if outputs.get("suite-score"):
        line += f", suite score {outputs['suite-score']}"
    if outputs.get("branch"):
        line += f", branch `{outputs['branch']}`"
    elif outputs["verdict"] == "unchanged":
        line += ": no round was accepted, so no branch and no pull request"
    return line


def write_outputs(env: Mapping[str, str], outputs: Mapping[str, str], summary_lines: list[str]) -> None:
    """Append `name=value` lines to `$GITHUB_OUTPUT` and the lines to `$GITHUB_STEP_SUMMARY` (when set)."""
    if env.get("GITHUB_OUTPUT"):
        with open(env["GITHUB_OUTPUT"], "a") as out:
            out.writelines(f"{name}={value}\n" for name, value in outputs.items())
    if env.get("GITHUB_STEP_SUMMARY"):
        with open(env["GITHUB_STEP_SUMMARY"], "a") as out:
            out.write("\n".join(summary_lines) + "\n")
    print("pytest-ecdysis action: " + ", ".join(f"{k}={v}" for k, v in outputs.items() if v), flush=True)


if __name__ == "__main__":
    sys.exit(run(os.environ))
