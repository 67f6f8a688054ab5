"""Whether a conversation asks for a write: the words that name a tool's action, in plain English.

A real model takes a write because something in the conversation calls for it: the user asked ("cancel
my reservation"), a tool result or a harness message named it. It does not take a step nobody motivated,
however the task's gold goes (an upgrade before a cancellation the user never asked for). `names_action`
says whether a text names the action of a write tool: one of its verb's words (`VERBS`: the tool name's
leading verb and its common English synonyms) and one of its object's words (the tool name's other words
and its argument names, with `OBJECTS` synonyms), each as a word stem. A tool whose leading verb is not in
`VERBS` (a suite's own verbs: τ² telecom's `enable_roaming`, `refuel_data`) is named by any text: the
model's plan stands for it, as before. `conversation_text` is what may motivate a step: the user-role
messages (the user's words and the harness's notes) and the tool errors; not a plain tool result, not the
system prompt (the policy describes every action, a harness's general rules name actions without asking
for one).
The simulated user reads its own requests the same way (`sim/user/trial.py`). Plain words, no suite
texts; this module must not import tau2.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from pytest_ecdysis.sim.knowledge import is_error_text
from pytest_ecdysis.sim.reading import message_text

#: A write tool's leading verb -> word stems that name that action (general English, no suite texts).
VERBS: dict[str, tuple[str, ...]] = {
    "cancel": ("cancel",),
    "book": ("book", "reserve", "purchase", "buy", "fly"),
    "update": (
        "change",
        "modify",
        "update",
        "switch",
        "move",
        "upgrade",
        "downgrade",
        "add",
        "remove",
        "push",
    ),
    "modify": (
        "change",
        "modify",
        "update",
        "switch",
        "upgrade",
        "downgrade",
        "add",
        "remove",
        "correct",
        "pay",
    ),
    "return": ("return", "send back"),
    "exchange": ("exchange", "swap", "replace", "switch"),
    "send": ("send", "compensat", "certificate", "voucher"),
    "transfer": ("transfer", "human", "supervisor", "representative", "manager"),
}
#: An object word of a tool (from its name or an argument name) -> further stems that name it.
OBJECTS: dict[str, tuple[str, ...]] = {
    "baggage": ("bag", "luggage", "suitcase"),
    "flight": ("trip", "cabin", "class", "economy", "business", "fly"),
    "passenger": ("name", "traveler", "traveller"),
    "reservation": ("booking", "trip", "flight"),
    "item": ("product",),
    "payment": ("card", "pay"),
    "certificate": ("compensat", "voucher"),
    "human": ("agent", "person", "supervisor", "representative"),
}
_GENERIC = frozenset({"id", "ids", "user", "to", "of", "the", "and", "total", "nonfree", "agents"})


def _stem(word: str) -> str:
    word = word.lower()
    for suffix in ("ages", "ies", "s"):
        if word.endswith(suffix) and len(word) > len(suffix) + 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "age" if suffix == "ages" else "")
    return word


@functools.lru_cache(maxsize=1024)
def action_words(
    tool: str, argument_names: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(verb stems, object stems) that name the action of write tool `tool` with these argument names; None
    when its leading verb is not one `VERBS` knows (any text names it then)."""
    parts = tool.lower().split("_")
    if not parts or parts[0] not in VERBS:
        return None
    objects: set[str] = set()
    for word in [*parts[1:], *(w for name in argument_names for w in name.lower().split("_"))]:
        if word in _GENERIC or not word.isalpha():
            continue
        stem = _stem(word)
        objects.add(stem)
        objects.update(OBJECTS.get(stem, ()))
    return VERBS[parts[0]], tuple(sorted(objects))


_SUFFIX = r"(?:e|es|s|ed|d|ing|ion|ions|ation|lation|led|ling|lled|lling|ment|er)?\b"


def _has(text: str, stems: tuple[str, ...]) -> bool:
    """Whether a word of `text` is one of the stems with at most a common English ending ("cancelled" for
    "cancel", never "address" for "add")."""
    return any(re.search(rf"\b{re.escape(stem)}{_SUFFIX}", text) for stem in stems)


def names_action(text: str, tool: str, arguments: dict[str, Any] | None = None) -> bool:
    """Whether `text` names the action of write tool `tool` (its arguments' names are object words too):
    a verb word and an object word of it in one sentence (a question "what will you change?" and an
    earlier "my flights" do not make a request to change flights)."""
    words = action_words(tool, tuple(sorted(arguments or {})))
    if words is None:
        return True
    verbs, objects = words
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text.lower().replace("_", " ")):
        if _has(sentence, verbs) and (not objects or _has(sentence, objects)):
            return True
    return False


def conversation_text(messages: list[dict[str, Any]]) -> str:
    """What in a request may motivate a write: its user-role messages (the user's words, a harness's notes)
    and its tool errors (a refusal that says what to do first) (module docstring). Not a tool's plain
    result: a record's `"status": "cancelled"` asks for nothing; not the system or developer text: the
    policy describes every action and a harness's general rules ("before you change a reservation, ...")
    name actions without asking for one; not the model's own messages: its confirmation names the action
    it means, which does not make the action asked for."""
    return "\n".join(
        message_text(m)
        for m in messages
        if m.get("role") == "user" or (m.get("role") == "tool" and is_error_text(message_text(m)))
    )
