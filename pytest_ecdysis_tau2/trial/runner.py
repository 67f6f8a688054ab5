"""One τ² trial, start to end: environment, harness agent, user simulator, orchestrator, reward.

`run_trial(spec)` is the suite's code path with no pytest in it (the pytest layer in `cases.py` only
parametrises, calls this, and records the result). It never raises for a trial outcome: every ending is a
`TrialResult` with a termination reason (`pytest_ecdysis.core.records.TerminationReason`):

- τ²'s own (`user_stop`, `agent_stop`, `max_steps`, `too_many_errors`, ...) when the orchestrator ends;
- `infrastructure_error`: the endpoint refused, timed out, or kept answering 429/5xx after the bounded
  retries; also a scorer process that fails (never the agent's fault);
- `time_budget_exceeded`: the trial's total budget (`EndpointSettings.trial_budget_s`) ran out, body reads
  included (`pytest_ecdysis.endpoint.deadline`); `TrialResult.pending_call` says which model call was in flight;
- `endpoint_format_error`: the harness found the endpoint's reply unusable (`EndpointFormatError`), or the
  agent's client layer did (`endpoint.EndpointLog.format_error`: tool calls written as text without
  ini `ecdysis_text_tool_calls = parse`, a server that could not parse the model's output); such a trial
  counts as a failure (reward 0) and its record says `endpoint_problem`;
- `context_overflow`: the endpoint refused a request that does not fit the model's context window (the
  harness's context management, or a server started with too small a context: the error says which);
- `user_error`: the user simulator called a user tool the task's user does not have, or sent arguments
  that are not a JSON object (`user.UserToolCallError`, τ² telecom): the user model's fault, kept out of
  the evidence (`user_abort`);
- `agent_error`: the harness raised anything else (a broken harness is evidence, not infrastructure),
  including an HTTP 4xx the agent's request caused (400, 413, 422: malformed, too large; not auth, not
  found, timeout or rate limit, `harness_caused`) and a request the server could not parse (llama.cpp's
  "Failed to parse tools: ..."): the record quotes the server's message and the request's size.

Blame is read from the server's words, not its status code (`_refused`, `endpoint.refusals`): a refusal
naming a server setting (tools or tool choice not enabled), a provider policy (a content filter) or the
tool-call ids the server generated itself would repeat for any harness, so it is `infrastructure_error`
naming what to change, never evidence. A refusal blamed on the harness is noted (`refusal_note`:
endpoint note `request_refused`) so that the session can read it across trials: the same refusal of every
trial's first request is the endpoint's (`pytest_ecdysis.evidence.first_refusal`). Every message says whose call it was (the agent's or the user
simulator's).

The reward comes from the scorer subprocess (`scorer.py`), which never imports harness code. τ² scores 0
unless a trial ended by user or agent stop, so other endings are not sent to the scorer.
"""

from __future__ import annotations

import functools
import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import openai

from pytest_ecdysis.core.errors import EndpointFormatError, InfrastructureError, TimeBudgetExceeded
from pytest_ecdysis.core.records import TerminationReason, ToolCallRecord, TrialResult
from pytest_ecdysis.endpoint.overflow import context_overflow
from pytest_ecdysis.endpoint.refusals import (
    REQUEST_UNPARSED,
    TOOL_CALL_ID,
    error_message,
    request_ids,
    setting_refusal,
    size_of,
)

from ..harness_process.agent_process import build_agent
from ..harness_process.agent_process import prepare as prepare_agent
from ..scoring.scorer_client import ScorerClient, ScorerError, scorer_client
from ..tasks import suite
from ..tasks.tau2lib import load_tau2
from ..tasks.tool_calls import tool_params
from .dual_control import guard_sync, user_tool_call_records, user_tools
from .endpoint import (
    EndpointLog,
    EndpointSettings,
    ModelViewTransport,
    TrialBudget,
    make_client,
    trial_header,
)

STOP_ENDINGS = ("user_stop", "agent_stop")
#: τ² endings the user simulator decides (its stop, transfer and out-of-scope tokens end as `user_stop`).
USER_ENDINGS = ("user_stop",)


