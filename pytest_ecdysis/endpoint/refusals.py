"""What an endpoint's refusal says, read by its words rather than its status code.

    tool_fix('"auto" tool choice requires --enable-auto-tool-choice')  # -> vLLM's flags named

The same status means different things on different servers (Ollama answers a model without tool support
with 400, llama.cpp without `--jinja` with 500, LiteLLM an unknown model with 400), so blame is read from
the body: a refusal naming a server setting (`TOOLS_REFUSED`), a provider's policy (`CONTENT_FILTER`), the key
(`KEY_REFUSED`) or the model (`MODEL_MISSING`) would repeat for any harness and is the endpoint's; a server
that could not parse the *request* (`REQUEST_UNPARSED`: llama.cpp's "Failed to parse tools: ... key
'parameters' not found") is about what the harness sent, not the model's output. Used by the pre-flight
(`endpoint.preflight`) and the τ² suite's trial runner. Pure functions and patterns; this module must not
import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: What to change when a server refuses tools, by server kind (the flag or setting each documents).
TOOL_FIXES: dict[str, str] = {
    "vLLM": "start `vllm serve` with --enable-auto-tool-choice --tool-call-parser <parser of the model>",
    "Ollama": "use a model whose template supports tools (`ollama show <model>` lists the `tools` capability)",
    "llama.cpp": "start `llama-server` with --jinja (and a chat template with tool support, --chat-template-file)",
    "TGI": "use a TGI version with tool support (the Messages API's `tools`, TGI 2.x) and a model with a tool "
    "template",
    "LM Studio": "load a model with tool use support (marked 'Tool Use' in LM Studio) in its server",
}
#: a refusal's words -> the server kind that says them (to name its fix first).
_SERVER_WORDS = (
    (re.compile(r"enable-auto-tool-choice|tool-call-parser|vllm", re.I), "vLLM"),
    (re.compile(r"does not support tools|ollama", re.I), "Ollama"),
    (re.compile(r"--jinja|llama[-_. ]?(cpp|server)|tools param requires", re.I), "llama.cpp"),
    (re.compile(r"text-generation-inference|\btgi\b|grammar", re.I), "TGI"),
    (re.compile(r"lm ?studio", re.I), "LM Studio"),
)
TOOLS_REFUSED = re.compile(
    r"does not support (tools|tool[ _]?(use|calls?|choice)|function[ _]?calling)|"
    r"tool[ _]choice[^\n]{0,40}(requires|not supported|unsupported)|enable-auto-tool-choice|"
    r"tools? (is|are) not supported|tools param requires|--jinja|"
    r"(tool|function)[ _]?call(ing|s)? (is )?not (supported|enabled)",
    re.I,
)
MODEL_MISSING = re.compile(
    r"\bmodel\b[^\n]{0,80}?\b(not found|does not exist|not exist|unknown|is not available)|"
    r"(invalid|unknown|no such) model|try pulling it",
    re.I,
)
KEY_REFUSED = re.compile(r"api[ _-]?key|authenticat|unauthori[sz]ed|invalid[ _]token|permission denied", re.I)
CONTENT_FILTER = re.compile(r"content[ _-]?(filter|policy|management)|responsibleai|safety system", re.I)


def server_kind(text: str) -> str | None:
    """The server kind whose words `text` uses (`TOOL_FIXES` keys), or None."""
    for pattern, kind in _SERVER_WORDS:
        if pattern.search(text):
            return kind
    return None


def tool_fix(text: str) -> str:
    """What to change for a tool refusal: the fix of the server kind `text` names, else every kind's."""
    kind = server_kind(text)
    if kind:
        return f"the server does not serve tool calls for this model: {kind}: {TOOL_FIXES[kind]}"
    known = "; ".join(f"{k}: {v}" for k, v in TOOL_FIXES.items())
    return f"the server does not serve tool calls for this model; {known}"


def error_message(body: bytes) -> str:
    """The server's own words in an error body: `error.message` (or `error` as text, `detail`, `message`),
    else the body itself; at most 300 characters."""
    text = body[:4000].decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return text[:300]
    said: Any = doc
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict):
            said = err.get("message") or err.get("msg") or err
        elif err:
            said = err
        elif doc.get("detail"):
            said = doc["detail"]
        elif doc.get("message"):
            said = doc["message"]
    said = said if isinstance(said, str) else json.dumps(said)
    return said.strip()[:300]


#: a server that could not parse the request it was sent (not the model's output): llama.cpp's
#: "Failed to parse tools: ... key 'parameters' not found", "Failed to parse messages: ...".
REQUEST_UNPARSED = re.compile(
    r"failed to parse (tools|messages|request|the request|json schema|tool_choice)|"
    r"key '[^']+' not found|invalid request body|could not parse (the )?request",
    re.I,
)
#: a refusal of a tool-call id in the request (Mistral: "Tool call id was ... but must be ...").
TOOL_CALL_ID = re.compile(r"tool[ _]?call[ _]?id", re.I)


def setting_refusal(text: str) -> str | None:
    """What to change when a refusal's words name a server setting or a provider policy (would repeat for
    any harness), else None. `text` is the error body or the client's error message."""
    if CONTENT_FILTER.search(text):
        return (
            "the provider's content policy refused the request (its content filter); change the deployment's "
            "filter settings or use another model; no harness change avoids it"
        )
    if TOOLS_REFUSED.search(text):
        return tool_fix(text)
    return None


def request_ids(body: bytes) -> set[str]:
    """The tool-call ids of a chat-completions request body: the assistant messages' `tool_calls[].id` and
    the tool messages' `tool_call_id`."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return set()
    ids: set[str] = set()
    for m in doc.get("messages", []) if isinstance(doc, dict) else []:
        if not isinstance(m, dict):
            continue
        if m.get("tool_call_id"):
            ids.add(str(m["tool_call_id"]))
        for c in m.get("tool_calls") or []:
            if isinstance(c, dict) and c.get("id"):
                ids.add(str(c["id"]))
    return ids


def size_of(body: bytes) -> str:
    """`N bytes, M messages, K tools` of a chat-completions request body (for a refusal's record)."""
    try:
        doc: Any = json.loads(body or b"{}")
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    return (
        f"{len(body)} bytes, {len(doc.get('messages') or [])} messages, {len(doc.get('tools') or [])} tools"
    )
