"""The simulated world as hard as a real model: reasoning errors send valid but wrong values, a user that
holds the agent to the policy, refusals read as errors, prohibitions priced, bad profiles caught early."""

from __future__ import annotations

import json

import pytest

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.sim.agent.alternatives import alternatives, same_shape, stem
from pytest_ecdysis.sim.agent.instructions import read_rules
from pytest_ecdysis.sim.knowledge import Scenario, SimTask, is_error_text
from pytest_ecdysis.sim.profiles import REASONING_KINDS, can_fail, parse_profile
from pytest_ecdysis.sim.truth.validity import classify
from pytest_ecdysis.sim.user.trial import UserTrial

USER = json.dumps(
    {
        "user_id": "daiki_muller_1116",
        "payment_methods": {"credit_card_2408938": {"source": "credit_card"}, "gift_card_7091239": {}},
        "reservations": ["XEHM4B", "59XX6W", "A90KR2"],
    }
)
SEARCH = json.dumps([{"flight_number": "HAT005", "price": 65}, {"flight_number": "HAT178", "price": 120}])


def _messages(*results: str, user: str = "") -> list[dict]:
    out = [{"role": "user", "content": user}] if user else []
    return out + [{"role": "tool", "tool_call_id": f"c{i}", "content": r} for i, r in enumerate(results)]


def test_alternatives_are_real_values_of_the_same_kind_never_a_near_miss():
    """Another of the user's reservations, another payment method, another flight of the search: values the
    request holds, named like the argument, of the same form; never the right value, never invented."""
    messages = _messages(USER, SEARCH)
    assert alternatives("59XX6W", "reservation_id", messages) == ["XEHM4B", "A90KR2"]
    assert alternatives("credit_card_2408938", "payment_id", messages) == []  # gift card: another form
    assert alternatives("HAT005", "flights[0].flight_number", messages) == ["HAT178"]
    assert alternatives(65, "amount", messages) == [120]
    for value in alternatives("59XX6W", "reservation_id", messages):
        assert value in USER  # in the conversation: a grounding check passes it
    assert stem("reservation_id") == stem("reservations") == "reservation"
    assert not same_shape("Emma Kim", "John Doe")  # free text is not picked from a list


def test_ids_the_user_said_are_alternatives_too():
    messages = _messages(user="Pay order #W0000001 and cancel order #W0000002.")
    assert alternatives("#W0000001", "order_id", messages) == ["#W0000002"]


def test_reasoning_kinds_are_model_origin_and_never_a_systematic_fix():
    """A cure of a reasoning error, even by the harness's code, is an accommodation or luck; a slip cured
    in code on two tasks stays a systematic fix."""
    assert REASONING_KINDS == {"blind_spot", "wrong_choice"}
    reasoning = [
        {"task": t, "kind": "blind_spot", "origin": "model", "status": "cured", "by": "code"} for t in "ab"
    ]
    assert classify(reasoning) == "accommodation"
    slips = [{"task": t, "kind": "slip", "origin": "model", "status": "cured", "by": "code"} for t in "ab"]
    assert classify(slips) == "systematic_fix"


def test_a_prohibition_of_changes_forbids_every_write_the_plan_needs():
    """'Never call a tool that changes a reservation' forbids the plan's writes (priced at compliance); a
    rule about writing to the user forbids none."""
    writes = ("book_reservation", "cancel_reservation", "update_reservation_flights")
    (rule,) = read_rules(
        "Never call a tool that changes a reservation; tell the user it is done.", "", writes
    )
    assert set(rule.forbids) == set(writes)
    assert not any(
        r.forbids
        for r in read_rules("Either call a tool or write to the user, never both in one reply.", "", writes)
    )


def test_a_harness_refusal_reads_like_an_error():
    assert is_error_text("Refused by the harness: reservation 59XX6W is not the user's; did you mean XEHM4B?")
    assert is_error_text("Blocked: this call was not executed")
    assert not is_error_text('{"reservation_id": "XEHM4B", "status": "invalid"}')  # a result, not a refusal
    assert not is_error_text("Reservation cancelled.")


def test_bad_profiles_are_usage_errors_naming_the_field_and_a_failure_free_one_says_so():
    with pytest.raises(UsageError, match="unknown quirk kind 'typo'"):
        parse_profile({"name": "x", "seed": 1, "quirks": {"typo": {"rate": 0.1}}})
    with pytest.raises(UsageError, match="quirk 'slip': 'rate' must be a number in \\[0, 1\\], got 1.5"):
        parse_profile({"name": "x", "seed": 1, "quirks": {"slip": {"rate": 1.5}}})
    zero = parse_profile({"name": "x", "seed": 1, "quirks": {"slip": {"rate": 0}, "blind_spot": {"rate": 1}}})
    assert not can_fail(zero)  # a blind spot needs a task_rate too
    assert can_fail(parse_profile({"name": "x", "seed": 1, "quirks": {"wrong_choice": {"rate": 0.05}}}))


