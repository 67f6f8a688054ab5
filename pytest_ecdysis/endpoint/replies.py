"""Reply shapes of OpenAI-compatible servers that are not what the protocol promises.

Two kinds of text reach `message.content` that are not the model's words to the user:

- *reasoning*: `<think>...</think>` (also `<thinking>`, `<reasoning>`), an unclosed `<think>` cut by the
  token limit, or a lone `</think>` when the chat template opened the block in the prompt (DeepSeek-R1,
  Qwen3). `strip_reasoning(text)` removes it; servers with a reasoning parser put it in
  `reasoning_content` instead, which callers drop.
- *tool calls written as text*: servers without a tool parser for the model (vLLM without
  `--enable-auto-tool-choice`, llama.cpp without `--jinja`, some Ollama templates) return the call markup
  in `content` with `tool_calls` empty and `finish_reason` `stop`. `find_text_tool_calls(text)` recognises
  the common markups:

  | style | markup |
  | --- | --- |
  | `hermes` | `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen 2.5/3; closing tag optional at the end) |
  | `function_tag` | `<function=NAME>{json}</function>` (Llama 3.1) or `<function=NAME><parameter=K>V</parameter></function>` (Qwen3-Coder) |
  | `mistral` | `[TOOL_CALLS][{"name": ..., "arguments": {...}}]` or `[TOOL_CALLS]NAME[ARGS]{json}` |
  | `python_tag` | `<|python_tag|>{"name": ..., "parameters": {...}}` (Llama 3.x) |

  Each call found is `TextCall(name, arguments, problem)`: `arguments` is the JSON text of the arguments
  (as a native call carries them), or the raw text when it is not a JSON object (`problem` says why), so a
  caller can give it the same outcome as a native call with that defect.

A tool call's *name* may carry chat-template markup too: a special token and what follows it
(`get_reservation_details<|channel|>commentary`, vLLM with gpt-oss), a namespace (`functions.get_x`),
a closing tag. `repair_tool_name(name, known)` finds the one known tool such a name stands for;
`has_markup(name)` says whether a name carries markup at all.

A third shape is no reply at all: an HTTP 200 to `/chat/completions` whose body is not a chat completion
(an HTML page from a proxy, truncated JSON, `choices: []`, an event stream the request did not ask for).
`completion_problem(path, content_type, body, streamed=...)` names what is wrong with it, or returns None.

Pure functions, no I/O; used by the trial's client layer (`pytest_ecdysis_tau2/trial/endpoint.py`), the τ²
user simulator and the role client. This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_UNCLOSED = re.compile(r"<(think|thinking|reasoning)>.*\Z", re.S | re.I)
_LONE_CLOSE = re.compile(r"\A.*?</(think|thinking|reasoning)>", re.S | re.I)


def strip_reasoning(text: str | None) -> tuple[str, str]:
    """`(spoken, reasoning)`: `text` without its reasoning blocks, and the reasoning removed (both stripped)."""
    if not text:
        return "", ""
    removed: list[str] = []

    def cut(match: re.Match) -> str:
        removed.append(match.group(0))
        return ""

    out = _BLOCK.sub(cut, text)
    out = _LONE_CLOSE.sub(cut, out, count=1)
    out = _UNCLOSED.sub(cut, out, count=1)
    return out.strip(), "\n".join(r.strip() for r in removed).strip()


@dataclass(frozen=True)
class TextCall:
    """One tool call found in text. `arguments` is JSON text (an object) or, when `problem` is set, the raw
    argument text that is not a JSON object."""

    name: str
    arguments: str
    problem: str | None = None


@dataclass(frozen=True)
class TextCalls:
    """What `find_text_tool_calls` found: the calls, the markup style, and the text outside the markup."""

    calls: list[TextCall] = field(default_factory=list)
    style: str | None = None
    rest: str = ""

    def __bool__(self) -> bool:
        return bool(self.calls)


def _arguments(value: object) -> tuple[str, str | None]:
    """(JSON text, problem) of an arguments value that may be an object, a JSON string or anything else."""
    if isinstance(value, dict):
        return json.dumps(value), None
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else {}
        except ValueError as exc:
            return value, f"arguments are not valid JSON ({exc})"
        if isinstance(parsed, dict):
            return json.dumps(parsed), None
        return value, f"arguments are a JSON {type(parsed).__name__}, not an object"
    if value is None:
        return "{}", None
    return json.dumps(value), f"arguments are a JSON {type(value).__name__}, not an object"


def _from_object(obj: object) -> TextCall | None:
    """A call from `{"name", "arguments"|"parameters"}` (or `{"function": {...}}`), else None."""
    if not isinstance(obj, dict):
        return None
    call: dict[str, Any] = obj["function"] if isinstance(obj.get("function"), dict) else obj
    name = call.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    args, problem = _arguments(call.get("arguments", call.get("parameters")))
    return TextCall(name.strip(), args, problem)


def _json_calls(body: str) -> list[TextCall] | None:
    """Calls in a JSON text: one object or a list of them; None when the text is not JSON."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    items = data if isinstance(data, list) else [data]
    calls = [c for c in (_from_object(i) for i in items) if c is not None]
    return calls if calls and len(calls) == len(items) else None


def _undecodable(body: str) -> TextCall:
    """A call whose markup body is not JSON: the name if it can be read, the raw text as arguments."""
    name = re.search(r'"name"\s*:\s*"([^"]+)"', body)
    return TextCall(name.group(1) if name else "", body.strip(), "the tool call markup is not valid JSON")


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_FUNCTION = re.compile(r"<function=([^>\s]+)>\s*(.*?)\s*(?:</function>|\Z)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\s*(.*?)\s*</parameter>", re.S)
_MISTRAL_ARGS = re.compile(
    r"\[TOOL_CALLS\]\s*([A-Za-z_][\w.-]*)\s*\[ARGS\]\s*(.*?)(?=\[TOOL_CALLS\]|\Z)", re.S
)
_PYTHON_TAG = re.compile(r"<\|python_tag\|>\s*(.*)\Z", re.S)


