"""The real alternatives to a value: what a reasoning error of the simulated model picks instead of it.

A real model that reasons wrongly does not change one character of the right value; it picks another
value that exists (another of the user's reservations, a flight on the same route that breaks the policy,
an amount from the wrong line; `docs/data/tau2-failure-modes.md`, "reasoning failure" and "policy
violation"). `alternatives(gold, path, messages)` lists such values from what the model was sent: the
leaves of the tool results (JSON objects, their keys included, as τ²'s results are) whose key names the same thing as the argument (`reservation_id` <- `reservations`, `reservation_id`;
`payment_id` <- `payment_methods`; `amount` <- `price`, `amount`, `total`) and whose value has the same
shape as the right one (same type; a string of the same length, separators and letter case; a number of
the same order of magnitude), and the ids the user said of the same shape. A harness check "is this value in the conversation?" or "is it one edit
from a value there?" cannot tell such a value from the right one. Pure functions; no I/O; no tau2.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Key stems that name the same kind of value (an amount under any of these names is an amount).
_SYNONYMS: dict[str, str] = {
    "price": "amount",
    "total": "amount",
    "refund": "amount",
    "cost": "amount",
    "balance": "amount",
    "paid": "amount",
    "fare": "amount",
    "payment_method": "payment",
    "method": "payment",
    "flight_number": "flight",
    "number": "flight",
}
_SUFFIXES = ("_ids", "_id", "_numbers", "_number", "_methods", "_method", "s")
_MAX_TEXT = 200_000
#: An id-like word: letters, digits, `#`, `_`, `-`, with at least one digit.
_ID = re.compile(r"#?(?=[\w\-]*\d)[A-Za-z0-9][\w\-]{3,}")


def stem(key: str) -> str:
    """The kind a key names: lower case, its last `[i]`/path part, without an id/number/plural suffix."""
    key = re.sub(r"\[\d+\]", "", key).split(".")[-1].lower()
    if key in _SYNONYMS:
        return _SYNONYMS[key]
    for suffix in _SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix) + 2:
            key = key[: -len(suffix)]
            break
    return _SYNONYMS.get(key, key)


def _shape(value: str) -> tuple[int, str, bool, bool]:
    """(length, separators, has lower case, has upper case) of a string value."""
    return (
        len(value),
        re.sub(r"[A-Za-z0-9]", "", value),
        any(c.islower() for c in value),
        any(c.isupper() for c in value),
    )


def same_shape(gold: Any, other: Any) -> bool:
    """Whether `other` could stand for `gold`: the same type and form (module docstring)."""
    if isinstance(gold, bool) or isinstance(other, bool):
        return False
    if isinstance(gold, (int, float)) and isinstance(other, (int, float)):
        if gold == 0 or other == 0:
            return False
        ratio = abs(other / gold)
        return 0.2 <= ratio <= 5.0
    if isinstance(gold, str) and isinstance(other, str) and gold and other:
        if " " in gold.strip():
            return False  # free text (a name, a reason) is not picked from a list
        g, o = _shape(gold), _shape(other)
        return g[0] == o[0] and g[1] == o[1] and (o[2] <= g[2]) and (o[3] <= g[3] or not g[3])
    return False


def _leaves(value: Any, key: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((key, k))  # a dict keyed by ids: the keys are values of the parent's kind
            _leaves(v, str(k), out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, key, out)
    else:
        out.append((key, value))


def keyed_values(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(key, value) of every leaf of the JSON tool results of a request, in order."""
    out: list[tuple[str, Any]] = []
    for m in messages:
        if m.get("role") != "tool" or not isinstance(m.get("content"), str):
            continue
        text = m["content"][:_MAX_TEXT]
        try:
            data = json.loads(text)
        except ValueError:
            continue
        _leaves(data, "", out)
    return out


def alternatives(gold: Any, path: str, messages: list[dict[str, Any]]) -> list[Any]:
    """The values of the request that name the same kind of thing as argument `path` and have the shape of
    `gold`, without `gold` itself, in the order first seen (deduplicated)."""
    want = stem(path)
    out: list[Any] = []
    for key, value in keyed_values(messages):
        if value == gold or value in out or not same_shape(gold, value):
            continue
        if stem(key) == want:
            out.append(value)
    if isinstance(gold, str) and _ID.fullmatch(gold):
        # an id the user said ("my orders #W0000001 and #W0000002"): words have no keys, the shape decides
        for m in messages:
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                for word in _ID.findall(m["content"]):
                    if word != gold and word not in out and same_shape(gold, word):
                        out.append(word)
    return out
