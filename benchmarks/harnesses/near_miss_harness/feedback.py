"""Environment contract layer: how tool results and errors are fed back to the model.

v1 passes errors through as `Error: <τ² text>` and cuts results longer than `MAX_TOOL_RESULT_CHARS`
with a `… [truncated N chars]` marker.
"""

from typing import Any

from . import config


def format_tool_result(name: str, args: dict[str, Any], content: str | None, error: bool) -> str:
    """The tool message content the model sees for one executed call."""
    text = content if content is not None else ""
    if error:
        return text if text.startswith("Error") else f"Error: {text}"
    if len(text) > config.MAX_TOOL_RESULT_CHARS:
        cut = len(text) - config.MAX_TOOL_RESULT_CHARS
        text = text[: config.MAX_TOOL_RESULT_CHARS] + f"… [truncated {cut} chars]"
    return text


def malformed_arguments_error(name: str, raw: str, problem: str) -> str:
    """The tool message for a call whose arguments were not valid JSON (the call was not executed)."""
    shown = raw if len(raw) <= 300 else raw[:300] + "…"
    return (
        f"Error: the arguments of your call to {name} were not valid JSON ({problem}): {shown}. "
        "The call was not executed. Send the call again with the arguments as one JSON object."
    )


def not_executed_error(name: str) -> str:
    """The tool message for a valid call sent in the same reply as a malformed one."""
    return (
        f"Error: the call to {name} was not executed because another call in the same reply had "
        "invalid arguments. Send it again if it is still needed."
    )
