"""The simulated agent policy: follow the task's plan, perturbed by the quirks of a model profile.

One `AgentTrial` per trial holds the model's state (where it is in the plan, what it sent last, the
quirks drawn), so the server answers correctly even when the harness trimmed its context. The gold
plan is the model's *intent* (which tools, in which order); every argument value and every figure it
states is read from the request it was sent (`sim/reading.py`): a value the harness cut, dropped or
never obtained is guessed wrong, and the ground truth records it as `unseen_value` (origin `harness`).
Quirks decide only whether the model errs when the value is visible.

Message shapes (τ²'s orchestrator protocol: a message has text OR tool calls, never both):

- a tool call: exactly one per message, arguments as a JSON string (invalid JSON for `malformed_args`);
- a confirmation question before the first write: contains `Do you confirm (yes/no)?`;
- a closing text (final answer, early end, giving up): ends with
  `Is there anything else I can help you with?`; the final answer states the `communicate_info` values.

Cures are decided by the information a request carries (docs/simulated-model.md quirk table), never
by a marker word; the tool schemas and system prompt are inputs too (an id format the schema shows
lowers the rate of the matching id habit). The one deliberate exception: `blind_spot` is cured only
when a system message contains the correct value literally (an over-fitted rule). A share `noise` of
the draws depends on the run nonce. This module must not import tau2.

`AgentTrial` is in six parts: this module follows the plan and reads the request (`respond`);
`agent_intent.Intending` works out the arguments the model means (`_intended`); `agent_rules.Following`
reads the rules of the prompt and corrects a value from the right one in any channel; `agent_draws.QuirkDraws` draws the quirks and reports the ground
truth; `agent_emit.Emitting` writes the messages the model sends (and holds `Pending`, `CLOSING_TEXT`,
`CONFIRM_TEXT`, re-exported here); `agent_user_steps.UserSteps` asks the user for the steps a dual-control
suite leaves in the user's hands (τ² telecom).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pytest_ecdysis.sim.agent.draws import QuirkDraws
from pytest_ecdysis.sim.agent.emit import CLOSING_TEXT, CONFIRM_TEXT, Emitting, Pending
from pytest_ecdysis.sim.agent.intent import Intending
from pytest_ecdysis.sim.agent.rules import Following, harness_text
from pytest_ecdysis.sim.agent.user_steps import UserSteps
from pytest_ecdysis.sim.knowledge import SimTask, is_error_text
from pytest_ecdysis.sim.profiles import Profile
from pytest_ecdysis.sim.reading import (
    informs_form,
    message_text,
    request_corpus,
)
from pytest_ecdysis.sim.values import _get_path

#: Names other modules use as `sim.agent.<name>` (kept where they were before `agent_draws`, `agent_emit`).
__all__ = ["CLOSING_TEXT", "CONFIRM_TEXT", "MAX_MALFORMED", "MAX_REPEATS", "MAX_REREADS", "AgentTrial", "Pending"]

MAX_REPEATS = 6  # identical repeats of a failing call before the model gives up
MAX_MALFORMED = 3  # malformed resends when the harness answers nothing
MAX_REREADS = 2  # extra lookups before each write under verbose_rereads


class AgentTrial(QuirkDraws, Following, Intending, Emitting, UserSteps):
    """The simulated model's state for one trial of one task, under one profile."""

    def __init__(self, task: SimTask, profile: Profile, trial: int, nonce: str = "",
                 off: frozenset[str] = frozenset()) -> None:
        self.task = task
        self.profile = profile
        self.trial = trial
        self.nonce = nonce
        self.off = off  # quirk kinds switched off (a replay asking whether one caused the failure)
        self.tools: list[Any] = []  # the tool schemas of the current request
        self.seen: dict[int, str] = {}  # plan index -> the latest tool result the model saw for it
        self.bent_by: dict[int, int] = {}  # plan index -> the ground-truth entry that bent its arguments
        self.effects: dict[int, str] = {}  # ground-truth entry -> how it damaged the outcome
        self.figure_entries: dict[int, int] = {}  # communicate_info index -> its unseen_value entry
        self.pos = 0
        self.step = 0  # agent requests answered
        self.calls = 0
        self.confirmed = False
        self.pending: Pending | None = None
        self.quirks: list[dict[str, Any]] = []
        self.intended: dict[int, dict[str, Any]] = {}  # plan index -> arguments the model means
        self.reread_queue: list[int] = []
        self.reread_done: set[int] = set()
        self.sent: set[int] = set()  # plan indices sent at least once (quirks fire on the first sending)
        self.id_habits: set[tuple[str, str]] = set()  # (kind, argument) already drawn this trial
        self.early_end_drawn = False
        self.reached_final = False
        self.closed = False  # the model sent a closing text (final answer, early end or giving up)
        self.user_texts: set[str] = set()
        self.last_key: str | None = None
        self.last_reply: dict[str, Any] | None = None
        self.verbose: bool | None = None  # drawn at the first write (the prompt's rules are read by then)
        self.rules: tuple[Any, ...] = ()  # the prompt's rules (sim/agent/instructions.py), read at every request
        self.addressed: frozenset[str] = frozenset()  # quirk kinds a rule of the prompt addresses
        self.wrong_at: dict[tuple[int, str], int] = {}  # (plan index, argument path) -> entry that made it wrong
        self.failed: Pending | None = None
        self.request: list[dict[str, Any]] = []  # the messages of the request being answered  # the last call whose error left a wrong value uncorrected
        self.refused: dict[int, int | None] = {}
        self.overreach_done: set[int] = set()
        self.overreach_follows: bool | None = None
        self.overreach_entry: int | None = None
        self.verbose_quirk: int | None = None
        self._blind = self._blind_spot()

    # -- the request ---------------------------------------------------------------------------------

    def respond(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> dict[str, Any]:
        """The assistant message (OpenAI shape) answering one agent request of this trial (`tools`: the
        request's tool schemas, read for the argument formats they document)."""
        key = hashlib.sha256(json.dumps([messages, tools], default=str).encode()).hexdigest()
        if key == self.last_key and self.last_reply is not None:
            return self.last_reply  # a retry of the same request gets the same answer
        self.tools = list(tools or [])
        self.request = messages
        self._read_instructions(messages)
        reply = self._next(messages)
        self.step += 1
        self.last_key, self.last_reply = key, reply
        return reply

    def _next(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        p = self.pending
        if p is None:
            return self._advance_to_next(messages)
        if p.kind == "call":
            return self._after_call(p, messages)
        last = messages[-1] if messages else {}
        is_new = last.get("role") in ("user", "system") and bool(message_text(last).strip())
        from_user = message_text(last).strip() in self.user_texts
        check = is_new and not from_user and bool(self.user_texts)
        if p.kind == "ask_user":  # dual control: the user was asked to run a step on their device
            return self._after_ask(p, messages, is_new)
        if check and self.failed is not None and p.kind != "confirm":
            failed, self.failed = self.failed, None  # a harness note after a failed call: does it correct it?
            note = message_text(last)
            fixed = self._corrected(failed.plan_index, failed.args, note, messages)
            if failed.bend is not None and not self.quirks[failed.bend_quirk]["cured"] and informs_form(
                    note, str(self._gold(failed.plan_index, failed.bend.arg)), str(failed.bend.bent),
                    request_corpus(messages)):
                self._cure(failed.bend_quirk)
                fixed = fixed or failed.args
            if fixed is not None:
                return self._emit_call(failed.plan_index, fixed, reread=self.pos > failed.plan_index)
        if p.kind == "confirm":
            if is_new and not check:
                self.confirmed = True
                return self._advance_to_next(messages)
            return self._text(p.text, p)
        if p.kind == "early_end":
            if is_new:
                if check:
                    self._cure(p.quirk)
                return self._advance_to_next(messages)
            return self._text(p.text, p)
        if p.kind == "final":
            if check and p.quirk is not None and not self.quirks[p.quirk]["cured"]:
                self._cure(p.quirk)
                return self._final(messages, forget=False)
            return self._final(messages, forget=p.quirk is not None and not self.quirks[p.quirk]["cured"])
        return self._text(p.text, p)  # giveup: say it again

    def _find_result(self, call_id: str, messages: list[dict[str, Any]]) -> str | None:
        for m in reversed(messages):
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id:
                return message_text(m)
        return None

    def _after_call(self, p: Pending, messages: list[dict[str, Any]]) -> dict[str, Any]:
        result = self._find_result(p.call_id, messages)
        if result is None:
            if p.malformed_quirk is not None:
                if p.repeats + 1 >= MAX_MALFORMED:
                    return self._give_up(f"the {self.task.plan[p.plan_index].name} call could not be sent",
                                         p.malformed_quirk)
                return self._emit_call(p.plan_index, p.args, quirk_repeat=p)
            return self._done_call(p, messages)  # the harness dropped the result: carry on
        self.seen[p.plan_index] = result
        error = is_error_text(result)
        if error and (p.bend is not None or any(at == p.plan_index for at, _ in self.wrong_at)):
            self.failed = p
        elif self.failed is not None and self.failed.plan_index == p.plan_index:
            self.failed = None
        if p.malformed_quirk is not None:
            self._cure(p.malformed_quirk)  # the harness answered the malformed call
            if error:
                return self._emit_call(p.plan_index, p.args, reread=p.reread)
            return self._done_call(p, messages)
        if p.repeat_quirk is not None:
            if result.strip() != (p.first_error or "").strip():
                self._cure(p.repeat_quirk)  # the harness flagged the repeat: stop looping
                return self._handle_error(p, result, messages, after_repeat=True)
            if p.repeats >= MAX_REPEATS:
                return self._give_up("the same error kept coming back", p.repeat_quirk)
            return self._repeat(p)
        if error:
            return self._handle_error(p, result, messages, after_repeat=False)
        if p.bend is not None and str(self._gold(p.plan_index, p.bend.arg)).strip() in result:
            self._cure(p.bend_quirk)  # the harness normalised the argument: the right record came back
        self._repaired(p.plan_index, p.args, result)
        return self._done_call(p, messages)

    def _gold(self, index: int, path: str) -> Any:
        return _get_path(self.task.plan[index].arguments, path)

    def _handle_error(self, p: Pending, result: str, messages: list[dict[str, Any]], *,
                      after_repeat: bool) -> dict[str, Any]:
        if p.bend is not None:
            gold = str(self._gold(p.plan_index, p.bend.arg))
            told = f"{result}\n{harness_text(messages, self.user_texts)}"  # the error, with what the harness said
            if informs_form(told, gold, str(p.bend.bent), request_corpus(messages)):
                self._cure(p.bend_quirk)  # the error shows the expected form: resend it corrected
                return self._emit_call(p.plan_index, p.args, reread=p.reread)
            if not after_repeat and self.fires("repeat_after_error", p.plan_index, self.calls):
                return self._start_repeat(p, result)
            return self._give_up(f"no record matches the {p.bend.arg} I have", p.bend_quirk)
        fixed = self._corrected(p.plan_index, p.args, result, messages)
        if fixed is not None:  # the error holds the right value (or shows its form): resend it corrected
            return self._emit_call(p.plan_index, fixed, reread=p.reread)
        if not after_repeat and self.fires("repeat_after_error", p.plan_index, self.calls):
            return self._start_repeat(p, result)
        return self._done_call(p, messages)

    def _start_repeat(self, p: Pending, result: str) -> dict[str, Any]:
        p.repeat_quirk = self._quirk("repeat_after_error", tool=self.task.plan[p.plan_index].name)
        p.first_error = result
        return self._repeat(p)

    def _repeat(self, p: Pending) -> dict[str, Any]:
        p.repeats += 1
        p.call_id = self._call_id()
        self.pending = p
        return self._tool_message(p.call_id, self.task.plan[p.plan_index].name, p.raw_args)

    def _done_call(self, p: Pending, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self.pending = None
        if p.reread:
            return self._advance_to_next(messages)
        step = self.task.plan[p.plan_index]
        self.pos = p.plan_index + 1
        writes = self.task.writes
        if (step.write and not self.early_end_drawn and len(writes) >= 2 and p.plan_index == writes[0]):
            self.early_end_drawn = True
            if self.fires("early_end", "trial"):
                quirk = self._quirk("early_end")
                text = f"Your request has been taken care of. {CLOSING_TEXT}"
                self.pending = Pending(kind="early_end", quirk=quirk, text=text)
                return self._assistant_text(text)
        return self._advance_to_next(messages)

    # -- choosing what to do next --------------------------------------------------------------------

    def _advance_to_next(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if self.reread_queue:
            index = self.reread_queue.pop(0)
            return self._emit_call(index, dict(self.task.plan[index].arguments), reread=True)
        if self.pos >= len(self.task.plan):
            return self._final(messages, forget=self._draw_forget())
        step = self.task.plan[self.pos]
        if step.actor == "user":  # dual control: the user's step, asked for in words (agent_user_steps)
            return self._ask_user(self.pos)
        if step.write and (refusal := self._refuses(self.pos)) is not None:
            return self._give_up(f"my instructions do not allow me to {step.name.replace('_', ' ')}", refusal)
        cost = self._overreach(self.pos)
        earlier = [j for j in range(self.pos) if not self.task.plan[j].write]
        if cost == "reread" and earlier:
            return self._emit_call(earlier[-1], dict(self.task.plan[earlier[-1]].arguments), reread=True)
        if cost == "confirm":
            text = f"Before I continue ({step.name.replace('_', ' ')}): {CONFIRM_TEXT}"
            self.pending = Pending(kind="confirm", text=text)
            return self._assistant_text(text)
        if step.write and not self.confirmed:
            action = step.name.replace("_", " ")
            text = f"I can do that for you. Before I proceed with the action ({action}): {CONFIRM_TEXT}"
            self.pending = Pending(kind="confirm", text=text)
            return self._assistant_text(text)
        if step.write and self.verbose is None:
            self.verbose = self._draw_trial("verbose_rereads", len(self.task.plan) >= self.profile.long_task_min_steps)
        if step.write and self.verbose and self.pos not in self.reread_done:
            self.reread_done.add(self.pos)
            rereads = self._rereads(self.pos)
            if rereads:
                if self.verbose_quirk is None:
                    self.verbose_quirk = self._quirk("verbose_rereads")
                self.reread_queue = rereads[1:]
                return self._emit_call(rereads[0], dict(self.task.plan[rereads[0]].arguments), reread=True)
        return self._emit_call(self.pos, self._intended(self.pos, messages))

    def _rereads(self, index: int) -> list[int]:
        """Earlier lookups sharing a value with this write (at most MAX_REREADS, latest first)."""
        values = {json.dumps(v) for v in self.task.plan[index].arguments.values()}
        found = []
        for j in range(index - 1, -1, -1):
            step = self.task.plan[j]
            if not step.write and values & {json.dumps(v) for v in step.arguments.values()}:
                found.append(j)
        if not found:
            reads = [j for j in range(index) if not self.task.plan[j].write]
            found = reads[-1:]
        return sorted(found[:MAX_REREADS])
