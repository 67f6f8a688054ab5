"""Evidence that tells the truth: endpoint defects, the user simulator's stop and what τ²'s
evaluator saw, each through a real τ² airline trial of the example harness against scripted endpoints."""

from __future__ import annotations

import json

import httpx2
import pytest
from suite_scripted import ScriptedModel, call, run, scripted_user, text

pytest.importorskip("tau2")

from pytest_ecdysis.core.metrics import score_block  # noqa: E402
from pytest_ecdysis.evidence.failures import triage  # noqa: E402
from pytest_ecdysis.evidence.patterns import group  # noqa: E402
from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings  # noqa: E402

FAST = EndpointSettings(call_timeout_s=30.0, max_retries=3, trial_budget_s=300.0, backoff_s=0.01)
PARSE = EndpointSettings(
    call_timeout_s=30.0, max_retries=3, trial_budget_s=300.0, backoff_s=0.01, text_tool_calls="parse"
)
ARGS = {"reservation_id": "JMO1MG"}
THINK = "<think>The user wants details; I will look up the reservation. ###STOP###</think>\n"
MARKUPS = {
    "hermes": THINK
    + '<tool_call>\n{"name": "get_reservation_details", "arguments": {"reservation_id": "JMO1MG"}}\n'
    "</tool_call>",
    "function_tag": THINK + '<function=get_reservation_details>{"reservation_id": "JMO1MG"}</function>',
    "mistral": '[TOOL_CALLS][{"name": "get_reservation_details", "arguments": {"reservation_id": "JMO1MG"}}]',
}


def sent_to_user(user: ScriptedModel) -> str:
    """Everything the user simulator's model was sent (the agent's words arrive as 'user' messages)."""
    return "\n".join(str(m.get("content")) for body in user.requests for m in body["messages"])


def evidence_of(result):
    tri = triage([result], 1.0)
    return tri, group(tri.records)


@pytest.mark.parametrize("style", list(MARKUPS))
def test_a_tool_call_written_as_text_ends_the_trial_as_an_endpoint_format_error(style):
    """Content with call markup and `tool_calls: null`, `finish_reason: stop`: by default the trial ends as
    endpoint_format_error, scored as a failure (reward 0), its record flagged endpoint_problem and kept out
    of the evidence; the markup and the reasoning never reach the user simulator."""
    agent, user = ScriptedModel([text(MARKUPS[style])]), scripted_user()
    result = run("3", agent, settings=FAST, user=user)
    assert result.termination_reason == "endpoint_format_error" and result.reward == 0.0
    assert not result.is_infra_error and result.endpoint_problem and style in result.error
    assert len(agent.requests) == 1  # not asked again once the endpoint showed it cannot call tools
    told = sent_to_user(user)
    assert "get_reservation_details" not in told and "TOOL_CALLS" not in told and "look up" not in told
    tri, groups = evidence_of(result)
    (record,) = tri.records
    assert record.endpoint_problem and record.kept_out == "endpoint_problem"
    assert tri.evidence == [] and groups == []
    block = score_block([result], threshold=1.0, n_trials_cfg=1, model="m", prices={})
    assert block["n_scored"] == 1 and block["suite_score"] == 0.0  # a worse endpoint, not an excluded trial


def test_with_the_parse_option_a_text_tool_call_is_executed_and_noted():
    """ini `ecdysis_text_tool_calls = parse`: the call is executed like a native one, the reasoning is dropped,
    the trial goes on; the note says what was parsed and the trial is flagged endpoint_problem."""
    agent = ScriptedModel([text(MARKUPS["hermes"]), text("Your reservation JMO1MG is confirmed.")])
    user = scripted_user()
    result = run("3", agent, settings=PARSE, user=user)
    assert result.termination_reason == "user_stop", result.error
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("get_reservation_details", ARGS)]
    assert not result.tool_calls[0].error and result.endpoint_problem
    assert [n["kind"] for n in result.endpoint_notes] == ["text_tool_calls", "reasoning_stripped"]
    assert "hermes" in result.endpoint_notes[0]["detail"]
    assert "look up" not in sent_to_user(user) and "<tool_call>" not in sent_to_user(user)


@pytest.mark.parametrize(
    "markup, outcome",
    [
        ('<tool_call>{"name": "get_magic_upgrade", "arguments": {}}</tool_call>', "unknown"),
        (
            '<tool_call>{"name": "get_reservation_details", "arguments": "{reservation_id: JMO1MG"}</tool_call>',
            "malformed",
        ),
    ],
)
def test_parsed_markup_with_a_defect_has_the_outcome_of_a_native_call_with_it(markup, outcome):
    """Markup naming a tool that does not exist, or with arguments that are not JSON: the same outcome as
    a native tool call with that defect (τ²'s tool error; the harness's malformed-arguments feedback),
    never a crash."""
    agent = ScriptedModel([text(markup), text("Sorry, let me help you another way.")])
    result = run("3", agent, settings=PARSE)
    assert result.termination_reason == "user_stop", result.error
    if outcome == "unknown":
        assert result.tool_calls[0].name == "get_magic_upgrade" and result.tool_calls[0].error
    else:
        assert not result.tool_calls and any(n["kind"] == "malformed_arguments" for n in result.harness_notes)


def test_a_server_parse_failure_is_not_retried_and_is_an_endpoint_format_error():
    """HTTP 500 "Failed to parse input at pos ..." (llama.cpp) is the model's output the server could not
    parse: not retried, not an infrastructure error, but endpoint_format_error, scored as a failure."""
    failure = httpx2.Response(
        500,
        json={
            "error": {
                "code": 500,
                "type": "server_error",
                "message": "Failed to parse input at pos 31: <tool_call>",
            }
        },
    )
    agent = ScriptedModel([failure])
    result = run("3", agent, settings=FAST)
    assert result.termination_reason == "endpoint_format_error" and result.reward == 0.0
    assert len(agent.requests) == 1 and result.endpoint_problem and "Failed to parse input" in result.error
    assert [n["kind"] for n in result.endpoint_notes] == ["server_parse_error"]
    assert evidence_of(result)[0].evidence == []