@dataclass(frozen=True)
class TrialSpec:
    """Everything a trial needs; built from the session's options by `cases.py`."""

    domain: str
    task_id: str
    trial: int
    run_id: str
    model: str
    user_model: str
    harness_dir: Path
    harness_id: str
    base_url: str | None = None
    sim_url: str | None = None
    max_steps: int | None = None  # None: τ²'s default (200)
    max_errors: int | None = None  # None: τ²'s default (10)

    @property
    def suite(self) -> str:
        return suite.suite_name(self.domain)

    @property
    def header(self) -> str:
        return trial_header(self.run_id, self.suite, self.task_id, self.trial)


def run_trial(
    spec: TrialSpec,
    settings: EndpointSettings | None = None,
    *,
    agent_transport: httpx2.BaseTransport | None = None,
    user_transport: httpx2.BaseTransport | None = None,
    scorer: ScorerClient | None = None,
) -> TrialResult:
    """Run one trial and score it. Transports replace the network in tests (`httpx2.MockTransport`)."""
    t = load_tau2()
    settings = settings or EndpointSettings.from_env()
    scorer = scorer or scorer_client()
    scorer.start(spec.domain)  # imports tau2 in its own process while this trial runs
    prepare_agent(spec.harness_dir)  # the harness's process (once per worker), outside the trial's budget
    started = time.monotonic()
    task = suite.get_task(spec.domain, spec.task_id)
    environment = suite.get_environment(spec.domain)
    # the budget covers the conversation (harness build, every model call and retry, tool calls), not the
    # loading of τ²'s data, which a worker's first trial pays once (seconds on a loaded machine)
    tools = tool_params(environment)  # τ²'s tool schema: names repaired, arguments coerced against it
    budget = TrialBudget(settings.trial_budget_s)
    client = functools.partial(  # what both roles' clients share
        make_client,
        trial=spec.header,
        base_url=spec.base_url,
        sim_url=spec.sim_url,
        budget=budget,
        settings=settings,
    )
    model_view = ModelViewTransport()
    endpoint_log = EndpointLog(text_tool_calls=settings.text_tool_calls, tools=tools)
    agent_client = client(
        model=spec.model,
        role="agent",
        transport=agent_transport,
        model_view=model_view,
        reply_log=endpoint_log,
    )
    user_client = client(model=spec.user_model, role="user", transport=user_transport)
    max_steps = spec.max_steps or t.DEFAULT_MAX_STEPS

    agent = None
    user = None
    orchestrator = None
    reason: TerminationReason = "agent_error"
    error, reward, components, checks = None, None, {}, None
    try:
        # the harness runs in a child process; its model calls come back through agent_client
        agent = build_agent(
            harness_dir=spec.harness_dir,
            domain=spec.domain,
            model=spec.model,
            client=agent_client,
            max_steps_hint=max_steps,
            trial=spec.header,
            budget=budget,
            environment=environment,
        )
        from .user import Tau2User

        user = Tau2User(
            scenario=task.user_scenario,
            client=user_client,
            model=spec.user_model,
            tools=user_tools(environment),
        )
        guard_sync(environment, spec)
        orchestrator = t.Orchestrator(
            domain=spec.domain,
            agent=agent,
            user=user,
            environment=environment,
            task=task,
            max_steps=max_steps,
            max_errors=spec.max_errors or t.DEFAULT_MAX_ERRORS,
        )
        simulation = orchestrator.run()
        reason = simulation.termination_reason.value
    except BaseException as exc:  # noqa: B036 - every ending becomes a TrialResult; KeyboardInterrupt re-raised
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        reason, error = classify(exc, budget, spec, endpoint_log.server_ids)
        if refused := refusal_note(exc, reason, endpoint_log.calls):
            endpoint_log.notes.append(refused)
        simulation = None
    finally:
        getattr(agent, "close", lambda: None)()  # the trial's harness process, however the trial ended
    if endpoint_log.format_error and reason not in ("time_budget_exceeded",):
        # the agent's endpoint sent an unusable reply: whatever the harness made of the failed call
        reason, error, simulation = "endpoint_format_error", endpoint_log.format_error, None
    trajectory = simulation.messages if simulation is not None else _partial(orchestrator)

    if simulation is not None and reason in STOP_ENDINGS:
        try:
            scored = scorer.score(spec.domain, spec.task_id, simulation.model_dump_json())
            reward, components, checks = scored["reward"], scored["components"], scored.get("checks")
        except ScorerError as exc:
            reason, error = "infrastructure_error", f"scorer failed: {exc}"
    elif reason not in ("infrastructure_error", "time_budget_exceeded"):
        reward = 0.0  # τ²: a trial that did not end by user or agent stop scores 0

    notes = list(getattr(agent, "harness_notes", []) or [])
    usage = dict(getattr(agent, "usage", None) or {})
    tokens = {k: int(usage.get(k, 0) or 0) for k in ("prompt", "completion", "total")}
    user_usage = dict(getattr(user, "usage", None) or {})
    user_tokens = {k: int(user_usage.get(k, 0) or 0) for k in ("prompt", "completion", "total")}
    from .suspect import is_suspect
    from .user import asks_confirmation, stop_after_confirmation, unconfirmed_writes, user_aborted

    messages = [message_dict(m) for m in trajectory]
    called = {c["name"] for m in messages for c in m.get("tool_calls") or []}
    writes = {name for name in called if _is_write(environment, name)}
    if checks is not None and asks_confirmation(environment):
        checks = {**checks, "unconfirmed_writes": unconfirmed_writes(messages, writes)}

    return TrialResult(
        suite=spec.suite,
        task_id=spec.task_id,
        trial=spec.trial,
        reward=reward,
        components=components,
        termination_reason=reason,
        tool_calls=tool_call_records(trajectory, notes, model_view.seen),
        user_tool_calls=user_tool_call_records(trajectory),
        steps=len(trajectory),
        tokens=tokens,
        user_tokens=user_tokens,
        wall_s=round(time.monotonic() - started, 3),
        harness_id=spec.harness_id,
        model=spec.model,
        suspect=is_suspect(spec.domain, spec.task_id),
        messages=messages,
        harness_notes=notes,
        error=error,
        pending_call=budget.pending if reason == "time_budget_exceeded" else None,
        endpoint_notes=endpoint_log.all_notes(),
        endpoint_problem=endpoint_log.problem or reason == "endpoint_format_error",
        user_stop_after_confirmation=reason == "user_stop" and stop_after_confirmation(messages, writes),
        user_abort=reason == "user_error" or (reason in USER_ENDINGS and user_aborted(messages)),
        checks=checks,
    )


