"""Replies and endings seen in the wild: the blame lands where the fault is.

Each test runs real τ² airline trials (example harness) against a scripted OpenAI-compatible server on
127.0.0.1 (`slow_endpoint.SlowEndpoint`), and checks the ending, the record and whether it is evidence.
"""

from __future__ import annotations

import json

import pytest
from slow_endpoint import SlowEndpoint

HELLO = {"content": "Hi, I need help with my reservation."}


@pytest.fixture(scope="module")
def warm_tau2():
    pytest.importorskip("tau2")
    from suite_scripted import warm_up

    warm_up()


def run_over(server: SlowEndpoint, task_id: str = "3", budget_s: float = 120.0, harness=None):
    """One trial of airline task `task_id`, example harness (or `harness`), agent and user both served by
    `server`."""
    from suite_scripted import EXAMPLE_HARNESS

    harness = harness or EXAMPLE_HARNESS

    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    settings = EndpointSettings(call_timeout_s=60.0, max_retries=1, trial_budget_s=budget_s, backoff_s=0.01)
    spec = TrialSpec(
        domain="airline",
        task_id=task_id,
        trial=0,
        run_id="wild",
        model="scripted",
        user_model="scripted",
        harness_dir=harness,
        harness_id=harness_id(harness),
        base_url=server.url,
    )
    return run_trial(spec, settings)


def sse(message: dict) -> bytes:
    """One chat-completion chunk as a server-sent event stream, then [DONE] (Ollama 9092 shape)."""
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", **message}, "finish_reason": "stop"}],
    }
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


# -- 4: an event stream nobody asked for ------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/event-stream", "text/event-stream; charset=utf-8"])
def test_an_event_stream_nobody_asked_for_is_unusable_unless_streaming_was_asked(content_type):
    """`completion_problem` names an unasked event stream (and quotes it); a streamed request's is left alone."""
    from pytest_ecdysis.endpoint.replies import asked_to_stream, completion_problem

    body = sse({"content": "hi"})
    said = completion_problem("/v1/chat/completions", content_type, body)
    assert said is not None and said.startswith(
        "an event stream though the request did not ask for streaming"
    )
    assert repr(body.decode()[:200]) in said and content_type in said
    assert completion_problem("/v1/chat/completions", content_type, body, streamed=True) is None
    assert asked_to_stream(b'{"model": "m", "stream": true}') and not asked_to_stream(b'{"stream": false}')
    assert not asked_to_stream(b"{}") and not asked_to_stream(b"not json")


@pytest.mark.parametrize("role", ["agent", "user"])
def test_an_unasked_event_stream_ends_a_trial_as_an_infrastructure_error(role, warm_tau2):
    """HTTP 200, text/event-stream, one chunk, though `stream` was not asked: the trial ends as
    infrastructure_error naming the URL and quoting the body (not agent_error), and is no evidence."""
    from pytest_ecdysis.evidence.failures import triage

    other = "user" if role == "agent" else "agent"
    body = sse({"content": "Hello"})
    with SlowEndpoint(**{role: ("raw", body, "text/event-stream"), other: ("ok", HELLO)}) as server:
        result = run_over(server)
    assert result.termination_reason == "infrastructure_error", result.error
    assert (
        f"the {role} call to {server.url}/chat/completions got HTTP 200 with an event stream" in result.error
    )
    assert repr(body.decode()[:200]) in result.error
    tri = triage([result], 1.0)
    assert tri.records == [] and tri.infra_errors == [result]


# -- 5: a request the harness malformed ------------------------------------------------------------

STRICT_400 = json.dumps(
    {
        "error": {
            "message": "function_call: Input should be a valid dictionary (got null)",
            "type": "invalid_request_error",
            "code": 400,
        }
    }
).encode()


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_4xx_the_agents_request_caused_is_the_harness_failure(status, warm_tau2):
    """A strict server refuses the agent's request (400/413/422): agent_error with the server's message in
    the record, a failure record that is evidence; never infrastructure_error."""
    from pytest_ecdysis.evidence.failures import triage

    with SlowEndpoint(agent=("status", status, STRICT_400, "application/json"), user=("ok", HELLO)) as server:
        result = run_over(server)
    assert result.termination_reason == "agent_error", result.error
    assert (
        f"HTTP {status}" in result.error
        and "function_call: Input should be a valid dictionary" in result.error
    )
    assert result.reward == 0.0 and not result.is_infra_error
    tri = triage([result], 1.0)
    assert len(tri.records) == 1 and tri.records[0].is_evidence() and tri.infra_errors == []


UNKNOWN_MODEL_400 = json.dumps(
    {
        "error": {
            "message": "Invalid model name passed in model=gpt-5-mini",
            "type": "invalid_request_error",
            "code": "400",
        }
    }
).encode()


