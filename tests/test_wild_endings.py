"""Replies and endings seen in the wild (issue 33): the blame lands where the fault is.

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


def run_over(server: SlowEndpoint, task_id: str = "3", budget_s: float = 120.0):
    """One trial of airline task `task_id`, example harness, agent and user both served by `server`."""
    from suite_scripted import EXAMPLE_HARNESS

    from pytest_ecdysis.core.harness import harness_id
    from task_suites.tau2.endpoint import EndpointSettings
    from task_suites.tau2.runner import TrialSpec, run_trial

    settings = EndpointSettings(call_timeout_s=60.0, max_retries=1, trial_budget_s=budget_s, backoff_s=0.01)
    spec = TrialSpec(domain="airline", task_id=task_id, trial=0, run_id="wild", model="scripted",
                     user_model="scripted", harness_dir=EXAMPLE_HARNESS, harness_id=harness_id(EXAMPLE_HARNESS),
                     base_url=server.url)
    return run_trial(spec, settings)


def sse(message: dict) -> bytes:
    """One chat-completion chunk as a server-sent event stream, then [DONE] (Ollama 9092 shape)."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", **message}, "finish_reason": "stop"}]}
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


# -- 4: an event stream nobody asked for ------------------------------------------------------------

@pytest.mark.parametrize("content_type", ["text/event-stream", "text/event-stream; charset=utf-8"])
def test_an_event_stream_nobody_asked_for_is_unusable_unless_streaming_was_asked(content_type):
    """`completion_problem` names an unasked event stream (and quotes it); a streamed request's is left alone."""
    from pytest_ecdysis.endpoint.replies import asked_to_stream, completion_problem

    body = sse({"content": "hi"})
    said = completion_problem("/v1/chat/completions", content_type, body)
    assert said is not None and said.startswith("an event stream though the request did not ask for streaming")
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
    assert f"the {role} call to {server.url}/chat/completions got HTTP 200 with an event stream" in result.error
    assert repr(body.decode()[:200]) in result.error
    tri = triage([result], 1.0)
    assert tri.records == [] and tri.infra_errors == [result]


# -- 5: a request the harness malformed ------------------------------------------------------------

STRICT_400 = json.dumps({"error": {"message": "function_call: Input should be a valid dictionary (got null)",
                                   "type": "invalid_request_error", "code": 400}}).encode()


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_4xx_the_agents_request_caused_is_the_harness_failure(status, warm_tau2):
    """A strict server refuses the agent's request (400/413/422): agent_error with the server's message in
    the record, a failure record that is evidence; never infrastructure_error."""
    from pytest_ecdysis.evidence.failures import triage

    with SlowEndpoint(agent=("status", status, STRICT_400, "application/json"), user=("ok", HELLO)) as server:
        result = run_over(server)
    assert result.termination_reason == "agent_error", result.error
    assert f"HTTP {status}" in result.error and "function_call: Input should be a valid dictionary" in result.error
    assert result.reward == 0.0 and not result.is_infra_error
    tri = triage([result], 1.0)
    assert len(tri.records) == 1 and tri.records[0].is_evidence() and tri.infra_errors == []


@pytest.mark.parametrize(("role", "status"), [("agent", 401), ("agent", 404), ("agent", 429), ("user", 400)])
def test_a_4xx_of_auth_routing_rate_or_the_user_simulator_stays_infrastructure(role, status, warm_tau2):
    """Auth, not-found and rate limits are the endpoint's or the account's business, and the user
    simulator's request is the suite's own: those stay infrastructure_error (out of score and evidence)."""
    other = "user" if role == "agent" else "agent"
    with SlowEndpoint(**{role: ("status", status, STRICT_400, "application/json"), other: ("ok", HELLO)}) as server:
        result = run_over(server)
    assert result.termination_reason == "infrastructure_error", result.error
    assert result.is_infra_error and result.reward is None
