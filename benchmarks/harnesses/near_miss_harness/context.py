"""Trajectory regulation: what part of the conversation the model sees on each request.

v1 keeps the system prompt plus the last `KEEP_LAST_MESSAGES` messages, never splitting a tool call from
its result (a window that would start with orphan tool results starts after them instead).
"""

from typing import Any

from . import config


def select_messages(system_prompt: str, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of one request: `[system] + window of history` (OpenAI chat format dicts)."""
    start = max(0, len(history) - config.KEEP_LAST_MESSAGES)
    while start < len(history) and history[start].get("role") == "tool":
        start += 1
    return [{"role": "system", "content": system_prompt}, *history[start:]]
