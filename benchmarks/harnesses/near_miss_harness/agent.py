"""The agent loop: τ²'s agent interface over an OpenAI-compatible chat-completions client.

One `generate_next_message` returns one τ² `AssistantMessage` (text for the user, or tool calls the
orchestrator executes). Inside it the harness may ask the model more than once: after re-asks for an
unusable reply, after tool errors it gives back itself (malformed arguments: the call is not executed),
and after a completion check (`closing.py`). Every model call counts against `MAX_MODEL_CALLS`.

Endpoint replies seen in the wild, each decided here and recorded in `harness_notes` as
`{"kind", "detail", "step"}` (`step` = the 1-based model call of the trial):

| reply | decision | note kind |
| --- | --- | --- |
| arguments not valid JSON (or not an object) | not executed; tool error saying so, model asked again | `malformed_arguments` |
| arguments a JSON object instead of a string | accepted as is (repair) | `arguments_object` |
| arguments an empty string | accepted as `{}` (repair) | `empty_arguments` |
| call id missing, empty or reused | stable id `call_<n>` synthesised and used for the result | `synthesised_call_id` |
| finish_reason `tool_calls` with no calls, or no text and no calls | re-asked up to `MAX_EMPTY_REPLIES`, then `EndpointFormatError` | `empty_reply` |
| finish_reason `stop` with calls / `tool_calls` with text only | the message's content wins | `finish_reason_mismatch` |
| finish_reason `length` | text accepted as truncated; calls accepted if their JSON parses, else as malformed | `truncated_reply` |
| text and calls in one reply | calls kept, text dropped (τ² allows one or the other) | `dropped_text` |
| content as a list of text parts | parts joined into the text | - |
| HTTP errors, timeouts (after the client's retries) | `InfrastructureError` | - |
| budget used up (with calls the model just issued: not executed) | stop text + τ²'s stop token | `budget_exhausted` |
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai
from tau2.agent.base import BaseAgent
from tau2.data_model.message import AssistantMessage, MultiToolMessage, ToolCall, ToolMessage, UserMessage

from pytest_ecdysis.core.errors import EndpointFormatError, InfrastructureError

from . import closing, config, context, feedback, grounding, prompts
from . import tools as tool_interface

STOP_TOKEN = "###STOP###"


@dataclass
class HarnessState:
    """The conversation as the model sees it (OpenAI chat dicts, no system prompt), and call ids -> calls."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)


@dataclass
class ParsedCall:
    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    problem: str | None = None  # why the arguments are unusable; None when valid


