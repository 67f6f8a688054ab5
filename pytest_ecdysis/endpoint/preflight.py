"""The endpoint checked before the first trial: one small request per configured model, classified.

    checks = check_models(["qwen3"], "http://localhost:8000/v1", "EMPTY", call_timeout_s=60, max_retries=1)
    problems = [c for c in checks if c.problem]       # each names what to change

A run against a server that cannot serve the suite's requests (tools off, a model not pulled, a wrong key
or base URL) used to fail every trial the same way, and each failure was read as the harness's. So before
any trial and before any role call of an evolution, `run/controller.prepare` sends each distinct model of
the session that is not `sim...` (agent, user simulator, diagnosis when evolving, `--ecdysis-test-model`)
one request of the suite's shape: one user message, one function tool with a JSON-schema `parameters`
object, a `tool_choice`, `max_tokens` `MAX_TOKENS`. The shape comes from the installed suite
(`core.hookspecs.ecdysis_preflight_request`: the τ² suite gives one of τ²'s own tool schemas), checked by
`shape`; with no suite that gives one, `TOOL`, `"auto"` and `MESSAGES`. The reply is one of `OUTCOMES`:

| outcome | what came back | what to change |
| --- | --- | --- |
| `ok` | a chat completion (a tool call or text) | nothing |
| `tools_unsupported` | a refusal of `tools`/`tool_choice`, or the call written as text | the server's tool flag (`refusals.TOOL_FIXES`) |
| `model_not_found` | 404, or a body saying the model does not exist | `--ecdysis-model` (or pull/serve it) |
| `key_refused` | 401/403, or a body about the API key | `OPENAI_API_KEY` |
| `base_url_wrong` | refused connection, a 404 without a model named, a 200 that is no chat completion | `--ecdysis-base-url` (ends in `/v1`) |
| `content_filter` | the provider's content policy refused the request | the provider's filter settings |
| `timeout` | no whole reply within the call timeout | `--ecdysis-limits call-timeout=S` |
| `server_error` | another 4xx | quoted as the server said it |
| `transient` | 429 or 5xx after the retries, naming no setting | nothing: printed, the trials run (they retry) |

Every outcome but `ok` and `transient` is a configuration problem: the session stops with one usage error (exit 4) before any
trial, naming each model's problem and the fix, and `preflight.json` in the run directory is the only file
written. Simulated models are skipped: the plugin starts that server itself in the same process, and it
answers every shape the suite sends, so a request to it would check nothing. The cost is one call per
checked model (printed, with the wall-clock); `--ecdysis-preflight off` skips the check. Validation sub-runs
inherit `ENV_DONE` from the controller that checked (or was told not to) and skip it (same endpoint, same
models).

The call goes through `endpoint.deadline.DeadlineTransport` (the session's call timeout and retries, so a
429 or a 503 while a server warms up is retried as a trial's call would be). This module must not import
tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx2

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.endpoint.deadline import Budget, DeadlineTransport, network_transport
from pytest_ecdysis.endpoint.refusals import (
    CONTENT_FILTER,
    KEY_REFUSED,
    MODEL_MISSING,
    TOOLS_REFUSED,
    error_message,
    tool_fix,
)
from pytest_ecdysis.endpoint.replies import completion_problem, find_text_tool_calls

#: set by a controller whose pre-flight passed or is off; sub-runs that inherit it do not check.
ENV_DONE = "ECDYSIS_PREFLIGHT_DONE"
#: the completion tokens the pre-flight asks for (a tool call of one argument fits).
MAX_TOKENS = 64
OUTCOMES = (
    "ok",
    "tools_unsupported",
    "model_not_found",
    "key_refused",
    "base_url_wrong",
    "content_filter",
    "timeout",
    "server_error",
    "transient",
)

#: The tool shape when no installed suite gives one (`shape`): an OpenAI function tool with a JSON-schema
#: `parameters` object, as τ²'s `Tool.openai_schema` writes one (airline's `get_reservation_details`).
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_reservation_details",
        "description": "Get the details of a reservation.",
        "parameters": {
            "type": "object",
            "properties": {
                "reservation_id": {"type": "string", "description": "The reservation ID, such as '8JX2WO'."}
            },
            "required": ["reservation_id"],
        },
    },
}
MESSAGES = [{"role": "user", "content": "Please look up reservation 8JX2WO."}]


def shape(given: dict[str, Any] | None) -> dict[str, Any]:
    """The pre-flight request's `{"tools", "tool_choice", "messages"}`: what a suite gave
    (`ecdysis_preflight_request`: `tools` one or more OpenAI function tools, `tool_choice` optional, default
    `"auto"`, `messages` optional, default `MESSAGES`), else `[TOOL]`, `"auto"`, `MESSAGES`.

    Raises:
        UsageError: a suite gave a shape that is not one (naming what is wrong), so the pre-flight would
            check something else than the trials send.
    """
    if given is None:
        return {"tools": [TOOL], "tool_choice": "auto", "messages": MESSAGES}
    bad = _shape_problem(given)
    if bad is not None:
        raise UsageError(
            f"the suite's pre-flight request (ecdysis_preflight_request) {bad}; it must be "
            '{"tools": [{"type": "function", "function": {"name": ..., "parameters": {...}}}], '
            '"tool_choice": "auto"}: fix the suite\'s hook, or pass --ecdysis-preflight off'
        )
    return {
        "tools": given["tools"],
        "tool_choice": given.get("tool_choice", "auto"),
        "messages": given.get("messages", MESSAGES),
    }


def _is_function_tool(tool: Any) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return (
        tool.get("type") == "function"
        and isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and isinstance(function.get("parameters"), dict)
    )


def _shape_problem(given: Any) -> str | None:
    """What is wrong with a suite's pre-flight shape (the start of a sentence), or None."""
    if not isinstance(given, dict):
        return f"is a {type(given).__name__}, not a dict"
    tools = given.get("tools")
    if not isinstance(tools, list) or not tools:
        return "has no `tools` list"
    for i, tool in enumerate(tools):
        if not _is_function_tool(tool):
            return f"has a tool ({i}) that is not a function tool with a name and a `parameters` object"
    if not isinstance(given.get("tool_choice", "auto"), str | dict):
        return "has a `tool_choice` that is neither a string nor an object"
    messages = given.get("messages", MESSAGES)
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return "has `messages` that are not a list of message objects"
    return None


