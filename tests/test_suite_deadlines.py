"""Time budgets hold against slow endpoints (issue 21): a total deadline per call and per trial that covers
the whole response, body included, for the agent's, the user simulator's and the roles' calls.

Every test talks to a real local HTTP server that misbehaves in time (`slow_endpoint.SlowEndpoint`):
an HTTP client's read timeout restarts on every byte, so only a deadline around the whole call holds.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx2
import openai
import pytest
from slow_endpoint import SlowEndpoint

from pytest_ecdysis.core.errors import InfrastructureError
from pytest_ecdysis.endpoint.deadline import Budget, DeadlineTransport
from pytest_ecdysis.endpoint.role_client import RoleClient

#: seconds a budget may be overrun: thread hand-over, one trickled chunk, a loaded 2-core machine.
MARGIN_S = 1.5
#: a trial's budget in these tests: more than building the harness and the user on a loaded machine.
BUDGET_S = 6.0
#: the real cache directory, read before pytester moves HOME
CACHE_HOME = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
HELLO = {"content": "Hi, I need help with my reservation."}


def client_over(url: str, budget: Budget, call_timeout_s: float, max_retries: int = 3) -> openai.OpenAI:
    transport = DeadlineTransport(httpx2.HTTPTransport(), budget, call_timeout_s=call_timeout_s,
                                  max_retries=max_retries, backoff_s=0.01)
    return openai.OpenAI(base_url=url, api_key="k", max_retries=0, http_client=httpx2.Client(transport=transport))


def ask(client: openai.OpenAI, role: str = "agent"):
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                          extra_headers={"X-Ecdysis-Role": role})


def test_a_trickled_body_cannot_outlast_the_budget():
    """Headers at once, then one byte every 0.2 s (a 30 s body): the call ends at the budget, not after
    the body, and the budget says the agent's call was pending in its body."""
    with SlowEndpoint(agent=("trickle", 0.2, {"content": "x" * 100})) as server:
        budget = Budget(2.5)
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError) as info:
            ask(client_over(server.url, budget, call_timeout_s=1.5))
        elapsed = time.monotonic() - started
    assert "time budget of 2.5 s ran out" in str(info.value.__cause__)
    assert elapsed < 2.5 + MARGIN_S
    assert budget.exhausted and budget.pending["role"] == "agent" and budget.pending["phase"] == "body"
    assert budget.pending["bytes"] > 0 and budget.attempts >= 2  # the call timeout cut attempt 1, then a retry


def test_a_call_timeout_covers_the_whole_response_and_is_retried():
    """Whitespace keep-alive longer than the call timeout: each attempt is cut at the call timeout and
    retried; with retries spent the call fails as a timeout well inside a large trial budget."""
    with SlowEndpoint(agent=("whitespace", 200, 0.05, {"content": "late"})) as server:
        budget = Budget(60.0)
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError) as info:
            ask(client_over(server.url, budget, call_timeout_s=0.6, max_retries=2))
        elapsed = time.monotonic() - started
    assert "call timeout of 0.6 s" in str(info.value.__cause__)
    assert elapsed < 3 * 0.6 + MARGIN_S and not budget.exhausted and budget.attempts == 3


def test_a_role_call_cut_at_its_call_timeout_is_not_asked_again():
    """The roles' and editor's client (RoleClient): an answer that outlasts the call timeout is one attempt,
    not 1 + max_retries (a server that accepted it keeps computing it, and a retry queues behind it: Gemma
    3's analyst on llama-cpp-python, 1,201 s for nothing); the error says why and what to raise."""
    with SlowEndpoint(analyst=("whitespace", 200, 0.05, {"content": "late"})) as server:
        client = RoleClient("m", base_url=server.url, timeout_s=0.6, max_retries=3, budget_s=60.0)
        started = time.monotonic()
        with pytest.raises(InfrastructureError, match=r"analyst call to 'm' timed out: no complete response within "
                                                      r"the call timeout of 0\.6 s.*not asked again.*--ecdysis-call-timeout"):
            client.complete("analyst", [{"role": "user", "content": "x"}])
        elapsed = time.monotonic() - started
    assert client.budget.attempts == 1 and elapsed < 0.6 + MARGIN_S


def test_whitespace_keep_alive_within_the_deadline_is_an_ordinary_reply():
    """A gateway's leading whitespace that ends before the deadline is no error: the JSON after it is read."""
    with SlowEndpoint(agent=("whitespace", 10, 0.02, {"content": "fine"})) as server:
        reply = ask(client_over(server.url, Budget(30.0), call_timeout_s=5.0))
    assert reply.choices[0].message.content == "fine"


