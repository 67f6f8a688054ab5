"""llama-cpp-python's server with one more chat format, `chatml-tools`: `python scripts/llama_server.py <the
arguments of python -m llama_cpp.server>` (started by `local_server.start_server`).

Why: llama-cpp-python 0.3.36's own `chatml-function-calling` cannot run an agent (read from its source,
then measured, docs/real-model.md): with `tool_choice: "auto"` a grammar first picks `message:` or
`functions.<name>:`, and after `message:` the grammar allows only a function name or the end token, so every
text answer is empty; and its template drops `tool` messages, so the model never sees a tool's result.
`chatml-tools` is the same protocol (ChatML, the tools listed in the system message as upstream does, the
same first choice under a grammar, the arguments under the tool's JSON-schema grammar) with those two
things fixed: a text answer is generated freely up to `max_tokens`, and tool results are shown as ChatML
`tool` turns. The model's replies are still its own; the grammar only makes a chosen call well-formed JSON
(or cut at `max_tokens`, which is a real shape too). One call per reply.

`gemma-tools` is the same protocol in Gemma 3's turn format (`<start_of_turn>user` / `model`,
`<end_of_turn>`): Gemma has no system or tool role, so the system text and the tool listing open the first
user turn (as Gemma 3's own chat template does with a system message) and a tool's result is a user turn
holding a ```tool_output block (Google's Gemma function-calling guide). llama-cpp-python's built-in `gemma`
format drops system and tool messages and has no tool calling.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from llama_cpp import llama_chat_format as fmt
from llama_cpp import llama_grammar

END = "<|im_end|>"
GEMMA_END = "<end_of_turn>"


def _listing(tools: list[dict[str, Any]] | None) -> str:
    if not tools:
        return ""
    return (
        "\n\nYou have access to the following functions:\n"
        + "".join(
            f"\nfunctions.{t['function']['name']}:\n{json.dumps(t['function'].get('parameters') or {})}\n"
            for t in tools
        )
        + "\n\nYou can respond to users messages with either a single message or one or more function "
        "calls.\n\nTo respond with a message begin the message with 'message:', use the following "
        "format:\n\nmessage:\n<message>\n\nTo respond with one or more function calls begin the "
        "message with 'functions.<function_name>:', use the following format:\n\n"
        'functions.<function_name>:\n{ "arg1": "value1", "arg2": "value2" }'
    )


def _text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _assistant_body(m: dict[str, Any], tools: list[dict[str, Any]] | None) -> str:
    content = _text(m.get("content"))
    body = (f"message:\n{content}" if tools else content) if content else ""
    for call in m.get("tool_calls") or []:
        body += f"\nfunctions.{call['function']['name']}:\n{call['function']['arguments']}"
    return body.strip()


def render_gemma(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The Gemma 3 prompt: system text and `tools` open the first user turn; tool results are user turns."""
    system = "\n\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    head = (system + _listing(tools)).strip()
    out = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "assistant":
            out.append(f"<start_of_turn>model\n{_assistant_body(m, tools)}{GEMMA_END}\n")
            continue
        content = _text(m.get("content"))
        if role == "tool":
            content = f"```tool_output\n{content}\n```"
        if head:
            content, head = f"{head}\n\n{content}", ""
        out.append(f"<start_of_turn>user\n{content}{GEMMA_END}\n")
    if head:  # a system message and nothing else
        out.insert(0, f"<start_of_turn>user\n{head}{GEMMA_END}\n")
    return "".join(out) + "<start_of_turn>model\n"


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The ChatML prompt; `tools` (when given) listed after the system text in upstream's words."""
    out = []
    listing = _listing(tools)
    if tools and not any(m.get("role") == "system" for m in messages):
        out.append(f"<|im_start|>system{listing}{END}\n")
    for m in messages:
        role, content = m.get("role"), _text(m.get("content"))
        if role == "system":
            out.append(f"<|im_start|>system\n{content}{listing}{END}\n")
        elif role == "assistant":
            out.append(f"<|im_start|>assistant\n{_assistant_body(m, tools)}{END}\n")
        else:  # user, tool
            out.append(f"<|im_start|>{role}\n{content}{END}\n")
    return "".join(out) + "<|im_start|>assistant\n"