@dataclass(frozen=True)
class Check:
    """One model's pre-flight: `outcome` one of `OUTCOMES`, `detail` what came back (the server's words,
    at most 300 characters), `fix` what to change (empty when `ok`), `wall_s` the call's wall-clock in
    seconds (retries included), `status` the HTTP status (None: no reply)."""

    model: str
    base_url: str
    outcome: str
    detail: str
    fix: str = ""
    wall_s: float = 0.0
    status: int | None = None

    @property
    def problem(self) -> bool:
        """A configuration problem: the session stops (every outcome but `ok` and `transient`)."""
        return self.outcome not in ("ok", "transient")

    def line(self) -> str:
        """One terminal line: `model at URL: outcome (N.NN s): detail; fix`."""
        text = f"{self.model} at {self.base_url}: {self.outcome} ({self.wall_s:.2f} s)"
        if self.outcome != "ok":
            text += f": {self.detail}; {self.fix}"
        return text


def classify(
    status: int, body: bytes, content_type: str, *, text_tool_calls: str = "reject"
) -> tuple[str, str, str]:
    """`(outcome, detail, fix)` of the pre-flight's reply (module docstring's table).

    `text_tool_calls`: ini `ecdysis_text_tool_calls`; a tool call written as text is `tools_unsupported`
    unless it is `parse` (then the trials execute such calls, and the reply is `ok`)."""
    said = error_message(body)
    whole = body[:4000].decode("utf-8", "replace")
    if status == 200:
        problem = completion_problem("/v1/chat/completions", content_type, body)
        if problem is not None:
            err = _error_object(body)
            if err is not None:  # an error object in a 200 body: classify it as the error it is
                code = err.get("code")
                return classify(code if isinstance(code, int) and code >= 400 else 502, body, content_type)
            return "base_url_wrong", f"HTTP 200 with {problem}", _BASE_URL_FIX
        message = json.loads(body)["choices"][0]["message"]
        if message.get("tool_calls"):
            return "ok", "a tool call", ""
        content = message.get("content")
        content = (
            "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if isinstance(content, list)
            else content
        )
        found = find_text_tool_calls(content if isinstance(content, str) else "")
        if found and text_tool_calls != "parse":
            return (
                "tools_unsupported",
                f"the tool call came back as text ({found.style} markup) with tool_calls empty",
                tool_fix(whole) + "; or set the ini key ecdysis_text_tool_calls = parse",
            )
        return "ok", "a text reply" + (" (tool call as text, parsed)" if found else ""), ""
    if CONTENT_FILTER.search(whole):
        return (
            "content_filter",
            f"HTTP {status}: {said}",
            (
                "the provider's content policy refused the request; change the deployment's content filter, "
                "or use another model"
            ),
        )
    if TOOLS_REFUSED.search(whole):
        return "tools_unsupported", f"HTTP {status}: {said}", tool_fix(whole)
    if status in (401, 403) or KEY_REFUSED.search(whole):
        return (
            "key_refused",
            f"HTTP {status}: {said}",
            (
                "the endpoint refused the API key; set OPENAI_API_KEY to a key it accepts (local servers accept any)"
            ),
        )
    if MODEL_MISSING.search(whole):
        return (
            "model_not_found",
            f"HTTP {status}: {said}",
            (
                "the endpoint does not serve this model; pass a name it serves (GET <base-url>/models lists them), "
                "or pull/load the model (Ollama: `ollama pull <model>`)"
            ),
        )
    if status in (404, 405):
        return "base_url_wrong", f"HTTP {status}: {said}", _BASE_URL_FIX
    if status == 429 or status >= 500:
        return (
            "transient",
            f"HTTP {status}: {said}",
            ("the endpoint was busy or failing after the retries; the trials retry their own calls"),
        )
    return (
        "server_error",
        f"HTTP {status}: {said}",
        (
            "the endpoint refused the suite's request shape; fix the server, or pass --ecdysis-preflight off to "
            "run anyway"
        ),
    )


