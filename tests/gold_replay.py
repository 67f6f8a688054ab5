"""Gold replays as τ² `SimulationRun` JSON, for scorer tests and `benchmarks/bench_scoring.py` only.

A replay is what a perfect agent would leave: the user's opening turn, each gold assistant action as a
tool call with the result a fresh environment returns, a closing message stating the task's
`communicate_info`, and the user's stop (`user_stop`). It reads τ²'s gold data, so it lives under
`tests/`, never in an installed package a harness could import.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis_tau2.tasks import suite
from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2


def gold_simulation(domain: str, task_id: str) -> dict[str, Any]:
    """The `SimulationRun` (as JSON-mode dict) of task `task_id`'s gold replay in `domain`."""
    t = load_tau2()
    task = suite.get_task(domain, task_id)
    env = suite.get_environment(domain)
    criteria = task.evaluation_criteria
    actions = list(criteria.actions or []) if criteria else []
    info = list((criteria.communicate_info or []) if criteria else [])
    initial = task.initial_state
    if initial is not None:  # telecom's scenarios set the user's phone up (airline/retail: no-op here)
        env.set_state(
            initialization_data=initial.initialization_data,
            initialization_actions=initial.initialization_actions,
            message_history=[],
        )
    messages: list[Any] = [t.UserMessage(role="user", content="Hello, I need help with my booking.")]
    for i, action in enumerate(actions):
        call = t.ToolCall(
            id=f"gold_{i}", name=action.name, arguments=dict(action.arguments), requestor=action.requestor
        )
        if action.requestor == "user":  # dual control: the agent asks, the user runs the tool on their phone
            messages.append(t.AssistantMessage(role="assistant", content=f"Please run {action.name}."))
            messages.append(t.UserMessage(role="user", content=None, tool_calls=[call]))
            messages.append(env.get_response(call))
            messages.append(t.UserMessage(role="user", content="Done."))
            continue
        messages.append(t.AssistantMessage(role="assistant", content=None, tool_calls=[call]))
        messages.append(env.get_response(call))
    messages.append(t.AssistantMessage(role="assistant", content=("All done. " + "; ".join(info)).strip()))
    messages.append(t.UserMessage(role="user", content="Thanks. ###STOP###"))
    run = t.SimulationRun(
        id=f"gold-{domain}-{task_id}",
        task_id=task_id,
        start_time="",
        end_time="",
        duration=0.0,
        termination_reason=t.TerminationReason.USER_STOP,
        messages=messages,
    )
    return run.model_dump(mode="json")