def classify(
    exc: BaseException,
    budget: TrialBudget,
    spec: TrialSpec,
    server_ids: set[str] | frozenset[str] = frozenset(),
) -> tuple[TerminationReason, str]:
    """(termination reason, error text) for an exception that ended a trial. `server_ids`: the tool-call ids
    the agent's endpoint generated in its replies (`EndpointLog.server_ids`)."""
    where = spec.sim_url if spec.model.startswith("sim") else (spec.base_url or "the OpenAI API")
    if budget.throttled:  # the provider's rate limit outlasted the budget: never the harness's time
        return "infrastructure_error", budget.throttled
    if isinstance(exc, TimeBudgetExceeded) or budget.exhausted:
        return "time_budget_exceeded", f"{budget.describe()}: {exc}"
    if isinstance(exc, EndpointFormatError):
        return "endpoint_format_error", str(exc)
    from .user import UserToolCallError

    if isinstance(exc, UserToolCallError):
        return "user_error", str(exc)
    if isinstance(exc, InfrastructureError) and isinstance(exc.__cause__, openai.APIError):
        exc = exc.__cause__  # a harness wrapped the client's error: describe the endpoint's failure
    elif isinstance(exc, InfrastructureError):
        return "infrastructure_error", str(exc)
    if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError):
        return "infrastructure_error", (
            f"model endpoint {where} did not answer ({type(exc).__name__}: {exc}) "
            f"after {budget.retries} retries; is the server running? check "
            "--ecdysis-base-url"
        )
    said = (
        context_overflow(exc.status_code, f"{exc.message} {exc.response.text}")
        if isinstance(exc, openai.APIStatusError)
        else None
    )
    if said and isinstance(exc, openai.APIStatusError):
        return "context_overflow", (
            f"model endpoint {where} refused {_call_of(exc)} as one that does not fit the model's "
            f"context window (HTTP {exc.status_code}: {said}; request: {_request_size(exc)}); the harness must "
            "keep its requests shorter, or the server needs a longer context"
        )
    if isinstance(exc, openai.APIStatusError):
        return _refused(exc, where, budget, server_ids)
    if isinstance(exc, ScorerError):
        return "infrastructure_error", f"scorer failed: {exc}"
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
    return "agent_error", f"the harness raised {type(exc).__name__}: {exc}\n" + "".join(tb[-3:])


