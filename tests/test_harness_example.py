"""The example harness's loop and its decisions on endpoint replies seen in the wild, each run
as a real τ² trial through the suite's runner with scripted replies over the real openai client."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from suite_scripted import ScriptedModel, call, run, text

pytest.importorskip("tau2")

RES = "JMO1MG"  # airline task 3's reservation
GET = "get_reservation_details"


def notes_of(result, kind):
    return [n for n in result.harness_notes if n["kind"] == kind]


def executed(result):
    return [m for m in result.messages if m["role"] == "assistant" and m.get("tool_calls")]


def test_scripted_trial_runs_to_user_stop_with_headers_policy_and_normalised_ids():
    """A scripted conversation ends by user stop; every request carries the trial and role headers, the
    system prompt holds the domain policy, and a reservation id is stripped and upper-cased before the call."""
    agent = ScriptedModel(
        [call(GET, json.dumps({"reservation_id": " jmo1mg "})), text("Your reservation is JMO1MG.")]
    )
    result = run("3", agent)
    assert result.termination_reason == "user_stop"
    assert result.tool_calls[0].arguments == {"reservation_id": RES} and not result.tool_calls[0].error
    assert all(
        h["x-ecdysis-trial"] == "test-run/tau2-airline/3/0" and h["x-ecdysis-role"] == "agent"
        for h in agent.headers
    )
    system = agent.requests[0]["messages"][0]
    assert system["role"] == "system" and "Airline Agent Policy" in system["content"]
    assert result.tokens == {"prompt": 20, "completion": 10, "total": 30}
    assert result.harness_id.startswith("example_harness@") and result.reward is not None


def test_case1_invalid_json_arguments_become_a_tool_error_and_are_not_executed():
    """Case 1: arguments that are not valid JSON are not executed; the model gets a tool error saying the
    arguments were not valid JSON, and its corrected call runs."""
    agent = ScriptedModel(
        [
            call(GET, '{"reservation_id": "JMO1MG"', call_id="c1"),
            call(GET, json.dumps({"reservation_id": RES}), call_id="c2"),
            text("Found it."),
        ]
    )
    result = run("3", agent)
    assert result.termination_reason == "user_stop"
    assert [c["id"] for m in executed(result) for c in m["tool_calls"]] == ["c2"]
    errors = [m for m in agent.requests[1]["messages"] if m["role"] == "tool"]
    assert errors[-1]["tool_call_id"] == "c1" and "not valid JSON" in errors[-1]["content"]
    assert "not executed" in errors[-1]["content"]
    assert notes_of(result, "malformed_arguments")[0]["step"] == 1


@pytest.mark.parametrize("bad", ["[1, 2]", '"JMO1MG"', "null"])
def test_case1_json_that_is_not_an_object_is_malformed_too(bad):
    """Case 1, same kind: JSON that is not an object (list, string, null) is treated as malformed."""
    agent = ScriptedModel(
        [call(GET, bad), call(GET, json.dumps({"reservation_id": RES}), call_id="c2"), text("Found it.")]
    )
    result = run("3", agent)
    assert len(notes_of(result, "malformed_arguments")) == 1
    assert len(result.tool_calls) == 1 and result.tool_calls[0].arguments == {"reservation_id": RES}


def test_case2_object_arguments_are_accepted_and_recorded_and_sent_back_as_a_string():
    """Case 2: arguments arriving as a JSON object are accepted (a recorded repair); in later requests the
    call's arguments go back to the endpoint as a JSON string, as the API requires."""
    agent = ScriptedModel([call(GET, {"reservation_id": RES}), text("Found it.")])
    result = run("3", agent)
    assert result.tool_calls[0].arguments == {"reservation_id": RES} and not result.tool_calls[0].error
    assert notes_of(result, "arguments_object")
    sent = [m for m in agent.requests[1]["messages"] if m.get("tool_calls")][-1]
    assert isinstance(sent["tool_calls"][0]["function"]["arguments"], str)


@pytest.mark.parametrize("ids", [(..., ...), ("", ""), ("c1", "c1")], ids=["missing", "empty", "reused"])
def test_case3_missing_empty_or_reused_ids_get_stable_ids_and_keep_call_result_pairing(ids):
    """Case 3: calls with no id, an empty id, or a reused id get `call_<n>` ids; each result is paired
    with its call in the trajectory and in what is sent back to the endpoint."""
    agent = ScriptedModel(
        [
            call(GET, json.dumps({"reservation_id": RES}), call_id=ids[0]),
            call("get_user_details", json.dumps({"user_id": "anya_garcia_5901"}), call_id=ids[1]),
            text("Done."),
        ]
    )
    result = run("3", agent)
    assert result.termination_reason == "user_stop"
    assert (
        all(c.result is not None and not c.error for c in result.tool_calls) and len(result.tool_calls) == 2
    )
    sent = agent.requests[-1]["messages"]
    call_ids = [c["id"] for m in sent if m.get("tool_calls") for c in m["tool_calls"]]
    result_ids = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert call_ids == result_ids and len(set(call_ids)) == 2
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in call_ids)
    synthesised = notes_of(result, "synthesised_call_id")
    assert len(synthesised) == (1 if ids[0] == "c1" else 2)
    assert all(re.fullmatch(r"call_\d+", i) for i in call_ids if i != "c1")


