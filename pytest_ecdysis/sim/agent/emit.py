"""What the simulated agent sends: tool calls, confirmations and closing texts, in τ²'s message shapes.

`Emitting` is the part of `sim.agent.trial.AgentTrial` that writes the assistant's messages (a message has
text OR one tool call, never both): `_emit_call` sends a planned call, where on its first sending the
presentation quirks may fire (malformed JSON, an id format habit, rarer when the request's tool schema
documents the form: `_documented`); `_final` the final answer with the figures read from the request
(`_figures`); `_give_up` and `_text` other closings. A closing text ends with `CLOSING_TEXT`, a
confirmation question contains `CONFIRM_TEXT`; `Pending` is what the model waits to see answered. The
attributes and the draws it uses are `AgentTrial`'s and `QuirkDraws`'. This module must not import tau2.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pytest_ecdysis.sim.agent.rules import harness_text
from pytest_ecdysis.sim.knowledge import IdBend
from pytest_ecdysis.sim.reading import informs_form, request_corpus, visible
from pytest_ecdysis.sim.values import _get_path, _set_path, wrong_value

CONFIRM_TEXT = "Do you confirm (yes/no)?"
CLOSING_TEXT = "Is there anything else I can help you with?"


@dataclass
class Pending:
    """What the model sent last and is waiting to see answered."""

    kind: str  # call | confirm | early_end | final | giveup
    call_id: str = ""
    plan_index: int = -1
    args: dict[str, Any] = field(default_factory=dict)
    raw_args: str = ""
    bend: IdBend | None = None
    bend_quirk: int | None = None
    malformed_quirk: int | None = None
    reread: bool = False
    repeat_quirk: int | None = None
    first_error: str | None = None
    repeats: int = 0
    quirk: int | None = None  # early_end / forget_communicate index
    text: str = ""


class Emitting:
    """The messages of one trial (a part of `AgentTrial`; module docstring)."""

    def _call_id(self) -> str:
        self.calls += 1
        digest = hashlib.sha256(f"{self.task.suite}/{self.task.task_id}/{self.trial}".encode()).hexdigest()
        return f"call_{digest[:10]}_{self.calls}"

    def _emit_call(self, index: int, args: dict[str, Any], *, reread: bool = False,
                   quirk_repeat: Pending | None = None) -> dict[str, Any]:
        """Send a planned call; on its first sending, presentation quirks (malformed JSON, id bends) may fire."""
        step = self.task.plan[index]
        call_id = self._call_id()
        pending = Pending(kind="call", call_id=call_id, plan_index=index, args=args, reread=reread)
        first = quirk_repeat is None and not reread and index not in self.sent
        raw = json.dumps(args)
        if quirk_repeat is not None:  # resend the malformed call: the harness answered nothing
            pending.malformed_quirk = quirk_repeat.malformed_quirk
            pending.repeats = quirk_repeat.repeats + 1
            raw = quirk_repeat.raw_args
        elif first:
            self.sent.add(index)
            if self.fires("malformed_args", index):
                pending.malformed_quirk = self._quirk("malformed_args", tool=step.name)
                raw = raw[:-1] + ","  # a trailing comma and no closing brace: not JSON
            else:
                for bend in step.id_bends:  # a format habit: drawn at the first call carrying the id
                    if (bend.kind, bend.arg) in self.id_habits:
                        continue
                    self.id_habits.add((bend.kind, bend.arg))
                    gold = _get_path(step.arguments, bend.arg)
                    told = informs_form(harness_text(self.request, self.user_texts), str(gold), str(bend.bent),
                                        request_corpus(self.request))
                    factor = (self.profile.documented_format_factor
                              if told or self._documented(step.name, bend.arg, str(gold), str(bend.bent)) else 1.0)
                    if (pending.bend is None and _get_path(args, bend.arg) == gold
                            and self.fires(bend.kind, bend.arg, factor=factor)):
                        pending.bend = bend
                        pending.bend_quirk = self._quirk(bend.kind, tool=step.name, arg=bend.arg)
                        raw = json.dumps(_set_path(args, bend.arg, bend.bent))
        pending.raw_args = raw
        self.pending = pending
        return self._tool_message(call_id, step.name, raw)

    def _documented(self, tool: str, arg: str, gold: str, bent: str) -> bool:
        """Whether the request's schema of `tool` shows the form of `arg` (an example or the rule)."""
        for schema in self.tools:
            fn = (schema or {}).get("function") or {}
            if fn.get("name") != tool:
                continue
            prop = ((fn.get("parameters") or {}).get("properties") or {}).get(arg.split("[")[0].split(".")[0]) or {}
            text = f"{prop.get('description', '')} {json.dumps(prop.get('examples', ''))} {prop.get('pattern', '')}"
            return informs_form(text, gold, bent, "")
        return False

    def _final(self, messages: list[dict[str, Any]], *, forget: bool) -> dict[str, Any]:
        self.reached_final = True
        prior = self.pending if self.pending is not None and self.pending.kind == "final" else None
        quirk = prior.quirk if prior is not None else None
        if prior is None and forget:
            quirk = self._quirk("forget_communicate")
        if self.task.writes:
            body = "Thank you for your patience: I have completed the requested changes."
        else:
            body = "Thank you for your patience: I have looked into your request."
        if self.task.communicate_info and not forget:
            body += " For your reference: " + "; ".join(self._figures(messages)) + "."
        text = f"{body} {CLOSING_TEXT}"
        self.pending = Pending(kind="final", quirk=quirk, text=text)
        return self._assistant_text(text)

    def _figures(self, messages: list[dict[str, Any]]) -> list[str]:
        """The figures the final answer states: each read from the request (a figure found in no tool
        result is the model's own computation), guessed wrong when the request lacks it."""
        corpus = request_corpus(messages)
        sources = {dep.path: dep for dep in self.task.figures}
        out = []
        for k, value in enumerate(self.task.communicate_info):
            dep = sources.get(f"communicate_info[{k}]")
            if dep is None or visible(value, corpus, figure=True):
                out.append(value)
                continue
            if k not in self.figure_entries:
                why, because = self._why_unseen(dep)
                entry = self._quirk("unseen_value", tool="final_answer", arg=dep.path, why=why,
                                    **({} if because is None else {"because": because}))
                self.figure_entries[k] = entry
                self.effects[entry] = "wrong_figure"
            out.append(str(wrong_value(value, f"figure{k}")))
        return out

    def _give_up(self, why: str, entry: int | None = None) -> dict[str, Any]:
        if entry is not None:
            self.effects.setdefault(entry, "gave_up")
        text = f"I'm sorry, {why}, so I am unable to complete this request. {CLOSING_TEXT}"
        self.pending = Pending(kind="giveup", text=text)
        return self._assistant_text(text)

    def _text(self, text: str, pending: Pending) -> dict[str, Any]:
        self.pending = pending
        return self._assistant_text(text)

    def _assistant_text(self, text: str) -> dict[str, Any]:
        if CLOSING_TEXT in text:
            self.closed = True
        return {"role": "assistant", "content": text}

    @staticmethod
    def _tool_message(call_id: str, name: str, raw_args: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw_args}}]}
