"""A generic near-miss check before a call is sent: an id-like argument value that the conversation does
not hold, but that is one edit (or only case and spaces) away from exactly one value it does hold, is
rewritten to that value and the rewrite is recorded as a harness note (`near_miss_repair`).

Knows nothing of τ²'s domains: it reads the words of the messages the model was shown (user turns, tool
results) and the values of the call. Part of a benchmark harness
(`benchmarks/near_miss_harness.py` copies it into a copy of the example), not a shipped one: it measures
which failures such a check cures.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(r"[A-Za-z0-9#_\-]{4,}")


def _id_like(value: str) -> bool:
    return 4 <= len(value) <= 40 and " " not in value.strip() and any(c.isdigit() for c in value)


def _one_edit(a: str, b: str) -> bool:
    """True when `a` and `b` differ by one substitution, insertion or deletion."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def vocabulary(messages: list[dict[str, Any]]) -> set[str]:
    """Every id-like token of the user and tool messages."""
    words: set[str] = set()
    for message in messages:
        if message.get("role") in ("user", "tool") and isinstance(message.get("content"), str):
            words.update(w for w in _TOKEN.findall(message["content"]) if _id_like(w))
    return words


def nearest(value: str, words: set[str]) -> str | None:
    """The one held value `value` is a near miss of, or None (held as is, none, or ambiguous)."""
    if value in words or not _id_like(value):
        return None
    bare = value.strip()
    close = {w for w in words if w.lower() == bare.lower() or _one_edit(bare, w)}
    return next(iter(close)) if len(close) == 1 else None


def ground(args: Any, words: set[str], repairs: list[tuple[str, str]]) -> Any:
    """A copy of `args` with near misses rewritten; each rewrite appended to `repairs` as (sent, held)."""
    if isinstance(args, dict):
        return {k: ground(v, words, repairs) for k, v in args.items()}
    if isinstance(args, list):
        return [ground(v, words, repairs) for v in args]
    if isinstance(args, str):
        held = nearest(args, words)
        if held is not None:
            repairs.append((args, held))
            return held
    return args
