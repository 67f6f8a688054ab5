"""Time budgets hold against slow endpoints: a total deadline per call and per trial that covers
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
from slow_endpoint import SlowEndpoint, completion_bytes

from pytest_ecdysis.core.errors import InfrastructureError
from pytest_ecdysis.endpoint.deadline import Budget, DeadlineTransport
from pytest_ecdysis.endpoint.role_client import RoleClient

#: a trial's budget in these tests: more than building the harness and the user on a loaded machine (6 s
#: ran out before the first model request at load 16-30: the trial's set-up counts against its budget).
BUDGET_S = 20.0
#: the real cache directory, read before pytester moves HOME
CACHE_HOME = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
HELLO = {"content": "Hi, I need help with my reservation."}


def held_s(pattern: tuple) -> float:
    """How long `SlowEndpoint` holds one call with `pattern` when nothing cuts it (seconds)."""
    kind, *args = pattern
    if kind == "trickle":
        return len(completion_bytes(args[-1])) * args[0]
    if kind == "whitespace":
        return args[0] * args[1]
    return 120.0  # silence: the server waits this long for the client to go


def ended_by(deadline_s: float, elapsed_s: float, unbounded_s: float) -> bool:
    """Whether a call or trial that took `elapsed_s` was ended by its deadline (`deadline_s`) rather than by
    the endpoint's misbehaviour running its course (`unbounded_s`): it ended nearer the deadline. The
    misbehaviour lasts at least 5x the deadline, so a loaded machine's overrun (a 1.5 s slack flaked at load
    8-20) cannot make a holding deadline fail, while one that does not hold still does. The overrun itself
    is a figure, not a test: benchmarks/bench_slow_endpoint.py prints it."""
    assert unbounded_s >= 5 * deadline_s, f"{unbounded_s} s is too close to {deadline_s} s to tell them apart"
    return elapsed_s < (deadline_s + unbounded_s) / 2


def start(budget: Budget) -> float:
    """Start `budget` now, after its client was built (building one, with its TLS context, took seconds at
    load 30 and ran the budget out before the first request); the time it started."""
    budget.restart()
    return budget.started


def client_over(url: str, budget: Budget, call_timeout_s: float, max_retries: int = 3) -> openai.OpenAI:
    transport = DeadlineTransport(
        httpx2.HTTPTransport(), budget, call_timeout_s=call_timeout_s, max_retries=max_retries, backoff_s=0.01
    )
    return openai.OpenAI(
        base_url=url, api_key="k", max_retries=0, http_client=httpx2.Client(transport=transport)
    )


def ask(client: openai.OpenAI, role: str = "agent"):
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], extra_headers={"X-Ecdysis-Role": role}
    )


@pytest.fixture(scope="module", autouse=True)
def warm_clients():
    """One answered call through each client first: a budget below is spent on the endpoint, not on this
    process's first request (building the client's models took the whole 2.5 s budget at load 16-30)."""
    with SlowEndpoint() as server:
        ask(client_over(server.url, Budget(120.0), call_timeout_s=60.0))
        RoleClient("m", base_url=server.url, budget_s=120.0).complete(
            "analyst", [{"role": "user", "content": "x"}]
        )


def test_a_trickled_body_cannot_outlast_the_budget():
    """Headers at once, then one byte every 0.2 s (a 71 s body): the call ends at the budget, not after
    the body, and the budget says the agent's call was pending in its body, part of it read."""
    pattern = ("trickle", 0.2, {"content": "x" * 100})
    with SlowEndpoint(agent=pattern) as server:
        budget = Budget(5.0)
        client = client_over(server.url, budget, call_timeout_s=3.0)
        started = start(budget)
        with pytest.raises(openai.APITimeoutError) as info:
            ask(client)
        elapsed = time.monotonic() - started
    assert "time budget of 5 s ran out" in str(info.value.__cause__)
    assert ended_by(5.0, elapsed, held_s(pattern)), elapsed
    assert budget.exhausted and budget.pending["role"] == "agent" and budget.pending["phase"] == "body"
    assert 0 < budget.pending["bytes"] < len(completion_bytes(pattern[-1]))  # cut inside the body
    assert budget.attempts >= 2  # the call timeout cut attempt 1, then a retry


def test_a_call_timeout_covers_the_whole_response_and_is_retried():
    """Whitespace keep-alive longer than the call timeout: each attempt is cut at the call timeout and
    retried; with retries spent the call fails as a timeout well inside a large trial budget."""
    pattern = ("whitespace", 2000, 0.05, {"content": "late"})  # 100 s of keep-alive a call
    with SlowEndpoint(agent=pattern) as server:
        budget = Budget(60.0)
        client = client_over(server.url, budget, call_timeout_s=0.6, max_retries=2)
        started = start(budget)
        with pytest.raises(openai.APITimeoutError) as info:
            ask(client)
        elapsed = time.monotonic() - started
    assert "call timeout of 0.6 s" in str(info.value.__cause__)
    assert ended_by(3 * 0.6, elapsed, held_s(pattern)), elapsed
    assert not budget.exhausted and budget.attempts == 3 and len(server.requests) == 3