def test_headers_then_silence_ends_at_the_budget():
    """Headers, then nothing: the call ends at the budget's end (the socket is shut by the watchdog)."""
    with SlowEndpoint(agent=("silence",)) as server:
        budget = Budget(1.5)
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            ask(client_over(server.url, budget, call_timeout_s=10.0))
        elapsed = time.monotonic() - started
    assert elapsed < 1.5 + MARGIN_S and budget.exhausted and budget.pending["phase"] == "body"


def test_role_calls_have_a_stage_budget_that_holds_against_a_trickle():
    """A diagnosis role's call against a trickling endpoint ends as an InfrastructureError naming the
    diagnosis budget, within it."""
    with SlowEndpoint(analyst=("trickle", 0.2, {"content": "{}"})) as server:
        client = RoleClient("slow-model", base_url=server.url, budget_s=2.0, stage="diagnosis",
                            transport=httpx2.HTTPTransport())
        started = time.monotonic()
        with pytest.raises(InfrastructureError, match="diagnosis time budget of 2 s ran out"):
            client.complete("analyst", [{"role": "user", "content": "x"}])
        elapsed = time.monotonic() - started
    assert elapsed < 2.0 + MARGIN_S and client.budget.exhausted
    with pytest.raises(InfrastructureError, match="diagnosis time budget"):  # spent: no further call is made
        client.complete("moderator", [{"role": "user", "content": "x"}])


# -- whole trials through the suite's runner ----------------------------------------------------------


@pytest.fixture(scope="module")
def warm_tau2():
    """A trial's budget in these tests is spent on the endpoint, not on this process's first imports."""
    pytest.importorskip("tau2")
    from suite_scripted import warm_up

    warm_up()


def run_trial_over(server: SlowEndpoint, budget_s: float, call_timeout_s: float):
    """Task 3 of airline with the example harness, agent and user both served by `server`."""
    pytest.importorskip("tau2")
    from suite_scripted import EXAMPLE_HARNESS

    from pytest_ecdysis.core.harness import harness_id
    from task_suites.tau2.endpoint import EndpointSettings
    from task_suites.tau2.runner import TrialSpec, run_trial

    settings = EndpointSettings(call_timeout_s=call_timeout_s, max_retries=3, trial_budget_s=budget_s, backoff_s=0.01)
    spec = TrialSpec(domain="airline", task_id="3", trial=0, run_id="test-run", model="slow", user_model="slow",
                     harness_dir=EXAMPLE_HARNESS, harness_id=harness_id(EXAMPLE_HARNESS), base_url=server.url)
    result = run_trial(spec, settings)
    # the budget bounds the conversation; measured from the first model request the endpoint received
    return result, time.monotonic() - server.requests[0][1]


@pytest.mark.parametrize("pattern", [
    ("trickle", 0.2, {"content": "I can help."}),
    ("whitespace", 300, 0.05, {"content": "I can help."}),
    ("silence",),
], ids=["trickled-body", "whitespace-keep-alive", "headers-then-silence"])
def test_a_slow_agent_endpoint_ends_the_trial_within_its_budget(pattern, warm_tau2):
    """The agent's endpoint misbehaves in time: the trial ends as time_budget_exceeded (an infrastructure
    error: no reward, no failure record) within its budget plus a small margin, with the pending call."""
    from pytest_ecdysis.evidence.failures import triage

    with SlowEndpoint(agent=pattern, user=("ok", HELLO)) as server:
        result, conversation_s = run_trial_over(server, budget_s=BUDGET_S, call_timeout_s=BUDGET_S - 1.0)
    assert result.termination_reason == "time_budget_exceeded" and result.reward is None and result.is_infra_error
    assert conversation_s < BUDGET_S + MARGIN_S
    assert result.pending_call["role"] == "agent" and f"time budget of {BUDGET_S:g} s ran out" in result.error
    tri = triage([result], 1.0)
    assert tri.records == [] and tri.infra_errors == [result]


def test_a_slow_user_model_ends_the_trial_within_its_budget(warm_tau2):
    """The user simulator's endpoint trickles: the same budget holds, and the record names the user call."""
    with SlowEndpoint(user=("trickle", 0.2, HELLO)) as server:
        result, conversation_s = run_trial_over(server, budget_s=BUDGET_S, call_timeout_s=30.0)
    assert result.termination_reason == "time_budget_exceeded" and result.reward is None
    assert conversation_s < BUDGET_S + MARGIN_S
    assert result.pending_call["role"] == "user" and result.pending_call["phase"] == "body"


