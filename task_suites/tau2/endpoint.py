"""OpenAI clients for a trial: per-trial headers, per-call timeout, bounded retries, total time budget.

The suite builds the clients and hands them to the harness (docs/internals.md, "Trial flow"), so a harness needs no code for
headers, retries or budgets. Retries live in `BudgetTransport` (the openai client gets `max_retries=0`):

- each attempt's timeout is `min(call_timeout_s, seconds left in the trial budget)`;
- HTTP 429 and 5xx and transport errors (refused, reset, timed out) are retried at most `max_retries`
  times, with exponential backoff `backoff_s * 2**n` s (0.5 s by default) (capped by `Retry-After`, at most 8 s, and the budget);
- once the trial budget is spent, no further attempt is made: `TrialBudget.exhausted` is set and the
  request fails with a timeout, which the runner reports as `time_budget_exceeded`.

So one trial costs at most its budget, however many calls and retries it makes. The API key comes from
`OPENAI_API_KEY` and is never printed or written. This module does not import tau2.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai

from pytest_ecdysis.config import is_sim_model
from pytest_ecdysis.errors import UsageError

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class EndpointSettings:
    """Timeouts and retries of one trial. Units: seconds.

    Defaults (overridable by env `ECDYSIS_CALL_TIMEOUT_S`, `ECDYSIS_MAX_RETRIES`, `ECDYSIS_TRIAL_BUDGET_S`):
    60 s per model call, 3 retries, 900 s per trial (a τ² trial makes ~10-60 model calls).
    """

    call_timeout_s: float = 60.0
    max_retries: int = 3
    trial_budget_s: float = 900.0
    connect_timeout_s: float = 10.0
    backoff_s: float = 0.5

    @classmethod
    def from_env(cls) -> EndpointSettings:
        env = os.environ
        try:
            return cls(
                call_timeout_s=float(env.get("ECDYSIS_CALL_TIMEOUT_S", cls.call_timeout_s)),
                max_retries=int(env.get("ECDYSIS_MAX_RETRIES", cls.max_retries)),
                trial_budget_s=float(env.get("ECDYSIS_TRIAL_BUDGET_S", cls.trial_budget_s)),
            )
        except ValueError as exc:
            raise UsageError(f"ECDYSIS_CALL_TIMEOUT_S / ECDYSIS_MAX_RETRIES / ECDYSIS_TRIAL_BUDGET_S: {exc}") from None


@dataclass
class TrialBudget:
    """Total wall-clock budget of one trial, shared by the agent's and the user's client."""

    seconds: float
    started: float = field(default_factory=time.monotonic)
    exhausted: bool = False
    attempts: int = 0
    retries: int = 0

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)


class BudgetTransport(httpx2.BaseTransport):
    """An httpx2 transport that enforces the trial budget and does the bounded retries."""

    def __init__(self, inner: httpx2.BaseTransport, budget: TrialBudget, settings: EndpointSettings,
                 sleep=time.sleep) -> None:
        self.inner = inner
        self.budget = budget
        self.settings = settings
        self.sleep = sleep

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        attempt = 0
        while True:
            left = self.budget.remaining()
            if left <= 0:
                self.budget.exhausted = True
                raise httpx2.ReadTimeout(f"trial time budget of {self.budget.seconds:g} s used up", request=request)
            per_call = min(self.settings.call_timeout_s, left)
            request.extensions["timeout"] = {
                "connect": min(self.settings.connect_timeout_s, per_call),
                "read": per_call, "write": per_call, "pool": per_call,
            }
            self.budget.attempts += 1
            try:
                response = self.inner.handle_request(request)
            except httpx2.TransportError:
                if attempt >= self.settings.max_retries or self.budget.remaining() <= 0:
                    if self.budget.remaining() <= 0:
                        self.budget.exhausted = True
                    raise
                wait = None
            else:
                if response.status_code not in RETRY_STATUS or attempt >= self.settings.max_retries:
                    return response
                wait = _retry_after(response)
                response.read()
                response.close()
            attempt += 1
            self.budget.retries += 1
            delay = min(wait if wait is not None else self.settings.backoff_s * 2 ** (attempt - 1), 8.0, max(self.budget.remaining(), 0))
            self.sleep(delay)

    def close(self) -> None:
        self.inner.close()


class ModelViewTransport(httpx2.BaseTransport):
    """Records, from the agent's requests on the wire, the tool message content the model was sent.

    Diagnosis must see what the model saw (a harness may cut, reword or drop a tool result), not only
    τ²'s raw tool output. Maps each `tool_call_id` to the content of its tool message in the first request
    that carried it. Works for any harness: it reads the chat-completions request body, nothing else.
    """

    def __init__(self, inner: httpx2.BaseTransport | None = None) -> None:
        self.inner = inner
        self.seen: dict[str, str] = {}

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            body = json.loads(request.read() or b"{}")
        except ValueError:
            body = {}
        for message in body.get("messages", []) if isinstance(body, dict) else []:
            if isinstance(message, dict) and message.get("role") == "tool":
                call_id = str(message.get("tool_call_id") or "")
                if call_id and call_id not in self.seen:
                    self.seen[call_id] = _content_text(message.get("content"))
        assert self.inner is not None, "make_client(model_view=...) sets the inner transport"
        return self.inner.handle_request(request)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _retry_after(response: httpx2.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def trial_header(run_id: str, suite: str, task_id: str, trial: int) -> str:
    """`<run-id>/<suite>/<task-id>/<trial>`, the `X-Ecdysis-Trial` value (docs/internals.md)."""
    return f"{run_id}/{suite}/{task_id}/{trial}"


def endpoint_for(model: str, base_url: str | None, sim_url: str | None) -> tuple[str | None, str]:
    """(base_url, api_key) for a model: sim models use `$ECDYSIS_SIM_URL/v1` and key 'sim'.

    Raises:
        UsageError: a sim model without a simulated server URL.
    """
    if is_sim_model(model):
        if not sim_url:
            raise UsageError(f"model {model!r} is simulated but no simulated server is running "
                             "(ECDYSIS_SIM_URL is unset); run through pytest with the ecdysis plugin")
        return sim_url.rstrip("/") + "/v1", "sim"
    return base_url, os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers (vLLM, Ollama) accept any key


def make_client(*, model: str, role: str, trial: str, base_url: str | None, sim_url: str | None,
                budget: TrialBudget, settings: EndpointSettings,
                transport: httpx2.BaseTransport | None = None,
                model_view: ModelViewTransport | None = None) -> openai.OpenAI:
    """The openai client of one role ('agent' or 'user') of one trial.

    `transport` replaces the network transport (tests use `httpx2.MockTransport`); the budget and
    retries wrap it either way. `model_view`, when given, wraps the whole and records what the model
    was sent (see `ModelViewTransport`); its `inner` is set here.
    """
    url, key = endpoint_for(model, base_url, sim_url)
    inner = transport or httpx2.HTTPTransport()
    outer: httpx2.BaseTransport = BudgetTransport(inner, budget, settings)
    if model_view is not None:
        model_view.inner = outer
        outer = model_view
    http_client = httpx2.Client(transport=outer, timeout=settings.call_timeout_s)
    return openai.OpenAI(
        base_url=url,
        api_key=key,
        timeout=settings.call_timeout_s,
        max_retries=0,
        default_headers={"X-Ecdysis-Trial": trial, "X-Ecdysis-Role": role},
        http_client=http_client,
    )