def test_a_role_call_cut_at_its_call_timeout_is_not_asked_again():
    """The roles' and editor's client (RoleClient): an answer that outlasts the call timeout is one attempt,
    not 1 + max_retries (a server that accepted it keeps computing it, and a retry queues behind it: Gemma
    3's analyst on llama-cpp-python, 1,201 s for nothing); the error says why and what to raise."""
    pattern = ("whitespace", 2000, 0.05, {"content": "late"})  # 100 s of keep-alive
    with SlowEndpoint(analyst=pattern) as server:
        client = RoleClient("m", base_url=server.url, timeout_s=0.6, max_retries=3, budget_s=60.0)
        started = start(client.budget)
        with pytest.raises(
            InfrastructureError,
            match=r"analyst call to 'm' timed out: no complete response within "
            r"the call timeout of 0\.6 s.*not asked again.*--ecdysis-limits call-timeout",
        ):
            client.complete("analyst", [{"role": "user", "content": "x"}])
        elapsed = time.monotonic() - started
    assert (
        client.budget.attempts == 1 and len(server.requests) == 1 and ended_by(0.6, elapsed, held_s(pattern))
    )


def test_whitespace_keep_alive_within_the_deadline_is_an_ordinary_reply():
    """A gateway's leading whitespace that ends before the deadline is no error: the JSON after it is read."""
    with SlowEndpoint(agent=("whitespace", 10, 0.02, {"content": "fine"})) as server:
        reply = ask(client_over(server.url, Budget(30.0), call_timeout_s=5.0))
    assert reply.choices[0].message.content == "fine"


def test_headers_then_silence_ends_at_the_budget():
    """Headers, then nothing: the call ends at the budget's end (the socket is shut by the watchdog)."""
    with SlowEndpoint(agent=("silence",)) as server:
        budget = Budget(3.0)
        client = client_over(server.url, budget, call_timeout_s=10.0)
        started = start(budget)
        with pytest.raises(openai.APITimeoutError):
            ask(client)
        elapsed = time.monotonic() - started
    assert ended_by(3.0, elapsed, held_s(("silence",))), elapsed
    assert budget.exhausted and budget.pending["phase"] == "body" and budget.pending["bytes"] == 0


def test_an_inner_timeout_at_the_budgets_end_keeps_the_attempts_phase():
    """Under load the inner transport's own read timeout can fire just before the watchdog: the budget's
    pending call names the phase the attempt was in (body, 2 bytes received), not "connect" with nothing."""

    class Trickle(httpx2.SyncByteStream):
        def __iter__(self):
            yield b'{"'
            raise httpx2.ReadTimeout("inner read timeout")

    class Spent(Budget):  # time left for the attempt, none once it failed
        calls = 0

        def remaining(self) -> float:
            self.calls += 1
            return 5.0 if self.calls == 1 else 0.0

    budget = Spent(5.0)
    transport = DeadlineTransport(
        httpx2.MockTransport(lambda request: httpx2.Response(200, stream=Trickle())),
        budget,
        call_timeout_s=5.0,
        max_retries=2,
        sleep=lambda s: None,
    )
    with pytest.raises(httpx2.ReadTimeout):
        transport.handle_request(httpx2.Request("POST", "http://model/v1/chat/completions"))
    assert budget.exhausted and budget.pending["phase"] == "body" and budget.pending["bytes"] == 2, (
        budget.pending
    )


def test_role_calls_have_a_stage_budget_that_holds_against_a_trickle():
    """A diagnosis role's call against a trickling endpoint ends as an InfrastructureError naming the
    diagnosis budget, within it."""
    pattern = ("trickle", 0.2, {"content": "{}"})  # a 51 s body
    with SlowEndpoint(analyst=pattern) as server:
        client = RoleClient(
            "slow-model",
            base_url=server.url,
            budget_s=2.0,
            stage="diagnosis",
            transport=httpx2.HTTPTransport(),
        )
        started = start(client.budget)
        with pytest.raises(InfrastructureError, match="diagnosis time budget of 2 s ran out"):
            client.complete("analyst", [{"role": "user", "content": "x"}])
        elapsed = time.monotonic() - started
    assert ended_by(2.0, elapsed, held_s(pattern)) and client.budget.exhausted
    with pytest.raises(InfrastructureError, match="diagnosis time budget"):  # spent: no further call is made
        client.complete("moderator", [{"role": "user", "content": "x"}])


# -- whole trials through the suite's runner ----------------------------------------------------------


@pytest.fixture(scope="module")
def warm_tau2():
    """A trial's budget in these tests is spent on the endpoint, not on this process's first imports."""
    pytest.importorskip("tau2")
    from suite_scripted import warm_up

    warm_up()


