"""Ground truth of the simulated model: the server's endpoint, the locked append from several processes,
the τ² knowledge it is computed from, and the file a real τ² run writes."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sim_toy import ToyHarness, ToyKnowledge

from pytest_ecdysis.core.errors import InfrastructureError
from pytest_ecdysis.sim.client import fetch_ground_truth, read_ground_truth, write_ground_truth
from pytest_ecdysis.sim.server import start_background

ROOT = Path(__file__).resolve().parents[1]


def _append_many(args):
    run_path, worker = args
    for i in range(60):
        write_ground_truth(
            run_path,
            {
                "task_id": str(i),
                "trial": worker,
                "failed": False,
                "quirks": [{"kind": "slip", "origin": "model", "step": i, "cured": False, "pad": "x" * 3000}],
            },
        )


def test_write_ground_truth_from_several_processes_never_interleaves(tmp_path):
    """Four processes appending 60 lines each (3 kB lines, beyond one write's atomic size) give 240 whole JSON lines."""
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_append_many, [(str(tmp_path), w) for w in range(4)])
    lines = read_ground_truth(tmp_path)
    assert len(lines) == 240
    assert sorted((line["trial"], line["task_id"]) for line in lines) == sorted(
        (w, str(i)) for w in range(4) for i in range(60)
    )
    assert (tmp_path / "sim" / "ground_truth.jsonl").is_file()


def test_ground_truth_endpoint_reports_each_quirk_with_origin_step_and_cured(tmp_path, monkeypatch):
    """GET /ecdysis/ground_truth returns task_id, trial and quirks {kind, origin, step, cured}; an unseen
    trial of a known task has no quirks; an unknown task is an error naming it."""
    from sim_toy import write_profile

    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path))
    model = write_profile(tmp_path, "gt", {"early_end": {"rate": 1.0}, "slip": {"rate": 1.0}})
    handle = start_background(knowledge={"toy": ToyKnowledge()})
    try:
        ToyHarness(truncate_at=None).run(handle.url, "r/toy/1/2", model=model)
        truth = fetch_ground_truth(handle.url, "r/toy/1/2")
        assert truth["task_id"] == "1" and truth["trial"] == 2
        assert (
            {"early_end", "slip"}
            <= {q["kind"] for q in truth["quirks"]}
            <= {"early_end", "slip", "unseen_value"}
        )
        for q in truth["quirks"]:
            assert set(q) >= {"kind", "origin", "step", "cured"} and isinstance(q["step"], int)
            assert (
                q["origin"]
                == {"early_end": "systematic", "slip": "model", "unseen_value": "harness"}[q["kind"]]
            )
        assert truth["cause"]["origin"] == "model" and truth["causes"]
        assert fetch_ground_truth(handle.url + "/v1", "r/toy/2/0")["quirks"] == []
        with pytest.raises(InfrastructureError, match="unknown task '9'"):
            fetch_ground_truth(handle.url, "r/toy/9/0")
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def tau2():
    from pytest_ecdysis_tau2.knowledge.providers import providers

    return providers()


def test_tau2_knowledge_plans_gold_actions_in_order_with_lookups_and_dependencies(tau2):
    """The τ² plan contains every gold action in order (lookups added before writes are marked gold=False),
    and a write value first seen in an earlier tool result is a dependency with its offset there."""
    from pytest_ecdysis_tau2.tasks.suite import get_task

    assert set(tau2) == {"tau2-airline", "tau2-retail", "tau2-telecom"}
    for suite, domain, task_id in (("tau2-retail", "retail", "5"), ("tau2-airline", "airline", "22")):
        task = tau2[suite].task(task_id)
        gold = [(a.name, a.arguments) for a in get_task(domain, task_id).evaluation_criteria.actions]
        assert [(s.name, s.arguments) for s in task.plan if s.gold] == gold
        assert task.writes
        deps = [d for i in task.writes for d in task.plan[i].dependencies]
        assert deps and all(d.source_step < i for i in task.writes for d in task.plan[i].dependencies)
    retail = tau2["tau2-retail"].task("5")
    write = retail.plan[retail.writes[0]]
    assert {b.kind for b in write.id_bends} == {"id_case", "id_prefix"}
    assert any(b.bent == "W6390527" for b in write.id_bends)


def test_telecom_knowledge_keeps_both_hands_of_the_gold_plan_and_adds_the_agents_lookups(tau2):
    """Telecom's plan: τ²'s gold actions in order, the user's marked `actor="user"` (never writes the agent
    makes), the agent's lookups inserted before its account write (customer by the phone number the user
    states, then the line), and the written ids read from the customer lookup's result."""
    from pytest_ecdysis_tau2.tasks.suite import get_task

    task_id = "[mobile_data_issue]data_mode_off|data_usage_exceeded[PERSONA:None]"
    task = tau2["tau2-telecom"].task(task_id)
    gold = [(a.name, a.arguments) for a in get_task("telecom", task_id).evaluation_criteria.actions]
    assert [(s.name, s.arguments) for s in task.plan if s.gold] == gold
    assert [(s.name, s.actor, s.write, s.gold) for s in task.plan] == [
        ("toggle_data", "user", False, True),
        ("get_customer_by_phone", "agent", False, False),
        ("get_details_by_id", "agent", False, False),
        ("refuel_data", "agent", True, True),
    ]
    refuel = task.plan[3]
    assert {(d.path, d.source_step) for d in refuel.dependencies} == {("customer_id", 1), ("line_id", 1)}
    assert {b.bent for b in refuel.id_bends} == {"c1001", "l1002"}
    assert task.plan[1].dependencies[0].source_step == -1  # the phone number: the user's own words


def test_tau2_knowledge_rejects_unknown_tasks_and_states_communicate_info(tau2):
    """An unknown τ² id is a KeyError; communicate_info and the scenario come from τ²'s task."""
    with pytest.raises(KeyError):
        tau2["tau2-airline"].task("9999")
    task = tau2["tau2-airline"].task("18")
    assert task.communicate_info == ("23553",)
    assert task.scenario.reason_for_call


def test_a_real_tau2_run_writes_ground_truth_lines_for_every_trial(tmp_path):
    """A sim run of the τ² airline suite writes one sim/ground_truth.jsonl line per trial with task_id,
    trial, failed and quirks, and no trial's messages mention the ground truth."""
    env = {k: v for k, v in os.environ.items() if k not in ("ECDYSIS_SIM_URL", "ECDYSIS_RUN_ID")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(ROOT),
            str(ROOT / "pytest_ecdysis_tau2/test_airline.py"),
            "--ecdysis-split",
            "test",
            "--ecdysis-tasks",
            "30",
            "--ecdysis-trials",
            "2",
            "--ecdysis-run-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )  # a loaded shared machine
    runs = list(tmp_path.glob("*/sim/ground_truth.jsonl"))
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [json.loads(x) for x in runs[0].read_text().splitlines()]
    assert sorted((x["task_id"], x["trial"]) for x in lines) == [("30", 0), ("30", 1)]
    assert all({"task_id", "trial", "failed", "quirks"} <= set(x) for x in lines)
    trials = (runs[0].parent.parent / "trials.jsonl").read_text().lower()
    for word in ("systematic", "cured", "blind_spot", "ground truth"):
        assert word not in trials
