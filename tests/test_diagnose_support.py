"""Builders shared by the diagnosis and simulated-role tests (no tests here).

Records are built directly as `FailureRecord`s; `sim_client()` is an openai client over a MockTransport
that answers every role request with `pytest_ecdysis.sim.roles.answers.answer` (no server, no network), and
`scripted_client(fn)` one whose answers come from `fn(role, body)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import openai

from pytest_ecdysis.core.records import FailureRecord, ToolCallRecord
from pytest_ecdysis.endpoint.role_client import RoleClient
from pytest_ecdysis.evidence.build import build_evidence
from pytest_ecdysis.evidence.patterns import group
from pytest_ecdysis.sim.roles import answers as roles


def call(
    name: str, args: dict[str, Any], result: str, error: bool = False, step: int | None = None
) -> ToolCallRecord:
    return ToolCallRecord(name=name, arguments=args, result=result, error=error, step=step)


def rec(
    task: str,
    trial: int = 0,
    *,
    reason: str = "user_stop",
    failed: tuple[str, ...] = ("db",),
    calls: tuple[ToolCallRecord, ...] = (),
    excerpt: tuple[dict[str, Any], ...] = (),
    notes: tuple[dict[str, Any], ...] = (),
    suite: str = "tau2-retail",
    suspect: bool = False,
) -> FailureRecord:
    first = next(
        (
            {"name": c.name, "arguments": c.arguments, "result": c.result, "step": c.step}
            for c in calls
            if c.error
        ),
        None,
    )
    return FailureRecord(
        suite=suite,
        task_id=task,
        trial=trial,
        reward=0.0,
        termination_reason=reason,
        failed_components=list(failed),
        tool_calls=list(calls),
        first_tool_error=first,
        excerpt=list(excerpt),
        harness_notes=list(notes),
        suspect=suspect,
        endpoint_problem=reason == "endpoint_format_error",
    )


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def agent(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


# --- scenarios: each a list of records showing one mechanism on the given tasks -----------------------


def id_prefix_records(tasks: tuple[str, ...] = ("1", "2")) -> list[FailureRecord]:
    return [
        rec(
            t,
            reason="too_many_errors",
            failed=("db",),
            calls=(
                call(
                    "get_order_details",
                    {"order_id": f"W{t}00001"},
                    "Error: Order not found",
                    error=True,
                    step=3,
                ),
            ),
            excerpt=(user(f"My order number is #W{t}00001."), agent("Let me look it up.")),
        )
        for t in tasks
    ]


def truncation_records(tasks: tuple[str, ...] = ("3", "4")) -> list[FailureRecord]:
    long = '{"reservation_id": "ABC123", "flights": [' + "x" * 900 + "… [truncated 800 chars]"
    return [
        rec(
            t,
            reason="agent_stop",
            failed=("db",),
            suite="tau2-airline",
            calls=(
                call("get_reservation_details", {"reservation_id": "ABC123"}, long, step=2),
                call(
                    "update_reservation_flights",
                    {"reservation_id": "ABC123", "flight_number": "HAT001"},
                    "{}",
                    step=4,
                ),
            ),
        )
        for t in tasks
    ]


def budget_records(tasks: tuple[str, ...] = ("5", "6")) -> list[FailureRecord]:
    return [
        rec(
            t,
            reason="max_steps",
            failed=("db",),
            suite="tau2-airline",
            calls=(call("get_user_details", {"user_id": "mia_1"}, '{"name": "Mia"}', step=2),),
            excerpt=(agent("I have to stop here: step budget of 20 model calls reached. ###STOP###"),),
            notes=({"kind": "budget_exhausted", "detail": "step budget of 20 model calls reached"},),
        )
        for t in tasks
    ]


def incomplete_records(tasks: tuple[str, ...] = ("7", "8")) -> list[FailureRecord]:
    return [
        rec(
            t,
            reason="user_stop",
            failed=("db",),
            calls=(
                call("get_order_details", {"order_id": f"#W{t}0"}, '{"status": "pending"}', step=2),
                call(
                    "cancel_pending_order",
                    {"order_id": f"#W{t}0", "reason": "no longer needed"},
                    '{"ok": true}',
                    step=4,
                ),
            ),
            excerpt=(
                user("Cancel order #W70 and also change the address of my other order."),
                agent("Your order is cancelled. Anything else?"),
                user("No. ###STOP###"),
            ),
        )
        for t in tasks
    ]


def blind_spot_records(task: str = "9") -> list[FailureRecord]:
    return [
        rec(
            task,
            trial=i,
            reason="user_stop",
            failed=("db", "communicate"),
            suite="tau2-airline",
            calls=(
                call(
                    "update_reservation_flights",
                    {"reservation_id": "XYZ789", "flight_number": "HAT170"},
                    "{}",
                    step=4,
                ),
            ),
            excerpt=(user("Please move me to flight HAT107 on the same day."), agent("Done. ###STOP###")),
        )
        for i in range(2)
    ]


def repeat_records(tasks: tuple[str, ...] = ("10", "11"), flagged: bool = False) -> list[FailureRecord]:
    second = (
        "Error: you repeated the identical failing call; change the arguments"
        if flagged
        else "Error: Insufficient balance in gift card"
    )
    return [
        rec(
            t,
            reason="too_many_errors",
            failed=("db",),
            calls=(
                call(
                    "modify_pending_order_payment",
                    {"order_id": "#W1", "payment_method_id": "gift_card_1"},
                    "Error: Insufficient balance in gift card",
                    error=True,
                    step=3,
                ),
                call(
                    "modify_pending_order_payment",
                    {"order_id": "#W1", "payment_method_id": "gift_card_1"},
                    second,
                    error=True,
                    step=5,
                ),
            ),
        )
        for t in tasks
    ]


def json_records(tasks: tuple[str, ...] = ("12", "13")) -> list[FailureRecord]:
    return [
        rec(
            t,
            reason="agent_stop",
            failed=("db",),
            calls=(
                call(
                    "get_order_details",
                    {},
                    "Error: the arguments of this call are not valid JSON; resend them",
                    error=True,
                    step=3,
                ),
            ),
        )
        for t in tasks
    ]


def write_harness(root: Path) -> Path:
    """A small harness like example_harness: config constants and the functions the knobs edit."""
    h = root / "harness"
    h.mkdir(parents=True, exist_ok=True)
    (h / "__init__.py").write_text(
        '"""A test harness."""\n\ndef build_agent(*, tools, domain_policy, client, model, '
        'max_steps_hint=None):\n    """Build the agent."""\n'
    )
    (h / "config.py").write_text(
        '"""Settings."""\nMAX_MODEL_CALLS = 20\nMAX_TOOL_RESULT_CHARS = 1200\nKEEP_LAST_MESSAGES = 40\n'
    )
    (h / "feedback.py").write_text(
        '"""Tool results."""\n\ndef format_tool_result(name, args, content, error):\n'
        '    """Format a tool result."""\n    return content\n'
    )
    (h / "tools.py").write_text('"""Tools."""\n\ndef normalise_arguments(name, args):\n    return args\n')
    (h / "closing.py").write_text('"""Closing."""\n\ndef check_before_end(history):\n    return None\n')
    (h / "prompts.py").write_text('"""Prompts."""\n\ndef system_prompt(policy):\n    return policy\n')
    return h


def cfg(passes: int = 2, limit: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(fdcr_passes=passes, evidence_limit=limit, diagnosis_model="sim", base_url=None)


def completion(text: str, prompt_tokens: int = 100, completion_tokens: int = 20) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def scripted_client(fn, log: list | None = None, max_retries: int = 0) -> RoleClient:
    """A RoleClient whose answers are `fn(role, body) -> str | httpx2.Response`; requests appended to `log`."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        role = request.headers.get("X-Ecdysis-Role", "")
        if log is not None:
            log.append((role, body))
        out = fn(role, body)
        return out if isinstance(out, httpx2.Response) else httpx2.Response(200, json=completion(out))

    oa = openai.OpenAI(
        base_url="http://test/v1",
        api_key="k",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    return RoleClient("scripted", client=oa, max_retries=max_retries)


def sim_client(log: list | None = None) -> RoleClient:
    """A RoleClient answered by the simulated roles (`roles.answer`) through a MockTransport."""
    return scripted_client(lambda role, body: roles.answer(role, body), log)


def evidence_text(records: list[FailureRecord], harness: Path | None = None, **kw: Any) -> str:
    return build_evidence(records=records, groups=group(records), harness_dir=harness, **kw).render()


def body_for(
    role: str,
    records: list[FailureRecord],
    harness: Path | None = None,
    fmt: str | None = None,
    turns: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A request body as `diagnose` would send it for `role` (first pass, or with the given turns)."""
    from pytest_ecdysis.diagnose.fdcr import FORMATS, load_prompt, role_messages

    fmt = fmt or FORMATS[role]
    prompt = load_prompt("analyst_nofdcr" if (role == "analyst" and fmt == "spec") else role)
    msgs = role_messages(
        role,
        prompt,
        None if role == "moderator" else 1,
        2,
        evidence_text(records, harness, **kw),
        turns or [],
        fmt,
    )
    return {"model": "sim", "messages": msgs}