_BASE_URL_FIX = (
    "check --ecdysis-base-url (or OPENAI_BASE_URL): the server's OpenAI-compatible root, ending in /v1 "
    "(vLLM, llama.cpp, TGI, LM Studio: http://HOST:PORT/v1; Ollama: http://HOST:11434/v1)"
)


def _error_object(body: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    return err if isinstance(err, dict) else None


def check_model(
    model: str,
    base_url: str,
    api_key: str,
    *,
    call_timeout_s: float,
    max_retries: int,
    text_tool_calls: str = "reject",
    transport: httpx2.BaseTransport | None = None,
    backoff_s: float = 0.5,
    request: dict[str, Any] | None = None,
) -> Check:
    """One model's pre-flight request and its `Check` (never raises for what the endpoint does).

    Args:
        base_url: the OpenAI-compatible root (`.../v1`); the request goes to `<base_url>/chat/completions`.
        call_timeout_s: seconds the whole reply may take (`--ecdysis-limits call-timeout`).
        max_retries: retries after 429/5xx and refused connections (`--ecdysis-limits max-retries`).
        transport: the network transport (tests pass `httpx2.MockTransport`).
        request: the suite's shape, `{"tools", "tool_choice", "messages"}` as `shape` returns it (None:
            `shape(None)`, the fallback).
    """
    request = request or shape(None)
    started = time.monotonic()
    budget = Budget(call_timeout_s * (max_retries + 1) + 30.0, label="pre-flight")
    deadline = DeadlineTransport(
        transport or network_transport(),
        budget,
        call_timeout_s=call_timeout_s,
        max_retries=max_retries,
        backoff_s=backoff_s,
        retry_timeouts=False,
    )
    body = {
        "model": model,
        "messages": request["messages"],
        "tools": request["tools"],
        "tool_choice": request["tool_choice"],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    url = base_url.rstrip("/") + "/chat/completions"
    headers = {"authorization": f"Bearer {api_key}", "x-ecdysis-role": "preflight"}

    def done(outcome: str, detail: str, fix: str, status: int | None = None) -> Check:
        wall = round(time.monotonic() - started, 3)
        return Check(model, base_url, outcome, detail, fix, wall, status)

    try:
        with httpx2.Client(transport=deadline, timeout=call_timeout_s) as client:
            response = client.post(url, json=body, headers=headers)
            raw = response.read()
    except httpx2.TimeoutException as exc:
        return done(
            "timeout",
            f"no whole reply within {call_timeout_s:g} s ({exc})",
            "the server did not answer in time; raise --ecdysis-limits call-timeout=SECONDS (a large model "
            "loading on first use can take minutes), or check the server",
        )
    except Exception as exc:  # refused, DNS, a reply that is no chat completion (UnusableReplyError)
        text = f"{type(exc).__name__}: {exc}"
        if "got HTTP 200 with" in str(exc):
            return done("base_url_wrong", str(exc)[:300], _BASE_URL_FIX, 200)
        return done(
            "base_url_wrong",
            f"no answer from {url} ({text[:240]})",
            "is the server running? " + _BASE_URL_FIX,
        )
    outcome, detail, fix = classify(
        response.status_code, raw, response.headers.get("content-type", ""), text_tool_calls=text_tool_calls
    )
    return done(outcome, detail, fix, response.status_code)


def check_models(models: list[str], base_url: str, api_key: str, **kwargs: Any) -> list[Check]:
    """`check_model` for each of `models` in turn (keyword arguments as for it): one call per model."""
    return [check_model(m, base_url, api_key, **kwargs) for m in models]


def models_to_check(cfg: Any) -> list[str]:
    """The distinct models of a session that are not `sim...`, in order: agent, user simulator, diagnosis
    (when evolving), test models. `cfg` is an `EcdysisConfig`."""
    from pytest_ecdysis.core.config import is_sim_model

    names = [cfg.model, cfg.user_model, *([cfg.diagnosis_model] if cfg.evolve else []), *cfg.test_models]
    out: list[str] = []
    for name in names:
        if name and not is_sim_model(name) and name not in out:
            out.append(name)
    return out


def report(checks: list[Check]) -> list[str]:
    """Terminal lines of a passed pre-flight: the cost (one call per model) and each check."""
    if not checks:
        return []
    wall = sum(c.wall_s for c in checks)
    head = f"ecdysis: endpoint pre-flight: {len(checks)} call(s), one per model, {wall:.2f} s"
    return [head, *(f"  {c.line()}" for c in checks)]


def refusal(checks: list[Check]) -> str:
    """The usage error's text for the checks that found a configuration problem (empty: none did)."""
    bad = [c for c in checks if c.problem]
    if not bad:
        return ""
    lines = [
        f"the endpoint pre-flight found {len(bad)} configuration problem(s) before any trial "
        f"({len(checks)} call(s), one per model); no trial was run:"
    ]
    lines += [f"  {c.line()}" for c in bad]
    lines.append("  (--ecdysis-preflight off skips this check)")
    return "\n".join(lines)


def as_json(checks: list[Check]) -> dict[str, Any]:
    """`preflight.json`: `{"calls", "wall_s", "checks": [Check fields]}`."""
    return {
        "calls": len(checks),
        "wall_s": round(sum(c.wall_s for c in checks), 3),
        "checks": [asdict(c) for c in checks],
    }