class HarnessAgent(BaseAgent):
    """The example harness's agent (τ² `BaseAgent`)."""

    def __init__(
        self,
        *,
        tools: list,
        domain_policy: str,
        client: openai.OpenAI,
        model: str,
        max_steps_hint: int | None = None,
    ) -> None:
        self.tools = tools
        self.schemas = tool_interface.tool_schemas(tools)
        self.system_prompt = prompts.build_system_prompt(domain_policy)
        self.client = client
        self.model = model
        self.max_steps_hint = max_steps_hint
        self.harness_notes: list[dict[str, Any]] = []
        self.usage = {"prompt": 0, "completion": 0, "total": 0}
        self.model_calls = 0
        self.ids_seen: set[str] = set()
        self.synthesised = 0
        self.seed: int | None = None

    # -- τ² agent interface -------------------------------------------------------------------------

    def get_init_state(self, message_history: list | None = None) -> HarnessState:
        state = HarnessState()
        for message in message_history or []:
            self._receive(message, state)
        return state

    def generate_next_message(
        self, message: Any, state: HarnessState
    ) -> tuple[AssistantMessage, HarnessState]:
        self._receive(message, state)
        return self._respond(state), state

    def stop(self, message: Any = None, state: Any = None) -> None:
        pass

    @classmethod
    def is_stop(cls, message: AssistantMessage) -> bool:
        return bool(message.content) and STOP_TOKEN in message.content

    def set_seed(self, seed: int) -> None:
        self.seed = seed

    # -- incoming messages -----------------------------------------------------------------------

    def _receive(self, message: Any, state: HarnessState) -> None:
        if isinstance(message, MultiToolMessage):
            for tool_message in message.tool_messages:
                self._receive(tool_message, state)
        elif isinstance(message, ToolMessage):
            name, args = state.calls.get(message.id, ("unknown", {}))
            content = feedback.format_tool_result(name, args, message.content, bool(message.error))
            state.messages.append({"role": "tool", "tool_call_id": message.id, "content": content})
        elif isinstance(message, UserMessage):
            state.messages.append({"role": "user", "content": message.content or ""})
        elif isinstance(message, AssistantMessage):  # only when resuming from a history
            if message.tool_calls:
                for call in message.tool_calls:
                    state.calls[call.id] = (call.name, call.arguments)
                    self.ids_seen.add(call.id)
                state.messages.append(
                    _assistant_calls_dict(
                        [(c.id, c.name, json.dumps(c.arguments)) for c in message.tool_calls]
                    )
                )
            else:
                state.messages.append({"role": "assistant", "content": message.content or ""})

    # -- the loop ---------------------------------------------------------------------------------

    def _respond(self, state: HarnessState) -> AssistantMessage:
        empty_replies = 0
        checked = False
        while True:
            if self.model_calls >= config.MAX_MODEL_CALLS:
                return self._budget_stop([])
            choice = self._complete(state)
            self.model_calls += 1
            step = self.model_calls
            message, finish = choice.message, getattr(choice, "finish_reason", None)
            raw_calls = list(getattr(message, "tool_calls", None) or [])
            text = _text_of(getattr(message, "content", None)).strip()

            if raw_calls:
                calls = [self._parse_call(raw, step) for raw in raw_calls]
                if text:
                    self._note(
                        "dropped_text", f"reply had text and {len(calls)} tool call(s); text dropped", step
                    )
                if finish == "stop":
                    self._note(
                        "finish_reason_mismatch", "finish_reason 'stop' with tool calls; calls accepted", step
                    )
                if finish == "length":
                    self._note(
                        "truncated_reply",
                        "finish_reason 'length' with tool calls; calls whose arguments parse are accepted",
                        step,
                    )
                bad = [c for c in calls if c.problem]
                if bad:
                    self._give_back_malformed(calls, state, step)
                    continue
                if self.model_calls >= config.MAX_MODEL_CALLS:
                    return self._budget_stop(calls)
                return self._emit_calls(calls, state)

            if not text:
                empty_replies += 1
                why = (
                    "finish_reason 'tool_calls' with no tool calls"
                    if finish == "tool_calls"
                    else f"no text and no tool calls (finish_reason {finish!r})"
                )
                if empty_replies > config.MAX_EMPTY_REPLIES:
                    self._note("empty_reply", f"{why}; giving up after {empty_replies} empty replies", step)
                    raise EndpointFormatError(
                        f"the endpoint returned {empty_replies} empty replies in a row ({why})"
                    )
                self._note("empty_reply", f"{why}; asked again", step)
                continue
            if finish == "length":
                self._note("truncated_reply", "finish_reason 'length'; text accepted as truncated", step)
            elif finish == "tool_calls":
                self._note(
                    "finish_reason_mismatch", "finish_reason 'tool_calls' with text only; text accepted", step
                )
            candidate = {"role": "assistant", "content": text}
            if not checked:
                check = closing.check_before_end([*state.messages, candidate])
                if check:
                    checked = True
                    state.messages += [candidate, {"role": "user", "content": check}]
                    self._note("completion_check", "closing reply answered with a check message", step)
                    continue
            state.messages.append(candidate)
            return AssistantMessage(role="assistant", content=text)

    def _complete(self, state: HarnessState) -> Any:
        """One model call; returns the first choice. Raises InfrastructureError, EndpointFormatError."""
        messages = context.select_messages(self.system_prompt, state.messages)
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                tools=self.schemas,
                temperature=config.TEMPERATURE,
                timeout=config.REQUEST_TIMEOUT_S,
            )
        except openai.APIStatusError as exc:
            raise InfrastructureError(
                f"model endpoint answered HTTP {exc.status_code}: {exc.message}"
            ) from exc
        except openai.APIError as exc:
            raise InfrastructureError(f"model endpoint failed: {type(exc).__name__}: {exc}") from exc
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.usage["prompt"] += getattr(usage, "prompt_tokens", 0) or 0
            self.usage["completion"] += getattr(usage, "completion_tokens", 0) or 0
            self.usage["total"] += getattr(usage, "total_tokens", 0) or 0
        choices = getattr(response, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise EndpointFormatError(f"the endpoint's reply has no choices/message: {str(response)[:200]}")
        return choices[0]

    def _parse_call(self, raw: Any, step: int) -> ParsedCall:
        function = getattr(raw, "function", None)
        name = getattr(function, "name", None)
        if not isinstance(name, str) or not name:
            raise EndpointFormatError(f"the endpoint returned a tool call without a function name: {raw!r}")
        call_id = getattr(raw, "id", None)
        if not isinstance(call_id, str) or not call_id.strip() or call_id in self.ids_seen:
            problem = (
                "missing" if not call_id else ("empty" if not str(call_id).strip() else f"reused ({call_id})")
            )
            self.synthesised += 1
            new_id = f"call_{self.synthesised}"
            while new_id in self.ids_seen:
                self.synthesised += 1
                new_id = f"call_{self.synthesised}"
            self._note("synthesised_call_id", f"tool call id {problem} for {name}; using {new_id}", step)
            call_id = new_id
        self.ids_seen.add(call_id)
        arguments = getattr(function, "arguments", None)
        if isinstance(arguments, dict):
            self._note(
                "arguments_object",
                f"arguments of {name} arrived as a JSON object, not a string; accepted",
                step,
            )
            return ParsedCall(call_id, name, arguments, json.dumps(arguments))
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            self._note("empty_arguments", f"arguments of {name} were empty; sent as {{}}", step)
            return ParsedCall(call_id, name, {}, "{}")
        raw_text = arguments if isinstance(arguments, str) else repr(arguments)
        try:
            parsed = json.loads(raw_text)
        except ValueError as exc:
            return ParsedCall(call_id, name, {}, raw_text, problem=str(exc))
        if not isinstance(parsed, dict):
            return ParsedCall(
                call_id, name, {}, raw_text, problem=f"a JSON {type(parsed).__name__}, not an object"
            )
        return ParsedCall(call_id, name, parsed, raw_text)

    def _give_back_malformed(self, calls: list[ParsedCall], state: HarnessState, step: int) -> None:
        """Answer a reply with malformed arguments ourselves: nothing is executed, each call gets an error."""
        state.messages.append(_assistant_calls_dict([(c.id, c.name, c.raw_arguments) for c in calls]))
        for call in calls:
            if call.problem:
                content = feedback.malformed_arguments_error(call.name, call.raw_arguments, call.problem)
                self._note(
                    "malformed_arguments",
                    f"arguments of {call.name} not valid JSON ({call.problem}); "
                    "not executed, tool error returned",
                    step,
                )
            else:
                content = feedback.not_executed_error(call.name)
            state.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})

    def _emit_calls(self, calls: list[ParsedCall], state: HarnessState) -> AssistantMessage:
        tool_calls = []
        words = grounding.vocabulary(state.messages)
        for call in calls:
            args = tool_interface.normalise_arguments(call.name, call.arguments)
            repairs: list[tuple[str, str]] = []
            args = grounding.ground(args, words, repairs)
            for sent, held in repairs:
                self._note(
                    "near_miss_repair",
                    f"{call.name}: {sent!r} is not in the conversation; sent {held!r}",
                    self.model_calls,
                )
            state.calls[call.id] = (call.name, args)
            tool_calls.append(ToolCall(id=call.id, name=call.name, arguments=args, requestor="assistant"))
        state.messages.append(
            _assistant_calls_dict([(c.id, c.name, json.dumps(c.arguments)) for c in tool_calls])
        )
        return AssistantMessage(role="assistant", content=None, tool_calls=tool_calls)

    def _budget_stop(self, pending: list[ParsedCall]) -> AssistantMessage:
        limit = config.MAX_MODEL_CALLS
        text = f"I'm sorry, I have to stop here: the step budget of {limit} model calls reached"
        detail = f"step budget of {limit} model calls reached"
        if pending:
            names = ", ".join(c.name for c in pending)
            text += f" before the call to {names} could be made"
            detail += f" with a tool call pending ({names}); not executed"
        self._note(
            "budget_exhausted",
            detail,
            self.model_calls,
            pending_tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in pending],
        )
        return AssistantMessage(role="assistant", content=f"{text}. {STOP_TOKEN}")

    def _note(self, kind: str, detail: str, step: int | None, **extra: Any) -> None:
        self.harness_notes.append({"kind": kind, "detail": detail, "step": step, **extra})


def _text_of(content: Any) -> str:
    """Message text; a list of content parts (some servers send `[{"type": "text", "text": ...}]`) is joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") if isinstance(p, dict) else str(getattr(p, "text", "")) for p in content
        )
    return ""


def _assistant_calls_dict(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    # content "" rather than OpenAI's null: llama-cpp-python's server answers null with HTTP 500
    # (docs/real-model.md); OpenAI, vLLM and Ollama take either
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in calls
        ],
    }
