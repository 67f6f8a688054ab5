"""OpenAI clients for a trial: per-trial headers, per-call deadline, bounded retries, total time budget.

The suite builds the clients and hands them to the harness (docs/internals.md, "Trial flow"), so a harness needs no code for
headers, retries or budgets. Deadlines and retries live in `pytest_ecdysis.endpoint.deadline.DeadlineTransport`
(the openai client gets `max_retries=0`), shared with the diagnosis roles and the editor:

- each attempt has a total deadline of `min(call_timeout_s, seconds left in the trial budget)` that covers
  the whole response, body included (a server trickling bytes cannot hold a worker past it);
- HTTP 429 and 5xx and transport errors are retried at most `max_retries` times with exponential backoff
  (0.5 s x 2^n, a `Retry-After` wins, at most 8 s, never past the budget); a 5xx that says the server
  could not parse the model's output is not retried;
- once the trial budget is spent no further attempt is made: `TrialBudget.exhausted` is set, `pending`
  says which call was in flight, and the request fails with a timeout, which the runner reports as
  `time_budget_exceeded`.

The agent's and the user simulator's clients share one budget, so one trial costs at most its budget. The
limits come from `--ecdysis-limits call-timeout`, `--ecdysis-limits max-retries`, `--ecdysis-limits trial-budget` (ini
mirrors; env `ECDYSIS_CALL_TIMEOUT_S`, `ECDYSIS_MAX_RETRIES`, `ECDYSIS_TRIAL_BUDGET_S` as fallbacks). The
API key comes from `OPENAI_API_KEY` and is never printed or written. This module does not import tau2.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai

from pytest_ecdysis.core.config import is_sim_model
from pytest_ecdysis.core.config_values import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TRIAL_BUDGET_S,
    endpoint_limits_from_env,
)
from pytest_ecdysis.core.errors import EndpointFormatError, UsageError
from pytest_ecdysis.endpoint.deadline import (
    RETRY_STATUS,
    Budget,
    DeadlineTransport,
    is_parse_failure,
    network_transport,
)
from pytest_ecdysis.endpoint.replies import find_text_tool_calls, strip_reasoning
from pytest_ecdysis.endpoint.response_cache import wrap_transport

from ..tasks.tool_calls import fix_calls, offered_tools

__all__ = [
    "RETRY_STATUS",
    "BudgetTransport",
    "EndpointLog",
    "EndpointSettings",
    "ModelViewTransport",
    "ReplyShapeTransport",
    "TrialBudget",
    "endpoint_for",
    "make_client",
    "trial_header",
]

#: The trial's budget: a `pytest_ecdysis.endpoint.deadline.Budget` labelled "trial" (name kept for callers).
TrialBudget = Budget


@dataclass(frozen=True)
class EndpointSettings:
    """Timeouts and retries of one trial. Units: seconds.

    Defaults: 60 s per model call (whole response), 3 retries, 900 s per trial (a τ² trial makes ~10-60
    model calls). The session's values come from `from_config` (options, ini, env fallbacks).
    """

    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    trial_budget_s: float = DEFAULT_TRIAL_BUDGET_S
    connect_timeout_s: float = 10.0
    backoff_s: float = 0.5
    text_tool_calls: str = "reject"  # ini `ecdysis_text_tool_calls`: reject or parse

    @classmethod
    def from_config(cls, cfg: Any) -> EndpointSettings:
        """The limits of an `EcdysisConfig` (`call_timeout_s`, `max_retries`, `trial_budget_s`,
        `text_tool_calls`)."""
        return cls(
            call_timeout_s=cfg.call_timeout_s,
            max_retries=cfg.max_retries,
            trial_budget_s=cfg.trial_budget_s,
            text_tool_calls=getattr(cfg, "text_tool_calls", "reject"),
        )

    @classmethod
    def from_env(cls) -> EndpointSettings:
        """The limits from env `ECDYSIS_CALL_TIMEOUT_S`, `ECDYSIS_MAX_RETRIES`, `ECDYSIS_TRIAL_BUDGET_S`.

        Raises:
            UsageError: a value that is not a number, or out of range.
        """
        limits = endpoint_limits_from_env()
        return cls(**limits)


class BudgetTransport(DeadlineTransport):
    """`DeadlineTransport` configured from `EndpointSettings` (the trial's transport)."""

    def __init__(
        self, inner: httpx2.BaseTransport, budget: Budget, settings: EndpointSettings, sleep=time.sleep
    ) -> None:
        super().__init__(
            inner,
            budget,
            call_timeout_s=settings.call_timeout_s,
            max_retries=settings.max_retries,
            connect_timeout_s=settings.connect_timeout_s,
            backoff_s=settings.backoff_s,
            sleep=sleep,
        )
        self.settings = settings


#: endpoint note kinds that make a trial's record `endpoint_problem` (not the agent's behaviour);
#: `tool_name_repaired`, `arguments_coerced` and `reasoning_stripped` are repairs that leave it evidence.
PROBLEM_NOTES = ("text_tool_calls", "server_parse_error", "tool_name_markup")

#: ini `ecdysis_text_tool_calls`: what the agent's client does with tool calls written as text.
TEXT_TOOL_CALLS = ("reject", "parse")


@dataclass
class EndpointLog:
    """What the trial's client layer saw of the agent's endpoint (kept in `TrialResult.endpoint_notes`).

    `format_error` is set when the endpoint's reply cannot be used (the trial then ends as
    `endpoint_format_error` whatever the harness did with the failed call, and no further agent call is
    sent); `notes` are `{"kind", "detail", "step"}` with `step` the 1-based agent call.
    """

    text_tool_calls: str = "reject"
    notes: list[dict[str, Any]] = field(default_factory=list)
    format_error: str | None = None
    calls: int = 0
    reasoning_replies: int = 0
    #: τ²'s assistant tools of the trial, name -> parameters model (`tool_calls.tool_params`): tool names
    #: are repaired and arguments coerced against them; empty: neither is done.
    tools: dict[str, Any] = field(default_factory=dict)
    #: tool-call ids the endpoint generated in its replies: a refusal of exactly these ids is the server's.
    server_ids: set[str] = field(default_factory=set)

    def note(self, kind: str, detail: str) -> None:
        self.notes.append({"kind": kind, "detail": detail, "step": self.calls})

    @property
    def problem(self) -> bool:
        """The endpoint wrote tool calls as text or failed to parse the model's output."""
        return self.format_error is not None or any(n["kind"] in PROBLEM_NOTES for n in self.notes)

    def all_notes(self) -> list[dict[str, Any]]:
        extra = []
        if self.reasoning_replies:
            extra.append(
                {
                    "kind": "reasoning_stripped",
                    "step": None,
                    "detail": f"reasoning (<think> blocks, "
                    f"reasoning_content) removed from {self.reasoning_replies} agent repl(ies); never "
                    "sent on as the agent's words",
                }
            )
        return self.notes + extra


class ReplyShapeTransport(httpx2.BaseTransport):
    """The agent's replies as the protocol promises them, or a recorded endpoint defect.

    On every agent reply (`pytest_ecdysis.endpoint.replies`): reasoning is removed from `content` and
    `reasoning_content` dropped; a tool call written as text with `tool_calls` empty is, with
    `text_tool_calls="parse"`, turned into a real tool call (note `text_tool_calls`), else the reply is
    refused: `EndpointLog.format_error` is set and the call fails. A 5xx saying the server could not
    parse the model's output (never retried) sets `format_error` too (note `server_parse_error`). Every
    tool call's name is repaired when it is a known tool plus chat-template markup (note
    `tool_name_repaired`; markup that names no single known tool: note `tool_name_markup`, an endpoint
    problem), and its arguments coerced to τ²'s tool schema where unambiguous (note `arguments_coerced`,
    `tool_calls.py`).
    """

    def __init__(self, inner: httpx2.BaseTransport, log: EndpointLog) -> None:
        self.inner, self.log = inner, log

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.log.format_error:
            raise EndpointFormatError(f"agent call not sent: {self.log.format_error}")
        self.log.calls += 1
        self.offered = offered_tools(request)
        response = self.inner.handle_request(request)
        body = response.read()
        if is_parse_failure(response.status_code, body):
            said = body[:300].decode("utf-8", "replace")
            self.log.format_error = (
                f"the server could not parse the model's output (HTTP {response.status_code}: "
                f"{said}); its tool parser or chat template does not fit the model"
            )
            self.log.note("server_parse_error", self.log.format_error)
            return response
        try:
            doc = json.loads(body) if response.status_code == 200 else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("choices"), list):
            return response
        if not any([self._reshape(c) for c in doc["choices"] if isinstance(c, dict)]):
            return response
        headers = [
            (k, v)
            for k, v in response.headers.items()
            if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")
        ]
        return httpx2.Response(
            response.status_code,
            headers=headers,
            content=json.dumps(doc).encode(),
            extensions=response.extensions,
        )

    def _reshape(self, choice: dict[str, Any]) -> bool:
        """Rewrite one choice in place; True when it changed. Raises EndpointFormatError (reject mode)."""
        message = choice.get("message")
        if not isinstance(message, dict):
            return False
        changed = False
        for key in ("reasoning_content", "reasoning"):
            if message.get(key):
                message[key], changed = None, True
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        spoken, reasoning = strip_reasoning(content if isinstance(content, str) else "")
        if reasoning:
            message["content"], changed = spoken, True
        if changed:
            self.log.reasoning_replies += 1
        if message.get("tool_calls"):
            self.log.server_ids.update(
                str(c["id"]) for c in message["tool_calls"] if isinstance(c, dict) and c.get("id")
            )
            return self._fix_calls(message) or changed
        found = find_text_tool_calls(spoken)
        if not found:
            return changed
        names = ", ".join(c.name or "?" for c in found.calls)
        if self.log.text_tool_calls != "parse":
            self.log.format_error = (
                f"the endpoint wrote {len(found.calls)} tool call(s) as text ({found.style} markup: {names}) with "
                "tool_calls empty: the server has no tool parser for this model (vLLM: --enable-auto-tool-choice "
                "--tool-call-parser; llama.cpp: --jinja); fix the server, or set the ini key "
                "ecdysis_text_tool_calls = parse"
            )
            self.log.note("text_tool_calls", self.log.format_error)
            raise EndpointFormatError(self.log.format_error)
        message["tool_calls"] = [
            {
                "id": f"text_call_{self.log.calls}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for i, c in enumerate(found.calls, start=1)
        ]
        message["content"] = found.rest or None
        choice["finish_reason"] = "tool_calls"
        self.log.note(
            "text_tool_calls",
            f"{len(found.calls)} tool call(s) written as text ({found.style} markup: "
            f"{names}) parsed into tool calls (ecdysis_text_tool_calls = parse)",
        )
        self._fix_calls(message)
        return True

    def _fix_calls(self, message: dict[str, Any]) -> bool:
        """Tool names and arguments against τ²'s tools (`tool_calls.fix_calls`); True when anything changed."""
        changed, notes = fix_calls(message, self.log.tools, getattr(self, "offered", set()))
        for kind, detail in notes:
            self.log.note(kind, detail)
        return changed

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
            raise UsageError(
                f"model {model!r} is simulated but no simulated server is running "
                "(ECDYSIS_SIM_URL is unset); run through pytest with the ecdysis plugin"
            )
        return sim_url.rstrip("/") + "/v1", "sim"
    return base_url, os.environ.get(
        "OPENAI_API_KEY"
    ) or "EMPTY"  # local servers (vLLM, Ollama) accept any key


def make_client(
    *,
    model: str,
    role: str,
    trial: str,
    base_url: str | None,
    sim_url: str | None,
    budget: TrialBudget,
    settings: EndpointSettings,
    transport: httpx2.BaseTransport | None = None,
    model_view: ModelViewTransport | None = None,
    reply_log: EndpointLog | None = None,
) -> openai.OpenAI:
    """The openai client of one role ('agent' or 'user') of one trial.

    `transport` replaces the network transport (tests use `httpx2.MockTransport`); the budget and
    retries wrap it either way. `reply_log`, when given (the agent's client), checks every reply's shape
    (`ReplyShapeTransport`). `model_view`, when given, wraps the whole and records what the model was
    sent (see `ModelViewTransport`); its `inner` is set here.
    """
    url, key = endpoint_for(model, base_url, sim_url)
    inner = wrap_transport(transport or network_transport(), model=model, base_url=url)  # response_cache.py
    outer: httpx2.BaseTransport = BudgetTransport(inner, budget, settings)
    if reply_log is not None:
        outer = ReplyShapeTransport(outer, reply_log)
    if model_view is not None:
        model_view.inner = outer
        outer = model_view
    # outermost: the model, role, trial and key of every request are the trial side's (request_guard.py)
    from ..harness_process.request_guard import TrustedRequestTransport

    outer = TrustedRequestTransport(
        outer,
        model=model,
        note=reply_log.note if reply_log is not None else None,
        forced={"X-Ecdysis-Trial": trial, "X-Ecdysis-Role": role, "Authorization": f"Bearer {key}"},
    )
    http_client = httpx2.Client(transport=outer, timeout=settings.call_timeout_s)
    return openai.OpenAI(
        base_url=url,
        api_key=key,
        timeout=settings.call_timeout_s,
        max_retries=0,
        default_headers={"X-Ecdysis-Trial": trial, "X-Ecdysis-Role": role},
        http_client=http_client,
    )
