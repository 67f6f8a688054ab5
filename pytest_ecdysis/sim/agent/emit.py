"""What the simulated agent sends: tool calls, confirmations and closing texts, in τ²'s message shapes.

`Emitter` is the part of `sim.agent.trial.AgentTrial` that writes the assistant's messages (a message has
text OR one tool call, never both): `emit_call` sends a planned call, where on its first sending the
presentation quirks may fire (malformed JSON, an id format habit, rarer when the request's tool schema
documents the form: `documented`); `repeat` resends a failing call unchanged; `final` the final answer with
the figures derived from the request (`figures`; it says so when a write was refused); `give_up` and `text` other closings. A closing text ends with
`CLOSING_TEXT`, a confirmation question contains `CONFIRM_TEXT`; what the model then waits to see answered
is the trial's `state.pending` (a `state.Pending`). Its own bookkeeping is which calls were sent and which
id habits and unseen figures were drawn; it draws through `draws.QuirkDraws`. This module must not import
tau2.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pytest_ecdysis.sim.agent.alternatives import alternatives
from pytest_ecdysis.sim.agent.draws import QuirkDraws
from pytest_ecdysis.sim.agent.intent import why_unseen
from pytest_ecdysis.sim.agent.rules import harness_text
from pytest_ecdysis.sim.agent.state import AgentState, Pending
from pytest_ecdysis.sim.knowledge import is_error_text
from pytest_ecdysis.sim.profiles import choose
from pytest_ecdysis.sim.reading import informs_form, request_corpus, visible
from pytest_ecdysis.sim.values import _get_path, _set_path

CONFIRM_TEXT = "Do you confirm (yes/no)?"
CLOSING_TEXT = "Is there anything else I can help you with?"


class Emitter:
    """The messages of one trial (module docstring)."""

    def __init__(self, state: AgentState, draws: QuirkDraws) -> None:
        self.state = state
        self.draws = draws
        self.sent: set[int] = set()  # plan indices sent at least once (quirks fire on the first sending)
        self.id_habits: set[tuple[str, str]] = set()  # (kind, argument) already drawn this trial
        self.figure_entries: dict[int, int] = {}  # communicate_info index -> its unseen_value entry

    def call_id(self) -> str:
        s = self.state
        s.calls += 1
        digest = hashlib.sha256(f"{s.task.suite}/{s.task.task_id}/{s.trial}".encode()).hexdigest()
        return f"call_{digest[:10]}_{s.calls}"

    def emit_call(
        self, index: int, args: dict[str, Any], *, reread: bool = False, quirk_repeat: Pending | None = None
    ) -> dict[str, Any]:
        """Send a planned call; on its first sending, presentation quirks (malformed JSON, id bends) may fire."""
        s = self.state
        step = s.task.plan[index]
        call_id = self.call_id()
        pending = Pending(kind="call", call_id=call_id, plan_index=index, args=args, reread=reread)
        first = quirk_repeat is None and not reread and index not in self.sent
        raw = json.dumps(args)
        if quirk_repeat is not None:  # resend the malformed call: the harness answered nothing
            pending.malformed_quirk = quirk_repeat.malformed_quirk
            pending.repeats = quirk_repeat.repeats + 1
            raw = quirk_repeat.raw_args
        elif first:
            self.sent.add(index)
            if self.draws.fires("malformed_args", index):
                pending.malformed_quirk = self.draws.quirk("malformed_args", tool=step.name)
                raw = raw[:-1] + ","  # a trailing comma and no closing brace: not JSON
            else:
                for bend in step.id_bends:  # a format habit: drawn at the first call carrying the id
                    if (bend.kind, bend.arg) in self.id_habits:
                        continue
                    self.id_habits.add((bend.kind, bend.arg))
                    gold = _get_path(step.arguments, bend.arg)
                    told = informs_form(
                        harness_text(s.request, s.user_texts),
                        str(gold),
                        str(bend.bent),
                        request_corpus(s.request),
                    )
                    factor = (
                        s.profile.documented_format_factor
                        if told or self.documented(step.name, bend.arg, str(gold), str(bend.bent))
                        else 1.0
                    )
                    if (
                        pending.bend is None
                        and _get_path(args, bend.arg) == gold
                        and self.draws.fires(bend.kind, bend.arg, factor=factor)
                    ):
                        pending.bend = bend
                        pending.bend_quirk = self.draws.quirk(bend.kind, tool=step.name, arg=bend.arg)
                        raw = json.dumps(_set_path(args, bend.arg, bend.bent))
        pending.raw_args = raw
        s.pending = pending
        return self.tool_message(call_id, step.name, raw)

    def repeat(self, p: Pending) -> dict[str, Any]:
        """Resend the call `p` unchanged (a new call id), as a model looping on a failing call does."""
        p.repeats += 1
        p.call_id = self.call_id()
        self.state.pending = p
        return self.tool_message(p.call_id, self.state.task.plan[p.plan_index].name, p.raw_args)

    def documented(self, tool: str, arg: str, gold: str, bent: str) -> bool:
        """Whether the request's schema of `tool` shows the form of `arg` (an example or the rule)."""
        for schema in self.state.tools:
            fn = (schema or {}).get("function") or {}
            if fn.get("name") != tool:
                continue
            prop = ((fn.get("parameters") or {}).get("properties") or {}).get(
                arg.split("[")[0].split(".")[0]
            ) or {}
            text = f"{prop.get('description', '')} {json.dumps(prop.get('examples', ''))} {prop.get('pattern', '')}"
            return informs_form(text, gold, bent, "")
        return False

    def final(self, messages: list[dict[str, Any]], *, forget: bool) -> dict[str, Any]:
        s = self.state
        s.reached_final = True
        prior = s.pending if s.pending is not None and s.pending.kind == "final" else None
        quirk = prior.quirk if prior is not None else None
        if prior is None and forget:
            quirk = self.draws.quirk("forget_communicate")
        refused = [i for i in s.task.writes if i in s.seen and is_error_text(s.seen[i])]
        done = [i for i in s.task.writes if i in s.seen and not is_error_text(s.seen[i])]
        # what it did, named: the user reads it to tell whether its requests were done (sim/user/trial.py)
        did = "; ".join(dict.fromkeys(s.task.plan[i].name.replace("_", " ") for i in done))
        if refused:  # the tool said no: the model says so instead of claiming the change was made
            names = ", ".join(sorted({s.task.plan[i].name.replace("_", " ") for i in refused}))
            body = f"I'm sorry: I could not complete every requested change ({names} was not accepted)."
            body += f" (done: {did})." if did else ""
        elif done:
            body = f"Thank you for your patience: I have completed the requested changes (done: {did})."
        else:
            body = "Thank you for your patience: I have looked into your request."
        if s.task.communicate_info and not forget:
            body += " For your reference: " + "; ".join(self.figures(messages)) + "."
        text = f"{body} {CLOSING_TEXT}"
        s.pending = Pending(kind="final", quirk=quirk, text=text)
        return self.assistant_text(text)

    def figures(self, messages: list[dict[str, Any]]) -> list[str]:
        """The figures the final answer states, each derived from what the request holds.

        A figure a tool result shows is read from it. One that no result shows (a total, a refund, a
        difference) is the model's own computation: made when the request holds the results of the task's
        lookups, and then wrong with the profile's `wrong_choice` rate (a reasoning error: an amount of
        the request from the wrong line, origin `model`); without those inputs, or when the result it
        needs is missing, the model cannot derive it and says it could not confirm the amount
        (`unseen_value`, origin `harness`). Never a value the model was not shown or could not compute.
        """
        s = self.state
        corpus = request_corpus(messages)
        sources = {dep.path: dep for dep in s.task.figures}
        reads = [i for i, step in enumerate(s.task.plan) if not step.write and step.actor != "user"]
        inputs = all(i in s.seen and not is_error_text(s.seen[i]) for i in reads)
        out = []
        for k, value in enumerate(s.task.communicate_info):
            dep = sources.get(f"communicate_info[{k}]")
            if dep is not None and visible(value, corpus, figure=True):
                out.append(value)
                continue
            if dep is None and inputs:
                if k not in self.figure_entries and self.draws.fires("wrong_choice", "figure", k):
                    options = [
                        v for v in alternatives(_number(value), "amount", messages) if v != _number(value)
                    ]
                    if options:
                        pick = options[
                            choose(len(options), s.profile.seed, s.task.task_id, s.trial, "fig", k)
                        ]
                        entry = self.draws.quirk(
                            "wrong_choice",
                            tool="final_answer",
                            arg=f"communicate_info[{k}]",
                            wrong="valid_alternative",
                            stated=str(pick),
                        )
                        self.figure_entries[k] = entry
                        s.effects[entry] = "wrong_figure"
                if k in self.figure_entries and s.quirks[self.figure_entries[k]]["kind"] == "wrong_choice":
                    out.append(str(s.quirks[self.figure_entries[k]]["stated"]))
                else:
                    out.append(value)  # computed from the results the request holds
                continue
            if k not in self.figure_entries:
                if dep is not None:
                    why, because = why_unseen(s, dep)
                else:
                    why, because = "inputs_missing", None
                cause: dict[str, Any] = {} if because is None else {"because": because}
                entry = self.draws.quirk(
                    "unseen_value", tool="final_answer", arg=f"communicate_info[{k}]", why=why, **cause
                )
                self.figure_entries[k] = entry
                s.effects[entry] = "wrong_figure"
            out.append("an amount I could not confirm")
        return out

    def give_up(self, why: str, entry: int | None = None) -> dict[str, Any]:
        if entry is not None:
            self.state.effects.setdefault(entry, "gave_up")
        text = f"I'm sorry, {why}, so I am unable to complete this request. {CLOSING_TEXT}"
        self.state.pending = Pending(kind="giveup", text=text)
        return self.assistant_text(text)

    def give_up_declined(self) -> dict[str, Any]:
        """The closing after the user declined a confirmation: no change made."""
        text = f"Understood: I will not make that change. {CLOSING_TEXT}"
        self.state.pending = Pending(kind="giveup", text=text)
        return self.assistant_text(text)

    def text(self, text: str, pending: Pending) -> dict[str, Any]:
        self.state.pending = pending
        return self.assistant_text(text)

    def assistant_text(self, text: str) -> dict[str, Any]:
        if CLOSING_TEXT in text:
            self.state.closed = True
        return {"role": "assistant", "content": text}

    @staticmethod
    def tool_message(call_id: str, name: str, raw_args: str) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw_args}}
            ],
        }


def _number(text: str) -> float | str:
    """A figure as a number when it reads as one (`"1,234.50"` -> 1234.5), else the text."""
    try:
        return float(text.replace(",", "").replace("$", ""))
    except ValueError:
        return text
