"""What the simulated model reads in one request: the text it can see, whether a value is in it, how
far back, and whether an error tells it the form a value must have.

The agent (`sim/agent/trial.py`) takes every argument value and every figure from here, never from the gold
plan: a value the harness cut, hid or never obtained is not in the request, so the model cannot send
it. Cures are decided by the information the text carries, never by a marker word a harness must
print: an error cures a mis-formatted id when it shows the expected form (an example of the right form,
the right value itself, or a statement of the rule the bent value breaks while the right value is
visible elsewhere in the request). This module must not import tau2, a suite or a harness.
"""

from __future__ import annotations

import functools
import re
from typing import Any

#: Tokens that may be ids in a text: letters, digits, `_`, `-`, `#`, `.` (at least 5 characters).
_TOKEN = re.compile(r"[#\w][\w#.\-]{4,}")
#: Words that state a letter-case rule, by the case they ask for (for `states_rule`).
_CASE_NAMES = {
    "upper": "upper|capital",
    "lower": "lower|small",
    "title": "capital|title",
    "mixed": "same",
    "none": "same",
}
_HEADING = re.compile(r"(?m)^\s*#+\s")
_SPACE_WORDS = re.compile(r"\b(white ?space|spaces?|trailing|leading|trim(med)?)\b", re.I)


def message_text(message: dict[str, Any]) -> str:
    """The text of an OpenAI message (string content, or the text parts of a content list)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def request_corpus(messages: list[dict[str, Any]]) -> str:
    """Everything the model can read in a request, in order: every message's text and tool-call arguments
    (the system prompt included)."""
    parts: list[str] = []
    for m in messages:
        parts.append(message_text(m))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            parts.append(str(fn.get("arguments", "")))
    return "\n".join(parts)


def fold_figure(text: str) -> str:
    """A text as τ²'s communicate check compares figures: lower case, commas removed."""
    return text.lower().replace(",", "")


def visible(value: str, corpus: str, *, figure: bool = False) -> bool:
    """Whether `value` is in the request text (exactly; a figure as τ²'s communicate check compares)."""
    if figure:
        return fold_figure(value) in fold_figure(corpus)
    return value in corpus


def distance_from_end(value: str, corpus: str) -> int | None:
    """Characters between the end of the value's last occurrence and the end of the request (None when
    absent): how far back the model must look for it."""
    at = corpus.rfind(value)
    return None if at < 0 else len(corpus) - (at + len(value))


def form(value: str) -> tuple[str, str, bool]:
    """The format features an id bend changes: (letter case, leading non-alphanumeric prefix, whitespace).

    Letter case is `upper`, `lower`, `title` (each `_`/`-` part capitalised) or `mixed`; `none` without
    letters. `form("#W0000001") == ("upper", "#", False)`; `form("zfa04y") == ("lower", "", False)`.
    """
    letters = [c for c in value if c.isalpha()]
    if not letters:
        case = "none"
    elif all(c.isupper() for c in letters):
        case = "upper"
    elif all(c.islower() for c in letters):
        case = "lower"
    elif all(p[:1].isupper() and p[1:] == p[1:].lower() for p in re.split(r"[_\-]", value.strip()) if p):
        case = "title"
    else:
        case = "mixed"
    stripped = value.strip()
    prefix = stripped[: len(stripped) - len(stripped.lstrip("#$@"))]
    return case, prefix, value != stripped or " " in stripped


def states_rule(text: str, gold: str, bent: str) -> bool:
    """Whether `text` states the format rule that `bent` breaks and `gold` keeps (the letter case `gold`
    has, or the same case as given; its prefix character; or that spaces do not belong)."""
    g, b = form(gold), form(bent)
    names = _CASE_NAMES[g[0]]
    if g[0] != b[0] and re.search(rf"\b({names}|same)[ -]?case(d|s)?\b|\bcase[- ]sensitive\b", text, re.I):
        return True
    prose = _HEADING.sub("", text)  # a markdown heading's '#' states no rule about ids
    if g[1] != b[1] and any(c in prose for c in g[1]) and g[1]:
        return True
    return g[2] != b[2] and bool(_SPACE_WORDS.search(text))


def informs_form(text: str, gold: str, bent: str, corpus: str) -> bool:
    """Whether an error text lets the model correct `bent` to `gold`.

    True when the text (1) contains `gold` itself; (2) contains an id-like example of the expected form
    (a token with `gold`'s format features and not `bent`'s, other than the bent value); or (3) states
    the rule `bent` breaks while `gold` is visible elsewhere in the request (`corpus`), so the model can
    copy it. "Error: order_id expected" informs of nothing; "order not found; ids look like #W0000001"
    shows the form.
    """
    if gold.strip() and gold.strip() in text:
        return True
    target, wrong = form(gold), form(bent)
    if target != wrong:
        for token in _TOKEN.findall(text):
            if token != bent.strip() and any(c.isdigit() for c in token) and form(token) == target:
                return True
    return states_rule(text, gold, bent) and visible(gold.strip(), corpus)


#: Share of the domain policy's words a request's system text must carry for the model to know the policy.
POLICY_COVERAGE = 0.5
_WORD = re.compile(r"[a-z]{6,}")


@functools.lru_cache(maxsize=8)
def _policy_words(policy: str) -> frozenset[str]:
    """The words `policy_coverage` looks for (one set per domain policy, not one per write request)."""
    return frozenset(_WORD.findall(policy.lower()))


def policy_coverage(policy: str, messages: list[dict[str, Any]]) -> float:
    """Share (0-1) of the distinct words of six letters or more in `policy` that the request's system and
    developer messages contain: how much of the domain policy the harness gave the model. A paraphrase or a
    shortened policy keeps most of these words; a prompt without the policy keeps few. 1.0 for an empty
    policy (a suite that registered none)."""
    words = _policy_words(policy)
    if not words:
        return 1.0
    system = " ".join(message_text(m) for m in messages if m.get("role") in ("system", "developer")).lower()
    return len(words & set(_WORD.findall(system))) / len(words)
