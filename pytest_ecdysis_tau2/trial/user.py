"""A τ²-style user simulator over the suite's openai client.

The system prompt is τ²'s own: `simulation_guidelines.md` from the installed package plus the task's user
scenario, in τ²'s `SYSTEM_PROMPT` template. The user ends the conversation with τ²'s stop tokens
(`###STOP###`, `###TRANSFER###`, `###OUT-OF-SCOPE###`). τ²'s orchestrator calls the user's methods
synchronously although `BaseUser` declares them `async`, so they are plain methods here.

Dual control (τ² telecom): given the environment's user tools (`tools`), the prompt is τ²'s guidelines
for a user with tools, the request offers their schemas, and the user's tool calls (requestor `user`) go
to the environment like τ²'s `UserSimulator` sends them; their results come back to the user, never to the
agent. A tool call naming a tool the user does not have, or with arguments that are not a JSON object,
raises `UserToolCallError` (the trial ends as `user_error`, kept out of the evidence: the user
simulator's fault, not the agent's).

An empty or unusable reply of the user model is not the agent's fault: it raises `InfrastructureError`
so it never becomes a failure record. Reasoning in the user model's reply (`<think>` blocks) is removed
before τ²'s stop check, so a stop token the model only thought about does not end the conversation.

`user_aborted(messages)` flags the user simulator's endings that are not the agent's doing (`###OUT-OF-SCOPE###`,
a `###TRANSFER###` the agent never asked for, a `###STOP###` before any request), kept out of the evidence.
Content given as a list of parts is joined from its text parts (`content_text`), as on the agent's side. `stop_after_confirmation(messages, writes)` flags a τ² artefact: the user confirms the agent's yes/no
question and stops in the same message ("Yes, please cancel it. ###STOP###"), so the write it confirmed
never happens and the trial fails through no fault of the agent. This module must not import harness code.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, cast

import openai

from pytest_ecdysis.core.errors import InfrastructureError
from pytest_ecdysis.endpoint.refusals import error_message
from pytest_ecdysis.endpoint.replies import strip_reasoning

from ..tasks.tau2lib import load_tau2

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

_t = load_tau2()


class UserToolCallError(Exception):
    """The user model called a tool the user does not have, or sent arguments that are not a JSON object:
    the user simulator's fault (termination `user_error`), never the agent's."""


_BaseUser: Any = _t.BaseUser  # τ² ships no type information: its base class is Any to mypy


class Tau2User(_BaseUser):
    """τ²'s user simulator behaviour, over an `openai.OpenAI` client (role header `user`).

    `tools`: τ²'s user tools (`environment.get_user_tools()`, telecom), or None for a user without tools.
    """

    def __init__(
        self, *, scenario: Any, client: openai.OpenAI, model: str, tools: list[Any] | None = None
    ) -> None:
        super().__init__(instructions=str(scenario), llm=model)
        self.client = client
        self.model = model
        self.tools = list(tools) if tools else None
        self.seed: int | None = None
        self.usage = {"prompt": 0, "completion": 0, "total": 0}

    @property
    def system_prompt(self) -> str:
        return _t.USER_SYSTEM_PROMPT.format(
            global_user_sim_guidelines=_t.get_global_user_sim_guidelines(use_tools=self.tools is not None),
            instructions=self.instructions,
        )

    def get_init_state(self, message_history: list | None = None) -> Any:
        return _t.UserState(
            system_messages=[_t.SystemMessage(role="system", content=self.system_prompt)],
            messages=list(message_history or []),
        )

    @classmethod
    def is_stop(cls, message: Any) -> bool:
        content = message.content or ""
        return any(token in content for token in (_t.STOP, _t.TRANSFER, _t.OUT_OF_SCOPE))

    def set_seed(self, seed: int) -> None:
        self.seed = seed

    def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
        """Answer the agent's last text message (or the results of the user's own tool calls) as the user;
        roles are flipped for the model: the agent speaks as `user`, the user's own words and tool calls
        are the model's (`assistant`), its tool results are `tool` messages."""
        if isinstance(message, _t.MultiToolMessage):
            state.messages.extend(message.tool_messages)
        else:
            state.messages.append(message)
        api_messages = [
            {"role": "system", "content": state.system_messages[0].content},
            *self._flipped(state),
        ]
        extra: dict[str, Any] = {"tools": [tool.openai_schema for tool in self.tools]} if self.tools else {}
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                # plain JSON dicts; openai types them as TypedDicts of each message kind
                messages=cast("list[ChatCompletionMessageParam]", api_messages),
                **extra,
            )
        except openai.APIStatusError as exc:
            said = error_message(exc.response.content) or exc.message
            raise InfrastructureError(
                f"the user simulator's call (model {self.model!r}) failed: HTTP {exc.status_code}: {said}"
            ) from exc
        except openai.APIError as exc:
            raise InfrastructureError(
                f"the user simulator's call (model {self.model!r}) failed: {exc}"
            ) from exc
        if response.usage is not None:
            self.usage["prompt"] += response.usage.prompt_tokens or 0
            self.usage["completion"] += response.usage.completion_tokens or 0
            self.usage["total"] += response.usage.total_tokens or 0
        reply = response.choices[0].message if response.choices else None
        calls = self._tool_calls(reply) if self.tools else []
        if calls:  # τ²: a message has text or tool calls, never both; the calls go to the environment
            user_message = _t.UserMessage(role="user", content=None, tool_calls=calls)
            state.messages.append(user_message)
            return user_message, state
        content = content_text(reply.content if reply is not None else None)
        content, _ = strip_reasoning(content)  # before the stop check
        if not content:
            raise InfrastructureError(
                f"the user simulator's call (model {self.model!r}) returned an empty reply"
            )
        user_message = _t.UserMessage(role="user", content=content)
        state.messages.append(user_message)
        return user_message, state

    @staticmethod
    def _flipped(state: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for m in state.messages:
            if isinstance(m, _t.AssistantMessage) and m.has_text_content():
                out.append({"role": "user", "content": m.content})
            elif isinstance(m, _t.UserMessage) and m.tool_calls:
                out.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                            }
                            for c in m.tool_calls
                        ],
                    }
                )
            elif isinstance(m, _t.UserMessage) and m.has_text_content():
                out.append({"role": "assistant", "content": m.content})
            elif isinstance(m, _t.ToolMessage) and getattr(m, "requestor", None) == "user":
                out.append({"role": "tool", "tool_call_id": m.id, "content": m.content or ""})
        return out

    def _tool_calls(self, reply: Any) -> list[Any]:
        """The reply's tool calls as τ² `ToolCall`s with requestor `user`.

        Raises:
            UserToolCallError: a name the user's tools do not have, or arguments that are not a JSON object.
        """
        names = {tool.name for tool in self.tools or []}
        calls = []
        for k, call in enumerate(getattr(reply, "tool_calls", None) or []):
            function = getattr(call, "function", None)
            name = getattr(function, "name", None)
            if name not in names:
                raise UserToolCallError(
                    f"the user simulator ({self.model!r}) called user tool {name!r}, which this task's user does "
                    f"not have (its tools: {', '.join(sorted(names))}); the user model's fault, not the agent's"
                )
            raw = getattr(function, "arguments", None) or "{}"
            try:
                arguments = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                raise UserToolCallError(
                    f"the user simulator ({self.model!r}) called user tool {name!r} with arguments that are not a "
                    f"JSON object ({str(raw)[:120]!r}); the user model's fault, not the agent's"
                )
            calls.append(
                _t.ToolCall(
                    id=getattr(call, "id", None) or f"user_call_{k}",
                    name=name,
                    arguments=arguments,
                    requestor="user",
                )
            )
        return calls


