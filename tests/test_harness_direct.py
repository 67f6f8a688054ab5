"""The Direct harness: model, tools and policy only; unusable replies end as endpoint_format_error."""

from __future__ import annotations

import json

import pytest
from suite_scripted import DIRECT_HARNESS, ScriptedModel, call, run, text

pytest.importorskip("tau2")


@pytest.mark.parametrize(
    "reply",
    [
        call("get_reservation_details", '{"reservation_id": "JMO1MG"'),
        call("get_reservation_details", {"reservation_id": "JMO1MG"}),
        call("get_reservation_details", json.dumps({"reservation_id": "JMO1MG"}), call_id=...),
        ({"content": ""}, "stop"),
    ],
    ids=["invalid-json", "object-arguments", "missing-id", "empty"],
)
def test_direct_does_not_repair_replies(reply):
    """Direct repairs nothing: malformed arguments, object arguments, a missing id or an empty reply end
    the trial as endpoint_format_error (reward 0, not an infrastructure error)."""
    result = run("3", ScriptedModel([reply]), harness=DIRECT_HARNESS)
    assert result.termination_reason == "endpoint_format_error" and result.reward == 0.0
    assert result.harness_id.startswith("direct@")


def test_direct_sends_policy_as_system_prompt_and_arguments_unnormalised():
    """System prompt = the domain policy alone; ids are not normalised (a lower-case id reaches τ² as sent)."""
    agent = ScriptedModel(
        [call("get_reservation_details", json.dumps({"reservation_id": "jmo1mg"})), text("Done.")]
    )
    result = run("3", agent, harness=DIRECT_HARNESS)
    assert result.termination_reason == "user_stop"
    assert agent.requests[0]["messages"][0]["content"].lstrip().startswith("# Airline Agent Policy")
    assert result.tool_calls[0].arguments == {"reservation_id": "jmo1mg"} and result.tool_calls[0].error


def test_direct_is_registered_by_name(tmp_path):
    """`--ecdysis-harness direct` resolves through the suite's registration hook."""
    from pytest_ecdysis.core.harness import resolve_harness

    assert resolve_harness("direct", tmp_path) == DIRECT_HARNESS.resolve()
