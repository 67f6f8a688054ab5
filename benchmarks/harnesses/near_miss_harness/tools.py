"""Tool interface layer: the schemas the model sees and argument normalisation before a call.

`normalise_arguments` runs on every tool call before it is sent to the environment ("action
realisation"). v1 strips surrounding whitespace from string values and upper-cases airline reservation
ids (τ² airline reservation ids are six upper-case letters/digits, e.g. "ZFA04Y").
"""

from typing import Any

UPPER_CASE_ARGUMENTS = ("reservation_id",)


def tool_schemas(tools: list) -> list[dict[str, Any]]:
    """OpenAI function-tool schemas of τ²'s tools, as τ² builds them (`tool.openai_schema`)."""
    return [tool.openai_schema for tool in tools]


def _normalise_value(key: str, value: Any) -> Any:
    if isinstance(value, str):
        value = value.strip()
        if key in UPPER_CASE_ARGUMENTS:
            value = value.upper()
        return value
    if isinstance(value, list):
        return [_normalise_value(key, v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise_value(k, v) for k, v in value.items()}
    return value


def normalise_arguments(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Arguments as they will be sent to the environment (a new dict; `args` is not changed)."""
    return {key: _normalise_value(key, value) for key, value in args.items()}
