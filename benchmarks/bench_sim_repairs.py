"""Benchmark: cures by the harness's code under the simulated model.

    python benchmarks/bench_sim_repairs.py [--domain airline] [--split test] [--trials 1] [--nonce attrib-1] [--tasks IDS]

Runs the example harness, then the example harness with its `value_check` recipe applied (what the
simulated Analyst now proposes from write values τ² accepted that are near misses of what the user stated),
on every task of the split, in process (`ECDYSIS_AGENT_PROCESS=0`), against one in-process simulated
server with a fixed nonce (both harnesses meet the same draws). For each it prints the score, the
ground-truth entries the harness repaired / refused / altered in code (`sim/truth/repairs.py`: the tool
calls τ² executed, POSTed with the ground-truth request, against what the model emitted) and the causes of
the failures. Figures are the simulated model's, not a real model's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
VALUE_CHECK = {
    "summary": "value check",
    "changes": [
        {
            "component": "tool_interface",
            "files": ["tools.py"],
            "description": "value check",
            "trigger": "a call that changes a record carries a value the conversation never showed",
            "addresses": ["bench"],
            "expected_effect": "",
            "risks": [],
            "guards": [],
            "parameters": {"knob": "value_check"},
        }
    ],
    "left_alone": [],
    "watch_tasks": [],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="airline")
    parser.add_argument("--split", default="test")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--nonce", default="attrib-1")
    parser.add_argument("--profile", default="default")
    parser.add_argument(
        "--tasks", default="", help="comma-separated task ids (default: every task of the split)"
    )
    args = parser.parse_args()
    os.environ["ECDYSIS_AGENT_PROCESS"] = "0"
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from pytest_ecdysis.core.records import ModificationSpec
    from pytest_ecdysis.sim.client import fetch_ground_truth
    from pytest_ecdysis.sim.editor.recipes import apply_spec
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis.sim.truth.repairs import executed_calls
    from pytest_ecdysis_tau2.tasks import suite
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    tmp = Path(tempfile.mkdtemp(prefix="bench-repairs-"))
    checked = tmp / "value_check"
    shutil.copytree(
        REPO / "pytest_ecdysis_tau2" / "example_harness",
        checked,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    applied = apply_spec(ModificationSpec.model_validate(VALUE_CHECK), checked)
    assert applied.applied == ["value_check"], applied
    ids = args.tasks.split(",") if args.tasks else list(suite.split_ids(args.domain, args.split))
    server = start_background(default_profile=args.profile, nonce=args.nonce)
    try:
        for harness in (REPO / "pytest_ecdysis_tau2" / "example_harness", checked):
            started = time.monotonic()
            rewards, verdicts, causes = [], Counter(), Counter()
            for task_id in ids:
                for trial in range(args.trials):
                    spec = TrialSpec(
                        domain=args.domain,
                        task_id=task_id,
                        trial=trial,
                        run_id=f"bench-{harness.name}",
                        model="sim",
                        user_model="sim",
                        harness_dir=harness,
                        harness_id=harness.name,
                        sim_url=server.url,
                    )
                    result = run_trial(spec)
                    truth = fetch_ground_truth(
                        server.url, spec.header, executed=executed_calls(result.messages)
                    )
                    rewards.append(result.reward or 0.0)
                    verdicts.update(
                        f"{q['kind']}:{q['harness']}{':cured' if q.get('cured') else ''}"
                        for q in truth["quirks"]
                        if q.get("harness")
                    )
                    if (result.reward or 0.0) < 1.0 and truth.get("cause"):
                        causes[truth["cause"]["kind"]] += 1
            print(
                f"{harness.name}: score {sum(rewards) / len(rewards):.3f} over {len(rewards)} trials; harness "
                f"verdicts {dict(verdicts)}; causes of failures {dict(causes)}; {time.monotonic() - started:.0f} s",
                flush=True,
            )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
