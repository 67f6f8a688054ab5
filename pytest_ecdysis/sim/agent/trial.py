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

`AgentTrial` is composed of parts, each in its own module and each given the trial's shared
`state.AgentState`: this module follows the plan and reads the request (`respond`); `draws.QuirkDraws`
draws the quirks, records the ground-truth entries and reports them; `rules.RuleFollower` reads the rules
of the prompt and corrects a value from the right one in any channel; `intent.IntentBuilder` works out
the arguments the model means; `emit.Emitter` writes the messages the model sends; `user_steps.UserSteps`
asks the user for the steps a dual-control suite leaves in the user's hands (τ² telecom).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pytest_ecdysis.sim.agent.draws import QuirkDraws
from pytest_ecdysis.sim.agent.emit import CLOSING_TEXT, CONFIRM_TEXT, Emitter
from pytest_ecdysis.sim.agent.intent import IntentBuilder
from pytest_ecdysis.sim.agent.rules import RuleFollower, harness_text
from pytest_ecdysis.sim.agent.state import AgentState, Pending
from pytest_ecdysis.sim.agent.user_steps import UserSteps
from pytest_ecdysis.sim.knowledge import SimTask, is_error_text, leaves
from pytest_ecdysis.sim.motivation import conversation_text, names_action
from pytest_ecdysis.sim.profiles import Profile
from pytest_ecdysis.sim.reading import (
    informs_form,
    message_text,
    request_corpus,
)
from pytest_ecdysis.sim.values import _get_path, _set_path

MAX_REPEATS = 6  # identical repeats of a failing call before the model gives up
MAX_MALFORMED = 3  # malformed resends when the harness answers nothing
MAX_REREADS = 2  # extra lookups before each write under verbose_rereads