def find_text_tool_calls(text: str | None) -> TextCalls:
    """Tool calls written as text in `text` (reasoning already stripped), per the table of the module
    docstring. Never raises: markup whose body is not JSON is a call with `problem` set (and the name
    when it can be read); text without markup gives an empty `TextCalls`."""
    if not text:
        return TextCalls()
    if "<tool_call>" in text:
        calls = []
        for body in _HERMES.findall(text):
            found = _json_calls(body)
            calls.extend(found if found is not None else [_undecodable(body)])
        return TextCalls(calls, "hermes", _HERMES.sub("", text).strip())
    if "<function=" in text:
        calls = []
        for name, body in _FUNCTION.findall(text):
            params = _PARAMETER.findall(body)
            if params:
                calls.append(TextCall(name, json.dumps({k: _scalar(v) for k, v in params})))
            else:
                args, problem = _arguments(body)
                calls.append(TextCall(name, args, problem))
        return TextCalls(calls, "function_tag", _FUNCTION.sub("", text).strip())
    at = text.find("[TOOL_CALLS]")
    if at >= 0:
        body, rest = text[at:], text[:at].strip()
        if "[ARGS]" in body:
            calls = [TextCall(name, *_arguments(args.strip())) for name, args in _MISTRAL_ARGS.findall(body)]
            return TextCalls(calls or [_undecodable(body)], "mistral", rest)
        payload = body[len("[TOOL_CALLS]") :].strip()
        found = _json_calls(payload)
        return TextCalls(found if found is not None else [_undecodable(payload)], "mistral", rest)
    match = _PYTHON_TAG.search(text)
    if match:
        found = _json_calls(match.group(1).strip())
        return TextCalls(
            found if found is not None else [_undecodable(match.group(1))],
            "python_tag",
            text[: match.start()].strip(),
        )
    return TextCalls()


_SPECIAL_TOKEN = re.compile(r"<\|[^<>|]*\|>|</?[A-Za-z_][\w:-]*>|\[/?[A-Z_]{3,}\]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def has_markup(name: str) -> bool:
    """True when a tool name carries chat-template markup: a special token (`<|channel|>`), a tag
    (`</tool_call>`), a bracket token (`[TOOL_CALLS]`), or whitespace."""
    return bool(_SPECIAL_TOKEN.search(name)) or name != name.strip() or any(c.isspace() for c in name)


def repair_tool_name(name: str, known: set[str] | frozenset[str]) -> str | None:
    """The known tool `name` stands for: `name` itself when known; else, when exactly one known tool name
    appears in it as a whole identifier (the rest being markup, a namespace such as `functions.` or a
    channel word), that one; else None (unknown, or ambiguous: two known names in it).

    `get_reservation_details<|channel|>commentary` -> `get_reservation_details`;
    `functions.get_user_details` -> `get_user_details`; `get_user_detail` -> None (a typo is the model's)."""
    if name in known:
        return name
    found = {token for token in _IDENTIFIER.findall(name) if token in known}
    return found.pop() if len(found) == 1 else None


def _scalar(value: str) -> object:
    """A `<parameter=K>V</parameter>` value: JSON when it parses (numbers, lists), else the text."""
    try:
        return json.loads(value)
    except ValueError:
        return value


#: characters of an unusable body quoted in the error (enough to recognise an HTML page or a proxy's message).
QUOTED_CHARS = 200


def asked_to_stream(request_body: bytes) -> bool:
    """True when a chat-completions request body asks for a streamed reply (`"stream": true`)."""
    try:
        doc = json.loads(request_body or b"{}")
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


def completion_problem(path: str, content_type: str, body: bytes, *, streamed: bool = False) -> str | None:
    """What makes an HTTP 200 reply to `path` unusable as a chat completion, or None when it is one.

    Only `.../chat/completions` is checked. A streamed reply (`text/event-stream`) is left alone only
    when the request asked for one (`streamed`, see `asked_to_stream`); an event stream nobody asked
    for (Ollama and some proxies stream whatever the request said) is unusable: the openai client hands
    the caller a string, not a completion. Otherwise the body must be a JSON object with a non-empty
    `choices` list whose first item has a `message` object. The content-type is not required to be JSON
    (the openai client reads a JSON body whatever its content-type) but is named in the answer, with the
    first `QUOTED_CHARS` characters of the body.
    """
    if not path.rstrip("/").endswith("/chat/completions"):
        return None
    if "event-stream" in content_type.lower():
        if streamed:
            return None
        return _quoted(
            'an event stream though the request did not ask for streaming ("stream" was not true)',
            content_type,
            body,
        )
    try:
        doc = json.loads(body)
    except ValueError:
        what = "an empty body" if not body.strip() else "a body that is not JSON"
    else:
        choices = doc.get("choices") if isinstance(doc, dict) else None
        if (
            isinstance(choices, list)
            and choices
            and isinstance(choices[0], dict)
            and isinstance(choices[0].get("message"), dict)
        ):
            return None
        what = "JSON without choices[0].message" if isinstance(doc, dict) else "JSON that is not an object"
    return _quoted(what, content_type, body)


def _quoted(what: str, content_type: str, body: bytes) -> str:
    quoted = body[: QUOTED_CHARS * 4].decode("utf-8", "replace")[:QUOTED_CHARS]
    more = "..." if len(body) > len(quoted.encode()) else ""
    return f"{what} (content-type {content_type or 'none'}, {len(body)} bytes): {quoted!r}{more}"