def test_reasoning_is_never_sent_on_as_the_agents_words():
    """`reasoning_content` and `<think>` blocks are dropped: the user simulator gets only the answer."""
    agent = ScriptedModel(
        [
            (
                {
                    "content": "<think>secret plan</think>Could you give me your reservation number?",
                    "reasoning_content": "more secret planning",
                },
                "stop",
            ),
            text("Thank you, all done."),
        ]
    )
    user = scripted_user()
    result = run("3", agent, settings=FAST, user=user)
    told = sent_to_user(user)
    assert "Could you give me your reservation number?" in told and "secret" not in told
    assert result.messages[1]["content"] != "" and "secret" not in json.dumps(result.messages)
    assert [n["kind"] for n in result.endpoint_notes] == [
        "reasoning_stripped"
    ] and not result.endpoint_problem


def confirming_user(stop_in_confirmation: bool, think: str = ""):
    """Opens, then answers the agent's yes/no question with a confirmation (and the stop token in the same
    message when `stop_in_confirmation`)."""

    def reply(body):
        agent_texts = [m for m in body["messages"] if m["role"] == "user"]
        if len(agent_texts) < 2:
            return {"content": "Hi, I want to cancel my reservation JMO1MG."}, "stop"
        if stop_in_confirmation:
            return {"content": think + "Yes, please cancel it. ###STOP###"}, "stop"
        return {"content": "###STOP###"}, "stop"

    return ScriptedModel([reply])


QUESTION = (
    "I can cancel reservation JMO1MG for you. Do you want me to proceed with the cancellation (yes/no)?"
)


def test_a_user_that_confirms_and_stops_in_one_message_is_flagged_and_kept_out():
    """The user answers the confirmation request with 'Yes, please cancel it. ###STOP###': the write never
    happens; the record says so and is kept out of the evidence (still scored, as τ² does)."""
    agent = ScriptedModel([call("get_reservation_details", json.dumps(ARGS)), text(QUESTION)])
    result = run("3", agent, settings=FAST, user=confirming_user(True))
    assert result.termination_reason == "user_stop" and result.user_stop_after_confirmation
    tri, groups = evidence_of(result)
    if tri.records:  # the pass/fail depends on τ²'s checks; flagged either way, kept out when failed
        assert tri.records[0].user_stop_after_confirmation and tri.evidence == [] and groups == []


def test_a_stop_the_user_model_only_thought_about_does_not_end_the_conversation():
    """Reasoning in the user model's reply is stripped before the stop check: a `###STOP###` inside
    `<think>` neither ends the trial nor reaches the agent."""
    user = ScriptedModel(
        [
            ({"content": "<think>maybe I say ###STOP### now</think>Hi, I need my reservation."}, "stop"),
            ({"content": "###STOP###"}, "stop"),
        ]
    )
    agent = ScriptedModel([text("Sure, which one?")])
    result = run("3", agent, settings=FAST, user=user)
    first_user = [m for m in result.messages if m["role"] == "user"][0]
    assert first_user["content"] == "Hi, I need my reservation." and len(user.requests) == 2
    assert not result.user_stop_after_confirmation


def test_the_evaluator_checks_are_kept_and_a_short_value_in_a_date_is_a_weak_pass(tmp_path, capsys):
    """Task 3's gold communicate value "4" matched inside a date, with no tool call at all: the trial
    passes; trials.jsonl keeps which message matched, the summary counts it as a weak pass and
    `ecdysis show` lists it."""
    agent = ScriptedModel([text("Your flight on 2024-05-14 is confirmed.")])
    result = run("3", agent, settings=FAST)
    assert result.reward == 1.0, result.components
    (check,) = result.checks["communicate"]
    assert check["info"] == "4" and check["met"] and "2024-05-14" in check["matched"]
    assert result.messages[check["message_index"]]["content"].startswith("Your flight on 2024-05-14")
    assert result.checks["db_match"] is True and result.checks["db_diff"] is None
    block = score_block([result], threshold=1.0, n_trials_cfg=1, model="m", prices={})
    assert block["n_weak_passes"] == 1
    reasons = block["weak_passes"][0]["reasons"]
    assert "no tool call" in reasons and "'4' under 3 characters" in reasons[0]
    from pytest_ecdysis import cli
    from pytest_ecdysis.run.files import aggregate

    summary, _, _ = aggregate([result], threshold=1.0, trials_per_task=1, model="m", prices={})
    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": 1, "run_id": "r", **summary}))
    assert cli.main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "weak passes: 1" in out and "weak pass tau2-airline/3 t0: communicate value '4'" in out


def test_a_db_failure_record_carries_the_changed_records_and_fields():
    """An agent that cancels a reservation the gold keeps: the record's db_diff names the changed record
    and field (agent vs gold), bounded."""
    agent = ScriptedModel([call("cancel_reservation", json.dumps(ARGS)), text("It is cancelled: 4 flights.")])
    result = run("3", agent, settings=FAST)
    assert result.components.get("db") == 0.0 and result.checks["db_match"] is False
    (record,) = triage([result], 1.0).records
    paths = {d["path"]: d for d in record.db_diff}
    assert "reservations.JMO1MG.status" in paths
    assert paths["reservations.JMO1MG.status"]["agent"] == "cancelled" and len(record.db_diff) <= 21
    assert record.is_evidence() and record.kept_out is None
