"""A user that holds the agent to its requests, and a model that takes no step nobody asked for: real τ²
trials over HTTP against the simulated model (airline train tasks 7, 21, 33), and the user's rules alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.sim.knowledge import PlanStep, Scenario, SimTask
from pytest_ecdysis.sim.motivation import conversation_text, names_action
from pytest_ecdysis.sim.profiles import parse_profile
from pytest_ecdysis.sim.user.trial import STOP, UserTrial, may_decline

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "pytest_ecdysis_tau2" / "example_harness"


def _profile(directory: Path, name: str, quirks: dict, user: dict) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "schema_version": 1,
        "name": name,
        "seed": 7,
        "difficulty": {"distribution": "fixed", "value": 0.5},
        "quirks": quirks,
        "user": user,
    }
    (directory / f"{name}.json").write_text(json.dumps(data))
    return f"sim/{name}"


def _trial(url: str, model: str, task_id: str):
    from pytest_ecdysis.sim.client import fetch_ground_truth
    from pytest_ecdysis.sim.truth.repairs import executed_calls
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    spec = TrialSpec(
        domain="airline",
        task_id=task_id,
        trial=0,
        run_id=model.replace("/", "-"),
        model=model,
        user_model=model,
        harness_dir=EXAMPLE,
        harness_id=EXAMPLE.name,
        sim_url=url,
    )
    result = run_trial(spec)
    truth = fetch_ground_truth(url, spec.header, executed=executed_calls(result.messages or []))
    users = [str(m.get("content") or "") for m in result.messages if m.get("role") == "user"]
    return result, truth, users


@pytest.fixture
def sim(tmp_path, monkeypatch):
    pytest.importorskip("tau2")
    from pytest_ecdysis.sim.server import start_background

    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path / "profiles"))
    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", "0")
    monkeypatch.setenv("ECDYSIS_SIM_NONCE", "userpolicy")
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    server = start_background()
    yield server.url, tmp_path / "profiles"
    server.stop()


def test_the_user_leaves_when_the_agent_closes_with_a_request_not_done(sim):
    """Airline 17 (bags, the passenger and the cabin, all asked for): the model ends after the first write;
    the user says what was not done and leaves (###STOP###), and τ² scores the missing writes 0; with
    remind_rate 1 it repeats the request once, the model goes on and the early end is cured by the user."""
    url, profiles = sim
    leaver = _profile(profiles, "leaver", {"early_end": {"rate": 1.0}}, {"remind_rate": 0.0})
    result, truth, users = _trial(url, leaver, "17")
    assert result.reward == 0.0 and result.components["db"] == 0.0
    assert users[-1].startswith("You did not update reservation passengers") and users[-1].endswith(STOP)
    assert truth["cause"]["kind"] == "early_end"
    reminded = _profile(profiles, "reminded", {"early_end": {"rate": 1.0}}, {"remind_rate": 1.0})
    result, truth, users = _trial(url, reminded, "17")
    assert any(u.startswith("You have not done what I asked") for u in users)
    (early,) = [q for q in truth["quirks"] if q["kind"] == "early_end"]
    assert early["cured"] and early["by"] == "user"
    names = [c.get("name") for m in result.messages for c in m.get("tool_calls") or []]
    assert "update_reservation_passengers" in names and "update_reservation_baggages" in names


def test_the_user_declines_where_its_instructions_allow_and_the_model_makes_no_change(sim):
    """Airline 33 (its user goes ahead only under a budget): at decline_rate 1 the user says no, the model
    makes no change and closes, the database check fails and the cause is the user's (origin user)."""
    url, profiles = sim
    model = _profile(profiles, "decliner", {}, {"decline_rate": 1.0})
    result, truth, users = _trial(url, model, "33")
    assert "No, I don't want to go ahead with that." in users
    assert result.reward == 0.0 and not [
        m
        for m in result.messages
        if m.get("tool_calls") and any(c.get("name", "").startswith("update_") for c in m["tool_calls"])
    ]
    assert truth["cause"] == {"kind": "user_declined", "origin": "user", "entry": 0}


def test_a_step_no_conversation_asked_for_is_omitted(sim):
    """Airline 7: the user asks to cancel two reservations; τ²'s gold upgrades the basic-economy one first
    (its user asks only when the agent says it is basic economy, which this model does not). Nothing in the
    conversation asks for the upgrade, so the model does not take it: it cancels both, the database check
    fails, and the cause is `omitted_step` (origin model, a failure of reasoning)."""
    url, profiles = sim
    model = _profile(profiles, "calm", {}, {})
    result, truth, _ = _trial(url, model, "7")
    names = [c.get("name") for m in result.messages for c in m.get("tool_calls") or []]
    assert "update_reservation_flights" not in names and names.count("cancel_reservation") == 2
    assert result.reward == 0.0 and result.components["db"] == 0.0
    assert truth["cause"] == {"kind": "omitted_step", "origin": "model", "entry": 0}
    assert truth["quirks"][0]["tool"] == "update_reservation_flights" and not truth["quirks"][0]["cured"]


def test_every_left_out_write_a_late_request_names_is_done_before_the_model_goes_on(sim):
    """Airline 42: the user first tells only the mixup; the model looks the reservations up and leaves both
    cancellations out (nobody asked yet). When the user then asks the agent to work out "which flights
    should be cancelled", that one sentence names both writes: the model cancels both (not only the first
    and then back to where it was), both omissions are cured by the user, and τ² scores the trial 1."""
    url, profiles = sim
    model = _profile(profiles, "calm", {}, {})
    result, truth, users = _trial(url, model, "42")
    names = [c.get("name") for m in result.messages for c in m.get("tool_calls") or []]
    assert any("should be cancelled" in u for u in users)
    assert names.count("cancel_reservation") == 2
    omitted = [q for q in truth["quirks"] if q["kind"] == "omitted_step"]
    assert len(omitted) == 2 and all(q["cured"] and q["by"] == "user" for q in omitted)
    assert result.reward == 1.0


def test_what_motivates_a_write_is_the_users_words_or_a_tool_error_in_one_sentence():
    assert names_action("I want to cancel reservation XEHM4B.", "cancel_reservation", {"reservation_id": 1})
    assert not names_action("I want to cancel my flights.", "update_reservation_flights", {"cabin": 1})
    assert names_action("Please upgrade it to economy.", "update_reservation_flights", {"cabin": 1})
    assert not names_action("What will you change? My flights are booked.", "update_reservation_flights")
    assert not names_action("Please send me the address.", "update_reservation_baggages")  # not 'add'
    messages = [
        {"role": "system", "content": "Before you change a reservation, confirm it."},
        {"role": "tool", "content": '{"status": "cancelled", "reservation_id": "X"}'},
        {"role": "assistant", "content": "Shall I change your reservation?"},
        {"role": "tool", "content": "Error: basic economy cannot be cancelled; upgrade the cabin first."},
    ]
    text = conversation_text(messages)
    assert "Before you change" not in text and '"status"' not in text and "Shall I" not in text
    assert names_action(text, "update_reservation_flights", {"cabin": "economy"})


def _user(instructions: str, user: dict, plan: tuple = ()) -> UserTrial:
    profile = parse_profile({"name": "u", "seed": 1, "quirks": {}, "user": user})
    task = SimTask(
        suite="toy",
        task_id="1",
        plan=plan,
        scenario=Scenario(
            reason_for_call="You want to cancel reservation 59XX6W.", task_instructions=instructions
        ),
    )
    trial = UserTrial(task, profile, 0, "n")
    trial.respond([{"role": "user", "content": "Hi! How can I help you today?"}])
    return trial


def test_the_user_says_its_wants_at_a_closing_and_declines_only_where_allowed():
    cancel = PlanStep("cancel_reservation", {"reservation_id": "59XX6W"}, write=True)
    comp = PlanStep("send_certificate", {"user_id": "u", "amount": 50}, write=True)
    user = _user(
        "You also want the airline to compensate you. If the agent says no, ask to upgrade.",
        {},
        (cancel, comp),
    )
    assert user.wants == ["You also want the airline to compensate you."]  # the conditional one waits
    said = user.respond([{"role": "user", "content": "Done (done: cancel reservation). Anything else?"}])
    assert said == "Also: I also want the airline to compensate me."
    assert may_decline("You don't want to cancel if you don't get a refund.")
    assert not may_decline("You are polite and terse.")
    never = _user("You are polite.", {"decline_rate": 1.0})
    assert never.respond([{"role": "user", "content": "Do you confirm (yes/no)?"}]) != (
        "No, I don't want to go ahead with that."
    )
    always = _user("You don't want to cancel if you don't get a refund.", {"decline_rate": 1.0})
    assert always.respond(
        [{"role": "user", "content": "Cancel 59XX6W. Do you confirm (yes/no)?"}]
    ).startswith("No,")


def test_a_bad_user_section_is_a_usage_error_naming_the_field():
    base = {"name": "x", "seed": 1, "quirks": {}}
    with pytest.raises(UsageError, match="'user.decline_rate' must be a number in \\[0, 1\\], got 2"):
        parse_profile({**base, "user": {"decline_rate": 2}})
    with pytest.raises(UsageError, match="unknown field 'user.leave'"):
        parse_profile({**base, "user": {"leave": 1}})
    with pytest.raises(UsageError, match="unknown field 'quirk'"):
        parse_profile({**base, "quirk": {}})
    with pytest.raises(UsageError, match="'rate' must be a number in \\[0, 1\\], got True"):
        parse_profile({**base, "quirks": {"slip": {"rate": True}}})
    with pytest.raises(UsageError, match="'task_rate' is a field of 'blind_spot' only"):
        parse_profile({**base, "quirks": {"slip": {"rate": 0.1, "task_rate": 0.2}}})
    from pytest_ecdysis.sim.profiles import can_fail

    assert can_fail(parse_profile({**base, "user": {"decline_rate": 0.1}}))
    assert not can_fail(parse_profile({**base, "user": {"remind_rate": 0.5}}))
