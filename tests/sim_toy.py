"""A toy suite, toy environment and configurable toy harness for the simulated model's tests.

No tau2: the toy task has two reads, a write whose payment id is first seen 1,500 characters into a
tool result, a second read and a second write, and a `communicate_info` figure. `ToyHarness` talks to a
real simulated server over HTTP with the real openai client, τ²-style (text OR one tool call; the user
is the simulated user; `###STOP###` ends), and each cure is a flag that changes what it *sends*.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from pytest_ecdysis.sim.knowledge import USER_SOURCE, Dependency, IdBend, PlanStep, Scenario, SimTask

PAYMENT = "card_7654321"
USER_ID = "ada_lovelace_1815"
ORDER_1, ORDER_2 = "#W0000001", "#W0000002"
FIGURE = "42.00"
USER_RESULT = json.dumps({"user_id": USER_ID, "notes": "x" * 1450, "payment_methods": [PAYMENT]})
ORDER_RESULT = json.dumps({"order_id": ORDER_1, "status": "pending", "total": FIGURE})


def _order_bends(value: str) -> tuple[IdBend, ...]:
    return (IdBend("id_case", "order_id", value.lower()), IdBend("id_prefix", "order_id", value.lstrip("#")))


def toy_task(task_id: str = "1") -> SimTask:
    scenario = Scenario(
        reason_for_call=f"You want to pay order {ORDER_1} with your card and cancel order {ORDER_2}.",
        known_info=f"You are Ada Lovelace. Your user id is {USER_ID}.",
    )
    spoken = f"{scenario.reason_for_call} {scenario.known_info}"

    def said(path: str, value: str) -> Dependency:  # a value the user states
        return Dependency(path, value, USER_SOURCE, spoken.index(value))

    plan = (
        PlanStep(
            "get_user_details",
            {"user_id": USER_ID},
            id_bends=(IdBend("id_case", "user_id", "Ada_Lovelace_1815"),),
            dependencies=(said("user_id", USER_ID),),
            result_chars=len(USER_RESULT),
        ),
        PlanStep(
            "get_order_details",
            {"order_id": ORDER_1},
            id_bends=_order_bends(ORDER_1),
            dependencies=(said("order_id", ORDER_1),),
        ),
        PlanStep(
            "modify_order_payment",
            {"order_id": ORDER_1, "payment_method_id": PAYMENT},
            write=True,
            dependencies=(
                said("order_id", ORDER_1),
                Dependency("payment_method_id", PAYMENT, 0, USER_RESULT.index(PAYMENT)),
            ),
            id_bends=_order_bends(ORDER_1),
        ),
        PlanStep(
            "get_order_details",
            {"order_id": ORDER_2},
            id_bends=_order_bends(ORDER_2),
            dependencies=(said("order_id", ORDER_2),),
        ),
        PlanStep(
            "cancel_order",
            {"order_id": ORDER_2, "reason": "no longer needed"},
            write=True,
            id_bends=_order_bends(ORDER_2),
            dependencies=(said("order_id", ORDER_2),),
        ),
    )
    figure = Dependency("communicate_info[0]", FIGURE, 1, ORDER_RESULT.index(FIGURE))
    return SimTask(
        suite="toy",
        task_id=task_id,
        plan=plan,
        scenario=scenario,
        communicate_info=(FIGURE,),
        figures=(figure,),
    )


class ToyKnowledge:
    """`SimKnowledge` of the toy suite: task ids '1' and '2' (the same plan)."""

    def task(self, task_id: str) -> SimTask:
        if task_id not in ("1", "2"):
            raise KeyError(task_id)
        return toy_task(task_id)


GOLD_WRITES = {
    ("modify_order_payment", json.dumps({"order_id": ORDER_1, "payment_method_id": PAYMENT}, sort_keys=True)),
    ("cancel_order", json.dumps({"order_id": ORDER_2, "reason": "no longer needed"}, sort_keys=True)),
}


def toy_env(name: str, args: dict[str, Any]) -> tuple[str, bool]:
    """(content, error) of one toy tool call."""
    if name == "get_user_details":
        return (USER_RESULT, False) if args.get("user_id") == USER_ID else ("Error: user not found", True)
    if name == "get_order_details":
        if args.get("order_id") in (ORDER_1, ORDER_2):
            return json.dumps({"order_id": args["order_id"], "status": "pending", "total": FIGURE}), False
        return "Error: order not found", True
    if (name, json.dumps(args, sort_keys=True)) in GOLD_WRITES:
        return json.dumps({"ok": True, **args}), False  # a write's result echoes the record, as τ²'s do
    if args.get("order_id") not in (ORDER_1, ORDER_2):
        return "Error: order not found", True
    return "Error: payment method not found", True


def normalise(args: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in args.items():
        if isinstance(v, str):
            v = v.strip()
            if k == "user_id":
                v = v.lower()
            if k == "order_id":
                v = "#" + v.lstrip("#").upper()
        out[k] = v
    return out


CHECK = "Before you end: is every request done and every figure stated?"


@dataclass
class ToyHarness:
    """A τ²-style loop whose cures are flags. Defaults: the example harness's v1 behaviour."""

    normalise_ids: bool = False
    error_hint: bool = False
    repeat_flag: bool = False
    truncate_at: int | None = 1200
    keep_last: int | None = 40
    completion_check: bool = False
    malformed_tool_error: bool = True
    max_calls: int = 20
    system_prompt: str = "You are a customer service agent. Follow the policy."
    error_text: str | None = None  # when set, replaces the text of every failing call's error
    developer: str | None = None  # when set, a developer message after the system prompt
    error_suffix: Any = None  # (tool, args) -> text appended to every failing call's error
    note_after_error: Any = None  # (tool, args) -> a user-role note the harness sends after a failing call
    repair: Any = None  # (tool, args) -> the arguments the harness executes instead (a code repair)
    tools: list[dict[str, Any]] = field(default_factory=list)  # tool schemas sent with every request
    seen_errors: dict[str, int] = field(default_factory=dict)

    def run(self, url: str, trial: str, model: str = "sim") -> dict[str, Any]:
        """One trial; returns the transcript, the writes done, the end reason and every raw reply."""
        agent = openai.OpenAI(
            base_url=url + "/v1",
            api_key="sim",
            max_retries=0,
            default_headers={"X-Ecdysis-Trial": trial, "X-Ecdysis-Role": "agent"},
        )
        user = openai.OpenAI(
            base_url=url + "/v1",
            api_key="sim",
            max_retries=0,
            default_headers={"X-Ecdysis-Trial": trial, "X-Ecdysis-Role": "user"},
        )
        messages: list[dict[str, Any]] = [{"role": "assistant", "content": "Hi! How can I help you today?"}]
        raw: list[str] = []
        writes: list[tuple[str, str]] = []
        texts: list[str] = []
        end = None

        def user_turn() -> bool:
            flipped = [{"role": "system", "content": "You are the user of a toy task."}]
            for m in messages:
                if m["role"] == "assistant" and m.get("content"):
                    flipped.append({"role": "user", "content": m["content"]})
                elif m["role"] == "user" and not m.get("check"):
                    flipped.append({"role": "assistant", "content": m["content"]})
            reply = user.chat.completions.create(model=model, messages=flipped)
            raw.append(reply.model_dump_json())
            text = reply.choices[0].message.content
            messages.append({"role": "user", "content": text})
            return "###STOP###" in text or "###TRANSFER###" in text

        user_turn()
        calls = 0
        checked = False
        while end is None:
            if calls >= self.max_calls:
                end = "budget"
                break
            calls += 1
            context = [{k: v for k, v in m.items() if k != "check"} for m in messages]
            if self.keep_last is not None:
                context = context[-self.keep_last :]
            head = [{"role": "system", "content": self.system_prompt}]
            if self.developer is not None:
                head.append({"role": "developer", "content": self.developer})
            reply = agent.chat.completions.create(model=model, messages=[*head, *context], tools=self.tools)
            raw.append(reply.model_dump_json())
            message = reply.choices[0].message
            if message.tool_calls:
                call = message.tool_calls[0]
                assert message.content is None, "text and tool calls in one message"
                entry = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.function.name, "arguments": call.function.arguments},
                        }
                    ],
                }
                try:
                    args = json.loads(call.function.arguments)
                except ValueError:
                    if not self.malformed_tool_error:
                        end = "format_error"
                        break
                    messages += [
                        entry,
                        {
                            "role": "tool",
                            "tool_call_id": call.id,
                            "content": "Error: arguments are not valid JSON",
                        },
                    ]
                    continue
                if self.normalise_ids:
                    args = normalise(args)
                if self.repair is not None:
                    args = self.repair(call.function.name, args)
                content, error = toy_env(call.function.name, args)
                if not error and call.function.name in ("modify_order_payment", "cancel_order"):
                    writes.append((call.function.name, json.dumps(args, sort_keys=True)))
                if error:
                    if self.error_text is not None:
                        content = self.error_text
                    if self.error_hint and "order_id" in args:
                        content += " (argument order_id: expected an id like #W1234567)"
                    if self.error_hint and "user_id" in args:
                        content += " (argument user_id: expected lower case, like jane_doe_1234)"
                    key = call.function.name + json.dumps(args, sort_keys=True)
                    self.seen_errors[key] = self.seen_errors.get(key, 0) + 1
                    if self.repeat_flag and self.seen_errors[key] > 1:
                        content += " [this identical call already failed: do not repeat it]"
                    if self.error_suffix is not None:
                        content += self.error_suffix(call.function.name, args)
                    note = self.note_after_error(call.function.name, args) if self.note_after_error else None
                    if note:
                        messages += [
                            entry,
                            {"role": "tool", "tool_call_id": call.id, "content": content},
                            {"role": "user", "content": note, "check": True},
                        ]
                        continue
                elif self.truncate_at is not None and len(content) > self.truncate_at:
                    content = (
                        content[: self.truncate_at] + f"… [truncated {len(content) - self.truncate_at} chars]"
                    )
                messages += [entry, {"role": "tool", "tool_call_id": call.id, "content": content}]
                continue
            text = message.content
            texts.append(text)
            if self.completion_check and not checked and "anything else" in text.lower():
                checked = True
                messages += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": CHECK, "check": True},
                ]
                continue
            checked = False
            messages.append({"role": "assistant", "content": text})
            if user_turn():
                end = "user_stop"
        solved = set(writes) == GOLD_WRITES and len(writes) == 2 and any(FIGURE in t for t in texts)
        return {
            "end": end,
            "writes": writes,
            "texts": texts,
            "raw": raw,
            "solved": solved,
            "messages": messages,
        }


def write_profile(
    directory: Path,
    name: str,
    quirks: dict[str, dict[str, float]],
    seed: int = 7,
    long_task_min_steps: int = 3,
) -> str:
    """A test profile with fixed difficulty 0.5 (rates unscaled); returns the model name `sim/<name>`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "name": name,
                "seed": seed,
                "difficulty": {"distribution": "fixed", "value": 0.5},
                "long_task_min_steps": long_task_min_steps,
                "quirks": quirks,
            }
        )
    )
    return f"sim/{name}"
