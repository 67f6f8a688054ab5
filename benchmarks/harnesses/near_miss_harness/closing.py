"""Trajectory regulation: a check before the agent's text reply may close the conversation.

`check_before_end(history)` sees the conversation so far, the last entry being the agent's candidate
text reply (OpenAI chat dicts). It returns None to let the reply go to the user, or the text of a check
message: the harness then sends that text to the model as a user-role message (the user simulator
never sees it) and asks for a new reply, which goes out unchecked. `looks_like_closing` is a helper for
deciding when a reply is a closing one.

v1 returns None (no completion check).
"""

from typing import Any

CLOSING_WORDS = (
    "anything else",
    "is there anything",
    "have a great",
    "have a nice",
    "glad i could help",
    "goodbye",
    "take care",
)


def looks_like_closing(text: str) -> bool:
    """True when a reply reads like the end of the conversation."""
    lowered = text.lower()
    return any(word in lowered for word in CLOSING_WORDS)


def check_before_end(history: list[dict[str, Any]]) -> str | None:
    """v1: no completion check."""
    return None
