"""Recognise "the request does not fit the model's context window" in an endpoint's error, across servers.

    context_overflow(400, '{"error": {"code": "context_length_exceeded", "message": "..."}}')  # -> the message

Servers say it differently (the fixtures under `tests/fixtures/replies/` hold each shape):

| server | status | how it says it |
| --- | --- | --- |
| OpenAI | 400 | `code: "context_length_exceeded"`, "This model's maximum context length is N tokens..." |
| vLLM | 400 | "This model's maximum context length is N tokens. However, you requested M tokens ..." (`type: BadRequestError`) |
| llama-cpp-python | 400 | `code: "context_length_exceeded"` (its own "Requested tokens (N) exceed context window of M" as a 500 elsewhere) |
| llama.cpp `llama-server` | 400 | `type: "exceed_context_size_error"`, "the request exceeds the available context size" |
| LiteLLM proxy | 400 | "litellm.ContextWindowExceededError: ..." (`code: "400"`) |
| TGI | 422 | "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. Given: ..." (`error_type: validation`) |
| Ollama | - | no error: it silently drops the start of the prompt (set `num_ctx` large enough) |

A context overflow is never retried and never infrastructure: the prompt is too long for this model, and
the fix is a shorter prompt (the harness's context management, fewer evidence records) or a model or
server with a longer context. This module must not import anything heavy.
"""

from __future__ import annotations

import re

PATTERN = re.compile(
    r"context_length_exceeded|exceed_context_size_error|ContextWindowExceededError"
    r"|maximum context length|exceeds? (?:the )?(?:available )?context (?:window|size|length)"
    r"|context window (?:exceeded|of \d+)|prompt is too long|input (?:token count|tokens?) exceeds?"
    r"|`?inputs`? tokens \+ `?max_new_tokens`? must be <=|`?inputs`? must have less than \d+ tokens",
    re.IGNORECASE,
)


def context_overflow(status: int | None, text: str) -> str | None:
    """The endpoint's message when an error reply (HTTP status >= 400) says the request did not fit the
    model's context window, else None. `text` is the error body or the client's error message."""
    if status is not None and status < 400:
        return None
    match = PATTERN.search(text or "")
    if match is None:
        return None
    message = re.search(r"""["']message["']\s*:\s*(["'])(.*?)(?<!\\)\1""", text or "", re.S)
    return (message.group(2) if message else text).strip()[:500]


LIMIT = re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE)
PARTS = re.compile(r"\((\d+) in the messages, (\d+) in the completion\)", re.IGNORECASE)


def completion_room(text: str) -> int | None:
    """Tokens left for the completion when only the asked completion did not fit: the prompt is shorter
    than the context but prompt + `max_tokens` is not. vLLM's OpenAI server (before its "input tokens plus
    'max_tokens'" wording, which names the parameter) refuses that with "maximum context length is N
    tokens. However, you requested M tokens (P in the messages, C in the completion)"; llama-cpp-python
    uses the same words only when the prompt alone does not fit (it cuts `max_tokens` itself), so the room
    is then None."""
    limit, parts = LIMIT.search(text or ""), PARTS.search(text or "")
    if not limit or not parts:
        return None
    room = int(limit.group(1)) - int(parts.group(1))
    return room if room > 0 else None