def _refused(
    exc: Any, where: str | None, budget: TrialBudget, server_ids: set[str] | frozenset[str]
) -> tuple[TerminationReason, str]:
    """(reason, error) of an HTTP error status, by what the server said rather than by its status code.

    The endpoint's (`infrastructure_error`, out of evidence), naming what to change: a refusal naming a
    server setting or a provider policy (`refusals.setting_refusal`), a refusal of tool-call ids the server
    generated itself, anything on the user simulator's call (the suite's request), and statuses or words
    about the account or the model (`harness_caused` false). The harness's (`agent_error`, evidence), with
    the request's size and the server's words: a request the server could not parse
    (`refusals.REQUEST_UNPARSED`) and other 4xx the agent's request caused."""
    text = _server_said(exc, 2000)
    words = _words(exc)
    call, size = _call_of(exc), _request_size(exc)
    fix = setting_refusal(text)
    if fix:
        return "infrastructure_error", (
            f"model endpoint {where} refused {call} for a reason no harness change avoids (HTTP "
            f"{exc.status_code}: {words}); {fix}"
        )
    sent = _request_ids(exc)
    if 400 <= exc.status_code < 500 and TOOL_CALL_ID.search(text) and sent and sent <= set(server_ids):
        return "infrastructure_error", (
            f"model endpoint {where} refused {call} over tool-call ids it generated itself "
            f"({', '.join(sorted(sent))}; HTTP {exc.status_code}: {words}); the server's ids do not pass its "
            "own check: a server or chat-template defect, not the harness's"
        )
    if _role(exc) != "user" and REQUEST_UNPARSED.search(text):
        return "agent_error", (
            f"the agent's endpoint {where} could not parse the request the harness sent (HTTP "
            f"{exc.status_code}: {words}; request: {size}); a tool or message the harness declared is "
            "malformed (e.g. a tool without `parameters`): the harness's failure, not the model's output"
        )
    if harness_caused(exc):
        return "agent_error", (
            f"the harness sent a request the agent's endpoint {where} refused (HTTP "
            f"{exc.status_code}: {words}; request: {size}); a malformed or oversized request is the "
            "harness's failure, not the endpoint's"
        )
    return "infrastructure_error", (
        f"model endpoint {where} answered {call} with HTTP {exc.status_code} "
        f"after {budget.retries} retries: {words}"
    )


def refusal_note(exc: BaseException, reason: TerminationReason, calls: int) -> dict[str, Any] | None:
    """The endpoint note of an agent request the server refused and the trial blamed on the harness
    (`agent_error`), else None: `{"kind": "request_refused", "detail": "HTTP <status>: <server's words>",
    "step": <1-based agent call>, "status": <status>}`. The session reads it across trials
    (`pytest_ecdysis.evidence.first_refusal`): the same refusal of every trial's first request would repeat
    for any harness."""
    if isinstance(exc, InfrastructureError) and isinstance(exc.__cause__, openai.APIError):
        exc = exc.__cause__
    if reason != "agent_error" or not isinstance(exc, openai.APIStatusError) or _role(exc) == "user":
        return None
    return {
        "kind": "request_refused",
        "detail": f"HTTP {exc.status_code}: {_words(exc)}",
        "step": calls,
        "status": exc.status_code,
    }


def _words(exc: Any) -> str:
    """The server's own message, decoded from its JSON error body (`refusals.error_message`: control
    characters as they were, for `safetext` to show), else `_server_said`."""
    try:
        said = error_message(exc.response.content)
    except Exception:
        said = ""
    return said or _server_said(exc)


def _role(exc: Any) -> str:
    try:
        return str(exc.response.request.headers.get("x-ecdysis-role", "")).lower()
    except Exception:
        return ""


def _call_of(exc: Any) -> str:
    """`the user simulator's call` or `the agent's call` (the role header of the failed request)."""
    return "the user simulator's call" if _role(exc) == "user" else "the agent's call"


def _sent(exc: Any) -> bytes:
    try:
        return bytes(exc.response.request.content or b"")
    except Exception:
        return b""


def _request_size(exc: Any) -> str:
    return size_of(_sent(exc))


def _request_ids(exc: Any) -> set[str]:
    return request_ids(_sent(exc))


