"""What the simulated agent makes of the harness's words: rules it follows and values it is told.

`RuleFollower` is the part of `sim.agent.trial.AgentTrial` that reads, at every request,

- the **rules** of the system and developer text (`sim/agent/instructions.py`, kept in the trial's
  `state.AgentState`): a rule addressing a quirk kind is followed at each draw site with the profile's
  `instruction_compliance` (`draws.QuirkDraws.complies`: the quirk is recorded `cured` with
  `by: instruction`); a prohibition of a write the plan needs makes the model refuse it (`refuses`: an
  `instruction_conflict` entry, origin `harness`, effect `gave_up`); a broad rule costs one extra turn per
  planned call (`overreach`: an `instruction_overreach` entry, origin `harness`; a long task may run into
  the harness's budget);
- the **values it is told**: one rule for every value a quirk made wrong (an id habit, a value too far
  back, a blind spot, a slip, a value it never saw), in every channel — a harness message before the
  call (a system or developer message, or a user-role note the user simulator did not write) that holds
  the right value prevents the error (`told`); a message after the call (the tool error answering it,
  or a later harness note) that holds the right value, or shows its form (`reading.informs_form`), makes
  the model resend the call corrected (`corrected`). A tool *result* is where values come from, not a
  correction of one.

Its own bookkeeping is the refusals and the overreach drawn (once per step, once per trial); the rest is the
trial's state. This module must not import tau2.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis.sim.agent.draws import QuirkDraws
from pytest_ecdysis.sim.agent.instructions import read_rules
from pytest_ecdysis.sim.agent.state import AgentState
from pytest_ecdysis.sim.reading import informs_form, message_text, request_corpus
from pytest_ecdysis.sim.values import _get_path, _set_path

#: Value-carrying entry kinds: a wrong value the model sent that a message holding the right one corrects.
VALUE_KINDS = frozenset(
    {"id_case", "id_prefix", "context_loss", "blind_spot", "wrong_choice", "slip", "unseen_value"}
)


def harness_text(messages: list[dict[str, Any]], user_texts: set[str]) -> str:
    """What the harness itself says to the model in a request: system and developer messages, and
    user-role messages the user simulator did not write (a harness's notes and check messages)."""
    parts = []
    for m in messages:
        role = m.get("role")
        text = message_text(m)
        if role in ("system", "developer") or (
            role == "user" and text.strip() and text.strip() not in user_texts
        ):
            parts.append(text)
    return "\n".join(parts)


class RuleFollower:
    """Rules and told values of one trial (module docstring)."""

    def __init__(self, state: AgentState, draws: QuirkDraws) -> None:
        self.state = state
        self.draws = draws
        self.refused: dict[int, int | None] = {}  # plan index -> its instruction_conflict entry (or None)
        self.overreach_done: set[int] = set()
        self.overreach_follows: bool | None = None
        self.overreach_entry: int | None = None

    def read_instructions(self, messages: list[dict[str, Any]]) -> None:
        s = self.state
        system = "\n".join(message_text(m) for m in messages if m.get("role") in ("system", "developer"))
        writes = tuple(sorted({s.task.plan[i].name for i in s.task.writes}))
        s.rules = read_rules(system, s.task.policy, writes)
        s.addressed = frozenset(k for r in s.rules for k in r.kinds)

    def refuses(self, index: int) -> int | None:
        """The `instruction_conflict` entry when a rule forbids the write at plan step `index` and the model
        follows it (refusing the write the policy asks for), else None. Drawn once per step."""
        if index in self.refused:
            return self.refused[index]
        s = self.state
        step = s.task.plan[index]
        rule = next((r for r in s.rules if step.name in r.forbids), None)
        entry = None
        if rule is not None and self.draws.draw("refuse", index) < s.profile.instruction_compliance:
            entry = self.draws.quirk("instruction_conflict", tool=step.name, rule=rule.text)
        self.refused[index] = entry
        return entry

    def overreach(self, index: int) -> str:
        """The extra turn a broad rule costs before plan step `index` (`reread`, `confirm` or "" for none);
        the model over-applies a broad rule on a trial with the profile's compliance (drawn per trial)."""
        rule = next((r for r in self.state.rules if r.broad), None)
        if rule is None or index in self.overreach_done or index == 0:
            return ""
        if self.overreach_follows is None:
            compliance = self.state.profile.instruction_compliance
            self.overreach_follows = self.draws.draw("overreach", "trial") < compliance
        if not self.overreach_follows:
            return ""
        self.overreach_done.add(index)
        if self.overreach_entry is None:
            self.overreach_entry = self.draws.quirk(
                "instruction_overreach", rule=rule.text, cost=rule.kind_of_cost
            )
        return rule.kind_of_cost

    def told(self, gold: Any, messages: list[dict[str, Any]]) -> bool:
        """Whether a harness message of the request holds the right value literally (prevents a value quirk)."""
        value = str(gold).strip()
        return bool(value) and value in harness_text(messages, self.state.user_texts)

    def corrected(
        self, index: int, args: dict[str, Any], text: str, messages: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """The arguments of plan step `index` corrected by `text` (a tool error answering the call, or a
        harness note after it) together with everything else the harness said in the request (system,
        developer, notes: after an error the model looks there too), curing each value entry it
        corrects; None when it corrects nothing."""
        s = self.state
        step = s.task.plan[index]
        corpus = request_corpus(messages)
        text = f"{text}\n{harness_text(messages, s.user_texts)}"  # with what the harness said before
        fixed = None
        for (at, path), entry in sorted(s.wrong_at.items()):
            if at != index or s.quirks[entry]["cured"]:
                continue
            gold, sent = _get_path(step.arguments, path), _get_path(args, path)
            if gold != sent and informs_form(text, str(gold), str(sent), corpus):
                fixed = _set_path(fixed or args, path, gold)
                s.quirks[entry]["cured"] = True
                s.quirks[entry]["by"] = "information"
        if fixed is not None:
            s.intended[index] = fixed
        return fixed

    def repaired(self, index: int, args: dict[str, Any], result: str) -> None:
        """A result (not an error) of a call the model sent with a wrong value that shows the right value and
        not the wrong one: the harness repaired the call before executing it; the entry is cured."""
        s = self.state
        step = s.task.plan[index]
        for (at, path), entry in sorted(s.wrong_at.items()):
            if at != index or s.quirks[entry]["cured"]:
                continue
            gold, sent = _get_path(step.arguments, path), _get_path(args, path)
            if str(gold) in result and str(sent) not in result:
                s.quirks[entry]["cured"] = True
                s.quirks[entry]["by"] = "harness_repair"