@pytest.mark.parametrize(
    ("role", "status", "body"),
    [
        ("agent", 401, STRICT_400),
        ("agent", 404, STRICT_400),
        ("agent", 429, STRICT_400),
        ("user", 400, STRICT_400),
        ("agent", 400, UNKNOWN_MODEL_400),
    ],
)
def test_a_4xx_of_auth_routing_rate_or_the_user_simulator_stays_infrastructure(role, status, body, warm_tau2):
    """Auth, not-found (also a 400 naming the model, as LiteLLM sends) and rate limits are the endpoint's
    or the account's business, and the user simulator's request is the suite's own: those stay
    infrastructure_error (out of score and evidence)."""
    other = "user" if role == "agent" else "agent"
    with SlowEndpoint(**{role: ("status", status, body, "application/json"), other: ("ok", HELLO)}) as server:
        result = run_over(server)
    assert result.termination_reason == "infrastructure_error", result.error
    assert result.is_infra_error and result.reward is None


# -- 1 and 2: tool names with chat-template markup, arguments of the wrong type ----------------------

RESERVATION, PAYMENT = "4WQ150", "gift_card_3576581"  # airline: 5 bags, 0 non-free, paid by this gift card


def one_call_then_done(name: str, arguments: dict):
    """Agent replies: the tool call `name(arguments)` (arguments sent as given), then a closing text."""

    def reply(body: dict) -> dict:
        if any(m.get("role") == "tool" for m in body.get("messages", [])):
            return {"content": "All done. Anything else?"}
        return {
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }

    return reply


def user_stops_second_turn(body: dict) -> dict:
    said = [m for m in body.get("messages", []) if m.get("role") == "assistant"]
    return HELLO if not said else {"content": "Thanks, that is all. ###STOP###"}


@pytest.mark.parametrize(
    "name",
    [
        "get_reservation_details<|channel|>commentary",
        "functions.get_reservation_details",
        "<|start|>assistant<|channel|>commentary to=functions.get_reservation_details",
        "get_reservation_details</tool_call>",
    ],
)
def test_a_known_tool_name_with_template_markup_is_repaired_with_a_note(name, warm_tau2):
    """A tool name that is a known tool plus chat-template markup (vLLM 32587) reaches τ² as the tool,
    with a `tool_name_repaired` endpoint note; the tool answers (no "tool not found"), the record is no
    endpoint problem."""
    agent = one_call_then_done(name, {"reservation_id": RESERVATION})
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_stops_second_turn)) as server:
        result = run_over(server)
    assert result.termination_reason == "user_stop", result.error
    assert [c.name for c in result.tool_calls] == ["get_reservation_details"]
    assert not result.tool_calls[0].error and RESERVATION in result.tool_calls[0].result
    notes = [n for n in result.endpoint_notes if n["kind"] == "tool_name_repaired"]
    assert len(notes) == 1 and repr(name) in notes[0]["detail"] and not result.endpoint_problem


def test_template_markup_that_names_no_known_tool_is_an_endpoint_problem(warm_tau2):
    """Markup around a name that is no tool (or two of them) cannot be repaired: the record says
    endpoint_problem and is kept out of the evidence."""
    from pytest_ecdysis.evidence.failures import triage

    agent = one_call_then_done("<|channel|>commentary", {"reservation_id": RESERVATION})
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_stops_second_turn)) as server:
        result = run_over(server)
    assert any(n["kind"] == "tool_name_markup" for n in result.endpoint_notes) and result.endpoint_problem
    records = triage([result], 1.0).records
    assert records and not records[0].is_evidence()


def test_integers_sent_as_strings_are_coerced_to_the_tool_schema_with_a_note(warm_tau2):
    """`"total_baggages": "6"` (Ollama 7843) is executed as 6: the tool succeeds, the trajectory holds the
    integer (so τ²'s scorer replays the same call), and an `arguments_coerced` note names each argument."""
    args = {
        "reservation_id": RESERVATION,
        "total_baggages": "6",
        "nonfree_baggages": "1",
        "payment_id": PAYMENT,
    }
    agent = one_call_then_done("update_reservation_baggages", args)
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_stops_second_turn)) as server:
        result = run_over(server)
    assert result.termination_reason == "user_stop" and result.reward is not None, result.error
    call = result.tool_calls[0]
    assert call.arguments["total_baggages"] == 6 and call.arguments["nonfree_baggages"] == 1
    assert not call.error and '"total_baggages": 6' in call.result
    [note] = [n for n in result.endpoint_notes if n["kind"] == "arguments_coerced"]
    assert "'total_baggages'" in note["detail"] and "'nonfree_baggages'" in note["detail"]
    assert not result.endpoint_problem