def run_trial_over(server: SlowEndpoint, budget_s: float, call_timeout_s: float, max_retries: int = 3):
    """Task 3 of airline with the example harness, agent and user both served by `server`."""
    pytest.importorskip("tau2")
    from suite_scripted import EXAMPLE_HARNESS

    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    settings = EndpointSettings(
        call_timeout_s=call_timeout_s, max_retries=max_retries, trial_budget_s=budget_s, backoff_s=0.01
    )
    spec = TrialSpec(
        domain="airline",
        task_id="3",
        trial=0,
        run_id="test-run",
        model="slow",
        user_model="slow",
        harness_dir=EXAMPLE_HARNESS,
        harness_id=harness_id(EXAMPLE_HARNESS),
        base_url=server.url,
    )
    result = run_trial(spec, settings)
    # the budget bounds the conversation; measured from the first model request the endpoint received
    assert server.requests, (
        f"no model request within the {budget_s:g} s budget (the set-up took it): {result.error}"
    )
    return result, time.monotonic() - server.requests[0][1]


@pytest.mark.parametrize(
    "pattern",
    [
        ("trickle", 0.2, {"content": "I can help."}),
        ("whitespace", 3000, 0.05, {"content": "I can help."}),
        ("silence",),
    ],
    ids=["trickled-body", "whitespace-keep-alive", "headers-then-silence"],
)
def test_a_slow_agent_endpoint_ends_the_trial_within_its_budget(pattern, warm_tau2):
    """The agent's endpoint misbehaves in time: the trial ends as time_budget_exceeded (an infrastructure
    error: no reward, no failure record) at its budget, with the pending call; without the budget, its 10
    retries (each cut at the call timeout) would have held it 209 s."""
    from pytest_ecdysis.evidence.failures import triage

    call_timeout_s, retries = BUDGET_S - 1.0, 10
    with SlowEndpoint(agent=pattern, user=("ok", HELLO)) as server:
        result, conversation_s = run_trial_over(
            server, budget_s=BUDGET_S, call_timeout_s=call_timeout_s, max_retries=retries
        )
    assert (
        result.termination_reason == "time_budget_exceeded"
        and result.reward is None
        and result.is_infra_error
    )
    unbounded_s = (1 + retries) * min(call_timeout_s, held_s(pattern))
    assert ended_by(BUDGET_S, conversation_s, unbounded_s), conversation_s
    assert result.pending_call["role"] == "agent" and f"time budget of {BUDGET_S:g} s ran out" in result.error
    tri = triage([result], 1.0)
    assert tri.records == [] and tri.infra_errors == [result]


def test_a_slow_user_model_ends_the_trial_within_its_budget(warm_tau2):
    """The user simulator's endpoint trickles: the same budget holds, and the record names the user call."""
    pattern = ("trickle", 0.2, HELLO)  # a 58 s body: 4 attempts cut at 30 s without the budget (120 s)
    with SlowEndpoint(user=pattern) as server:
        result, conversation_s = run_trial_over(server, budget_s=BUDGET_S, call_timeout_s=30.0)
    assert result.termination_reason == "time_budget_exceeded" and result.reward is None
    assert ended_by(BUDGET_S, conversation_s, 4 * min(30.0, held_s(pattern))), conversation_s
    assert result.pending_call["role"] == "user" and result.pending_call["phase"] == "body"


def test_the_limits_are_options_that_reach_the_trial_and_the_summary(pytester: pytest.Pytester, monkeypatch):
    """`--ecdysis-limits call-timeout`, `--ecdysis-limits max-retries` and the ini key `ecdysis_trial_budget` reach the
    trial through pytest (a silent agent endpoint ends the case as time_budget_exceeded within the
    budget), and the run's summary prints them."""
    pytest.importorskip("tau2")
    # a cold pytest process's first trial: its set-up alone took 8 s at load 30, so the budget is larger
    pytester.makeini("[pytest]\necdysis_trial_budget = 30\n")
    monkeypatch.setenv("XDG_CACHE_HOME", CACHE_HOME)  # pytester moves HOME: keep τ²'s suspect-task cache
    with SlowEndpoint(agent=("silence",), user=("ok", HELLO)) as server:
        result = pytester.runpytest_subprocess(
            "--pyargs",
            "pytest_ecdysis_tau2.test_airline",
            "-p",
            "no:cacheprovider",
            "--ecdysis-model",
            "slow",
            "--ecdysis-base-url",
            server.url,
            "--ecdysis-preflight",
            "off",  # the agent's silence is the trial's to meet, not the pre-flight's
            "--ecdysis-tasks",
            "3",
            "--ecdysis-limits",
            "call-timeout=60",
            "--ecdysis-limits",
            "max-retries=0",
            "--ecdysis-run-dir",
            str(pytester.path / "runs"),
            timeout=300,
        )
    result.stdout.fnmatch_lines(
        [
            "*time_budget_exceeded: the trial time budget of 30 s ran out*",
            "limits: call 60 s, retries 0, trial 30 s, diagnosis 1800 s, editor 900 s",
        ]
    )
    (run_dir,) = (pytester.path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["limits"]["trial_budget_s"] == 30.0 and summary["n_infra_errors"] == 1
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
        client = RoleClient(
            "m", base_url=server.url, budget_s=30.0, stage=stage, transport=httpx2.HTTPTransport()
        )
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


@pytest.mark.parametrize(
    ("role", "body"), [("agent", "html"), ("agent", "truncated"), ("agent", "no-message"), ("user", "html")]
)
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
