"""Argument values of the simulated agent: reading and replacing a value at a path of an arguments
object (`name`, `name[i]`, `a[0].b`), and a plausible wrong value of the same shape (what the model
sends when it guesses or slips). Pure functions; no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_ecdysis.sim.profiles import choose


def wrong_value(value: Any, salt: str) -> Any:
    """A plausible wrong value of the same shape: one digit changed, or a letter changed."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value + 1.0, 2)
    if isinstance(value, list) and value:
        return [wrong_value(value[0], salt), *value[1:]]
    if isinstance(value, str) and value:
        digits = [i for i, c in enumerate(value) if c.isdigit()]
        if digits:
            i = digits[-1]
            return value[:i] + str((int(value[i]) + 1 + choose(8, salt)) % 10) + value[i + 1 :]
        return value[:-1] + ("x" if value[-1] != "x" else "y")
    return value


def _tokens(path: str) -> list[str | int]:
    """`flights[0].flight_number` -> ['flights', 0, 'flight_number']."""
    out: list[str | int] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        if name:
            out.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            out.append(int(index))
            rest = rest[1:] if rest.startswith("[") else rest
    return out


def _get_path(args: Any, path: str) -> Any:
    """The value at `name`, `name[i]` or `a[0].b` of an arguments object."""
    for token in _tokens(path):
        args = args[token]
    return args


def _set_path(args: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Copy of `args` with the value at `path` replaced."""
    out = json.loads(json.dumps(args))
    tokens = _tokens(path)
    target: Any = out
    for token in tokens[:-1]:
        target = target[token]
    target[tokens[-1]] = value
    return out