@pytest.mark.parametrize(
    ("argument", "value", "wanted"),
    [("total_baggages", "six", "an integer"), ("payment_id", ["x"], "a string")],
)
def test_an_argument_that_cannot_take_the_schema_type_is_refused_naming_it(
    argument, value, wanted, warm_tau2
):
    """A value no unambiguous coercion fits is refused before the tool runs: the tool's error names the
    argument and the type wanted (not Python's `unsupported operand`), and τ²'s scorer, which replays the
    call on an environment guarded alike, scores the trial."""
    args = {
        "reservation_id": RESERVATION,
        "total_baggages": 6,
        "nonfree_baggages": 1,
        "payment_id": PAYMENT,
        argument: value,
    }
    agent = one_call_then_done("update_reservation_baggages", args)
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_stops_second_turn)) as server:
        result = run_over(server)
    assert result.termination_reason == "user_stop" and result.reward is not None, result.error
    call = result.tool_calls[0]
    assert (
        call.error and f"argument '{argument}' of update_reservation_baggages must be {wanted}" in call.result
    )
    assert "unsupported operand" not in call.result


# -- 3: the user simulator's own abort ----------------------------------------------------------------


def test_the_user_simulators_out_of_scope_abort_is_flagged_kept_out_and_listed(warm_tau2):
    """The user's turn ends `###OUT-OF-SCOPE###` (tau2-bench 517): scored as τ² scores it, flagged
    `user_abort`, its failure record kept out of the evidence (`kept_out: user_abort`), and the summary
    lists it; an ordinary `###STOP###` is no abort."""
    from pytest_ecdysis.evidence.failures import triage
    from pytest_ecdysis.evidence.patterns import group
    from pytest_ecdysis.report.summary import summary_lines
    from pytest_ecdysis.run.files import aggregate

    def user(body: dict) -> dict:
        said = [m for m in body.get("messages", []) if m.get("role") == "assistant"]
        return HELLO if not said else {"content": "I don't know that, sorry. ###OUT-OF-SCOPE###"}

    agent = one_call_then_done("get_reservation_details", {"reservation_id": RESERVATION})
    with SlowEndpoint(agent=("ok", agent), user=("ok", user)) as server:
        aborted = run_over(server)
    with SlowEndpoint(agent=("ok", agent), user=("ok", user_stops_second_turn)) as server:
        stopped = run_over(server)
    assert aborted.termination_reason == "user_stop" and aborted.reward is not None, aborted.error
    assert aborted.user_abort and not stopped.user_abort
    stopped = stopped.model_copy(update={"trial": 1})
    tri = triage([aborted, stopped], 1.0)
    [record] = [r for r in tri.records if r.trial == 0]
    assert record.user_abort and record.kept_out == "user_abort" and not record.is_evidence()
    assert all("t0" not in key for g in group(tri.records) for key in g.records)
    summary, _, _ = aggregate([aborted, stopped], threshold=1.0, trials_per_task=2, model="m", prices={})
    assert summary["user_aborts"] == ["tau2-airline/3/t0"] and summary["kept_out"] == {"user_abort": 1}
    assert any(
        "user simulator aborts" in line and "tau2-airline/3/t0" in line for line in summary_lines(summary, [])
    )


def test_a_harness_tool_the_request_offered_is_repaired_but_not_coerced():
    """A name the request's `tools` offered (a harness's own tool, unknown to τ²) is repaired from markup
    too; arguments are coerced only against τ²'s tools."""
    from pytest_ecdysis_tau2.tasks.tool_calls import fix_calls

    message = {
        "tool_calls": [
            {
                "id": "1",
                "type": "function",
                "function": {"name": "think<|channel|>analysis", "arguments": '{"n": "2"}'},
            }
        ]
    }
    changed, notes = fix_calls(message, {}, {"think"})
    assert changed and message["tool_calls"][0]["function"] == {"name": "think", "arguments": '{"n": "2"}'}
    assert [kind for kind, _ in notes] == ["tool_name_repaired"]


# -- 6: the same failure under every configuration, with real trials -----------------------------------


def test_real_trials_of_two_harnesses_failing_a_task_alike_make_it_suspect(warm_tau2):
    """Airline task 3 under the example and the direct harness, the model answering the same useless text:
    both fail with one signature, so the task is suspect with the reason, and its records are kept out."""
    from suite_scripted import DIRECT_HARNESS, EXAMPLE_HARNESS

    from pytest_ecdysis.evidence.failures import triage
    from pytest_ecdysis.evidence.suspects import keep_out, suspect_across

    runs = []
    for harness in (EXAMPLE_HARNESS, DIRECT_HARNESS):
        with SlowEndpoint(
            agent=("ok", {"content": "I am sorry, I cannot look that up."}),
            user=("ok", user_stops_second_turn),
        ) as server:
            runs.append([run_over(server, harness=harness)])
    assert runs[0][0].harness_id != runs[1][0].harness_id
    assert all(r[0].termination_reason == "user_stop" and r[0].reward == 0.0 for r in runs), runs
    found = suspect_across(runs, 1.0)
    assert list(found) == ["tau2-airline/3"] and "under 2 configurations" in found["tau2-airline/3"]
    records = keep_out(triage(runs[0], 1.0).records, found)
    assert [r.kept_out for r in records] == ["suspect_task"] and not records[0].is_evidence()
