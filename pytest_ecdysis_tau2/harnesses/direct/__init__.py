"""The Direct harness (the paper's Direct row): the model, the tools and the policy, no other layer.

System prompt = the τ² domain policy; tools = τ²'s schemas; tool results go back verbatim; the whole
conversation is sent every time; no normalisation, no feedback formatting, no truncation, no completion
check, no budget besides τ²'s own (max steps, max errors). A reply it cannot use as it is (arguments that
are not a JSON object string, a call without an id, an empty reply) is not repaired: it raises
`EndpointFormatError`, which ends the trial as `endpoint_format_error`. Endpoint errors propagate and the
suite reports them as infrastructure errors.
"""

from __future__ import annotations

import json
from typing import Any

from tau2.agent.base import BaseAgent
from tau2.data_model.message import AssistantMessage, MultiToolMessage, ToolCall, ToolMessage, UserMessage

from pytest_ecdysis.core.errors import EndpointFormatError


class DirectAgent(BaseAgent):
    def __init__(self, *, tools: list, domain_policy: str, client: Any, model: str) -> None:
        self.schemas = [tool.openai_schema for tool in tools]
        self.system_prompt = domain_policy
        self.client = client
        self.model = model
        self.harness_notes: list[dict[str, Any]] = []
        self.usage = {"prompt": 0, "completion": 0, "total": 0}

    def get_init_state(self, message_history: list | None = None) -> list[dict[str, Any]]:
        state: list[dict[str, Any]] = []
        for message in message_history or []:
            self._receive(message, state)
        return state

    def _receive(self, message: Any, state: list[dict[str, Any]]) -> None:
        if isinstance(message, MultiToolMessage):
            for tool_message in message.tool_messages:
                self._receive(tool_message, state)
        elif isinstance(message, ToolMessage):
            state.append({"role": "tool", "tool_call_id": message.id, "content": message.content or ""})
        elif isinstance(message, UserMessage):
            state.append({"role": "user", "content": message.content or ""})
        elif isinstance(message, AssistantMessage):
            state.append(_assistant_dict(message))

    def generate_next_message(self, message: Any, state: list[dict[str, Any]]) -> tuple[AssistantMessage, list]:
        self._receive(message, state)
        response = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "system", "content": self.system_prompt}, *state], tools=self.schemas
        )
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.usage["prompt"] += usage.prompt_tokens or 0
            self.usage["completion"] += usage.completion_tokens or 0
            self.usage["total"] += usage.total_tokens or 0
        if not getattr(response, "choices", None):
            raise EndpointFormatError("the endpoint's reply has no choices")
        reply = response.choices[0].message
        if reply.tool_calls:
            calls = []
            for raw in reply.tool_calls:
                if not isinstance(raw.id, str) or not raw.id:
                    raise EndpointFormatError(f"tool call without an id: {raw!r}")
                try:
                    arguments = json.loads(raw.function.arguments)
                except (TypeError, ValueError) as exc:
                    raise EndpointFormatError(f"tool call arguments are not a JSON string: {exc}") from None
                if not isinstance(arguments, dict):
                    raise EndpointFormatError("tool call arguments are not a JSON object")
                calls.append(ToolCall(id=raw.id, name=raw.function.name, arguments=arguments, requestor="assistant"))
            out = AssistantMessage(role="assistant", content=None, tool_calls=calls)
        elif isinstance(reply.content, str) and reply.content.strip():
            out = AssistantMessage(role="assistant", content=reply.content)
        else:
            raise EndpointFormatError("the endpoint returned an empty reply (no text, no tool calls)")
        state.append(_assistant_dict(out))
        return out, state

    def stop(self, message: Any = None, state: Any = None) -> None:
        pass

    def set_seed(self, seed: int) -> None:
        pass


def _assistant_dict(message: AssistantMessage) -> dict[str, Any]:
    if message.tool_calls:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in message.tool_calls]}
    return {"role": "assistant", "content": message.content}


def build_agent(*, tools: list, domain_policy: str, client: Any, model: str, max_steps_hint: int | None = None,
                **options: Any) -> DirectAgent:
    return DirectAgent(tools=tools, domain_policy=domain_policy, client=client, model=model)