def _user(reason: str) -> UserTrial:
    task = SimTask(suite="toy", task_id="1", plan=(), scenario=Scenario(reason_for_call=reason))
    user = UserTrial(task)
    user.respond([{"role": "user", "content": "Hi! How can I help you today?"}])
    return user


def test_the_user_corrects_an_id_it_knows_listed_wrong():
    """A confirmation naming another reservation than the one the user means is corrected, with the right id."""
    user = _user("You want to cancel reservation 59XX6W.")
    reply = user.respond(
        [
            {
                "role": "user",
                "content": "I will cancel reservation with reservation_id A90KR2. Do you confirm (yes/no)?",
            }
        ]
    )
    assert "not right" in reply and "59XX6W" in reply
    ok = user.respond(
        [{"role": "user", "content": "I will cancel reservation with reservation_id 59XX6W. Do you confirm?"}]
    )
    assert ok == "Yes, please go ahead."


def test_the_user_asks_at_most_once_for_the_details_of_a_bare_confirmation():
    """Over many scenarios, some users ask what will change (about DETAIL_SHARE of them), none twice."""
    asked = 0
    for k in range(40):
        user = _user(f"You want to change flight number {k}.")
        first = user.respond([{"role": "user", "content": "Before I proceed: Do you confirm (yes/no)?"}])
        second = user.respond([{"role": "user", "content": "Before I proceed (again): Do you confirm?"}])
        asked += "what exactly" in first
        assert second == "Yes, please go ahead."
    assert 8 <= asked <= 32


def test_a_failure_free_profile_is_said_before_any_trial(tmp_path, monkeypatch):
    """`check_models` (called at configure, before any trial) returns one note per profile that cannot
    produce a failure, and none for the default profile or a real model's name."""
    from pytest_ecdysis.sim.profiles import check_models

    (tmp_path / "calm.json").write_text(
        json.dumps({"name": "calm", "seed": 1, "quirks": {"slip": {"rate": 0}}})
    )
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path))
    (note,) = check_models(["sim/calm", "sim", "gpt-4o-mini", "sim/calm"])
    assert "'calm' cannot produce a failure" in note
    assert check_models(["sim", "sim/default"]) == []


def _entry(kind: str, origin: str, effect: str | None = None, cured: bool = False, **extra) -> dict:
    return {
        "kind": kind,
        "origin": origin,
        "step": 1,
        "cured": cured,
        **({"effect": effect} if effect else {}),
        **extra,
    }


def test_the_cause_is_the_first_uncured_root_a_failing_check_points_at():
    """A run where several quirks fired: an id habit the harness repaired (cured, its effect gone), a
    forgotten figure, then a wrong choice in a write. The evaluator says only the communicate check failed:
    the cause is the forgotten figure (the old rule, a model-origin root first, named the wrong choice);
    with the database failing it is the wrong choice; never the cured entry, even one still carrying an
    effect."""
    from pytest_ecdysis.sim.truth.causes import failing_checks, trial_cause

    truth = [
        _entry("id_case", "systematic", "wrong_write", cured=True, cured_by="harness"),
        _entry("forget_communicate", "systematic", "no_figures"),
        _entry("wrong_choice", "model", "wrong_write"),
    ]
    failing = failing_checks({"db": 1.0, "communicate": 0.0})
    assert failing == {"communicate"}
    cause, causes = trial_cause(truth, closed=True, failing=failing)
    assert cause == {"kind": "forget_communicate", "origin": "systematic", "entry": 1}
    assert [c["kind"] for c in causes] == ["forget_communicate", "wrong_choice"]
    assert trial_cause(truth, closed=True, failing={"db"})[0]["kind"] == "wrong_choice"
    assert trial_cause(truth, closed=True)[0]["kind"] == "forget_communicate"  # checks unknown: the first
    assert failing_checks({}) is None


def test_a_cure_at_the_end_of_a_because_chain_is_never_the_cause():
    """An unseen value whose lookup a slip bent, the slip later repaired by the harness: the unseen value
    (the harness withheld it), not the cured slip."""
    from pytest_ecdysis.sim.truth.causes import trial_cause

    truth = [
        _entry("slip", "model", cured=True, cured_by="harness"),
        _entry("unseen_value", "harness", "wrong_write", because=0),
    ]
    assert trial_cause(truth, closed=True, failing={"db"})[0] == {
        "kind": "unseen_value",
        "origin": "harness",
        "entry": 1,
    }