#: an agent question that asks for a yes/no confirmation before acting.
CONFIRM_REQUEST = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|would you like( me)? to|do you want( me)? "
    r"to|is (that|this) (correct|right|ok|okay)|are you sure|yes or no|\(yes/no\))\b",
    re.I,
)
#: a user reply that gives the confirmation.
CONFIRMS = re.compile(
    r"^\W*(yes|yeah|yep|yup|sure|ok|okay|correct|confirm(ed)?|please (do|go ahead|proceed)|"
    r"go ahead|that'?s (right|correct))\b",
    re.I,
)


def content_text(content: Any) -> str:
    """A reply's `content` as text: a string as it is; a list of content parts (Mistral's
    `[{"type": "thinking", ...}, {"type": "text", "text": ...}]`) joined from its text parts, as the agent's
    client joins them (`endpoint.ReplyShapeTransport`); a thinking part is never the user's words."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            part = part if isinstance(part, dict) else getattr(part, "__dict__", {})
            if part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "".join(texts)
    return ""


def user_aborted(messages: list[dict[str, Any]]) -> bool:
    """True when the user simulator ended the conversation in a way that is not the agent's doing: τ²'s
    `###OUT-OF-SCOPE###` (its scenario does not say what the agent asked), a `###TRANSFER###` though the
    agent never called a transfer tool (τ²'s user says it only once transferred), or a `###STOP###` as the
    user's first words with no request in them. `messages` as for `stop_after_confirmation`."""
    users = [m for m in messages if m.get("role") == "user" and m.get("content")]
    if not users:
        return False
    last = str(users[-1].get("content") or "")
    if _t.OUT_OF_SCOPE in last:
        return True
    if _t.TRANSFER in last:
        return not any(
            "transfer" in str(c.get("name", "")).lower()
            for m in messages
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        )
    if _t.STOP in last and len(users) == 1:
        said = last
        for token in (_t.STOP, _t.TRANSFER, _t.OUT_OF_SCOPE):
            said = said.replace(token, "")
        return not said.strip(" \n\t.!,")
    return False


def stop_after_confirmation(messages: list[dict[str, Any]], writes: set[str]) -> bool:
    """True when the conversation ended with the user confirming the agent's yes/no question and stopping
    in the same message, with no write tool call after that question.

    `messages` are the trial's message dicts (`runner.message_dict`), `writes` the names of the domain's
    write tools. The stop tokens are τ²'s (`###STOP###`, ...); the user's text besides them must start
    with a confirmation, and the last agent text before it must ask for one.
    """
    if not messages or messages[-1].get("role") != "user":
        return False
    last = str(messages[-1].get("content") or "")
    tokens = (_t.STOP, _t.TRANSFER, _t.OUT_OF_SCOPE)
    if not any(t in last for t in tokens):
        return False
    said = last
    for t in tokens:
        said = said.replace(t, "")
    if not CONFIRMS.search(said.strip()):
        return False
    for message in reversed(messages[:-1]):
        if message.get("role") != "assistant":
            continue
        if any(c.get("name") in writes for c in message.get("tool_calls") or []):
            return False  # a write followed the question
        text = str(message.get("content") or "")
        if text:
            return "?" in text and bool(CONFIRM_REQUEST.search(text))
    return False


#: the policy sentence of τ²'s airline and retail domains that makes a write wait for the user's "yes".
CONFIRMATION_POLICY = re.compile(r"obtain explicit user confirmation", re.I)


def asks_confirmation(environment: Any) -> bool:
    """True when the domain's policy requires explicit user confirmation before a write (airline, retail)."""
    try:
        return bool(CONFIRMATION_POLICY.search(environment.get_policy() or ""))
    except Exception:
        return False


def unconfirmed_writes(messages: list[dict[str, Any]], writes: set[str]) -> list[str]:
    """The agent's write tool calls (names, in order) not preceded by the user's confirmation: the last user
    text before the call does not start with a confirmation (`CONFIRMS`), or no agent text before that
    asked for one (`CONFIRM_REQUEST`). τ²'s policy requires it, τ²'s DB check does not see it (τ² #298).
    `messages` as for `stop_after_confirmation`; user tool calls (telecom) are not the agent's writes."""
    out = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            if call.get("name") in writes and not _confirmed_before(messages[:i]):
                out.append(str(call["name"]))
    return out


def _confirmed_before(messages: list[dict[str, Any]]) -> bool:
    for j in range(len(messages) - 1, -1, -1):
        m = messages[j]
        if m.get("role") == "user" and m.get("content") and not m.get("requestor"):
            if not CONFIRMS.search(str(m["content"]).strip()):
                return False
            asked = [
                str(a.get("content") or "")
                for a in messages[:j]
                if a.get("role") == "assistant" and a.get("content")
            ]
            return bool(asked) and bool(CONFIRM_REQUEST.search(asked[-1]))
    return False
