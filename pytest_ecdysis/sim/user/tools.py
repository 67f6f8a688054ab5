"""The simulated user's own tools (dual control, τ² telecom): which tool the agent asked for, with what.

The user reads only the request: the agent's latest words and the tool schemas the suite offered the user
(`tools`, OpenAI shape). `requested_call(text, tools)` picks the tool the words ask for: every word of the
tool's name must appear in the text, its leading verb as itself or as a common English synonym
(`VERBS`: "turn"/"switch"/"enable" for *toggle*, "restart" for *reboot*, ...); among the tools that fit,
the verb said literally wins, then the longest name (so "toggle data saver mode" is
`toggle_data_saver_mode`, not `toggle_data`), then the most words shared with the tool's description
("turn on data roaming" is `toggle_roaming`, whose description names data roaming).
Arguments are read the same way: an enum value of the schema named in the text, else the word beside the
parameter's last name word ("messaging app", "permission sms"). A required argument it cannot read means
no call: the user asks which value (`missing_argument`). `report(result)` is what the user says after a
call: the result, grounded, as τ²'s guidelines ask. Nothing here reads gold data; it must not import tau2.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: a tool name's leading verb -> words a speaker may use for it instead (plain English, no suite texts).
VERBS: dict[str, tuple[str, ...]] = {
    "toggle": ("turn", "switch", "enable", "disable", "activate", "deactivate"),
    "check": ("look", "see", "verify", "show", "what", "tell"),
    "set": ("change", "switch", "select", "configure", "put"),
    "grant": ("allow", "give", "enable"),
    "reseat": ("remove", "reinsert", "re-insert", "take"),
    "reboot": ("restart", "power"),
    "run": ("perform", "do", "test"),
    "reset": ("restore",),
    "make": ("pay", "complete"),
    "can": ("try",),
    "connect": ("join",),
    "disconnect": ("turn", "disable", "stop"),
}
_STOP = frozenset(
    {"the", "a", "an", "your", "my", "to", "of", "on", "for", "with", "and", "then", "please", "it"}
)
#: characters of a tool result the simulated user repeats to the agent.
REPORT_CHARS = 600


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:[.\-][a-z0-9]+)*", text.lower().replace("_", " "))


def _schema(tool: Any) -> dict[str, Any]:
    fn = (tool or {}).get("function") if isinstance(tool, dict) else None
    return fn if isinstance(fn, dict) and isinstance(fn.get("name"), str) else {}


def requested_call(text: str, tools: list[Any]) -> tuple[str, dict[str, Any]] | tuple[str, str] | None:
    """The tool the agent's `text` asks the user to run: `(name, arguments)`; `("?", parameter)` when the
    tool is clear but a required argument is not; None when the words name no tool."""
    words = _words(text)
    present = set(words)
    best: tuple[tuple[int, int, int], dict[str, Any]] | None = None
    for tool in tools:
        fn = _schema(tool)
        if not fn:
            continue
        parts = fn["name"].split("_")
        verb, rest = parts[0], parts[1:]
        if not all(w in present for w in rest):
            continue
        if verb not in present and not any(v in present for v in VERBS.get(verb, ())):
            continue
        overlap = len(present & (set(_words(str(fn.get("description", "")))) - _STOP))
        score = (int(verb in present), len(parts), overlap)
        if best is None or score > best[0]:
            best = (score, fn)
    if best is None:
        return None
    fn = best[1]
    params = fn.get("parameters") or {}
    arguments: dict[str, Any] = {}
    for name, prop in (params.get("properties") or {}).items():
        value = _argument(name, prop, params.get("$defs") or {}, text, set(fn["name"].split("_")))
        if value is not None:
            arguments[name] = value
        elif name in (params.get("required") or []):
            return "?", name
    return fn["name"], arguments


def _argument(name: str, prop: dict[str, Any], defs: dict[str, Any], text: str, naming: set[str]) -> Any:
    """The value of parameter `name` in the agent's words: `name=value` / `name: value`; an enum value of
    the schema named in the text; else the word before (then after) the parameter's last name word
    ("messaging app", "sms permission"), never a word of the tool's own name (`naming`). None when none of
    these is there."""
    lowered = text.lower()
    said = re.search(rf"\b{re.escape(name.lower())}\s*[=:]\s*[\"']?([\w.\-]+)", lowered)
    if said:
        return said.group(1)
    words = _words(text)
    joined = f" {' '.join(words)} "
    for value in _enum_values(prop, defs):
        phrase = " ".join(_words(str(value)))
        if phrase and f" {phrase} " in joined:
            return value
    content = [w for w in words if w not in _STOP]
    verbs = set(VERBS) | {v for vs in VERBS.values() for v in vs}
    for key in reversed(_words(name)):  # app_name: "name", else "app"
        for i, w in enumerate(content):
            if w != key:
                continue
            for j in (i - 1, i + 1):
                if 0 <= j < len(content) and content[j] not in verbs and content[j] not in naming:
                    return content[j]
    return None


def _enum_values(prop: dict[str, Any], defs: dict[str, Any]) -> list[Any]:
    found: list[Any] = list(prop.get("enum") or [])
    for option in prop.get("anyOf") or []:
        ref = str(option.get("$ref", ""))
        target = defs.get(ref.rsplit("/", 1)[-1]) if ref else option
        found.extend((target or {}).get("enum") or [])
    return sorted(found, key=lambda v: -len(str(v)))  # the longest value first: "4g_5g_preferred" before "4g"


def report(result: str) -> str:
    """What the user tells the agent after running a tool: its result, grounded and bounded."""
    text = " ".join(str(result).split())
    if len(text) > REPORT_CHARS:
        text = text[:REPORT_CHARS] + " ..."
    return f"I did that. My phone shows: {text}"


def missing_argument(parameter: str) -> str:
    return f"Which {parameter.replace('_', ' ')} should I use for that?"


def tool_call_message(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The user's tool call as an OpenAI assistant message (the user model's own turn, roles flipped)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }
