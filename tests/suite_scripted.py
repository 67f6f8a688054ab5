"""Scripted OpenAI-compatible replies for the suite and harness tests (no network).

`ScriptedModel` is a `httpx2.MockTransport` handler that answers chat-completion requests from a list of
replies (assistant message dicts, `(message, finish_reason)` pairs, `httpx2.Response`s, or callables of
the request body) and keeps every request body it saw. `scripted_user` stops on the agent's second text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_HARNESS = REPO / "pytest_ecdysis_tau2" / "example_harness"
DIRECT_HARNESS = REPO / "pytest_ecdysis_tau2" / "harnesses" / "direct"
ORACLE_HARNESS = Path(__file__).resolve().parent / "suite_oracle_harness"


def completion(message: dict[str, Any], finish: str | None = "stop") -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **message}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def text(content: str, finish: str | None = "stop") -> tuple[dict[str, Any], str | None]:
    return {"content": content}, finish


def call(
    name: str, arguments: Any, call_id: Any = "c1", finish: str | None = "tool_calls"
) -> tuple[dict, str | None]:
    """A reply with one tool call; `arguments` is sent as given (a str, or a dict to test case 2)."""
    function = {"name": name, "arguments": arguments}
    tool_call = {"type": "function", "function": function}
    if call_id is not ...:
        tool_call["id"] = call_id
    return {"content": None, "tool_calls": [tool_call]}, finish


class ScriptedModel:
    """MockTransport handler replying from `replies` in order (the last one repeats)."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        index = min(len(self.requests) - 1, len(self.replies) - 1)
        reply = self.replies[index]
        if callable(reply):
            reply = reply(body)
        if isinstance(reply, httpx2.Response):
            return reply
        message, finish = reply if isinstance(reply, tuple) else (reply, "stop")
        return httpx2.Response(200, json=completion(message, finish))

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self)


def scripted_user(opening: str = "Hi, I need help with my reservation.") -> ScriptedModel:
    """A user that opens with `opening` and sends ###STOP### once the agent has written twice."""

    def reply(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        agent_texts = [m for m in body["messages"] if m["role"] == "user"]
        return ({"content": "###STOP###"} if len(agent_texts) >= 2 else {"content": opening}), "stop"

    return ScriptedModel([reply])


def run(
    task_id: str,
    agent: ScriptedModel | None,
    *,
    domain: str = "airline",
    harness: Path = EXAMPLE_HARNESS,
    settings: Any = None,
    user: ScriptedModel | None = None,
    base_url: str = "http://scripted.invalid/v1",
    agent_transport: Any = None,
    scorer: Any = None,
) -> Any:
    """One trial through the suite's runner with scripted agent and user endpoints."""
    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    spec = TrialSpec(
        domain=domain,
        task_id=task_id,
        trial=0,
        run_id="test-run",
        model="scripted",
        user_model="scripted",
        harness_dir=harness,
        harness_id=harness_id(harness),
        base_url=base_url,
    )
    user = user or scripted_user()
    transport = agent_transport or (agent.transport() if agent is not None else None)
    return run_trial(
        spec, settings, agent_transport=transport, user_transport=user.transport(), scorer=scorer
    )


Handler = Callable[[httpx2.Request], httpx2.Response]


def warm_up() -> None:
    """Import τ², the example harness and the user simulator and load the airline environment once, so a
    timed trial measures its endpoint, not this process's first imports (seconds on a loaded machine)."""
    from pytest_ecdysis.core.harness import load_harness
    from pytest_ecdysis_tau2.tasks import suite  # noqa: F401
    from pytest_ecdysis_tau2.trial import user  # noqa: F401

    suite.get_environment("airline")
    suite.get_task("airline", "3")
    load_harness(EXAMPLE_HARNESS)