def test_the_limits_are_options_that_reach_the_trial_and_the_summary(pytester: pytest.Pytester, monkeypatch):
    """`--ecdysis-call-timeout`, `--ecdysis-max-retries` and the ini key `ecdysis_trial_budget` reach the
    trial through pytest (a silent agent endpoint ends the case as time_budget_exceeded within the
    budget), and the run's summary prints them."""
    pytest.importorskip("tau2")
    pytester.makeini("[pytest]\necdysis_trial_budget = 8\n")
    monkeypatch.setenv("XDG_CACHE_HOME", CACHE_HOME)  # pytester moves HOME: keep τ²'s suspect-task cache
    with SlowEndpoint(agent=("silence",), user=("ok", HELLO)) as server:
        result = pytester.runpytest_subprocess(
            "--pyargs", "task_suites.tau2.test_airline", "-p", "no:cacheprovider", "--ecdysis-model", "slow",
            "--ecdysis-base-url", server.url, "--ecdysis-tasks", "3", "--ecdysis-call-timeout", "30",
            "--ecdysis-max-retries", "0", "--ecdysis-run-dir", str(pytester.path / "runs"), timeout=300)
    result.stdout.fnmatch_lines(["*time_budget_exceeded: the trial time budget of 8 s ran out*",
                                 "limits: call 30 s, retries 0, trial 8 s, diagnosis 1800 s, editor 900 s"])
    (run_dir,) = (pytester.path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["limits"]["trial_budget_s"] == 8.0 and summary["n_infra_errors"] == 1
    trial = json.loads((run_dir / "trials.jsonl").read_text())
    assert trial["termination_reason"] == "time_budget_exceeded" and trial["pending_call"]["role"] == "agent"


# -- HTTP 200 replies that are not chat completions ---------------------------------------------------

#: bodies an endpoint (or a proxy in front of it) answered with HTTP 200, none of them a chat completion.
UNUSABLE = {
    "html": (b"<html>hello, not json</html>", "text/html"),
    "html-said-json": (b"<html>hello, not json</html>", "application/json"),
    "no-choices": (b'{"id": "x", "object": "chat.completion", "choices": []}', "application/json"),
    "no-message": (b'{"id": "x", "choices": [{"index": 0, "finish_reason": "stop"}]}', "application/json"),
    "truncated": (b'{"id": "x", "choices": [{"index": 0, "message": {"role": "assist', "application/json"),
    "empty": (b"", "application/json"),
}


@pytest.mark.parametrize("body", UNUSABLE, ids=list(UNUSABLE))
@pytest.mark.parametrize("stage", ["diagnosis", "editor"])
def test_an_unusable_200_to_a_role_or_the_editor_is_an_infrastructure_error(body, stage):
    """A 200 whose body is not a chat completion reaches an FDCR role or the built-in editor as an
    InfrastructureError naming the URL and what came back (never a JSONDecodeError, never "no spec")."""
    from pytest_ecdysis.core.errors import UnusableReplyError

    with SlowEndpoint(analyst=("raw", *UNUSABLE[body]), editor=("raw", *UNUSABLE[body])) as server:
        client = RoleClient("m", base_url=server.url, budget_s=30.0, stage=stage, transport=httpx2.HTTPTransport())
        role = "analyst" if stage == "diagnosis" else "editor"
        with pytest.raises(UnusableReplyError) as info:
            client.complete(role, [{"role": "user", "content": "x"}])
        assert len(server.requests) == 1  # not retried: asking again gets the same page
    said = str(info.value)
    assert f"the {role} call to {server.url}/chat/completions got HTTP 200" in said
    assert repr(UNUSABLE[body][0].decode()[:200]) in said and UNUSABLE[body][1] in said
    assert isinstance(info.value, InfrastructureError)


def test_a_json_chat_completion_with_another_content_type_is_usable():
    """The openai client reads a JSON body whatever its content-type, so the check does too."""
    from slow_endpoint import completion_bytes

    with SlowEndpoint(analyst=("raw", completion_bytes({"content": "fine"}), "text/plain")) as server:
        client = RoleClient("m", base_url=server.url, budget_s=30.0, transport=httpx2.HTTPTransport())
        assert client.complete("analyst", [{"role": "user", "content": "x"}]).text == "fine"


@pytest.mark.parametrize(("role", "body"), [("agent", "html"), ("agent", "truncated"), ("agent", "no-message"),
                                            ("user", "html")])
def test_an_unusable_200_ends_a_trial_as_an_infrastructure_error(role, body, warm_tau2):
    """The agent's (through the harness's process) or the user simulator's endpoint answers 200 with a
    body that is not a chat completion: the trial ends as infrastructure_error (no reward, no failure
    record), naming the endpoint and the body, not as the harness's agent_error."""
    from pytest_ecdysis.evidence.failures import triage

    other = "user" if role == "agent" else "agent"
    with SlowEndpoint(**{role: ("raw", *UNUSABLE[body]), other: ("ok", HELLO)}) as server:
        result, _ = run_trial_over(server, budget_s=60.0, call_timeout_s=30.0)
    assert result.termination_reason == "infrastructure_error", result.error
    assert f"the {role} call to {server.url}/chat/completions got HTTP 200" in result.error
    assert repr(UNUSABLE[body][0].decode()) in result.error
    tri = triage([result], 1.0)
    assert tri.records == [] and tri.infra_errors == [result]
