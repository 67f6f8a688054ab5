"""Dual control (τ² telecom): the user holds tools too, on their own phone.

What the trial needs beyond a user without tools: the environment's user tools for the user simulator
(`user_tools`), the user's own tool calls as records marked `actor="user"` (`user_tool_call_records`; the
agent's stay in `TrialResult.tool_calls`), and a task environment that fails between turns reported as the
task's defect, not the agent's (`guard_sync`, `TaskEnvironmentError`). Airline and retail have no user
tools: every function here is a no-op there. This module must not import harness code.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis.core.errors import InfrastructureError
from pytest_ecdysis.core.records import ToolCallRecord


class TaskEnvironmentError(InfrastructureError):
    """τ²'s environment of a task failed outside any tool call (telecom's `sync_tools` between turns: a
    scenario whose line or plan the database lacks): a defect of the task or of τ², not of the agent."""


def user_tools(environment: Any) -> list[Any] | None:
    """τ²'s user tools of the environment (telecom: the user's phone), or None for a domain without them."""
    if getattr(environment, "user_tools", None) is None:
        return None
    return list(environment.get_user_tools())


def guard_sync(environment: Any, spec: Any) -> None:
    """Make the environment's `sync_tools` (run by τ²'s orchestrator after every step) raise
    `TaskEnvironmentError` naming the task (`spec`: the `runner.TrialSpec`) instead of whatever it raised."""
    original = environment.sync_tools

    def sync_tools() -> None:
        try:
            original()
        except Exception as exc:
            raise TaskEnvironmentError(
                f"τ²'s environment of {spec.suite} task {spec.task_id} failed between turns ({type(exc).__name__}: "
                f"{exc}): a defect of the task's data or of τ², not of the agent"
            ) from exc

    environment.sync_tools = sync_tools


def user_tool_call_records(trajectory: list) -> list[ToolCallRecord]:
    """The user's own tool calls (τ² telecom), each with its result, marked `actor="user"`; [] elsewhere."""
    results = {
        m.id: m for m in trajectory if m.role == "tool" and getattr(m, "requestor", "assistant") == "user"
    }
    records = []
    for step, message in enumerate(trajectory):
        if message.role != "user" or not getattr(message, "tool_calls", None):
            continue
        for call in message.tool_calls:
            result = results.get(call.id)
            records.append(
                ToolCallRecord(
                    name=call.name,
                    arguments=call.arguments,
                    step=step,
                    actor="user",
                    result=result.content if result is not None else None,
                    error=bool(result.error) if result is not None else False,
                )
            )
    return records