def _usage(*completions: dict[str, Any]) -> dict[str, int]:
    prompt = max(c["usage"]["prompt_tokens"] for c in completions)
    gen = sum(c["usage"]["completion_tokens"] for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": gen, "total_tokens": prompt + gen}


#: chat format name -> (prompt renderer, end-of-turn token)
STYLES = {"chatml-tools": (render, END), "gemma-tools": (render_gemma, GEMMA_END)}


def chatml_tools(
    llama: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    temperature: float = 0.2,
    max_tokens: int | None = None,
    response_format: dict[str, Any] | None = None,
    stream: bool = False,
    stop: Any = None,
    functions: Any = None,
    function_call: Any = None,
    style: str = "chatml-tools",
    **kwargs: Any,
) -> Any:
    """The `chatml-tools` / `gemma-tools` handler (`style`; llama-cpp-python's chat-handler signature; returns
    an OpenAI chat completion). `tool_choice` None or "auto": the model chooses (missing means auto, as with
    OpenAI); "none" or no tools: plain text; "required" or a named function: a call is forced."""
    render_prompt, end = STYLES[style]
    sample = {
        k: kwargs[k]
        for k in (
            "top_p",
            "top_k",
            "min_p",
            "seed",
            "repeat_penalty",
            "presence_penalty",
            "frequency_penalty",
            "model",
        )
        if kwargs.get(k) is not None
    }
    stops = [end] + ([stop] if isinstance(stop, str) else list(stop or []))
    use_tools = tools if tools and tool_choice != "none" else None
    prompt = render_prompt(messages, use_tools)
    if not use_tools:
        grammar = (
            fmt._grammar_for_response_format(response_format)
            if response_format and response_format.get("type") == "json_object"
            else None
        )
        return fmt._convert_completion_to_chat(
            llama.create_completion(
                prompt=prompt,
                temperature=temperature,
                max_tokens=max_tokens,
                stop=stops,
                stream=stream,
                grammar=grammar,
                **sample,
            ),
            stream=stream,
        )
    if stream:
        raise ValueError("chatml-tools does not stream replies with tools; send stream=false")
    names = [t["function"]["name"] for t in use_tools]
    forced = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    if forced:
        choices = [f'"functions.{forced}:"']
    else:
        choices = [f'"functions.{n}:"' for n in names] + ([] if tool_choice == "required" else ['"message:"'])
    first = llama.create_completion(
        prompt=prompt,
        temperature=temperature,
        max_tokens=32,
        stop=[end],
        **sample,
        grammar=llama_grammar.LlamaGrammar.from_string(f"root ::= {' | '.join(choices)}\n", verbose=False),
    )
    picked = first["choices"][0]["text"].strip()
    if not picked.startswith("functions."):
        answer = llama.create_completion(
            prompt=prompt + "message:\n", temperature=temperature, max_tokens=max_tokens, stop=stops, **sample
        )
        reply = fmt._convert_completion_to_chat(answer, stream=False)
        reply["usage"] = _usage(first, answer)
        return reply
    name = picked[len("functions.") :].rstrip(":")
    tool = next(t for t in use_tools if t["function"]["name"] == name)
    try:
        grammar = llama_grammar.LlamaGrammar.from_json_schema(
            json.dumps(tool["function"].get("parameters") or {"type": "object"}), verbose=False
        )
    except Exception:  # a schema the converter does not take: any JSON, as upstream falls back
        grammar = llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)
    args = llama.create_completion(
        prompt=prompt + f"functions.{name}:\n",
        temperature=temperature,
        max_tokens=max_tokens,
        stop=stops,
        grammar=grammar,
        **sample,
    )
    finish = args["choices"][0]["finish_reason"]
    return {
        "id": "chat" + args["id"],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": args["model"],
        "choices": [
            {
                "index": 0,
                "logprobs": None,
                "finish_reason": "tool_calls" if finish == "stop" else finish,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{uuid.uuid4().hex[:24]}",
                            "type": "function",
                            "function": {"name": name, "arguments": args["choices"][0]["text"]},
                        }
                    ],
                },
            }
        ],
        "usage": _usage(first, args),
    }


fmt.register_chat_completion_handler("chatml-tools")(chatml_tools)
fmt.register_chat_completion_handler("gemma-tools")(
    lambda *a, **kw: chatml_tools(*a, style="gemma-tools", **kw)
)

if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    main()
