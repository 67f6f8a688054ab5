"""Cures by the harness's code (sim/truth/repairs.py): the ground truth compares what the
model emitted with what the environment executed, so a bent argument the harness rewrote before the call is a
cure by the harness, not "model quirk still present"; a call the harness refused never reached the
environment; a value the harness passed through is the model's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sim_toy import write_profile

from pytest_ecdysis.sim.client import fetch_ground_truth
from pytest_ecdysis.sim.knowledge import PlanStep
from pytest_ecdysis.sim.server import start_background
from pytest_ecdysis.sim.truth.repairs import attribute, executed_calls, note_emitted

ROOT = Path(__file__).resolve().parents[1]
PLAN = [
    PlanStep("get_user_details", {"user_id": "mia_li_3668"}),
    PlanStep("cancel_reservation", {"reservation_id": "NO6JO3"}, write=True),
    PlanStep("cancel_reservation", {"reservation_id": "AIXC49"}, write=True),
]


def _truth(*entries, closed=True):
    return {"task_id": "7", "trial": 0, "closed": closed, "quirks": [dict(e) for e in entries]}


def _slip(step, tool="cancel_reservation", arg="reservation_id"):
    return {
        "kind": "slip",
        "origin": "model",
        "step": step,
        "cured": False,
        "tool": tool,
        "arg": arg,
        "effect": "wrong_write",
    }


def _emitted(*calls):
    out: dict = {}
    for step, (cid, name, args) in enumerate(calls):
        note_emitted(
            out,
            step,
            {"tool_calls": [{"id": cid, "function": {"name": name, "arguments": json.dumps(args)}}]},
        )
    return out


def test_a_bent_argument_the_harness_rewrote_is_a_cure_by_the_harness():
    """The model sent AIXC48 for AIXC49; the environment executed AIXC49 under the same call id: repaired,
    cured by the harness, no effect left, and the trial has no cause any more. Passed through: untouched."""
    emitted = _emitted(("c1", "cancel_reservation", {"reservation_id": "AIXC48"}))
    fixed = attribute(
        _truth(_slip(0)),
        emitted,
        [{"id": "c1", "name": "cancel_reservation", "arguments": {"reservation_id": "AIXC49"}}],
        PLAN,
    )
    (entry,) = fixed["quirks"]
    assert entry["harness"] == "repaired" and entry["cured"] and entry["cured_by"] == "harness"
    assert "effect" not in entry and fixed["cause"] is None
    passed = attribute(
        _truth(_slip(0)),
        emitted,
        [{"id": "c1", "name": "cancel_reservation", "arguments": {"reservation_id": "AIXC48"}}],
        PLAN,
    )
    assert "harness" not in passed["quirks"][0] and passed["cause"]["kind"] == "slip"
    altered = attribute(
        _truth(_slip(0)),
        emitted,
        [{"id": "c1", "name": "cancel_reservation", "arguments": {"reservation_id": "aixc48"}}],
        PLAN,
    )
    assert altered["quirks"][0]["harness"] == "altered" and not altered["quirks"][0]["cured"]


def test_a_value_drawn_a_turn_before_its_call_is_judged_on_the_call_that_follows():
    """The slip was drawn at request 1 (the model read the details back for the user's confirmation) and the
    call went out in the reply to request 2: that call is the one judged (repaired here); an earlier call of
    the same tool, before the draw, is not."""
    emitted = _emitted(
        ("c0", "cancel_reservation", {"reservation_id": "NO6JO3"}),
        ("c1", "get_user_details", {"user_id": "mia_li_3668"}),
        ("c2", "cancel_reservation", {"reservation_id": "AIXC48"}),
    )
    executed = [
        {"id": "c0", "name": "cancel_reservation", "arguments": {"reservation_id": "NO6JO3"}},
        {"id": "c2", "name": "cancel_reservation", "arguments": {"reservation_id": "AIXC49"}},
    ]
    (entry,) = attribute(_truth(_slip(1)), emitted, executed, PLAN)["quirks"]
    assert entry["harness"] == "repaired" and entry["cured_by"] == "harness"
    (late,) = attribute(_truth(_slip(3)), emitted, executed, PLAN)["quirks"]
    assert "harness" not in late


def test_a_refused_call_is_a_cure_only_when_the_right_value_was_executed_after_it():
    """The harness refused the bent call (never executed): `refused`; if the model then sent it right and it
    ran, the failure was prevented (cured by the harness); if nothing right ran, the work was not done and
    the entry keeps its effect. A rewrite under a new call id is still a repair."""
    emitted = _emitted(
        ("c1", "cancel_reservation", {"reservation_id": "AIXC48"}),
        ("c2", "cancel_reservation", {"reservation_id": "AIXC49"}),
    )
    right_after = attribute(
        _truth(_slip(0)),
        emitted,
        [{"id": "c2", "name": "cancel_reservation", "arguments": {"reservation_id": "AIXC49"}}],
        PLAN,
    )
    assert right_after["quirks"][0]["harness"] == "refused" and right_after["quirks"][0]["cured"]
    nothing = attribute(
        _truth(_slip(0)), _emitted(("c1", "cancel_reservation", {"reservation_id": "AIXC48"})), [], PLAN
    )
    assert nothing["quirks"][0]["harness"] == "refused" and not nothing["quirks"][0]["cured"]
    assert nothing["quirks"][0]["effect"] == "wrong_write" and nothing["cause"]["kind"] == "slip"
    new_id = attribute(
        _truth(_slip(0)),
        _emitted(("c1", "cancel_reservation", {"reservation_id": "AIXC48"})),
        [{"id": "call_1", "name": "cancel_reservation", "arguments": {"reservation_id": "AIXC49"}}],
        PLAN,
    )
    assert new_id["quirks"][0]["harness"] == "repaired"


def test_the_plan_step_is_the_one_the_emitted_call_matches():
    """Two cancellations in the plan: a slip of the first id is judged against the first, not the second."""
    emitted = _emitted(("c1", "cancel_reservation", {"reservation_id": "NO6JO4"}))
    fixed = attribute(
        _truth(_slip(0)),
        emitted,
        [{"id": "c1", "name": "cancel_reservation", "arguments": {"reservation_id": "NO6JO3"}}],
        PLAN,
    )
    assert fixed["quirks"][0]["harness"] == "repaired"


def test_executed_calls_are_the_assistant_tool_calls_of_the_trajectory():
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "name": "get_user_details", "arguments": {"user_id": "x"}}],
        },
        {"role": "tool", "id": "c1", "content": "{}", "error": False},
    ]
    assert executed_calls(messages) == [
        {"id": "c1", "name": "get_user_details", "arguments": {"user_id": "x"}}
    ]


def test_the_endpoint_needs_the_credential_and_an_executed_list(tmp_path):
    """POST /ecdysis/ground_truth: 403 without the token, 400 naming the shape without `executed`."""
    import httpx2

    handle = start_background()
    try:
        url = f"{handle.url}/ecdysis/ground_truth"
        assert httpx2.post(url, json={"trial": "r/tau2-airline/7/0", "executed": []}).status_code == 403
        bad = httpx2.post(
            url, json={"trial": "r/tau2-airline/7/0"}, headers={"X-Ecdysis-Ground-Truth-Token": handle.token}
        )
        assert bad.status_code == 400 and "executed" in bad.json()["error"]["message"]
    finally:
        handle.stop()


def _trial(url: str, model: str, harness: Path, task_id: str):
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    spec = TrialSpec(
        domain="airline",
        task_id=task_id,
        trial=0,
        run_id=f"repairs-{harness.name}",
        model=model,
        user_model=model,
        harness_dir=harness,
        harness_id=harness.name,
        sim_url=url,
    )
    result = run_trial(spec)
    return result, fetch_ground_truth(url, spec.header, executed=executed_calls(result.messages))


def slip_only_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *harnesses: Path, task_id: str = "7"):
    """Airline `task_id` once per harness, in this process, against a simulated server whose only quirk is a
    slip in every planned call (profile `sliponly`, written under `tmp_path`): `[(result, ground truth)]`."""
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path / "profiles"))
    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", "0")
    monkeypatch.delenv("ECDYSIS_SIM_NONCE", raising=False)
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    model = write_profile(tmp_path / "profiles", "sliponly", {"slip": {"rate": 1.0}})
    server = start_background(default_profile="sliponly")
    try:
        return [_trial(server.url, model, harness, task_id) for harness in harnesses]
    finally:
        server.stop()


@pytest.mark.slow
def test_a_harness_that_rewrites_slipped_arguments_is_credited_with_the_cure(tmp_path, monkeypatch):
    """Airline task 7 (a flight change and two cancellations) under a profile that only slips: the example
    harness fails, its ground truth names a slip as the cause; a copy that, before executing a call, rewrites
    an argument the conversation never showed to the one value it showed two characters away, passes, and
    over HTTP the server marks every slip it rewrote `repaired`, cured by the harness."""
    pytest.importorskip("tau2")
    repairing = tmp_path / "repairing"
    shutil.copytree(
        ROOT / "pytest_ecdysis_tau2" / "example_harness",
        repairing,
        ignore=shutil.ignore_patterns("__pycache__", "recipes"),
    )
    addon = (ROOT / "tests" / "fixtures" / "repairing_agent_addon.py").read_text()
    (repairing / "agent.py").write_text((repairing / "agent.py").read_text() + "\n\n" + addon)
    (plain, plain_truth), (fixed, fixed_truth) = slip_only_trials(
        tmp_path, monkeypatch, ROOT / "pytest_ecdysis_tau2" / "example_harness", repairing
    )
    assert plain.reward == 0.0 and plain_truth["cause"]["kind"] == "slip"
    assert not [q for q in plain_truth["quirks"] if q.get("cured_by") == "harness" and q["kind"] == "slip"]
    assert fixed.reward == 1.0 and fixed_truth["cause"] is None
    writes = [
        q for q in fixed_truth["quirks"] if q["tool"] in ("update_reservation_flights", "cancel_reservation")
    ]
    assert writes and all(
        q["harness"] == "repaired" and q["cured"] and q["cured_by"] == "harness" for q in writes
    )
    assert fixed_truth["executed_calls"] == len(executed_calls(fixed.messages)) > 0
