"""The suite's openai clients: headers, bounded retries, the trial time budget, key handling (no tau2)."""

from __future__ import annotations

import httpx2
import openai
import pytest

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis_tau2.trial.endpoint import (
    BudgetTransport,
    EndpointSettings,
    TrialBudget,
    endpoint_for,
    make_client,
)

OK = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
}


def client_for(handler, budget=None, settings=None, sleeps=None):
    settings = settings or EndpointSettings(call_timeout_s=5, max_retries=3, trial_budget_s=60, backoff_s=0.5)
    budget = budget or TrialBudget(settings.trial_budget_s)
    transport = BudgetTransport(
        httpx2.MockTransport(handler),
        budget,
        settings,
        sleep=(sleeps.append if sleeps is not None else lambda s: None),
    )
    return openai.OpenAI(
        api_key="k",
        base_url="http://endpoint.invalid/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=transport),
    ), budget


def ask(client):
    return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


def test_retries_back_off_exponentially_and_honour_retry_after_with_a_cap():
    """429/5xx are retried with backoff 0.5 s x 2^n, a Retry-After header wins but is capped at 8 s."""
    answers = iter(
        [
            httpx2.Response(503),
            httpx2.Response(429, headers={"retry-after": "30"}),
            httpx2.Response(500),
            httpx2.Response(200, json=OK),
        ]
    )
    sleeps = []
    client, budget = client_for(lambda request: next(answers), sleeps=sleeps)
    assert ask(client).choices[0].message.content == "hi"
    assert sleeps == [0.5, 8.0, 2.0] and budget.retries == 3 and budget.attempts == 4


def test_retries_stop_after_max_retries_with_the_endpoint_status():
    """After max_retries the last error answer reaches the caller (openai raises its status error)."""
    calls = []
    client, _ = client_for(lambda request: calls.append(1) or httpx2.Response(500))
    with pytest.raises(openai.InternalServerError):
        ask(client)
    assert len(calls) == 4


def test_a_spent_budget_stops_all_further_requests_and_is_flagged():
    """Once the trial budget is spent no request is sent; the budget says it was exhausted."""
    calls = []
    client, budget = client_for(
        lambda request: calls.append(1) or httpx2.Response(200, json=OK), budget=TrialBudget(0.0)
    )
    with pytest.raises(openai.APITimeoutError):
        ask(client)
    assert calls == [] and budget.exhausted


def test_each_attempt_timeout_is_capped_by_the_remaining_budget():
    """The per-attempt timeout is min(call timeout, budget left)."""
    seen = []

    def handler(request):
        seen.append(request.extensions["timeout"]["read"])
        return httpx2.Response(200, json=OK)

    client, _ = client_for(handler, budget=TrialBudget(2.0))
    ask(client)
    assert 0 < seen[0] <= 2.0


def test_clients_carry_trial_and_role_headers_and_sim_models_use_the_sim_server():
    """The suite's clients send X-Ecdysis-Trial / X-Ecdysis-Role; sim models go to $ECDYSIS_SIM_URL/v1."""
    seen = []

    def handler(request):
        seen.append(request)
        return httpx2.Response(200, json=OK)

    settings = EndpointSettings()
    client = make_client(
        model="sim/strong",
        role="user",
        trial="r/tau2-airline/3/1",
        base_url=None,
        sim_url="http://127.0.0.1:9/",
        budget=TrialBudget(10),
        settings=settings,
        transport=httpx2.MockTransport(handler),
    )
    ask(client)
    assert (
        seen[0].headers["x-ecdysis-trial"] == "r/tau2-airline/3/1"
        and seen[0].headers["x-ecdysis-role"] == "user"
    )
    assert str(seen[0].url) == "http://127.0.0.1:9/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sim"


def test_real_models_read_the_key_from_the_environment_and_sim_needs_a_server(monkeypatch):
    """A real model uses OPENAI_API_KEY (or a placeholder for keyless local servers); a sim model without a
    simulated server is a usage error."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    assert endpoint_for("gpt-x", "http://h/v1", None) == ("http://h/v1", "sk-secret")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert endpoint_for("gpt-x", "http://h/v1", None) == ("http://h/v1", "EMPTY")
    with pytest.raises(UsageError, match="ECDYSIS_SIM_URL"):
        endpoint_for("sim", None, None)