class AgentTrial:
    """The simulated model for one trial of one task, under one profile.

    `state` is what the parts share (`state.AgentState`); `draws`, `follower`, `intent`, `emitter` and
    `user_steps` are the parts (module docstring). `user_texts`: the set the server fills with what the
    user simulator wrote in this trial (shared, not copied: a message in it is the user's, not the harness's).
    """

    def __init__(
        self,
        task: SimTask,
        profile: Profile,
        trial: int,
        nonce: str = "",
        off: frozenset[str] = frozenset(),
        user_texts: set[str] | None = None,
    ) -> None:
        self.state = AgentState(
            task=task,
            profile=profile,
            trial=trial,
            nonce=nonce,
            off=off,
            user_texts=set() if user_texts is None else user_texts,
        )
        self.draws = QuirkDraws(self.state)
        self.follower = RuleFollower(self.state, self.draws)
        self.intent = IntentBuilder(self.state, self.draws, self.follower)
        self.emitter = Emitter(self.state, self.draws)
        self.user_steps = UserSteps(self.state, self.emitter)
        self.confirmed = False
        self.early_end_drawn = False
        self.verbose: bool | None = None  # drawn at the first write (the prompt's rules are read by then)
        self.reread_queue: list[int] = []
        self.reread_done: set[int] = set()
        self.failed: Pending | None = None  # the last call whose error left a wrong value uncorrected
        self.last_key: str | None = None
        self.last_reply: dict[str, Any] | None = None
        #: plan index -> its `omitted_step` entry: writes nothing in the conversation asked for, left out
        self.omitted: dict[int, int] = {}
        self.resume_at: int | None = None  # where the plan goes on after an omitted write done late
        self.late_by = "user"  # who asked for the omitted writes done late (the user or a harness's note)

    # -- the request ---------------------------------------------------------------------------------

    def respond(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> dict[str, Any]:
        """The assistant message (OpenAI shape) answering one agent request of this trial (`tools`: the
        request's tool schemas, read for the argument formats they document)."""
        key = hashlib.sha256(json.dumps([messages, tools], default=str).encode()).hexdigest()
        if key == self.last_key and self.last_reply is not None:
            return self.last_reply  # a retry of the same request gets the same answer
        self.state.tools = list(tools or [])
        self.state.request = messages
        self.follower.read_instructions(messages)
        reply = self._next(messages)
        self.state.step += 1
        self.last_key, self.last_reply = key, reply
        return reply

    def _next(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        s, emitter = self.state, self.emitter
        p = s.pending
        if p is None:
            return self._advance_to_next(messages)
        if p.kind == "call":
            return self._after_call(p, messages)
        last = messages[-1] if messages else {}
        is_new = last.get("role") in ("user", "system") and bool(message_text(last).strip())
        from_user = message_text(last).strip() in s.user_texts
        check = is_new and not from_user and bool(s.user_texts)
        if (
            p.kind in ("final", "early_end")
            and is_new
            and (late := self._now_motivated(messages)) is not None
        ):
            # the user (or a note) now asks for a write the model had left out: it does it, then closes again
            self.resume_at = s.pos
            self._take_late(late, "user" if from_user else "information")
            if p.kind == "early_end" and from_user and p.quirk is not None:
                self.draws.cure(p.quirk)
                s.quirks[p.quirk]["by"] = "user"
            s.pending = None
            return self._advance_to_next(messages)
        if p.kind == "ask_user":  # dual control: the user was asked to run a step on their device
            reply = self.user_steps.after_ask(p, is_new)
            return reply if reply is not None else self._advance_to_next(messages)
        if check and self.failed is not None and p.kind != "confirm":
            failed, self.failed = self.failed, None  # a harness note after a failed call: does it correct it?
            note = message_text(last)
            fixed = self.follower.corrected(failed.plan_index, failed.args, note, messages)
            if (
                failed.bend is not None
                and failed.bend_quirk is not None
                and not s.quirks[failed.bend_quirk]["cured"]
                and informs_form(
                    note,
                    str(self._gold(failed.plan_index, failed.bend.arg)),
                    str(failed.bend.bent),
                    request_corpus(messages),
                )
            ):
                self.draws.cure(failed.bend_quirk)
                fixed = fixed or failed.args
            if fixed is not None:
                return emitter.emit_call(failed.plan_index, fixed, reread=s.pos > failed.plan_index)
        if p.kind == "confirm":
            if is_new and not check:
                return self._after_confirm(p, message_text(last), messages)
            return emitter.text(p.text, p)
        if p.kind == "early_end":
            if is_new and from_user and not self._asks_rest(message_text(last)):
                return emitter.text(p.text, p)  # the user spoke of something else: the model closes again
            if is_new:
                if check:
                    self.draws.cure(p.quirk)
                elif from_user and p.quirk is not None:  # the user says the rest was not done: it goes on
                    self.draws.cure(p.quirk)
                    s.quirks[p.quirk]["by"] = "user"
                return self._advance_to_next(messages)
            return emitter.text(p.text, p)
        if p.kind == "final":
            if check and p.quirk is not None and not s.quirks[p.quirk]["cured"]:
                self.draws.cure(p.quirk)
                return emitter.final(messages, forget=False)
            return emitter.final(messages, forget=p.quirk is not None and not s.quirks[p.quirk]["cured"])
        return emitter.text(p.text, p)  # giveup: say it again

    def _after_confirm(self, p: Pending, said: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The user's answer to a confirmation: asked for the details, the model lists what the write will
        change (its intended arguments, as it means to send them); corrected ("No, that is not right: it is
        X"), it takes the value the user gave (each wrong value it replaces is cured, `by: user`) and
        goes on; otherwise the answer confirms."""
        s = self.state
        low = said.lower()
        step = s.task.plan[s.pos] if s.pos < len(s.task.plan) else None
        if (
            step is not None
            and step.write
            and "what exactly" in low
            and not p.text.startswith("To be precise")
        ):
            args = self.intent.intended(s.pos, messages)
            details = ", ".join(f"{path} {value}" for path, value in leaves(args))
            text = f"To be precise: I will {step.name.replace('_', ' ')} with {details}. {CONFIRM_TEXT}"
            return self.emitter.text(text, Pending(kind="confirm", text=text))
        if step is not None and step.write and low.startswith("no") and "not right" not in low:
            # the user declines: the model does not make the change and closes (a write the task needed)
            entry = self.draws.quirk("user_declined", tool=step.name)
            s.effects[entry] = "declined"
            return self.emitter.give_up_declined()
        if step is not None and step.write and "not right" in low and s.pos in s.intended:
            args = s.intended[s.pos]
            for (at, path), entry in sorted(s.wrong_at.items()):
                if at != s.pos or s.quirks[entry]["cured"]:
                    continue
                gold = _get_path(step.arguments, path)
                if str(gold) in said:
                    args = _set_path(args, path, gold)
                    s.quirks[entry]["cured"] = True
                    s.quirks[entry]["by"] = "user"
            s.intended[s.pos] = args
        self.confirmed = True
        return self._advance_to_next(messages)

    def _find_result(self, call_id: str, messages: list[dict[str, Any]]) -> str | None:
        for m in reversed(messages):
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id:
                return message_text(m)
        return None

    def _after_call(self, p: Pending, messages: list[dict[str, Any]]) -> dict[str, Any]:
        s, emitter = self.state, self.emitter
        result = self._find_result(p.call_id, messages)
        if result is None:
            if p.malformed_quirk is not None:
                if p.repeats + 1 >= MAX_MALFORMED:
                    return emitter.give_up(
                        f"the {s.task.plan[p.plan_index].name} call could not be sent", p.malformed_quirk
                    )
                return emitter.emit_call(p.plan_index, p.args, quirk_repeat=p)
            return self._done_call(p, messages)  # the harness dropped the result: carry on
        s.seen[p.plan_index] = result
        error = is_error_text(result)
        if error and (p.bend is not None or any(at == p.plan_index for at, _ in s.wrong_at)):
            self.failed = p
        elif self.failed is not None and self.failed.plan_index == p.plan_index:
            self.failed = None
        if p.malformed_quirk is not None:
            self.draws.cure(p.malformed_quirk)  # the harness answered the malformed call
            if error:
                return emitter.emit_call(p.plan_index, p.args, reread=p.reread)
            return self._done_call(p, messages)
        if p.repeat_quirk is not None:
            if result.strip() != (p.first_error or "").strip():
                self.draws.cure(p.repeat_quirk)  # the harness flagged the repeat: stop looping
                return self._handle_error(p, result, messages, after_repeat=True)
            if p.repeats >= MAX_REPEATS:
                return emitter.give_up("the same error kept coming back", p.repeat_quirk)
            return emitter.repeat(p)
        if error:
            return self._handle_error(p, result, messages, after_repeat=False)
        if p.bend is not None and str(self._gold(p.plan_index, p.bend.arg)).strip() in result:
            self.draws.cure(p.bend_quirk)  # the harness normalised the argument: the right record came back
        self.follower.repaired(p.plan_index, p.args, result)
        return self._done_call(p, messages)

    def _gold(self, index: int, path: str) -> Any:
        return _get_path(self.state.task.plan[index].arguments, path)

    def _handle_error(
        self, p: Pending, result: str, messages: list[dict[str, Any]], *, after_repeat: bool
    ) -> dict[str, Any]:
        s, emitter = self.state, self.emitter
        if p.bend is not None:
            gold = str(self._gold(p.plan_index, p.bend.arg))
            told = (
                f"{result}\n{harness_text(messages, s.user_texts)}"  # the error, with what the harness said
            )
            if informs_form(told, gold, str(p.bend.bent), request_corpus(messages)):
                self.draws.cure(p.bend_quirk)  # the error shows the expected form: resend it corrected
                return emitter.emit_call(p.plan_index, p.args, reread=p.reread)
            if not after_repeat and self.draws.fires("repeat_after_error", p.plan_index, s.calls):
                return self._start_repeat(p, result)
            return emitter.give_up(f"no record matches the {p.bend.arg} I have", p.bend_quirk)
        fixed = self.follower.corrected(p.plan_index, p.args, result, messages)
        if fixed is not None:  # the error holds the right value (or shows its form): resend it corrected
            return emitter.emit_call(p.plan_index, fixed, reread=p.reread)
        if not after_repeat and self.draws.fires("repeat_after_error", p.plan_index, s.calls):
            return self._start_repeat(p, result)
        return self._done_call(p, messages)

    def _start_repeat(self, p: Pending, result: str) -> dict[str, Any]:
        p.repeat_quirk = self.draws.quirk("repeat_after_error", tool=self.state.task.plan[p.plan_index].name)
        p.first_error = result
        return self.emitter.repeat(p)

    def _done_call(self, p: Pending, messages: list[dict[str, Any]]) -> dict[str, Any]:
        s = self.state
        s.pending = None
        if p.reread:
            return self._advance_to_next(messages)
        step = s.task.plan[p.plan_index]
        s.pos = p.plan_index + 1
        if self.resume_at is not None and s.pos <= self.resume_at:
            # a write done late: first every other left-out write the conversation now asks for ("cancel the
            # two flights" names both cancellations), then back to where the model was
            if (late := self._now_motivated(messages)) is not None:
                self._take_late(late, self.late_by)
                return self._advance_to_next(messages)
            s.pos, self.resume_at = self.resume_at, None
        writes = s.task.writes
        if step.write and not self.early_end_drawn and len(writes) >= 2 and p.plan_index == writes[0]:
            self.early_end_drawn = True
            if self.draws.fires("early_end", "trial"):
                quirk = self.draws.quirk("early_end")
                text = f"Your request has been taken care of (done: {step.name.replace('_', ' ')}). {CLOSING_TEXT}"
                s.pending = Pending(kind="early_end", quirk=quirk, text=text)
                return self.emitter.assistant_text(text)
        return self._advance_to_next(messages)

    # -- choosing what to do next --------------------------------------------------------------------

    def _advance_to_next(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        s, emitter, plan = self.state, self.emitter, self.state.task.plan
        if self.reread_queue:
            index = self.reread_queue.pop(0)
            return emitter.emit_call(index, dict(plan[index].arguments), reread=True)
        if s.pos >= len(plan):
            return emitter.final(messages, forget=self.draws.draw_forget())
        step = plan[s.pos]
        if step.actor == "user":  # dual control: the user's step, asked for in words (user_steps)
            return self.user_steps.ask_user(s.pos)
        if step.write and not self._motivated(s.pos, messages):
            # nothing in the conversation asks for this write (the gold's path, not the user's request): a
            # real model does not take it (a failure of reasoning, origin model; `sim/motivation.py`)
            if s.pos not in self.omitted:
                entry = self.draws.quirk("omitted_step", tool=step.name)
                s.effects[entry] = "omitted_write"
                self.omitted[s.pos] = entry
            s.pos += 1
            return self._advance_to_next(messages)
        if step.write and (refusal := self.follower.refuses(s.pos)) is not None:
            action = step.name.replace("_", " ")
            return emitter.give_up(f"my instructions do not allow me to {action}", refusal)
        cost = self.follower.overreach(s.pos)
        earlier = [j for j in range(s.pos) if not plan[j].write]
        if cost == "reread" and earlier:
            return emitter.emit_call(earlier[-1], dict(plan[earlier[-1]].arguments), reread=True)
        if cost == "confirm":
            text = f"Before I continue ({step.name.replace('_', ' ')}): {CONFIRM_TEXT}"
            s.pending = Pending(kind="confirm", text=text)
            return emitter.assistant_text(text)
        if step.write and not self.confirmed:
            action = step.name.replace("_", " ")
            text = f"I can do that for you. Before I proceed with the action ({action}): {CONFIRM_TEXT}"
            s.pending = Pending(kind="confirm", text=text)
            return emitter.assistant_text(text)
        if step.write and self.verbose is None:
            self.verbose = self.draws.draw_trial(
                "verbose_rereads", len(plan) >= s.profile.long_task_min_steps
            )
        if step.write and self.verbose and s.pos not in self.reread_done:
            self.reread_done.add(s.pos)
            rereads = self._rereads(s.pos)
            if rereads:
                if s.verbose_quirk is None:
                    s.verbose_quirk = self.draws.quirk("verbose_rereads")
                self.reread_queue = rereads[1:]
                return emitter.emit_call(rereads[0], dict(plan[rereads[0]].arguments), reread=True)
        return emitter.emit_call(s.pos, self.intent.intended(s.pos, messages))

    def _motivated(self, index: int, messages: list[dict[str, Any]]) -> bool:
        """Whether the conversation asks for write `index` (`sim.motivation.names_action` over
        `conversation_text`); always, when a replay switched `omitted_step` off."""
        s = self.state
        if "omitted_step" in s.off:
            return True
        step = s.task.plan[index]
        return names_action(conversation_text(messages), step.name, step.arguments)

    def _asks_rest(self, text: str) -> bool:
        """Whether `text` names a write of the plan still ahead (the user saying the rest was not done)."""
        plan = self.state.task.plan
        return any(st.write and names_action(text, st.name, st.arguments) for st in plan[self.state.pos :])

    def _take_late(self, index: int, by: str) -> None:
        """Do left-out write `index` next, its omission cured `by` the user or a harness's information."""
        entry = self.omitted.pop(index)
        self.state.quirks[entry]["cured"] = True
        self.state.quirks[entry]["by"] = self.late_by = by
        self.state.pos = index

    def _now_motivated(self, messages: list[dict[str, Any]]) -> int | None:
        """The first omitted write the conversation now asks for, or None."""
        return next((i for i in sorted(self.omitted) if self._motivated(i, messages)), None)

    def _rereads(self, index: int) -> list[int]:
        """Earlier lookups sharing a value with this write (at most MAX_REREADS, latest first)."""
        plan = self.state.task.plan
        values = {json.dumps(v) for v in plan[index].arguments.values()}
        found = []
        for j in range(index - 1, -1, -1):
            step = plan[j]
            if not step.write and values & {json.dumps(v) for v in step.arguments.values()}:
                found.append(j)
        if not found:
            reads = [j for j in range(index) if not plan[j].write]
            found = reads[-1:]
        return sorted(found[:MAX_REREADS])