def test_case4_tool_calls_finish_with_no_calls_is_asked_again_then_recorded():
    """Case 4: finish_reason 'tool_calls' with an empty call list is an empty reply: asked again once."""
    agent = ScriptedModel(
        [({"content": None, "tool_calls": []}, "tool_calls"), text("How can I help?"), text("Done.")]
    )
    result = run("3", agent)
    assert result.termination_reason == "user_stop"
    assert notes_of(result, "empty_reply")[0]["detail"].startswith(
        "finish_reason 'tool_calls' with no tool calls"
    )


def test_case4_repeated_empty_replies_end_as_endpoint_format_error():
    """Case 4: an endpoint that keeps sending empty replies ends the trial as endpoint_format_error."""
    agent = ScriptedModel([({"content": ""}, "stop")])
    result = run("3", agent)
    assert result.termination_reason == "endpoint_format_error" and result.reward == 0.0
    assert "empty replies" in result.error
    assert len(agent.requests) == 2


def test_case4_stop_with_calls_and_length_with_text_are_accepted_and_recorded():
    """Case 4: finish_reason 'stop' with calls runs the calls; 'length' with text is accepted as truncated;
    both are recorded so diagnosis can tell an endpoint quirk from a harness defect."""
    agent = ScriptedModel(
        [
            call(GET, json.dumps({"reservation_id": RES}), finish="stop"),
            text("Your reservation is JMO1MG and it", finish="length"),
            text("Done."),
        ]
    )
    result = run("3", agent)
    assert len(result.tool_calls) == 1 and not result.tool_calls[0].error
    assert notes_of(result, "finish_reason_mismatch") and notes_of(result, "truncated_reply")
    assert result.termination_reason == "user_stop"


def test_case4_length_with_cut_arguments_is_handled_as_malformed():
    """Case 4: finish_reason 'length' whose call arguments were cut mid-JSON gets the malformed-JSON error."""
    agent = ScriptedModel(
        [
            call(GET, '{"reservation_id": "JM', finish="length"),
            call(GET, json.dumps({"reservation_id": RES}), call_id="c2"),
            text("Done."),
        ]
    )
    result = run("3", agent)
    assert notes_of(result, "truncated_reply") and notes_of(result, "malformed_arguments")
    assert len(result.tool_calls) == 1


def test_text_and_calls_in_one_reply_keep_the_calls():
    """A reply with both text and calls (τ² allows one or the other) keeps the calls; the drop is recorded."""
    message, finish = call(GET, json.dumps({"reservation_id": RES}))
    agent = ScriptedModel([({**message, "content": "Let me check."}, finish), text("Done.")])
    result = run("3", agent)
    assert len(result.tool_calls) == 1 and notes_of(result, "dropped_text")


@pytest.fixture
def tiny_budget_harness(tmp_path):
    directory = tmp_path / "budget_harness"
    shutil.copytree(
        __import__("suite_scripted").EXAMPLE_HARNESS,
        directory,
        ignore=shutil.ignore_patterns("__pycache__", "recipes"),
    )
    config = directory / "config.py"
    config.write_text(re.sub(r"MAX_MODEL_CALLS = \d+", "MAX_MODEL_CALLS = 2", config.read_text()))
    return directory


def test_case6_budget_hit_with_a_call_pending_is_recorded_and_aggregates(tiny_budget_harness):
    """Case 6: when the step budget runs out right after the model issued a call, the call is not run,
    the trial ends by agent stop with the budget text, the TrialResult lists the call with no result and
    a `budget_exhausted` note, and the records stage turns it into a failure record without crashing."""
    from pytest_ecdysis.evidence import failures

    agent = ScriptedModel(
        [
            call(GET, json.dumps({"reservation_id": RES}), call_id="c1"),
            call("cancel_reservation", json.dumps({"reservation_id": RES}), call_id="c2"),
        ]
    )
    result = run("3", agent, harness=tiny_budget_harness)
    assert result.termination_reason == "agent_stop"
    assert "step budget of 2 model calls reached" in result.messages[-1]["content"]
    assert "###STOP###" in result.messages[-1]["content"]
    note = notes_of(result, "budget_exhausted")[0]
    assert note["pending_tool_calls"][0]["name"] == "cancel_reservation" and "pending" in note["detail"]
    pending = result.tool_calls[-1]
    assert pending.name == "cancel_reservation" and pending.result is None
    assert not any(c["name"] == "cancel_reservation" for m in executed(result) for c in m["tool_calls"])
    assert failures.has_pending_tool_call(result)
    record = failures.to_record(result)
    assert record.pending_tool_call and record.termination_reason == "agent_stop"


def test_content_sent_as_text_parts_is_read_as_text():
    """A reply whose content is a list of text parts is read as the joined text, not as an empty reply."""
    agent = ScriptedModel(
        [
            ({"content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "done."}]}, "stop"),
            text("Done."),
        ]
    )
    result = run("3", agent)
    assert result.termination_reason == "user_stop" and not notes_of(result, "empty_reply")
    assert any(m["content"] == "Hello, done." for m in result.messages if m["role"] == "assistant")


def test_tool_call_turns_are_sent_with_empty_text_not_null() -> None:
    """llama-cpp-python's server answers an assistant message with `content: null` (OpenAI's own shape) with
    HTTP 500, which ended a real trial as an infrastructure error (docs/real-model.md): the example harness
    sends "" with its tool calls, which every server named in the docs accepts."""
    from pytest_ecdysis_tau2.example_harness.agent import _assistant_calls_dict

    message = _assistant_calls_dict([("c1", "get_user_details", '{"user_id": "u"}')])
    assert message["content"] == "" and message["tool_calls"][0]["function"]["name"] == "get_user_details"