#: 4xx statuses that are the endpoint's or the account's business, not a request the harness malformed:
#: unauthorised, forbidden, not found (wrong URL or model), request timeout, conflict, rate limit.
NOT_THE_HARNESS_4XX = frozenset({401, 402, 403, 404, 408, 409, 429})
#: a 4xx body that blames the configuration, whatever the status (LiteLLM answers an unknown model with 400):
#: a model or key the user chose, not a request the harness malformed ("tool_call_id not found" stays the harness's).
NOT_THE_HARNESS_BODY = re.compile(
    r"\bmodel\b[^\n]{0,60}?\b(not found|does not exist|not exist|is not supported|"
    r"unknown|invalid)|(invalid|unknown|no such) model|api[ _-]?key|authenticat|"
    r"unauthori[sz]ed|insufficient.quota",
    re.I,
)


def harness_caused(exc: Any) -> bool:
    """True for an `openai.APIStatusError` of the agent's call with a 4xx the request itself caused (400 bad
    request, 413 too large, 422 unprocessable...): statuses in `NOT_THE_HARNESS_4XX`, a body naming the model
    or the key (`NOT_THE_HARNESS_BODY`) and every call of the user simulator (the suite's own request) are
    not the harness's doing."""
    status = getattr(exc, "status_code", 0) or 0
    if not 400 <= status < 500 or status in NOT_THE_HARNESS_4XX:
        return False
    if NOT_THE_HARNESS_BODY.search(_server_said(exc, 2000)):
        return False
    return _role(exc) != "user"


def _server_said(exc: Any, limit: int = 300) -> str:
    """The server's own message of an `APIStatusError`: its body (first `limit` characters), else the message."""
    try:
        body = exc.response.text.strip()
    except Exception:
        body = ""
    said = body or str(getattr(exc, "message", "") or exc)
    return said[:limit] + ("..." if len(said) > limit else "")


def _is_write(environment: Any, name: str) -> bool:
    """τ²'s own tool type (`@is_tool(ToolType.WRITE)`); False for a name the domain does not have."""
    try:
        return str(getattr(environment.tools.tool_type(name), "value", "")) == "write"
    except Exception:
        return False


def _partial(orchestrator: Any) -> list:
    if orchestrator is None:
        return []
    try:
        return orchestrator.get_trajectory()
    except Exception:
        return list(orchestrator.trajectory)


def message_dict(message: Any) -> dict[str, Any]:
    """A τ² message as a plain JSON-safe dict: `{role, content, tool_calls?, id?, error?, requestor?}`.

    `requestor` is `user` on the user's own tool calls and on their results (τ² telecom: the user runs tools
    on their phone); the agent never sees those messages. Absent on everything else."""
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    calls = getattr(message, "tool_calls", None)
    if calls:
        data["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
        if message.role == "user":
            data["requestor"] = "user"
    if message.role == "tool":
        data["id"] = message.id
        data["error"] = bool(message.error)
        if getattr(message, "requestor", "assistant") == "user":
            data["requestor"] = "user"
    return data


def tool_call_records(
    trajectory: list, notes: list[dict], model_view: dict[str, str] | None = None
) -> list[ToolCallRecord]:
    """The agent's tool calls, each with its result (paired by call id), in trajectory order.

    `model_view` maps call ids to the tool message content the harness sent the model (observed on the
    wire by `endpoint.ModelViewTransport`); it fills `ToolCallRecord.model_view`.

    Calls a harness reports as pending in its notes (`pending_tool_calls`: the budget ran out before they
    could be sent) are appended with `result=None`.
    """
    results = {
        m.id: m
        for m in trajectory
        if m.role == "tool" and getattr(m, "requestor", "assistant") == "assistant"
    }
    records = []
    for step, message in enumerate(trajectory):
        if message.role != "assistant" or not message.tool_calls:
            continue
        for call in message.tool_calls:
            result = results.get(call.id)
            records.append(
                ToolCallRecord(
                    name=call.name,
                    arguments=call.arguments,
                    step=step,
                    result=result.content if result is not None else None,
                    error=bool(result.error) if result is not None else False,
                    model_view=(model_view or {}).get(call.id),
                )
            )
    for note in notes:
        for call in note.get("pending_tool_calls", []) or []:
            records.append(
                ToolCallRecord(
                    name=call.get("name", ""),
                    arguments=call.get("arguments") or {},
                    result=None,
                    step=max(len(trajectory) - 1, 0),
                )
            )
    return records
