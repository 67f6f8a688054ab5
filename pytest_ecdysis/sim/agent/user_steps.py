"""The simulated agent's side of dual control: asking the user to run a step on their own device.

A plan step with `actor="user"` (τ² telecom: toggle airplane mode, reseat the SIM card, grant an app
permission) is not the agent's tool call. The agent asks for it in words, the way a support agent reads
the action out of its workflow ("Could you please toggle airplane mode on your phone, then tell me what
it shows?"), naming the arguments it means ("(mode=4g_5g_preferred)"), and waits for the user's next
words before it goes on. `UserSteps` is that part of `sim.agent.trial.AgentTrial`: it writes through the
trial's `emit.Emitter` and moves the trial's `state.AgentState` past the step; going on with the plan is
the trial's. This module must not import tau2.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis.sim.agent.emit import Emitter
from pytest_ecdysis.sim.agent.state import AgentState, Pending


def ask_text(name: str, arguments: dict[str, Any]) -> str:
    """The agent's request for a user step: the action in words, its arguments as `name=value` pairs."""
    action = name.replace("_", " ")
    args = ", ".join(f"{key}={value}" for key, value in arguments.items())
    with_args = f" ({args})" if args else ""
    return f"Could you please {action} on your phone{with_args}, then tell me what it shows?"


class UserSteps:
    """Asking for user steps (module docstring)."""

    def __init__(self, state: AgentState, emitter: Emitter) -> None:
        self.state = state
        self.emitter = emitter

    def ask_user(self, index: int) -> dict[str, Any]:
        step = self.state.task.plan[index]
        text = ask_text(step.name, dict(step.arguments))
        self.state.pending = Pending(kind="ask_user", plan_index=index, text=text)
        return self.emitter.assistant_text(text)

    def after_ask(self, p: Pending, is_new: bool) -> dict[str, Any] | None:
        """Nothing new (a harness that re-sent the request): ask again. The user answered (any new words):
        the step is theirs to have done, the plan moves past it, and None says the trial goes on with it."""
        if not is_new:
            return self.emitter.text(p.text, p)
        self.state.pending = None
        self.state.pos = p.plan_index + 1
        return None
